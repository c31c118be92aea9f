"""Items 6 and 7: undo/redo/retry persisted in the store, and the truncation guard."""

from __future__ import annotations

import pytest

from sessions_admin import core
from tests.helpers import messages, session

TOOL_CALL = [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]


def _session_with_two_turns() -> str:
    ref = core.create_session(source="cli").session_id
    core.append_messages(
        session_id=ref,
        messages=[
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "one"},
            {"role": "user", "content": "second"},
            {"role": "assistant", "content": None, "tool_calls": TOOL_CALL},
            {"role": "tool", "content": "found", "tool_call_id": "c1", "tool_name": "search"},
            {"role": "assistant", "content": "two"},
        ],
    )
    return ref


def _active_contents(session_id: str) -> list:
    return [m["content"] for m in messages(session_id, active_only=True)]


def test_undo_marks_the_last_turn_inactive_in_the_store_and_fixes_counters():
    ref = _session_with_two_turns()
    result = core.undo_last_turn(session_id=ref)
    row = session(ref)
    assert _active_contents(ref) == ["first", "one"]
    assert len(messages(ref)) == 6  # kept, restorable
    assert (row["message_count"], row["tool_call_count"], row["rewind_count"]) == (2, 0, 1)
    assert len(result.message_ids) == 4


def test_redo_restores_exactly_what_undo_removed():
    ref = _session_with_two_turns()
    before = messages(ref)
    core.undo_last_turn(session_id=ref)
    core.undo_last_turn(session_id=ref)
    assert _active_contents(ref) == []
    core.redo_turn(session_id=ref)
    assert _active_contents(ref) == ["first", "one"]
    core.redo_turn(session_id=ref)
    after = messages(ref)
    assert [(m["id"], m["active"]) for m in after] == [(m["id"], m["active"]) for m in before]
    assert (session(ref)["message_count"], session(ref)["tool_call_count"]) == (6, 1)
    with pytest.raises(core.NothingToUndo):
        core.redo_turn(session_id=ref)


def test_an_undone_turn_cannot_come_back_once_the_conversation_moved_on():
    ref = _session_with_two_turns()
    core.undo_last_turn(session_id=ref)
    core.append_message(session_id=ref, role="user", content="instead")
    with pytest.raises(core.NothingToUndo):
        core.redo_turn(session_id=ref)
    assert _active_contents(ref) == ["first", "one", "instead"]


def test_retry_drops_only_the_reply_to_the_last_user_message():
    ref = _session_with_two_turns()
    core.retry_last_turn(session_id=ref)
    assert _active_contents(ref) == ["first", "one", "second"]
    assert (session(ref)["message_count"], session(ref)["tool_call_count"]) == (3, 0)
    core.append_message(session_id=ref, role="assistant", content="two, again")
    assert _active_contents(ref) == ["first", "one", "second", "two, again"]


def test_nothing_to_undo_or_retry_is_a_clear_error():
    ref = core.create_session(source="cli").session_id
    with pytest.raises(core.NothingToUndo):
        core.undo_last_turn(session_id=ref)
    core.append_message(session_id=ref, role="user", content="hi")
    with pytest.raises(core.NothingToUndo):
        core.retry_last_turn(session_id=ref)
    assert session(ref)["rewind_count"] == 0


def test_undo_of_an_unknown_session_is_not_found():
    with pytest.raises(core.SessionNotFound):
        core.undo_last_turn(session_id="nope")


def test_save_appends_only_what_is_new():
    ref = _session_with_two_turns()
    history = [
        {"role": m["role"], "content": m["content"], "tool_call_id": m["tool_call_id"]}
        for m in messages(ref)
    ]
    result = core.save_transcript(
        session_id=ref, messages=[*history, {"role": "user", "content": "third"}]
    )
    assert (result.kept, result.appended, result.deactivated) == (6, 1, 0)
    assert _active_contents(ref)[-1] == "third"
    assert session(ref)["message_count"] == 7


def test_save_refuses_to_replace_a_long_transcript_with_a_short_one():
    """hermes-agent #3123: a resume loaded 0 messages and saved 2 over 200."""
    ref = _session_with_two_turns()
    with pytest.raises(core.TruncationRefused) as caught:
        core.save_transcript(
            session_id=ref,
            messages=[
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "hi"},
            ],
        )
    assert (caught.value.stored, caught.value.offered) == (6, 2)
    assert len(_active_contents(ref)) == 6
    assert session(ref)["message_count"] == 6


def test_save_refuses_a_diverging_transcript_of_the_same_length():
    ref = _session_with_two_turns()
    forged = [{"role": m["role"], "content": "x"} for m in messages(ref)]
    with pytest.raises(core.TruncationRefused):
        core.save_transcript(session_id=ref, messages=forged)
    assert _active_contents(ref)[0] == "first"


def test_an_explicit_rewrite_deactivates_instead_of_deleting():
    ref = _session_with_two_turns()
    result = core.save_transcript(
        session_id=ref,
        rewrite=True,
        messages=[{"role": "user", "content": "first"}, {"role": "assistant", "content": "uno"}],
    )
    assert (result.kept, result.appended, result.deactivated) == (1, 1, 5)
    assert _active_contents(ref) == ["first", "uno"]
    assert len(messages(ref)) == 7
    assert session(ref)["message_count"] == 2


def test_redo_after_a_retry_brings_the_dropped_reply_back():
    ref = _session_with_two_turns()
    dropped = core.retry_last_turn(session_id=ref).message_ids
    assert core.redo_turn(session_id=ref).message_ids == dropped
    assert _active_contents(ref)[-1] == "two"


def test_redo_takes_the_newest_rewind_even_when_an_older_one_is_later_in_the_transcript():
    ref = core.create_session(source="cli").session_id
    core.append_message(session_id=ref, role="user", content="one")
    core.undo_last_turn(session_id=ref)
    core.append_message(session_id=ref, role="user", content="two")
    core.undo_last_turn(session_id=ref)
    core.redo_turn(session_id=ref)
    assert _active_contents(ref) == ["two"]
    with pytest.raises(core.NothingToUndo, match="moved on"):
        core.redo_turn(session_id=ref)
