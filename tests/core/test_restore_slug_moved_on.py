"""A trash restore never makes a second live session for one conversation slug (attack 42, G).

A slug's session is deleted, the runtime resolves the slug again and gets a new session, then
the delete is restored: the restored session comes back ended ``session_switch``, as one of a
session key that moved on does, and the slug keeps resolving to the runtime's new session.
"""

from __future__ import annotations

from sessions_admin import core
from sessions_admin.core import lineage
from sessions_admin.ledger.trash import LEDGER_TRASH


def _conversation(slug: str) -> str:
    session_id = core.resolve_conversation(conversation=slug).session_id
    core.append_message(session_id=session_id, role="user", content="q1")
    core.append_message(session_id=session_id, role="assistant", content="a1")
    core.record_turn(response_id=f"r1-{slug}", session_id=session_id, conversation=slug)
    return session_id


def _delete(session_id: str) -> int:
    plan = core.plan_cascade_delete(session_ids=[session_id])
    deleted = core.execute_cascade_delete(
        session_ids=[session_id],
        expected_fingerprint=plan.fingerprint,
        actor="a",
        reason="r",
        trash=LEDGER_TRASH,
    )
    return deleted.trash_entry_ids[0]


def _live(session_id: str) -> bool:
    return lineage.session_row(session_id)["ended_at"] is None


def test_a_restored_session_whose_slug_moved_on_comes_back_ended():
    first = _conversation("support-7")
    entry = _delete(first)
    second = core.resolve_conversation(conversation="support-7").session_id
    assert second != first
    core.append_message(session_id=second, role="user", content="q2")

    result = core.restore_trash_entry(entry_id=entry, actor="a", trash=LEDGER_TRASH)

    assert result.skipped_conversations == ("support-7",)
    assert lineage.session_row(first)["end_reason"] == "session_switch"
    assert _live(second)
    assert core.resolve_conversation(conversation="support-7").session_id == second
    # Its messages are back, and a stale writer is told where the conversation went on.
    assert [m["content"] for m in core.active_transcript(session_id=first)] == ["q1", "a1"]
    try:
        core.append_message(session_id=first, role="user", content="late")
    except core.SessionEnded:
        pass
    else:
        raise AssertionError("a write to the restored, ended session was accepted")


def test_a_restored_session_whose_slug_did_not_move_stays_live():
    first = _conversation("support-8")
    entry = _delete(first)

    result = core.restore_trash_entry(entry_id=entry, actor="a", trash=LEDGER_TRASH)

    assert result.skipped_conversations == ()
    assert _live(first)
    assert core.resolve_conversation(conversation="support-8").session_id == first
