"""A live session's page follows the runtime in a real browser: what the runtime writes
appears without a reload, once; a compression meanwhile continues into the new segment;
the polling stops when the session ends. Jump to latest and the segment navigator."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.core.cache import cache
from playwright.sync_api import expect

from sessions_admin import core
from tests.browser import open_support_actions

TICK = "document.getElementById('live-tail').dispatchEvent(new CustomEvent('live-tick'))"


def poll_now(page) -> int:
    """One poll at once (live.js sends the same event every few seconds); its status."""
    with page.expect_response(lambda r: "/tail/" in r.url) as answer:
        page.evaluate(TICK)
    status = answer.value.status
    page.wait_for_load_state()
    return status


def test_what_the_runtime_writes_appears_once_without_a_reload(signed_in_page):
    ref = core.create_session(source="telegram", session_key="tg:live").session_id
    core.append_message(session_id=ref, role="user", content="is my order shipped?")
    page = signed_in_page("viewer")
    page.goto(f"/sessions/{ref}/")
    messages = page.locator("#transcript article.msg")
    expect(messages).to_have_count(1)
    page.evaluate("window.sameDocument = true")

    # The runtime answers; live.js's own timer brings it in.
    core.append_message(session_id=ref, role="assistant", content="yes, on Monday")
    expect(page.get_by_text("yes, on Monday")).to_be_visible(timeout=20_000)
    expect(messages).to_have_count(2)
    for _ in range(3):
        assert poll_now(page) == 204
    expect(messages).to_have_count(2)

    # A compression starts a new segment meanwhile: the transcript continues into it.
    tip = core.rotate_for_compression(
        session_id=ref, summary="they asked about 8812"
    ).new_session_id
    core.append_message(session_id=tip, role="user", content="and the invoice?")
    assert poll_now(page) == 200
    expect(page.locator("#transcript .handoff")).to_contain_text(tip)
    expect(page.get_by_text("and the invoice?")).to_be_visible()
    assert poll_now(page) == 204
    expect(page.get_by_text("and the invoice?")).to_have_count(1)

    # The session ends: the last answer says so and nothing polls any more.
    core.append_message(session_id=tip, role="assistant", content="sent it again")
    core.end_session(session_id=tip, end_reason="user_exit")
    assert poll_now(page) == 200
    expect(page.get_by_text("sent it again")).to_have_count(1)
    expect(page.locator(".transcript-end")).to_contain_text("The conversation ended")
    expect(page.locator("#live-tail")).to_have_count(0)
    assert page.locator("[hx-trigger*=live-tick]").count() == 0
    assert page.evaluate("window.sameDocument") is True  # appended by htmx, never reloaded
    assert page.script_errors == []


def test_jump_to_latest_and_the_segment_navigator(signed_in_page):
    root = core.create_session(source="cli").session_id
    segments = [root]
    for n in range(3):
        core.append_messages(
            session_id=segments[-1],
            messages=[
                {"role": "user" if i % 2 == 0 else "assistant", "content": f"seg{n} {i:03d}"}
                for i in range(120 if n == 0 else 4)
            ],
        )
        segments.append(core.rotate_for_compression(session_id=segments[-1]).new_session_id)
    core.append_message(session_id=segments[-1], role="user", content="the latest question")
    page = signed_in_page("viewer")
    page.goto(f"/sessions/{root}/")
    expect(page.get_by_text("the latest question")).to_have_count(0)

    page.get_by_role("link", name="Jump to latest").click()
    expect(page.get_by_text("the latest question")).to_be_visible()
    expect(page.locator("#live-tail")).to_be_visible()
    assert page.url.endswith("?at=end")

    nav = page.get_by_role("navigation", name="Compression segments")
    nav.get_by_role("link", name="2", exact=True).click()
    expect(page.locator("#transcript article.msg").first).to_contain_text("seg1 000")
    expect(nav.get_by_role("link", name="2", exact=True)).to_be_visible()
    assert "after=1%3A0" in page.url
    assert page.script_errors == []


def tick(page, selector: str, path: str) -> int:
    """One live-tick on ``selector`` (live.js sends it every few seconds); the answer's status."""
    with page.expect_response(lambda r: urlsplit(r.url).path == path) as answer:
        page.evaluate(
            f"document.querySelector({selector!r}).dispatchEvent(new CustomEvent('live-tick'))"
        )
    status = answer.value.status
    page.wait_for_load_state()
    return status


def test_the_list_and_the_overview_show_new_sessions_without_a_reload(signed_in_page):
    core.create_session(source="cli")
    page = signed_in_page("viewer")
    page.goto("/sessions/")
    page.evaluate("window.sameDocument = true")
    banner = page.locator("#activity-banner")
    expect(banner).to_be_hidden()
    assert tick(page, "#activity-banner", "/activity/sessions/") == 204

    core.create_session(source="telegram")
    assert tick(page, "#activity-banner", "/activity/sessions/") == 200
    expect(banner).to_have_text("1 session started since you opened this page: show them")
    assert page.evaluate("window.sameDocument") is True
    banner.get_by_role("link").click()
    expect(page.locator("#activity-banner")).to_be_hidden()  # a fresh page counts from now

    cache.clear()
    page.goto("/")
    live = page.locator("#overview .stat", has_text="live sessions").locator(".stat-value")
    expect(live).to_have_text("2")
    page.evaluate("window.sameDocument = true")
    core.create_session(source="telegram")
    cache.clear()  # as when the cached figures have aged: the next refresh recounts
    assert tick(page, "#overview", "/") == 200
    expect(live).to_have_text("3")
    assert page.evaluate("window.sameDocument") is True
    assert page.script_errors == []


def test_the_action_panel_stays_in_reach_while_the_transcript_scrolls(signed_in_page):
    ref = core.create_session(source="cli").session_id
    core.append_messages(
        session_id=ref,
        messages=[
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"line {i:03d}"}
            for i in range(60)
        ],
    )
    page = signed_in_page("support")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"/sessions/{ref}/")
    panel = page.locator("#session-actions")
    last = page.locator("#transcript").get_by_text("line 059", exact=True)
    last.scroll_into_view_if_needed()
    assert page.evaluate("window.scrollY") > 1000
    box = panel.bounding_box()
    assert box is not None and 0 <= box["y"] < 50  # pinned to the top of the viewport
    open_support_actions(page)  # one line until opened
    expect(panel.get_by_text("Undo last turn…")).to_be_visible()

    # On a phone it scrolls away with the page instead of covering the transcript.
    page.set_viewport_size({"width": 390, "height": 800})
    last.scroll_into_view_if_needed()
    box = panel.bounding_box()
    assert box is not None and box["y"] + box["height"] < 0
    assert page.script_errors == []


# live.js's one-second timer, run by the test instead of the clock; the tab's visibility set by it.
CONTROLLED_CLOCK = """
window.liveTimers = [];
const realSetInterval = window.setInterval;
window.setInterval = (callback, ms, ...rest) => {
  if (String(callback).includes("tick(false)")) {
    window.liveTimers.push(callback);
    return 0;
  }
  return realSetInterval(callback, ms, ...rest);
};
window.tabState = "visible";
Object.defineProperty(document, "visibilityState", { get: () => window.tabState });
"""


def test_a_hidden_tab_does_not_poll(signed_in_page):
    ref = core.create_session(source="cli").session_id
    core.append_message(session_id=ref, role="user", content="hello")
    page = signed_in_page("viewer")
    page.context.add_init_script(CONTROLLED_CLOCK)
    polls: list[str] = []
    page.on(
        "request", lambda request: polls.append(request.url) if "/tail/" in request.url else None
    )
    page.goto(f"/sessions/{ref}/")
    expect(page.locator("#live-tail")).to_be_visible()
    assert page.evaluate("window.liveTimers.length") == 1

    page.evaluate("window.tabState = 'hidden'")
    page.evaluate("for (let s = 0; s < 30; s++) window.liveTimers[0]()")  # 30 s while hidden
    page.wait_for_load_state("networkidle")
    assert polls == []

    page.evaluate("window.tabState = 'visible'")
    with page.expect_response(lambda r: "/tail/" in r.url):
        page.evaluate("for (let s = 0; s < 5; s++) window.liveTimers[0]()")  # 5 s in view
    page.wait_for_load_state("networkidle")
    assert len(polls) == 1
    assert page.script_errors == []
