"""Support actions in a real browser: undo and redo in place, resume through the preflight, reset."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from sessions_admin import core
from tests import builders
from tests.browser import open_support_actions
from tests.helpers import messages, session


def two_turns(key: str = "tg:dm:b1", **fields) -> tuple[str, list[int]]:
    return builders.two_turns(
        key,
        source="telegram",
        texts=("first question", "first answer", "second question", "second answer"),
        **fields,
    )


def test_undo_then_redo_the_last_turn_without_a_reload(signed_in_page):
    ref, ids = two_turns()
    page = signed_in_page("support")
    page.goto(f"/sessions/{ref}/")
    expect(page.locator("#session-history")).to_contain_text("No operator has acted")
    page.evaluate("window.stillTheSamePage = true")
    last_turn = [page.locator(f"#m{mid}") for mid in ids[2:]]
    for article in last_turn:
        expect(article).not_to_have_class(re.compile(r"\binactive\b"))

    # Undo is a secondary button that first shows what it would mark undone.
    undo = page.locator("#sa-undo")
    expect(undo.locator("summary")).to_have_class(re.compile(r"\bsecondary\b"))
    expect(undo.locator("summary")).to_be_hidden()  # the panel is one line until opened
    open_support_actions(page)
    expect(undo.locator(".sa-preview")).to_be_hidden()
    undo.locator("summary").click()
    expect(undo.locator(".sa-preview li")).to_have_count(2)
    expect(undo.locator(".sa-preview")).to_contain_text("second question")
    expect(undo.locator(".sa-preview")).to_contain_text("second answer")
    expect(undo.locator(".sa-preview")).not_to_contain_text("first")
    assert [m["active"] for m in messages(ref)] == [1, 1, 1, 1]  # opening it changed nothing
    undo.get_by_role("button", name="Undo these 2 messages").click()
    expect(page.locator("#session-actions .sa-notice")).to_contain_text(
        "Undid the last turn: 2 messages"
    )
    for article in last_turn:
        expect(article).to_have_class(re.compile(r"\binactive\b"))
        expect(article.locator(".badge.undone")).to_be_visible()
    expect(page.locator(f"#m{ids[1]}")).not_to_have_class(re.compile(r"\binactive\b"))
    expect(page.locator("#meta")).to_contain_text("2 active · 1 rewind")
    expect(page.locator("#session-history")).to_contain_text("undo")
    expect(page.locator("#lineage li.current .node-meta")).to_contain_text("2 messages")
    assert page.evaluate("window.stillTheSamePage") is True
    assert [m["active"] for m in messages(ref)] == [1, 1, 0, 0]

    page.locator("#sa-redo summary").click()
    expect(page.locator("#sa-redo .sa-preview li")).to_have_count(2)
    page.get_by_role("button", name="Bring back 2 messages").click()
    expect(page.locator("#session-actions .sa-notice")).to_contain_text("Redid: 2 messages")
    for article in last_turn:
        expect(article).not_to_have_class(re.compile(r"\binactive\b"))
    expect(page.locator("#meta")).to_contain_text("4 active")
    assert page.evaluate("window.stillTheSamePage") is True
    assert [m["active"] for m in messages(ref)] == [1, 1, 1, 1]
    assert session(ref)["message_count"] == 4

    # Nothing left to redo: the panel says so instead of offering a button.
    page.locator("#sa-redo summary").click()
    expect(page.locator("#sa-redo")).to_contain_text("nothing to redo")
    expect(page.locator("#sa-redo button")).to_have_count(0)
    assert page.evaluate("window.stillTheSamePage") is True
    assert page.script_errors == []


def test_an_ended_segment_sends_the_operator_to_the_live_session_to_undo(signed_in_page):
    old, _ = two_turns("tg:dm:b6")
    live = core.reset_session_key(session_key="tg:dm:b6").new_session_id
    core.append_messages(
        session_id=live,
        messages=[
            {"role": "user", "content": "third question"},
            {"role": "assistant", "content": "third answer"},
        ],
    )
    page = signed_in_page("support")
    page.goto(f"/sessions/{old}/")
    expect(page.locator("#session-actions .sa-rewind")).to_have_count(0)
    open_support_actions(page)
    page.locator("#session-actions .sa-live-link").click()
    page.wait_for_url(lambda address: f"/sessions/{live}/" in address)
    page.locator("#sa-undo summary").click()
    expect(page.locator("#sa-undo .sa-preview")).to_contain_text("third question")
    page.get_by_role("button", name="Undo these 2 messages").click()
    expect(page.locator("#session-actions .sa-notice")).to_contain_text("Undid the last turn")
    assert [m["active"] for m in messages(live)] == [0, 0]
    assert [m["active"] for m in messages(old)] == [1, 1, 1, 1]
    assert page.script_errors == []


def test_resume_an_ended_session_through_the_preflight(signed_in_page):
    old, _ = two_turns("tg:dm:b2", title="Order 8812")
    core.end_session(session_id=old, end_reason="lru_evict")
    newer, _ = two_turns("tg:dm:b2")
    page = signed_in_page("support")
    page.goto(f"/sessions/{old}/")
    expect(page.locator(".status-line")).to_contain_text("evicted")

    open_support_actions(page)
    page.get_by_role("link", name="Resume…").click()
    page.wait_for_url(f"**/sessions/{old}/resume/")
    expect(page.locator(".sa-target-id")).to_have_text(old)
    expect(page.locator(".sa-size")).to_contain_text("4 messages")
    expect(page.locator(".sa-ended")).to_contain_text("evicted from the runtime's cache")
    expect(page.locator(".sa-switch-id")).to_have_text(newer)

    page.get_by_role("button", name=f"Resume {old}").click()
    page.wait_for_url(f"**/sessions/{old}/")
    expect(page.locator("ul.messages")).to_contain_text(f"Resumed {old}")
    expect(page.locator(".status-line .badge.live")).to_be_visible()
    assert session(old)["ended_at"] is None
    assert session(newer)["end_reason"] == "session_switch"
    assert core.live_session_for_key("tg:dm:b2") == old
    assert page.script_errors == []


def test_find_a_session_to_resume_by_title(signed_in_page):
    old, _ = two_turns("tg:dm:b3", title="Refund chat")
    core.end_session(session_id=old, end_reason="idle_expiry")
    other, _ = two_turns("tg:dm:b4")
    page = signed_in_page("support")
    page.goto(f"/sessions/{other}/resume/")
    page.get_by_label("Title, id or id prefix").fill("Refund chat")
    page.get_by_role("button", name="Find").click()
    page.wait_for_url(f"**/sessions/{old}/resume/")
    expect(page.locator(".sa-target-id")).to_have_text(old)


def test_reset_from_the_panel(signed_in_page):
    ref, _ = two_turns("tg:dm:b5")
    page = signed_in_page("admin")
    page.goto(f"/sessions/{ref}/")
    open_support_actions(page)
    page.locator(".sa-reset > summary").click()
    page.get_by_label("Summary").fill("They asked about a refund.")
    page.get_by_role("button", name="Reset the chat").click()
    page.wait_for_url(lambda url: ref not in url)
    new = core.live_session_for_key("tg:dm:b5")
    assert new != ref
    assert page.url.endswith(f"/sessions/{new}/")
    expect(page.locator("ul.messages")).to_contain_text(
        f"Reset: ended {ref} (session_reset), started {new}"
    )
    expect(page.locator("#transcript")).to_contain_text("They asked about a refund.")
    assert session(ref)["end_reason"] == "session_reset"
    assert page.script_errors == []
