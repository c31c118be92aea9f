"""Real-browser tests: Playwright for Python driving Debian's chromium against a live server."""

from __future__ import annotations

import os
import shutil

import pytest
from django.contrib.auth.models import User

from sessions_admin.console.roles import assign_role

# Playwright's sync API keeps an event loop running in this thread; Django would
# otherwise refuse the test's own ORM calls as "async-unsafe".
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

PASSWORD = "correct horse battery staple"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/browser/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser():
    executable = shutil.which("chromium")
    if not executable:
        pytest.skip("Debian's chromium is not installed (the test command installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS
        )
        yield instance
        instance.close()


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.script_errors = errors
    yield page
    context.close()


@pytest.fixture
def signed_in_page(page):
    """A page signed in through the real login form as an operator of the given role."""

    def sign_in(role: str = "admin", username: str = "operator"):
        user = User.objects.create_user(username, password=PASSWORD)
        assign_role(user, role)
        page.goto("/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/login/" not in url)
        return page

    return sign_in
