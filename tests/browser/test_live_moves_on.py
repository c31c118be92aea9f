"""A live session's page when the runtime moves the conversation on (a reset, a compression)
while it is open: its status, its lineage and its actions follow without a reload, and it
links to the session the conversation continues in."""

from __future__ import annotations

from playwright.sync_api import expect

from sessions_admin import core
from tests import builders
from tests.browser import open_support_actions

TICK = "document.getElementById('live-tail').dispatchEvent(new CustomEvent('live-tick'))"


def poll_now(page) -> int:
    """One poll at once (live.js sends the same event every few seconds); its status."""
    with page.expect_response(lambda r: "/tail/" in r.url) as answer:
        page.evaluate(TICK)
    status = answer.value.status
    page.wait_for_load_state("networkidle")
    return status


def open_live_page(signed_in_page, ref: str):
    page = signed_in_page("support")
    page.goto(f"/sessions/{ref}/")
    expect(page.locator(".status-line .badge.live")).to_be_visible()
    expect(page.locator("#lineage .current .badge.live")).to_have_count(1)
    expect(page.locator("#sa-undo")).to_have_count(1)
    page.evaluate("window.sameDocument = true")
    return page


def test_a_reset_by_the_runtime_ends_the_page_and_links_to_the_new_session(signed_in_page):
    ref, _ids = builders.two_turns("tg:dm:moves", source="telegram")
    page = open_live_page(signed_in_page, ref)

    fresh = core.reset_session_key(session_key="tg:dm:moves", summary="carry on").new_session_id
    assert fresh and fresh != ref
    assert poll_now(page) == 200

    status = page.locator(".status-line")
    expect(status.locator(".badge.ended")).to_be_visible()
    expect(status.locator(".badge.live")).to_have_count(0)
    expect(status.locator(f"a[href='/sessions/{fresh}/']")).to_be_visible()
    expect(page.locator("#transcript-end a", has_text=fresh)).to_be_visible()
    # The lineage no longer marks this session live; undo, redo and retry are gone and the
    # panel points to where they are offered now.
    expect(page.locator("#lineage .current .badge.live")).to_have_count(0)
    for action in ("undo", "redo", "retry"):
        expect(page.locator(f"#sa-{action}")).to_have_count(0)
    expect(page.locator("#session-actions .sa-live-link")).to_have_attribute(
        "href", f"/sessions/{fresh}/#session-actions"
    )
    expect(page.locator("#live-tail")).to_have_count(0)
    assert page.evaluate("window.sameDocument") is True
    assert page.script_errors == []


def test_a_compression_by_the_runtime_ends_this_segment_and_links_to_the_next(signed_in_page):
    ref, _ids = builders.two_turns("cli:moves")
    page = open_live_page(signed_in_page, ref)
    open_support_actions(page)  # open while the runtime moves on: it stays open

    tip = core.rotate_for_compression(session_id=ref, summary="so far").new_session_id
    assert poll_now(page) == 200

    status = page.locator(".status-line")
    expect(status.locator(".badge.ended")).to_be_visible()
    expect(status.locator(f"a[href='/sessions/{tip}/']")).to_be_visible()
    expect(page.locator("#transcript .handoff")).to_contain_text(tip)
    expect(page.locator("#lineage .current .badge.live")).to_have_count(0)
    expect(page.locator("#sa-undo")).to_have_count(0)
    expect(page.locator("#session-actions .sa-live-link")).to_have_attribute(
        "href", f"/sessions/{tip}/#session-actions"
    )
    expect(page.locator("#session-actions .sa-live-link")).to_be_visible()
    # The transcript still follows the conversation into its new segment.
    expect(page.locator("#live-tail")).to_have_count(1)
    assert page.evaluate("window.sameDocument") is True
    assert page.script_errors == []
