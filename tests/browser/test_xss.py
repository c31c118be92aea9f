"""Hostile store content in a real browser: every field a runtime or operator writes shows as text.

Payloads go through the core (as a runtime would write them) into every field a page shows;
each page is then loaded with the Content-Security-Policy bypassed, so escaping alone must
hold: no script runs, no dialog opens, no injected element or attribute exists, and the
payload is visible as text.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client

from sessions_admin.ledger import worker
from sessions_admin.signin.roles import assign_role
from tests.browser.conftest import HTMX_SETTLED, PASSWORD
from tests.browser.hostile import (
    INJECTED,
    PAYLOAD,
    SHORT_PAYLOAD,
    VISIBLE,
    hostile_store,
    marked,
    shown,
)


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch):
    cache.clear()
    # Bulk delete jobs stay queued: the job page shows what was asked, nothing runs.
    monkeypatch.setattr(worker, "ensure_worker_running", lambda: None)
    yield
    cache.clear()


@pytest.fixture
def hostile_page(browser, live_server):
    """An admin's page with the CSP bypassed, recording dialogs."""
    user = User.objects.create_user("operator", password=PASSWORD)
    assign_role(user, "admin")
    context = browser.new_context(base_url=live_server.url, bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.dialogs = []
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    page.goto("/login/")
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url)
    page.user = user
    yield page
    context.close()


def _problems(page, path: str, must_show: list[str]) -> list[str]:
    """What is wrong with the page at ``path``: anything that ran, was injected, or is missing."""
    response = page.goto(path)
    # The htmx fragments (health panel, transcript) are in, swapped and settled: any element
    # or attribute a payload injected is in the DOM then, which INJECTED finds.
    page.wait_for_function(HTMX_SETTLED)
    problems = [] if response.status == 200 else [f"{path}: status {response.status}"]
    return problems + _hostile_effects(page, path, must_show)


def _hostile_effects(page, path: str, must_show: list[str]) -> list[str]:
    problems = []
    if page.evaluate("typeof window.__xss") != "undefined":
        problems.append(f"{path}: a payload ran")
    if page.dialogs:
        problems.append(f"{path}: dialogs {page.dialogs}")
    injected = page.eval_on_selector_all(INJECTED, "found => found.map(e => e.outerHTML)")
    if injected:
        problems.append(f"{path}: injected {injected}")
    text = page.locator("body").text_content()  # closed <details> included
    problems.extend(
        f"{path}: {wanted!r} is not shown as text" for wanted in must_show if wanted not in text
    )
    return problems


def test_payloads_in_every_field_stay_text_on_every_page(hostile_page):
    ids = hostile_store(hostile_page.user)
    main, other = ids["main"], ids["other"]
    detail = f"/sessions/{quote(main, safe='')}/"
    pages = {
        "/": [shown("source"), shown("user")],
        "/sessions/": [shown("title"), shown("source"), shown("user")],
        "/sessions/?scope=all&source=" + "source%3A%3Cscript%3E": [],
        detail: [
            shown("title"),
            shown("source"),
            shown("user"),
            shown("model"),
            shown("chat"),
            shown("user-msg"),
            shown("assistant-msg"),
            shown("tool-msg"),
            shown("fn"),
            shown("args"),
            shown("why"),
            shown("config"),
            shown("key"),
            shown("chattype"),
            shown("thread"),
        ],
        f"/sessions/{other}/": [shown("other-title"), SHORT_PAYLOAD, shown("user")],
        "/conversations/": [shown("slug"), shown("title")],
        "/forks/": [shown("slug"), shown("title"), shown("other-title")],
        f"/merge/preview/?ids={other}&ids={quote(main, safe='')}": [
            shown("title"),
            shown("other-title"),
            SHORT_PAYLOAD,
            shown("user-msg"),
        ],
        f"{detail}delete/": [shown("title")],
        f"/bulk-delete/?preset=by_source&source={quote(marked('source')[:200], safe='')}": [
            shown("source")
        ],
        f"/jobs/{ids['job']}/": [shown("job-description")],
        "/jobs/": [shown("job-description")],
        "/trash/": [shown("trashed-title"), shown("delete-reason")],
        "/audit/": [shown("audit-reason"), shown("delete-reason"), shown("job-reason")],
        f"/audit/session/{quote(main, safe='')}/": [shown("audit-reason"), shown("audit-detail")],
    }
    problems = [p for path, shown_ in pages.items() for p in _problems(hostile_page, path, shown_)]
    assert problems == []

    # The same checks do see a payload that gets in (here, put in by hand).
    hostile_page.evaluate("html => document.body.insertAdjacentHTML('beforeend', html)", PAYLOAD)
    hostile_page.wait_for_function("() => window.__xss === 1")  # the CSP is bypassed here
    found = _hostile_effects(hostile_page, "/", [])
    assert any("a payload ran" in p for p in found)
    assert any("injected" in p and "onerror" in p for p in found)


def test_search_queries_and_snippets_stay_text(hostile_page):
    hostile_store(hostile_page.user)
    query = '"><svg class=xss onload=window.__xss=1> user-msg'
    hostile_page.goto("/sessions/")
    hostile_page.fill('input[name="q"]', query)
    hostile_page.press('input[name="q"]', "Enter")
    hostile_page.wait_for_url(lambda url: "q=" in url)
    hostile_page.locator("mark").first.wait_for()
    assert hostile_page.input_value('input[name="q"]') == query
    assert _problems(hostile_page, hostile_page.url, [VISIBLE]) == []
    assert hostile_page.input_value('input[name="q"]') == query


def test_exports_are_downloads_not_pages(hostile_page, live_server):
    ids = hostile_store(hostile_page.user)
    client = Client()
    client.force_login(hostile_page.user)
    for fmt in ("markdown", "jsonl"):
        response = client.get("/export/", {"session": ids["main"], "format": fmt})
        assert response.status_code == 200
        assert not response["Content-Type"].startswith("text/html")
        assert response["Content-Disposition"].startswith("attachment;")
        assert response["X-Content-Type-Options"] == "nosniff"
        body = b"".join(response.streaming_content).decode()
        assert "window.__xss" in body  # the content is exported as written
