"""Search in a real browser: hits grouped by session, then the words marked in the opened
transcript with next/previous (static/js/find.js), chunks loaded later included."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from sessions_admin import core
from sessions_admin.console.views.detail import CHUNK_SIZE
from tests.builders import fresh_cache  # noqa: F401 - an autouse fixture


def _say(session_id: str, *texts: str) -> list[int]:
    return list(
        core.append_messages(
            session_id=session_id, messages=[{"role": "user", "content": t} for t in texts]
        ).message_ids
    )


def test_hits_are_grouped_and_the_transcript_steps_through_the_marked_words(signed_in_page):
    busy = core.create_session(source="telegram", started_at=1_700_000_000.0).session_id
    _say(busy, "Where is my red parcel?")
    _say(busy, *[f"filler {n}" for n in range(3)])
    ids = _say(busy, "the red parcel left", "a Red-Parcel again", "no match: red, then parcel")
    quiet = core.create_session(source="cli", started_at=1_700_000_100.0).session_id
    _say(quiet, "an older red parcel elsewhere")
    _say(busy, "last word: red parcel")
    page = signed_in_page("viewer")
    page.goto("/sessions/")
    page.fill('input[name="q"]', '"red parcel" -elsewhere')
    page.press('input[name="q"]', "Enter")
    page.wait_for_url(re.compile(r"q=%22red"))
    sessions = page.locator("li.hit-session")
    expect(sessions).to_have_count(1)  # the quiet session's only hit is excluded
    expect(sessions.first.locator(".match-count")).to_have_text("4 matching messages")
    expect(sessions.first.locator("li.hit")).to_have_count(3)
    expect(sessions.first.locator("a.more-hits")).to_have_text("1 more in this session »")
    expect(sessions.first.locator(".session-link")).to_have_text("Where is my red parcel?")

    # The second snippet: its message opens with the phrase marked, the bar on that match.
    sessions.first.locator("a.snippet").nth(1).click()
    page.wait_for_url(re.compile(rf"around={ids[1]}"))
    bar = page.locator(".find-bar")
    counter = bar.locator("[data-find-count]")
    # "red parcel" in four messages ("Red-Parcel" too: words in order, punctuation between).
    expect(page.locator("#transcript mark.find")).to_have_count(4)
    expect(counter).to_have_text("match 3 of 4")
    current = page.locator("mark.find.current")
    expect(current).to_have_text("Red-Parcel")
    bar.get_by_role("button", name="Next").click()
    expect(counter).to_have_text("match 4 of 4")
    expect(page.locator("mark.find.current")).to_have_text("red parcel")
    bar.get_by_role("button", name="Next").click()
    expect(counter).to_have_text("match 1 of 4")  # wraps around
    bar.get_by_role("button", name="Previous").click()
    expect(counter).to_have_text("match 4 of 4")
    # Header words (role, ids, times) and the bar itself are never marked.
    expect(page.locator(".msg-head mark.find")).to_have_count(0)
    assert page.script_errors == []
    assert page.csp_violations == []


def test_chunks_loaded_later_are_marked_too(signed_in_page):
    sid = core.create_session(source="cli", started_at=1_700_000_000.0).session_id
    [first] = _say(sid, "needle at the start")
    _say(sid, *[f"hay {n}" for n in range(CHUNK_SIZE + 5)])
    [last] = _say(sid, "needle at the end")
    page = signed_in_page("viewer")
    page.goto(f"/sessions/{sid}/?around={first}&q=needle#m{first}")
    counter = page.locator(".find-bar [data-find-count]")
    expect(counter).to_have_text("match 1 of 2")  # the conversation's count, loaded or not
    page.locator("a.load-more").scroll_into_view_if_needed()  # revealed: htmx loads the rest
    expect(page.locator(f"#m{last} mark.find")).to_have_count(1)
    expect(counter).to_have_text("match 1 of 2")
    page.locator(".find-bar").get_by_role("button", name="Next").click()
    expect(counter).to_have_text("match 2 of 2")
    expect(page.locator(f"#m{last} mark.find.current")).to_have_count(1)
    assert page.script_errors == []


def test_the_counter_counts_the_whole_conversation_and_next_loads_what_it_needs(signed_in_page):
    """22 matching messages, ten others between each two: a hit's transcript loads a
    hundred messages, some of the matches; the bar counts all 22 and steps to each."""
    sid = core.create_session(source="cli", started_at=1_700_000_000.0).session_id
    needles = []
    for n in range(22):
        [needle] = _say(sid, f"needle number {n}")
        needles.append(needle)
        _say(sid, *[f"hay {n}.{k}" for k in range(10)])
    # Compressed meanwhile: the count is the conversation's, across its segments.
    tip = core.rotate_for_compression(session_id=sid).new_session_id
    [late] = _say(tip, "a late needle")
    needles.append(late)
    page = signed_in_page("viewer")
    page.goto(f"/sessions/{sid}/?around={needles[4]}&q=needle#m{needles[4]}")
    counter = page.locator(".find-bar [data-find-count]")
    expect(counter).to_have_text("match 5 of 23")
    assert page.locator(f"#m{needles[-1]}").count() == 0  # not loaded
    next_button = page.locator(".find-bar").get_by_role("button", name="Next")
    for n in range(5, 23):
        next_button.click()
        expect(counter).to_have_text(f"match {n + 1} of 23")
        expect(page.locator(f"#m{needles[n]} mark.find.current")).to_have_count(1)
    next_button.click()  # wraps to the first, loaded again
    expect(counter).to_have_text("match 1 of 23")
    expect(page.locator(f"#m{needles[0]} mark.find.current")).to_be_in_viewport()
    previous = page.locator(".find-bar").get_by_role("button", name="Previous")
    previous.click()
    expect(counter).to_have_text("match 23 of 23")
    expect(page.locator(f"#m{late} mark.find.current")).to_be_in_viewport()
    assert page.script_errors == []
    assert page.csp_violations == []
