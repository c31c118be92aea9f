"""The repairs on both backends: stray messages moved and returned, recoverable siblings closed."""

from __future__ import annotations

import time

import pytest

from sessions_admin import core
from sessions_admin.core import clock, db, lineage, stray
from sessions_admin.store import health


def _stale_write(session_id: str, content: str) -> int:
    """What hermes-agent 0.19's append_message does with an ended session: writes anyway."""
    db.execute(
        "INSERT INTO messages (session_id, role, content, timestamp, active) "
        "VALUES (%s, 'user', %s, %s, 1)",
        [session_id, content, time.time()],
    )
    return int(db.fetchone("SELECT MAX(id) FROM messages")[0])


def test_stray_messages_move_to_the_merge_target_and_back():
    key = "agent:main:discord:dm:5"
    kept = core.create_session(source="discord", session_key=key).session_id
    core.append_message(session_id=kept, role="user", content="first")
    core.end_session(session_id=kept, end_reason="agent_close")
    husk = core.create_session(source="discord", session_key=key).session_id
    core.append_message(session_id=husk, role="user", content="second")
    plan = core.plan_merge(session_ids=[kept, husk], target_id=kept)
    with clock.use_clock(lambda: time.time() - 120):
        core.merge_sessions(
            session_ids=[kept, husk], target_id=kept, expected_fingerprint=plan.fingerprint
        )
    strays = [_stale_write(husk, "late one"), _stale_write(husk, "late two")]
    assert health.count("written_after_end") == 1

    moving = stray.plan_stray_move(session_id=husk)
    assert moving.message_ids == tuple(strays) and moving.destination_id == kept
    with pytest.raises(core.StoreError):
        stray.move_stray_messages(session_id=husk, expected_fingerprint="stale")
    result = stray.move_stray_messages(session_id=husk, expected_fingerprint=moving.fingerprint)
    assert result.destination_id == kept
    in_kept = [r[0] for r in db.fetchall("SELECT id FROM messages WHERE session_id = %s", [kept])]
    assert set(strays) <= set(in_kept)
    assert health.count("written_after_end") == 0
    assert stray.plan_stray_move(session_id=husk).message_ids == ()

    returned = stray.return_stray_messages(
        session_id=husk, destination_id=kept, message_ids=result.message_ids
    )
    assert returned.returned_ids == tuple(strays)
    assert health.count("written_after_end") == 1
    with pytest.raises(core.InvalidInput):
        stray.return_stray_messages(session_id=husk, destination_id=kept, message_ids=strays)


def test_resume_closes_only_the_siblings_a_gateway_would_reopen_instead():
    key = "agent:main:telegram:dm:77"
    ids = []
    for n, reason in enumerate(["agent_close", "user_exit", "agent_close", "ws_orphan_reap"]):
        sid = core.create_session(source="telegram", session_key=key, started_at=1000.0 + n)
        core.append_message(session_id=sid.session_id, role="user", content=f"turn {n}")
        core.end_session(session_id=sid.session_id, end_reason=reason)
        ids.append(sid.session_id)
    result = core.resume_session(ref=ids[1])
    assert dict(result.closed_recoverable) == {ids[2]: "agent_close", ids[3]: "ws_orphan_reap"}
    reasons = dict(db.fetchall("SELECT id, end_reason FROM sessions WHERE session_key = %s", [key]))
    # The earlier accidental close is left alone: the gateway prefers the newer, resumed one.
    assert reasons == {
        ids[0]: "agent_close",
        ids[1]: None,
        ids[2]: "session_switch",
        ids[3]: "session_switch",
    }

    reset = core.reset_session_key(session_key=key)
    assert dict(reset.closed_recoverable) == {ids[0]: "agent_close"}
    assert reset.new_session_id and not reset.left_to_gateway  # no Hermes gateway routes it


def test_a_turn_written_into_a_husk_the_moment_after_its_merge_is_stray():
    """Attack 42 (G): a runtime's turn lands in the husk a second after the merge, inside the
    clock tolerance; the merge took every message the husk had, so it is stray all the same."""
    slug_forks = [core.create_session(source="api_server").session_id for _ in range(2)]
    target, husk = slug_forks
    core.append_message(session_id=target, role="user", content="first")
    core.append_message(session_id=husk, role="user", content="second")
    plan = core.plan_merge(session_ids=slug_forks, target_id=target)
    core.merge_sessions(
        session_ids=slug_forks, target_id=target, expected_fingerprint=plan.fingerprint
    )
    late = [_stale_write(husk, "question"), _stale_write(husk, "answer")]

    assert health.count("written_after_end") == 1
    moving = stray.plan_stray_move(session_id=husk)
    assert moving.message_ids == tuple(late) and moving.merged_into == target
    assert moving.destination_id == target
    stray.move_stray_messages(session_id=husk, expected_fingerprint=moving.fingerprint)
    assert set(late) <= {
        r[0] for r in db.fetchall("SELECT id FROM messages WHERE session_id = %s", [target])
    }
    assert health.count("written_after_end") == 0


@pytest.mark.parametrize("how", ["reset", "resume"])
def test_a_turn_a_cached_agent_writes_the_moment_after_a_reset_is_stray(how):
    """Attack 42 (G): the console ends the session a gateway's cached agent holds (a reset, a
    resume of another session of the key); the agent's next turn lands a second later, inside
    the clock tolerance. The core marked the end: a later message id is written after it."""
    key = "agent:main:telegram:dm:42"
    older = core.create_session(source="telegram", session_key=key).session_id
    core.append_message(session_id=older, role="user", content="old")
    core.end_session(session_id=older, end_reason="user_exit")
    held = core.create_session(source="telegram", session_key=key).session_id
    core.append_message(session_id=held, role="user", content="before")
    if how == "reset":
        core.reset_session_key(session_key=key)
    else:
        core.resume_session(ref=older)
    assert lineage.session_row(held)["ended_at"] is not None
    late = [_stale_write(held, "question"), _stale_write(held, "answer")]

    assert health.count("written_after_end") == 1
    plan = stray.plan_stray_move(session_id=held)
    assert plan.message_ids == tuple(late)
    # Reopened and ended again by the runtime itself, the mark no longer applies.
    db.execute("UPDATE sessions SET ended_at = NULL WHERE id = %s", [held])
    db.execute("DELETE FROM messages WHERE id IN (%s, %s)", late)
    _stale_write(held, "the runtime's own turn")
    db.execute(
        "UPDATE sessions SET ended_at = %s, end_reason = 'user_exit' WHERE id = %s",
        [time.time() + 1, held],
    )
    assert health.count("written_after_end") == 0
    assert stray.plan_stray_move(session_id=held).message_ids == ()


def test_stray_messages_never_move_into_another_persons_session(admin_client):
    # A key a runtime reused for someone else: nina's stale write would have landed in oscar's
    # session, where erasing nina missed it (attack round 46, Z1).
    key = "agent:main:telegram:group:9"
    nina = core.create_session(source="telegram", session_key=key, user_id="nina").session_id
    core.append_message(session_id=nina, role="user", content="nina's question")
    core.end_session(session_id=nina, end_reason="session_reset")
    oscar = core.create_session(source="telegram", session_key=key, user_id="oscar").session_id
    late = _stale_write(nina, "nina stale write")
    before = db.fetchall("SELECT id, session_id FROM messages ORDER BY id")

    plan = stray.plan_stray_move(session_id=nina)
    assert plan.message_ids == (late,) and plan.destination_id == oscar
    assert plan.another_person == "user nina against oscar" and not plan.movable
    with pytest.raises(core.InvalidInput, match="another person's"):
        stray.move_stray_messages(session_id=nina, expected_fingerprint=plan.fingerprint)
    assert db.fetchall("SELECT id, session_id FROM messages ORDER BY id") == before
    page = admin_client.get(f"/sessions/{nina}/stray/").content.decode()
    assert "is another person's (user nina against oscar)" in page
    assert f"/sessions/{nina}/stray/move/" not in page  # no form to post

    # Without user ids, another chat tells people apart (a merge across chats, say).
    db.execute("UPDATE sessions SET user_id = NULL WHERE id IN (%s, %s)", [nina, oscar])
    db.execute("UPDATE sessions SET chat_id = 'c1' WHERE id = %s", [nina])
    assert stray.plan_stray_move(session_id=nina).another_person == "chat c1 against (none)"
    db.execute("UPDATE sessions SET chat_id = NULL WHERE id = %s", [nina])
    assert stray.plan_stray_move(session_id=nina).movable  # one chat, one key: one person
