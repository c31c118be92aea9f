"""A store whose write lock the runtime holds: bounded retries, then StoreBusy, nothing changed."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
from django.db import connections

from sessions_admin import core
from sessions_admin.core import db as core_db
from tests.helpers import messages, session


@pytest.fixture
def short_waits(monkeypatch):
    monkeypatch.setattr(core_db, "RETRY_SECONDS", 0.6)
    monkeypatch.setattr(core_db, "PG_LOCK_TIMEOUT_MS", 150)
    store = connections["store"]
    if store.vendor == "sqlite":
        store.ensure_connection()
        with store.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout = 150")


def _hold_write_lock(session_id: str):
    """Another process (the runtime) holding the lock our write needs."""
    store = connections["store"]
    params = store.get_connection_params()
    if store.vendor == "sqlite":
        other = sqlite3.connect(params["database"], isolation_level=None, timeout=1)
        other.execute("BEGIN IMMEDIATE")
        return other
    other = psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"})
    other.execute("SELECT id FROM sessions WHERE id = %s FOR UPDATE", [session_id])
    return other


def test_a_held_lock_gives_store_busy_and_no_partial_change(short_waits):
    ref = core.create_session(source="telegram", session_key="tg:busy").session_id
    other = _hold_write_lock(ref)
    try:
        with pytest.raises(core.StoreBusy) as caught:
            core.append_message(session_id=ref, role="user", content="during lock")
        assert "try again" in str(caught.value)
    finally:
        other.rollback()
        other.close()
    assert messages(ref) == []
    assert session(ref)["message_count"] == 0
    # Once the runtime lets go, the same call goes through.
    core.append_message(session_id=ref, role="user", content="after lock")
    assert [m["content"] for m in messages(ref)] == ["after lock"]
