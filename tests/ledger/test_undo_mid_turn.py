"""An operator's undo or retry waits while the runtime is still answering the last turn
(attack 42, G): undone between the runtime's tool call and its result, the result and the reply
landed as the active tail of a turn that was gone (a tool result without its call, an answer
to an undone question), and redo then refused."""

from __future__ import annotations

import time

import pytest

from sessions_admin import core
from sessions_admin.core import clock, db, transcript
from sessions_admin.ledger import actions


def _active(session_id: str) -> list[tuple[str, str | None]]:
    return [(m["role"], m["content"]) for m in core.active_transcript(session_id=session_id)]


def _conversation() -> str:
    sid = core.create_session(source="telegram", session_key="tg:dm:mid-turn").session_id
    core.append_message(session_id=sid, role="user", content="u1")
    core.append_message(session_id=sid, role="assistant", content="a1")
    return sid


CALL = [{"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]


@pytest.mark.parametrize("action", ["undo", "retry"])
def test_an_operators_undo_or_retry_waits_for_the_runtimes_reply(action):
    sid = _conversation()
    core.append_message(session_id=sid, role="user", content="u2")
    core.append_message(session_id=sid, role="assistant", content=None, tool_calls=CALL)
    before = _active(sid)

    for last in ("a tool call", "a tool's result"):
        with pytest.raises(core.TurnInProgress, match=last):
            actions.rewrite(actor="ada", session_id=sid, action=action, reason="asked")
        with pytest.raises(core.TurnInProgress):
            transcript.plan_rewrite(session_id=sid, action=action, wait_for_reply=True)
        assert _active(sid) == before
        if last == "a tool call":
            core.append_message(session_id=sid, role="tool", content="sunny", tool_call_id="call_2")
            before = _active(sid)

    # The reply is in: the turn goes whole (undo) or its whole answer does (retry).
    core.append_message(session_id=sid, role="assistant", content="It is sunny.")
    actions.rewrite(actor="ada", session_id=sid, action=action, reason="asked")
    kept = [("user", "u1"), ("assistant", "a1")] + ([("user", "u2")] if action == "retry" else [])
    assert _active(sid) == kept


def test_a_question_left_unanswered_by_a_runtime_that_stopped_can_be_undone_later():
    sid = _conversation()
    core.append_message(session_id=sid, role="user", content="u2")
    with pytest.raises(core.TurnInProgress, match="the question"):
        actions.rewrite(actor="ada", session_id=sid, action="undo", reason="asked")
    later = time.time() + transcript.TURN_IN_PROGRESS_SECONDS + 1
    with clock.use_clock(lambda: later):
        actions.rewrite(actor="ada", session_id=sid, action="undo", reason="asked")
    assert _active(sid) == [("user", "u1"), ("assistant", "a1")]


def test_the_runtimes_own_undo_does_not_wait():
    """The runtime undoing its own interrupted turn (its user's /undo) is not an operator."""
    sid = _conversation()
    core.append_message(session_id=sid, role="user", content="u2")
    core.append_message(session_id=sid, role="assistant", content=None, tool_calls=CALL)
    core.undo_last_turn(session_id=sid)
    assert _active(sid) == [("user", "u1"), ("assistant", "a1")]
    assert db.fetchone("SELECT COUNT(*) FROM messages WHERE session_id = %s", [sid])[0] == 4
