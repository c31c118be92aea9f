"""Real-browser tests: Playwright for Python driving Debian's chromium against a live server."""

from __future__ import annotations

import os
import shutil

import pytest
from django.contrib.auth.models import User

from sessions_admin.signin.roles import assign_role

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


# For ``page.wait_for_function``: the page and its htmx fragments have arrived, none still
# asked for, swapping or settling (cheaper than waiting for the network to be idle half a
# second on every page).
HTMX_SETTLED = """() => document.readyState === "complete" && window.htmx !== undefined
  && !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling, [hx-trigger^="load"]')"""


# Every document reports what its Content-Security-Policy blocked (sessions_admin/security.py).
REPORT_CSP_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  window.reportCspViolation(
    `${event.effectiveDirective} blocked ${event.blockedURI || "inline"} ` +
      `(${event.sourceFile || location.pathname}:${event.lineNumber}) ${event.sample || ""}`
  );
});
"""


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(base_url=live_server.url)
    violations: list[str] = []
    context.expose_function("reportCspViolation", lambda report: violations.append(report))
    context.add_init_script(REPORT_CSP_VIOLATIONS)
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "console",
        lambda message: (
            violations.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    page.script_errors = errors
    page.csp_violations = violations
    yield page
    context.close()
    # Whatever a test did, nothing on our pages may need more than the policy allows.
    assert violations == [], f"Content-Security-Policy violations: {violations}"


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
