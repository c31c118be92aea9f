"""Operators delete and restore while a runtime writes: no id handed out twice, nothing left dangling."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import connections

from sessions_admin import core
from tests.helpers import conversation, messages, one


def test_a_restore_never_moves_the_message_id_sequence_back():
    store = connections["store"]
    if store.vendor != "postgresql":
        pytest.skip("SQLite's AUTOINCREMENT never goes back; BEGIN IMMEDIATE serializes writers")
    restored = core.create_session(source="cli").session_id
    core.append_message(session_id=restored, role="user", content="to be deleted")
    writing = core.create_session(source="telegram").session_id
    plan = core.plan_cascade_delete(session_ids=[restored])
    entry = core.execute_cascade_delete(
        session_ids=[restored], expected_fingerprint=plan.fingerprint, actor="t", reason="test"
    ).trash_entry_ids[0]

    # The runtime's append has taken the next id but not committed yet.
    params = store.get_connection_params()
    runtime = psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"})
    try:
        runtime.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES (%s, 'user', 'in flight', 0)",
            [writing],
        )
        core.restore_trash_entry(entry_id=entry, actor="t")
        runtime.commit()
    finally:
        runtime.close()

    core.append_message(session_id=writing, role="assistant", content="after the restore")
    assert [m["content"] for m in messages(writing)] == ["in flight", "after the restore"]
    assert [m["content"] for m in messages(restored)] == ["to be deleted"]


def test_a_turn_recorded_while_its_session_is_deleted_leaves_no_conversation_behind():
    store = connections["store"]
    if store.vendor != "postgresql":
        pytest.skip("SQLite's BEGIN IMMEDIATE serializes the two transactions whole")
    session_id = core.resolve_conversation(conversation="slug-race").session_id
    core.record_turn(response_id="resp-1", session_id=session_id, conversation="slug-race")

    # An operator's delete batch is under way: it holds the session and has removed the rows.
    params = store.get_connection_params()
    operator = psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"})
    outcome: list[BaseException | None] = []

    def runtime_turn() -> None:
        try:
            core.record_turn(response_id="resp-2", session_id=session_id, conversation="slug-race")
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - inspected below
            outcome.append(error)
        finally:
            connections.close_all()

    try:
        operator.execute("SELECT id FROM sessions WHERE id = %s FOR UPDATE", [session_id])
        operator.execute("DELETE FROM conversations WHERE name = 'slug-race'")
        operator.execute("DELETE FROM responses")
        operator.execute(
            "DELETE FROM sessions_admin_switch_events WHERE new_session_id = %s", [session_id]
        )
        operator.execute("DELETE FROM sessions WHERE id = %s", [session_id])
        turn = threading.Thread(target=runtime_turn)
        turn.start()
        time.sleep(0.5)  # the runtime's turn reaches the rows the delete holds
        operator.commit()
        turn.join(30)
    finally:
        operator.close()

    assert len(outcome) == 1 and isinstance(outcome[0], core.SessionNotFound), outcome
    assert conversation("slug-race") is None
    assert one("SELECT COUNT(*) FROM responses")[0] == 0
