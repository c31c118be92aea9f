"""Every page works under the Content-Security-Policy (sessions_admin/security.py).

The ``page`` fixture fails a test on any violation the browser reports; here every main
page is loaded with its htmx fragments, and the policy is shown to block what it should.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from playwright.sync_api import expect

from sessions_admin import core
from sessions_admin.ledger import worker
from tests.browser import open_support_actions
from tests.browser.conftest import HTMX_SETTLED
from tests.browser.hostile import PAYLOAD, hostile_store
from tests.builders import refund_lineage


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    cache.clear()
    monkeypatch.setattr(worker, "ensure_worker_running", lambda: None)  # jobs stay queued
    yield
    cache.clear()


def _no_inline_styles_or_scripts(page) -> list[str]:
    return page.eval_on_selector_all(
        "style, [style], script:not([src])", "found => found.map(e => e.outerHTML.slice(0, 200))"
    )


def test_every_page_loads_under_the_policy_with_htmx_working(signed_in_page):
    page = signed_in_page("admin")
    lineage = refund_lineage()
    ids = hostile_store(User.objects.get(username="operator"))
    main = quote(ids["main"], safe="")
    paths = [
        "/",
        "/sessions/",
        "/sessions/?scope=all&q=charged",
        f"/sessions/{lineage['tip']}/",
        f"/sessions/{lineage['root']}/",
        f"/sessions/{main}/",
        "/conversations/",
        "/forks/",
        f"/merge/preview/?ids={ids['other']}&ids={main}",
        f"/sessions/{lineage['tip']}/delete/",
        "/bulk-delete/",
        "/bulk-delete/?preset=empty",
        "/jobs/",
        f"/jobs/{ids['job']}/",
        "/trash/",
        "/audit/",
        f"/audit/session/{main}/",
        "/no-such-page/",
    ]
    for path in paths:
        page.goto(path)
        page.wait_for_function(HTMX_SETTLED)  # the htmx fragments have arrived
        assert page.evaluate("htmx.config.allowEval") is False, path
        assert page.evaluate("htmx.config.includeIndicatorStyles") is False, path
        assert "style" not in page.evaluate("htmx.config.attributesToSettle"), path
        assert _no_inline_styles_or_scripts(page) == [], path
    assert page.csp_violations == []
    assert page.script_errors == []

    # htmx still swaps under the policy: the overview's health panel and a transcript page.
    page.goto("/")
    expect(page.locator("#health-panel.loading")).to_have_count(0)
    page.goto(f"/sessions/{lineage['tip']}/")
    expect(page.locator("body")).to_contain_text("thanks")
    assert page.csp_violations == []


def test_the_policy_blocks_inline_code_and_reports_it(page):
    page.goto("/login/")
    with page.expect_console_message(lambda message: "Content Security Policy" in message.text):
        page.evaluate(
            "html => document.body.insertAdjacentHTML('beforeend', html)",
            PAYLOAD + '<p id="styled" style="color: rgb(255, 0, 0)">styled</p>',
        )
    expect(page.locator("img.xss")).to_have_count(1)  # the element is there, its handler is not run
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator("#styled").evaluate("e => getComputedStyle(e).color") != "rgb(255, 0, 0)"
    assert page.csp_violations  # what the page fixture checks after every browser test
    page.csp_violations.clear()  # expected here; any other test fails on one


def test_repeated_actions_swap_without_a_report(signed_in_page):
    """htmx settles a swap by copying the old element's class, size and (by default) style
    attributes onto the new one; the policy refuses a copied style attribute. The operator
    has resized the reset summary box (the browser gives it a style); the action panel is
    then swapped again and again."""
    chat = core.create_session(source="telegram", session_key="tg:dm:42").session_id
    core.append_messages(
        session_id=chat,
        messages=[
            {"role": "user", "content": "where is my refund?"},
            {"role": "assistant", "content": "On its way."},
        ],
    )
    page = signed_in_page("support")
    page.goto(f"/sessions/{chat}/")
    panel = page.locator("#session-actions")
    open_support_actions(page)
    panel.locator("summary", has_text="Reset").click()
    # What dragging the box's corner does: an inline size through the CSSOM (allowed).
    page.eval_on_selector("#sa-summary", "box => { box.style.height = '9em'; }")
    for action in ("undo", "redo", "undo"):
        page.eval_on_selector("#session-actions", "panel => { panel.dataset.swapped = 'no'; }")
        # Submitted as its button would (the button may sit in a closed disclosure).
        panel.locator(f'form[hx-post$="/{action}/"]').first.evaluate("f => f.requestSubmit()")
        expect(page.locator("#session-actions:not([data-swapped])")).to_have_count(1)
        page.wait_for_load_state("networkidle")
        page.eval_on_selector("#sa-summary", "box => { box.style.height = '9em'; }")
    page.wait_for_timeout(100)  # past htmx's settle delay (20 ms)
    assert page.csp_violations == []
    assert page.script_errors == []
