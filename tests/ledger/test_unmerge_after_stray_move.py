"""An unmerge waits until a move of stray messages out of one of its husks is undone (attack 42,
G): the unmerge gives a husk back only the rows the merge took, so a runtime's turn written
into the husk after the merge and moved to the target would stay with the target, apart from
the conversation it was written in."""

from __future__ import annotations

import time

import pytest

from sessions_admin import core
from sessions_admin.core import db, stray
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditEntry


def _messages_of(session_id: str) -> list[int]:
    return [
        int(r[0])
        for r in db.fetchall(
            "SELECT id FROM messages WHERE session_id = %s ORDER BY id", [session_id]
        )
    ]


def test_an_unmerge_is_refused_until_the_stray_move_out_of_its_husk_is_undone():
    target, husk = (core.create_session(source="api_server").session_id for _ in range(2))
    core.append_message(session_id=target, role="user", content="first")
    (own,) = core.append_message(session_id=husk, role="user", content="second").message_ids
    plan = core.plan_merge(session_ids=[target, husk], target_id=target)
    merged = actions.merge(
        actor="ada",
        session_ids=[target, husk],
        target_id=target,
        expected_fingerprint=plan.fingerprint,
    )
    # A runtime still holding the husk's id writes its next turn there (hermes 0.19's SQL).
    db.execute(
        "INSERT INTO messages (session_id, role, content, timestamp, active) "
        "VALUES (%s, 'user', 'late question', %s, 1)",
        [husk, time.time()],
    )
    late = _messages_of(husk)
    moving = stray.plan_stray_move(session_id=husk)
    actions.move_stray_messages(
        actor="ada", session_id=husk, expected_fingerprint=moving.fingerprint
    )
    before = {sid: _messages_of(sid) for sid in (target, husk)}

    with pytest.raises(core.InvalidInput, match="move them back first"):
        actions.unmerge(actor="ada", merge_id=merged.merge_id, reason="wrong customer")
    assert {sid: _messages_of(sid) for sid in (target, husk)} == before
    assert core.merge_record(merge_id=merged.merge_id).undone_at is None
    refused = AuditEntry.objects.filter(action="unmerge").get()
    assert refused.outcome != AuditEntry.OK

    move = AuditEntry.objects.get(action="move_stray_messages")
    actions.undo_stray_move(actor="ada", entry_id=move.pk)
    actions.unmerge(actor="ada", merge_id=merged.merge_id, reason="wrong customer")
    # The husk has its own message and the turn written into it; the target only its own.
    assert _messages_of(husk) == sorted([own, *late])
    assert own not in _messages_of(target) and not set(late) & set(_messages_of(target))
