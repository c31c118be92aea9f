"""The consistency checks for what only a runtime writing past the core leaves behind.

Each bad state is written by raw SQL on the test store, as a runtime with a
stale id or a racing start can write it (the core refuses each); the check
must name the offenders, in ``check_store()`` and as a health kind the home
page counts and the session list filters on. A store built through the core,
including the operations that move rows between sessions (merge, unmerge,
trash and restore, import), must report nothing.
"""

from __future__ import annotations

import io
import json
import time

import pytest
from django.core.management import call_command

from sessions_admin import core
from sessions_admin.core import clock, db
from sessions_admin.demo.consistency import check_store
from sessions_admin.routers import responses_alias
from sessions_admin.store import health, overview


def _ids(kind: str) -> set[str]:
    sql, params = health.predicate(kind)
    return {r[0] for r in db.fetchall(f"SELECT s.id FROM sessions s WHERE {sql}", params)}


def _problems(word: str) -> list[str]:
    return [p for p in check_store() if word in p]


def _raw_session(session_id: str, *, key: str | None, ended_at=None, end_reason=None, config=None):
    """A session row as a runtime inserts it, past the core."""
    db.execute(
        "INSERT INTO sessions (id, source, session_key, started_at, ended_at, end_reason, "
        "model_config, message_count, tool_call_count) VALUES (%s, 'telegram', %s, %s, %s, %s, "
        "%s, 0, 0)",
        [
            session_id,
            key,
            clock.now(),
            ended_at,
            end_reason,
            json.dumps(config) if config else None,
        ],
    )


def _raw_message(session_id: str, content: str, timestamp: float) -> None:
    """A message as a runtime inserts it (counter kept, so only the new check can fire)."""
    db.execute(
        "INSERT INTO messages (session_id, role, content, timestamp, active, compacted) "
        "VALUES (%s, 'user', %s, %s, 1, 0)",
        [session_id, content, timestamp],
    )
    db.execute(
        "UPDATE sessions SET message_count = COALESCE(message_count, 0) + 1 WHERE id = %s",
        [session_id],
    )


def _slug(name: str, session_id: str) -> None:
    """A conversation slug recording a live session, as the API server records a turn."""
    core.record_turn(response_id=f"resp_{name}", session_id=session_id, conversation=name)


# --------------------------------------------------------------------------- several live


def test_a_key_with_two_live_sessions_is_reported_with_both():
    first = core.create_session(source="telegram", session_key="chat:1").session_id
    core.append_message(session_id=first, role="user", content="hi")
    # A second runtime process starting the same chat without the core's key lock.
    _raw_session("racer", key="chat:1")
    other_key = core.create_session(source="telegram", session_key="chat:2").session_id

    assert _ids("several_live") == {first, "racer"}
    [problem] = _problems("more than one live session")
    assert "'chat:1'" in problem and first in problem and "racer" in problem
    assert other_key not in problem
    assert health.count("several_live") == 2


def test_delegates_and_ended_sessions_never_count_as_a_second_live_session():
    parent = core.create_session(source="telegram", session_key="chat:1").session_id
    _raw_session("delegate", key="chat:1", config={"_delegate_from": parent})
    db.execute("UPDATE sessions SET parent_session_id = %s WHERE id = 'delegate'", [parent])
    _raw_session("old", key="chat:1", ended_at=clock.now(), end_reason="session_reset")
    core.create_session(source="cli", session_key="")
    core.create_session(source="cli", session_key="")

    assert _ids("several_live") == set()
    assert check_store() == []


# --------------------------------------------------------------------------- written after end


def test_a_message_stamped_after_its_session_ended_is_reported():
    stale = core.create_session(source="telegram", session_key="chat:1").session_id
    core.append_message(session_id=stale, role="user", content="before the reset")
    core.reset_session_key(session_key="chat:1")
    ended_at = db.fetchone("SELECT ended_at FROM sessions WHERE id = %s", [stale])[0]
    fine = core.create_session(source="cli").session_id
    core.append_message(session_id=fine, role="user", content="hi")
    core.end_session(session_id=fine, end_reason="user_exit")
    # The runtime still holds the old id and writes a minute later.
    _raw_message(stale, "written with a stale id", ended_at + 60)

    assert _ids("written_after_end") == {stale}
    [problem] = _problems("stamped after their end")
    assert stale in problem and fine not in problem


def test_a_stamp_within_the_tolerance_of_the_end_is_not_reported():
    # A runtime stamping with its own clock, a second ahead of the store's host: written
    # before the end (a lower id than the end's mark), stamped after it.
    sid = core.create_session(source="cli").session_id
    _raw_message(sid, "skewed clock", time.time() + health.END_TOLERANCE_SECONDS / 2)
    core.end_session(session_id=sid, end_reason="user_exit")
    ended_at = db.fetchone("SELECT ended_at FROM sessions WHERE id = %s", [sid])[0]
    assert db.fetchone("SELECT MAX(timestamp) FROM messages WHERE session_id = %s", [sid])[0] > (
        ended_at
    )

    assert _ids("written_after_end") == set()


def test_a_message_written_after_the_core_ended_the_session_is_reported_however_soon():
    """Written after an end the core made (a higher id than its mark), a message is late even
    stamped within the tolerance (attack 42: a cached agent's turn a second after a reset)."""
    sid = core.create_session(source="cli").session_id
    core.end_session(session_id=sid, end_reason="user_exit")
    ended_at = db.fetchone("SELECT ended_at FROM sessions WHERE id = %s", [sid])[0]
    _raw_message(sid, "late", ended_at + health.END_TOLERANCE_SECONDS / 2)

    assert _ids("written_after_end") == {sid}


def test_a_merge_of_ended_forks_into_the_older_one_is_not_reported_nor_its_unmerge():
    with clock.use_clock(lambda: 1_000.0):
        older = core.create_session(source="telegram", user_id="u1").session_id
        core.append_message(session_id=older, role="user", content="first")
        core.end_session(session_id=older, end_reason="idle")
    with clock.use_clock(lambda: 5_000.0):
        newer = core.create_session(source="telegram", user_id="u1").session_id
        core.append_message(session_id=newer, role="user", content="later")
        core.end_session(session_id=newer, end_reason="idle")
    merge = core.merge_sessions(session_ids=[older, newer], target_id=older)

    assert db.fetchone("SELECT ended_at FROM sessions WHERE id = %s", [older])[0] == 1_000.0
    assert _ids("written_after_end") == set()
    assert check_store() == []
    core.unmerge(merge_id=merge.merge_id)
    assert check_store() == []
    # A stale write into the merge target, past every end it absorbed, is still seen.
    _raw_message(older, "stale", 9_000.0)
    assert _ids("written_after_end") == {older}


# --------------------------------------------------------------------------- stranded slugs


@pytest.mark.parametrize(
    "end_reason",
    ["session_reset", "session_switch", "new_session", "branched", "compression", "merged"],
)
def test_a_slug_left_on_a_rotated_session_with_nothing_live_is_stranded(end_reason):
    sid = core.create_session(source="api_server", session_key="api:1").session_id
    core.append_message(session_id=sid, role="user", content="hi")
    _slug("support-chat", sid)
    # A runtime rotated the session past the core: ended it, and moved nothing.
    db.execute(
        "UPDATE sessions SET ended_at = %s, end_reason = %s WHERE id = %s",
        [clock.now(), end_reason, sid],
    )
    fine = core.create_session(source="api_server").session_id
    _slug("fine-chat", fine)

    assert _ids("stranded_conversation") == {sid}
    assert health.count("stranded_conversation") == 1
    [problem] = _problems("stranded")
    assert f"support-chat -> {sid}" in problem and "fine-chat" not in problem


@pytest.mark.parametrize(("tip_end", "stranded"), [("session_switch", True), ("idle", False)])
def test_a_slug_on_a_compressed_root_is_judged_by_where_its_chain_ended(tip_end, stranded):
    root = core.create_session(source="api_server").session_id
    core.append_message(session_id=root, role="user", content="hi")
    _slug("chained", root)
    tip = core.rotate_for_compression(session_id=root).new_session_id
    # A runtime that cached the slug's old session writes it back onto the root.
    db.execute(
        "UPDATE conversations SET session_id = %s WHERE name = 'chained'",
        [root],
        alias=responses_alias(),
    )
    assert check_store() == []  # the slug follows the compression to a live tip
    db.execute(
        "UPDATE sessions SET ended_at = %s, end_reason = %s WHERE id = %s",
        [clock.now(), tip_end, tip],
    )
    # Compression moved the conversation on; the tip's end decides: a switch
    # strands it, an idle end simply ended it (resolving continues the tip).
    assert health.stranded_conversations() == ([("chained", root)] if stranded else [])
    assert _ids("stranded_conversation") == ({root} if stranded else set())


def test_a_slug_of_a_session_that_simply_ended_or_goes_on_live_is_not_stranded():
    idle = core.create_session(source="api_server").session_id
    _slug("idle-chat", idle)
    core.end_session(session_id=idle, end_reason="idle")
    exited = core.create_session(source="api_server").session_id
    _slug("exit-chat", exited)
    core.end_session(session_id=exited, end_reason="user_exit")
    # Reset with the key's new live session carrying on: a continuation exists.
    reset = core.create_session(source="api_server", session_key="api:9").session_id
    _slug("reset-chat", reset)
    core.reset_session_key(session_key="api:9")
    # Compressed with a live continuation.
    compressed = core.create_session(source="api_server").session_id
    _slug("compressed-chat", compressed)
    core.rotate_for_compression(session_id=compressed)
    # Branched without a key: the live branch continues it.
    branched = core.create_session(source="api_server").session_id
    core.append_message(session_id=branched, role="user", content="hi")
    _slug("branched-chat", branched)
    core.branch_session(session_id=branched)

    assert health.stranded_conversations() == []
    assert _ids("stranded_conversation") == set()
    assert check_store() == []


def test_stranded_slugs_are_found_when_the_slugs_live_in_their_own_database():
    # The response store is a separate database on SQLite (response_store.db) and the
    # same one on PostgreSQL: either way the check reads the slugs by themselves.
    sid = core.create_session(source="api_server").session_id
    _slug("apart", sid)
    db.execute(
        "UPDATE sessions SET ended_at = %s, end_reason = 'new_session' WHERE id = %s",
        [clock.now(), sid],
    )
    rows = db.fetchall("SELECT name, session_id FROM conversations", alias=responses_alias())
    assert rows == [("apart", sid)]
    assert health.stranded_conversations() == [("apart", sid)]


# --------------------------------------------------------------------------- clean stores


def test_a_store_built_through_the_core_reports_nothing():
    chat = core.create_session(source="telegram", session_key="chat:1").session_id
    core.append_message(session_id=chat, role="user", content="one")
    _slug("chat-slug", chat)
    core.rotate_for_compression(session_id=chat)
    core.reset_session_key(session_key="chat:1")
    core.create_session(source="telegram", session_key="chat:1", join_live=True)
    fork_a = core.create_session(source="telegram", user_id="u").session_id
    core.append_message(session_id=fork_a, role="user", content="a")
    fork_b = core.create_session(source="telegram", user_id="u").session_id
    core.append_message(session_id=fork_b, role="user", content="b")
    core.merge_sessions(session_ids=[fork_a, fork_b], target_id=fork_a)
    gone = core.create_session(source="cli").session_id
    core.append_message(session_id=gone, role="user", content="trash me")
    core.end_session(session_id=gone, end_reason="user_exit")
    plan = core.plan_cascade_delete(session_ids=[gone])
    deleted = core.execute_cascade_delete(
        session_ids=[gone], expected_fingerprint=plan.fingerprint, actor="t", reason="test"
    )
    core.restore_trash_entry(entry_id=deleted.trash_entry_ids[0], actor="t")

    assert check_store() == []
    for check in overview.health_counts():
        if check.kind in {"several_live", "written_after_end", "stranded_conversation"}:
            assert check.sessions == 0, check


def test_the_demo_store_reports_none_of_the_new_problems():
    out = io.StringIO()
    call_command("seed_demo", "--sessions", "60", stdout=out)
    problems = check_store()
    new = [
        p
        for p in problems
        if "more than one live session" in p or "stamped after" in p or "stranded" in p
    ]
    assert new == [], problems
