"""A restore while a runtime's append is in flight never hands out a message id twice."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connections

from sessions_admin import core
from tests.helpers import messages


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
