"""bench/multiply.py: the copies it makes of a seeded store are a consistent, bigger store.

The million-session bench store is a seeded base and copies of it made inside the database;
the benchmarks are only worth something if that store holds what a real one would: every
invariant the consistency checker knows still holds, lineage links point inside each copy,
the search index covers every copied message, the undo records name copied messages, and the
full-text tables keep their settings. Run on both backends, as the bench builds both.
"""

from __future__ import annotations

import io
import json

from django.core.management import call_command
from django.db import connections

from bench import multiply
from sessions_admin.core import db
from sessions_admin.demo.consistency import check_store
from sessions_admin.routers import store_alias

COPIES = 2


def _scalar(sql: str, params=()):
    return db.fetchone(sql, list(params))[0]


def _store_target() -> str:
    settings = connections[store_alias()].settings_dict
    connections.close_all()  # the copies are made on a connection of their own
    if db.vendor() == "postgresql":
        user = settings.get("USER") or "postgres"
        return f"postgresql://{user}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"
    return str(settings["NAME"])


def _copy(target: str) -> None:
    if db.vendor() == "postgresql":
        multiply.multiply_postgres(target, COPIES)
    else:
        multiply.multiply_sqlite(target, COPIES)


def test_copies_of_a_seeded_store_keep_every_invariant():
    call_command("seed_demo", "--sessions", "120", "--long-transcript", "0", stdout=io.StringIO())
    before = {
        "sessions": _scalar("SELECT COUNT(*) FROM sessions"),
        "messages": _scalar("SELECT COUNT(*) FROM messages"),
        "linked": _scalar("SELECT COUNT(*) FROM sessions WHERE parent_session_id IS NOT NULL"),
        "slugs": _scalar("SELECT COUNT(*) FROM conversations"),
        "undos": _scalar("SELECT COUNT(*) FROM sessions_admin_undos"),
        "problems": sorted(p.split(":")[0] for p in check_store()),
    }
    fts_settings = (
        None
        if (db.vendor() == "postgresql")
        else db.fetchall("SELECT k, v FROM messages_fts_trigram_config ORDER BY k")
    )
    assert before["linked"] and before["undos"]  # the base has lineage and undone turns

    _copy(_store_target())

    # Nothing in this small base is over the size limit: every session is copied each time.
    factor = COPIES + 1
    assert _scalar("SELECT COUNT(*) FROM sessions") == before["sessions"] * factor
    assert _scalar("SELECT COUNT(*) FROM messages") == before["messages"] * factor
    assert (
        _scalar("SELECT COUNT(*) FROM sessions WHERE parent_session_id IS NOT NULL")
        == before["linked"] * factor
    )
    assert _scalar("SELECT COUNT(*) FROM conversations") == before["slugs"] * factor
    # Every parent link points at a session of the same copy (none dangles, none crosses).
    assert (
        _scalar(
            "SELECT COUNT(*) FROM sessions s LEFT JOIN sessions p ON p.id = s.parent_session_id "
            "WHERE s.parent_session_id IS NOT NULL AND (p.id IS NULL OR "
            "COALESCE(p.user_id, '') <> COALESCE(s.user_id, '') AND s.source = p.source)"
        )
        == 0
    )
    # Undo records name messages of their own (copied) session.
    for session_id, message_ids in db.fetchall(
        "SELECT session_id, message_ids FROM sessions_admin_undos"
    ):
        ids = json.loads(message_ids)
        owners = db.fetchall(
            f"SELECT DISTINCT session_id FROM messages WHERE id IN ({db.placeholders(ids)})",
            ids,
        )
        assert owners == [(session_id,)]
    # The checker finds nothing the base did not already have (the demo plants forks).
    assert sorted(p.split(":")[0] for p in check_store()) == before["problems"]
    if fts_settings is not None:
        assert (
            db.fetchall("SELECT k, v FROM messages_fts_trigram_config ORDER BY k") == fts_settings
        )
        assert _scalar("SELECT COUNT(*) FROM messages_fts") == before["messages"] * factor
