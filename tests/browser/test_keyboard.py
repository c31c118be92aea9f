"""Every job with the keyboard alone (issue 29): Tab to a control, type, press Enter or Space.

Pages are opened by address (what typing a URL does); everything on them is done with key
presses only. At each control reached, focus must be visible (a :focus-visible outline),
and after an htmx swap focus must land somewhere in the page, never back on <body>.
What each job did is checked in the databases, not on the page.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.ledger.models import DeleteJob, TrashEntry
from tests.browser.test_merge import cold_start_forks
from tests.builders import (
    fresh_cache,  # noqa: F401 - an autouse fixture
    old_sessions,
)
from tests.helpers import messages, present

pytestmark = pytest.mark.usefixtures("no_worker")  # a bulk delete job stays queued

TABS = 150

FOCUS = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const style = getComputedStyle(el);
  return {
    tag: el.tagName.toLowerCase(),
    text: (el.innerText || el.value || el.getAttribute("aria-label") || "").trim().slice(0, 80),
    name: el.getAttribute("name") || el.getAttribute("type") || "",
    outline: `${style.outlineStyle} ${style.outlineWidth}`,
    // The console's own ring (static/css/console.css), not the browser's thin default.
    visible: style.outlineStyle !== "none" && parseFloat(style.outlineWidth) >= 2,
  };
}"""


def tab_to(page, selector: str, *, backwards: bool = False) -> dict:
    """Press Tab (or Shift+Tab) until the focused element matches ``selector``; its focus
    must be visible."""
    key = "Shift+Tab" if backwards else "Tab"
    for _ in range(TABS):
        page.keyboard.press(key)
        if page.evaluate("s => document.activeElement.matches(s)", selector):
            focused = page.evaluate(FOCUS)
            assert focused["visible"], f"focus on {focused} is not visible"
            return focused
    raise AssertionError(f"{TABS} presses of {key} never reached {selector}")


def focused(page) -> dict | None:
    return page.evaluate(FOCUS)


def _say(session_id: str, *texts: str) -> list[int]:
    return list(
        core.append_messages(
            session_id=session_id, messages=[{"role": "user", "content": t} for t in texts]
        ).message_ids
    )


def test_every_stop_of_the_busiest_pages_shows_its_focus(signed_in_page):
    sid = core.create_session(source="telegram", session_key="tg:dm:3").session_id
    core.append_messages(
        session_id=sid,
        messages=[
            {"role": "user", "content": "where is my refund?"},
            {"role": "assistant", "content": "On its way."},
        ],
    )
    page = signed_in_page("support")
    for path in ("/sessions/?scope=all", f"/sessions/{sid}/"):
        page.goto(path)
        stops = []
        for _ in range(60):
            page.keyboard.press("Tab")
            stop = focused(page)
            if stop is None:
                break  # past the last control
            assert stop["visible"], f"{path}: focus on {stop} is not visible"
            stops.append(stop)
        assert len(stops) > 10, stops
        assert stops[0]["text"] == "Skip to the page's content"


def test_search_open_a_hit_and_step_through_matches(signed_in_page):
    sid = core.create_session(source="telegram", started_at=1_700_000_000.0).session_id
    _say(sid, "Where is my red parcel?", "filler", "the red parcel left", "red parcel again")
    page = signed_in_page("viewer")
    page.goto("/sessions/")
    tab_to(page, 'input[name="q"]')
    page.keyboard.type('"red parcel"')
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"q=%22red"))
    expect(page.locator("li.hit-session")).to_have_count(1)

    tab_to(page, "a.snippet")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"around=\d+"))
    counter = page.locator("[data-find-count]")
    expect(counter).to_have_text(re.compile(r"^match [123] of 3$"))

    def at() -> int:
        return int(counter.inner_text().split()[1])

    start = at()
    tab_to(page, ".find-bar button[data-find-step='1']")
    page.keyboard.press("Enter")
    expect(counter).to_have_text(f"match {start % 3 + 1} of 3")
    page.keyboard.press("Space")
    expect(counter).to_have_text(f"match {(start + 1) % 3 + 1} of 3")
    tab_to(page, ".find-bar button[data-find-step='-1']", backwards=True)
    page.keyboard.press("Enter")
    expect(counter).to_have_text(f"match {start % 3 + 1} of 3")
    assert page.script_errors == []


def test_select_rows_and_merge_through_the_preview(signed_in_page):
    ids = cold_start_forks("keyboard-slug", forks=2)
    page = signed_in_page("support")
    page.goto("/sessions/?scope=all&source=api_server")
    for sid in ids:
        tab_to(page, f'input[name="ids"][value="{sid}"]')
        page.keyboard.press("Space")
    expect(page.locator("[data-selected-count]")).to_have_text("2 selected")
    tab_to(page, "#selection button[formaction]", backwards=True)
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/merge/preview/"))

    tab_to(page, "#merge-reason")
    page.keyboard.type("one conversation, two sessions")
    tab_to(page, "form.confirm-merge button[type=submit]")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/sessions/{ids[0]}/")
    assert db.fetchall("SELECT target_session_id FROM sessions_admin_merges") == [(ids[0],)]
    assert len(messages(ids[0], active_only=True)) == 4  # both sessions' turns, in the target
    assert page.script_errors == []


def test_cascade_delete_with_the_typed_count_then_restore_from_the_trash(signed_in_page):
    root = core.create_session(source="cli", session_key="cli:kb", title="long").session_id
    chain = [root]
    for n in range(20):
        core.append_message(session_id=chain[-1], role="user", content=f"turn {n}")
        chain.append(core.rotate_for_compression(session_id=chain[-1]).new_session_id)
    page = signed_in_page("admin")
    page.goto(f"/sessions/{chain[-1]}/delete/")
    tab_to(page, 'form.confirm textarea[name="reason"]')
    page.keyboard.type("customer asked")
    tab_to(page, 'form.confirm input[name="typed_count"]')
    page.keyboard.type("21")
    tab_to(page, "form.confirm button[type=submit]")
    page.keyboard.press("Enter")
    page.wait_for_url("**/trash/")
    assert present(chain) == set()

    tab_to(page, "form.restore button[type=submit]")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert present(chain) == set(chain)
    assert {e.state for e in TrashEntry.objects.all()} == {TrashEntry.RESTORED}
    assert page.script_errors == []


def test_start_and_cancel_a_bulk_delete_job(signed_in_page):
    old_sessions(3, messages=2, ended_at=5000.0)
    page = signed_in_page("admin")
    page.goto("/bulk-delete/")
    tab_to(page, 'form.preset input[name="days"]')
    page.keyboard.press("Control+A")
    page.keyboard.type("30")
    page.keyboard.press("Enter")  # submits the preset's dry run (htmx)
    expect(page.locator("[data-count]")).to_have_text("3")
    # The dry run is shown below the presets: focus moved to it, so Tab goes on inside it.
    expect(page.locator("#dry-run-heading")).to_be_focused()
    tab_to(page, 'form.confirm textarea[name="reason"]')
    page.keyboard.type("old cron sessions")
    tab_to(page, "form.confirm button[type=submit]")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = DeleteJob.objects.get()
    assert job.state == DeleteJob.PENDING

    tab_to(page, "#job-actions button[type=submit]")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    job.refresh_from_db()
    assert job.state == DeleteJob.CANCELLED
    assert page.script_errors == []


def test_focus_after_a_swap_lands_on_the_answer_not_the_top_of_the_page(signed_in_page):
    """The session actions panel is swapped whole by its own buttons: the button that had
    focus is gone, and focus goes to the panel's notice, which is also read out."""
    sid = core.create_session(source="telegram", session_key="tg:dm:7").session_id
    core.append_messages(
        session_id=sid,
        messages=[
            {"role": "user", "content": "where is my refund?"},
            {"role": "assistant", "content": "On its way."},
        ],
    )
    page = signed_in_page("support")
    page.goto(f"/sessions/{sid}/")
    tab_to(page, "#session-actions summary.sa-summary")
    page.keyboard.press("Enter")  # opens the support actions panel (one line until opened)
    tab_to(page, "#sa-undo summary")
    page.keyboard.press("Enter")  # opens the disclosure with the undo preview
    tab_to(page, '#sa-undo form button[type="submit"]')
    page.keyboard.press("Enter")
    notice = page.locator("#session-actions .sa-notice")
    expect(notice).to_contain_text("Undid the last turn")
    expect(notice).to_be_focused()
    expect(page.locator("#announcer")).to_contain_text("Undid the last turn")
    assert messages(sid, active_only=True) == []
    assert page.script_errors == []
