"""A store the console creates is one hermes-agent 0.19 opens untouched.

``ensure_store_schema`` on an empty file must create exactly what 0.19's
``SessionDB`` creates (tables, the inline ``messages_fts`` and
``messages_fts_trigram`` with their six triggers, indexes, schema version):
otherwise Hermes's first open adds what is missing, and rebuilds both search
indexes when a trigger is missing (seconds and a doubled file on a large store).
Every write path of the console (merge, unmerge, undo/redo, delete, restore,
import) must then keep both indexes in step through those triggers.
"""

from __future__ import annotations

import sqlite3

from django.core.management import call_command

from sessions_admin import core
from sessions_admin.core import portability
from sessions_admin.ledger.trash import purge_trash
from tests.hermes.checks import assert_healthy, search
from tests.hermes.conftest import call, sql

KEY = "agent:main:telegram:dm:5"


def _schema(path) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()
    finally:
        conn.close()


def _trigram(hermes, word: str) -> set[str]:
    rows = hermes.one(
        sql(
            "SELECT DISTINCT m.session_id FROM messages_fts_trigram f "
            "JOIN messages m ON m.id = f.rowid WHERE messages_fts_trigram MATCH ?",
            word,
        )
    )
    return {row[0] for row in rows}


def test_a_fresh_store_is_exactly_what_hermes_creates(hermes, attach):
    attach()
    created = _schema(hermes.state)
    assert {"messages_fts", "messages_fts_trigram"} <= {name for _t, name, _tb, _s in created}
    version = hermes.one(sql("SELECT version FROM schema_version"))
    assert version == [[22]]
    assert _schema(hermes.state) == created, "Hermes changed the schema of a store we created"
    assert_healthy(hermes)


def test_every_console_write_keeps_both_indexes_for_hermes(hermes, attach, tmp_path):
    attach()
    # Two forked sessions of one key, with turns; a compression-free delegate under one.
    a = core.create_session(source="telegram", session_key=KEY, started_at=1.0).session_id
    core.append_messages(
        session_id=a,
        messages=[
            {"role": "user", "content": "first ocelot turn"},
            {"role": "assistant", "content": "Ocelot answer."},
        ],
    )
    core.end_session(session_id=a, end_reason="agent_close")
    b = core.create_session(source="telegram", session_key=KEY, started_at=2.0).session_id
    core.append_messages(
        session_id=b,
        messages=[
            {"role": "user", "content": "second quetzal turn"},
            {"role": "assistant", "content": "Quetzal answer."},
            {"role": "user", "content": "third tapir turn"},
            {"role": "assistant", "content": "Tapir answer."},
        ],
    )
    other = core.create_session(source="cli").session_id
    core.append_message(session_id=other, role="user", content="lonely wombat")
    schema_before = _schema(hermes.state)

    merge = core.merge_sessions(session_ids=[a, b], target_id=a)
    core.unmerge(merge_id=merge.merge_id)
    merge = core.merge_sessions(session_ids=[a, b], target_id=a)
    core.undo_last_turn(session_id=a)
    core.redo_turn(session_id=a)
    core.undo_last_turn(session_id=a)  # the tapir turn stays undone

    export = tmp_path / "other.jsonl"
    export.write_text("".join(portability.export_jsonl([other])))
    plan = core.plan_cascade_delete(session_ids=[other])
    core.execute_cascade_delete(
        session_ids=[other], expected_fingerprint=plan.fingerprint, actor="t", reason="r"
    )
    purge_trash()  # gone for good: an import of what the trash still holds is refused
    call_command("import_sessions", str(export), reason="back")  # new message ids
    plan = core.plan_cascade_delete(session_ids=[a])
    deleted = core.execute_cascade_delete(  # a is merge's target: its undo waits on the trash
        session_ids=[a],
        expected_fingerprint=plan.fingerprint,
        actor="t",
        reason="r",
        lose_undo=True,
    )
    core.restore_trash_entry(entry_id=deleted.trash_entry_ids[0], actor="t")

    # Hermes opens the store: no schema change, both indexes equal the rows.
    assert hermes.one(call("state.get_session", a))["id"] == a
    assert _schema(hermes.state) == schema_before
    assert_healthy(hermes)
    assert search(hermes, "ocelot", "quetzal", "wombat", "tapir") == {
        "ocelot": {a},
        "quetzal": {a},
        "wombat": {other},
        "tapir": set(),  # undone: Hermes searches active rows
    }
    assert _trigram(hermes, "ocelo") == {a}
    assert _trigram(hermes, "quetza") == {a}
    assert _trigram(hermes, "womba") == {other}
