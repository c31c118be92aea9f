"""Attaching to a Hermes store: what it changes, the start-up check, and read-only mode."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core.schema import ensure_store_schema
from sessions_admin.store import attach as attach_module
from tests.hermes import scenario
from tests.hermes.checks import assert_healthy, transcripts
from tests.hermes.conftest import BASE_DIR, file_digest, raw_rows

RUNTIME_OBJECTS = (
    "SELECT type, name, tbl_name, sql FROM sqlite_master "
    "WHERE tbl_name NOT LIKE 'sessions\\_admin\\_%' ESCAPE '\\' ORDER BY type, name"
)


# --- what attach changes ---------------------------------------------------------------------


def test_attach_adds_only_what_is_documented(hermes, attach):
    scenario.build(hermes)
    state_before = raw_rows(hermes.state, RUNTIME_OBJECTS)
    responses_before = raw_rows(hermes.responses, RUNTIME_OBJECTS)
    rows_before = raw_rows(hermes.state, "SELECT * FROM sessions ORDER BY id")
    attach(init=False)
    report = ensure_store_schema()
    assert report.problems == ()
    assert report.added_columns == ("conversations.session_id",)
    assert set(report.created_tables) == {
        "sessions_admin_delete_claims",
        "sessions_admin_deletions",
        "sessions_admin_end_marks",
        "sessions_admin_holds",
        "sessions_admin_idempotency",
        "sessions_admin_merges",
        "sessions_admin_meta",
        "sessions_admin_slug_history",
        "sessions_admin_switch_cursors",
        "sessions_admin_switch_events",
        "sessions_admin_undos",
    }
    # state.db: eight new tables of ours; every runtime table, index and trigger as it was.
    assert raw_rows(hermes.state, RUNTIME_OBJECTS) == state_before
    assert raw_rows(hermes.state, "SELECT * FROM sessions ORDER BY id") == rows_before
    # response_store.db: one new column on conversations, nothing else.
    after = raw_rows(hermes.responses, RUNTIME_OBJECTS)
    changed = [row for row in after if row not in responses_before]
    assert [(kind, name) for kind, name, _t, _s in changed] == [("table", "conversations")]
    assert "session_id TEXT" in changed[0][3]
    # A second run changes nothing at all.
    assert ensure_store_schema().created_tables == ()
    assert raw_rows(hermes.state, RUNTIME_OBJECTS) == state_before
    # Hermes opens the attached files as its own and sees every conversation.
    assert_healthy(hermes)


def test_the_upgrade_opt_in_adds_indexes_but_leaves_hermes_working(hermes, attach):
    built = scenario.build(hermes)
    before = transcripts(hermes, list(built.message_ids))
    attach(init=False)
    ensure_store_schema(upgrade_runtime_tables=True)
    indexes = {
        r[0] for r in raw_rows(hermes.state, "SELECT name FROM sqlite_master WHERE type = 'index'")
    }
    assert "idx_sa_messages_session_id" in indexes
    # Hermes's own FTS table and triggers were kept, not replaced by ours.
    triggers = raw_rows(
        hermes.state, "SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
    )
    assert [t[0] for t in triggers] == [
        "messages_fts_delete",
        "messages_fts_insert",
        "messages_fts_trigram_delete",
        "messages_fts_trigram_insert",
        "messages_fts_trigram_update",
        "messages_fts_update",
    ]
    assert transcripts(hermes, list(built.message_ids)) == before
    assert_healthy(hermes)


# --- the start-up check ------------------------------------------------------------------------


def _codes(path: Path) -> list[tuple[str, str]]:
    found = attach_module.inspect_sqlite(str(path), alias="store", role="store")
    return [(f.level, f.code) for f in found.findings]


def _make(path: Path, script: str) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(script)
    conn.commit()
    conn.close()
    return path


def test_the_test_store_passes_the_check_on_every_backend():
    messages = attach_module.check_store()
    assert [m for m in messages if m.is_serious()] == []
    (store,) = [i for i in attach_module.inspect_configured() if i.role == "store"]
    assert {"sessions", "messages", "sessions_admin_merges"} <= store.tables


def test_a_hermes_store_passes_the_check(hermes):
    scenario.build(hermes)
    inspection = attach_module.inspect_sqlite(str(hermes.state), alias="store", role="store")
    assert inspection.schema_version == 22 and inspection.fts_layout == "inline"
    # Only: our own tables are not there yet (init_store adds them).
    assert [(f.level, f.code) for f in inspection.findings] == [("warning", "own_tables_missing")]


def test_unusable_stores_are_named_and_left_untouched(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("this is not a database, it is a note about aardvarks\n" * 20)
    other = _make(tmp_path / "other.db", "CREATE TABLE invoices (id INTEGER PRIMARY KEY);")
    half = _make(
        tmp_path / "half.db",
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, started_at REAL);",
    )
    old = _make(
        tmp_path / "old.db",
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, started_at REAL);"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT, "
        "role TEXT, content TEXT, timestamp REAL);",
    )
    newer = _make(tmp_path / "newer.db", _complete_store_sql(extra="tenant_id TEXT NOT NULL,"))
    cases = {
        text: [("error", "not_sqlite")],
        other: [("error", "not_a_store")],
        half: [("error", "missing_tables")],
        old: [("error", "missing_columns"), ("error", "missing_columns")],
        newer: [("error", "incompatible_layout")],
    }
    digests = {path: file_digest(path) for path in cases}
    for path, expected in cases.items():
        assert [c for c in _codes(path) if c[0] == "error"] == expected, path.name
    assert {path: file_digest(path) for path in cases} == digests
    assert not any(p.name.endswith(("-wal", "-shm")) for p in tmp_path.iterdir())


def test_a_store_in_rollback_journal_mode_gets_a_warning(tmp_path):
    path = _make(tmp_path / "nfs.db", _complete_store_sql())
    assert ("warning", "journal_mode") in _codes(path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    assert ("warning", "journal_mode") not in _codes(path)


def test_a_full_text_table_needing_a_missing_tokenizer_is_an_error(tmp_path):
    path = _make(tmp_path / "cjk.db", _complete_store_sql())
    conn = sqlite3.connect(path)
    conn.execute("CREATE VIRTUAL TABLE messages_fts_cjk USING fts5(content)")
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = replace(sql, 'fts5(content)', "
        "'fts5(content, tokenize=''cjk_unicode61'')') WHERE name = 'messages_fts_cjk'"
    )
    conn.commit()
    conn.close()
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TRIGGER messages_fts_cjk_insert AFTER INSERT ON messages BEGIN "
        "INSERT INTO messages_fts_cjk(rowid, content) VALUES (new.id, new.content); END"
    )
    conn.commit()
    conn.close()
    found = attach_module.inspect_sqlite(str(path), alias="store", role="store")
    errors = [f for f in found.findings if f.level == "error"]
    assert [f.code for f in errors] == ["missing_extension"]
    assert "cjk_unicode61" in errors[0].message and "messages_fts_cjk_insert" in errors[0].message


def _complete_store_sql(extra: str = "") -> str:
    from sessions_admin.core.schema import MESSAGE_COLUMNS, SESSION_COLUMNS

    sessions = ", ".join(f"{name} {lite}" for name, lite, _pg in SESSION_COLUMNS)
    messages = ", ".join(f"{name} {lite}" for name, lite, _pg in MESSAGE_COLUMNS)
    return (
        f"CREATE TABLE sessions ({extra} {sessions});"
        f"CREATE TABLE messages ({messages});"
        "CREATE TABLE schema_version (version INTEGER NOT NULL);"
        "INSERT INTO schema_version VALUES (22);"
    )


def _manage(*args: str, store: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "SESSIONS_ADMIN_STORE_URL": f"sqlite:///{store}",
            "DATABASE_URL": f"sqlite:///{store.parent / 'dashboard.db'}",
            **env,
        },
    )


def test_start_up_stops_with_a_message_and_writes_nothing(tmp_path):
    store = tmp_path / "state.db"
    store.write_text("not sqlite at all\n")
    digest = file_digest(store)
    for command in (("check",), ("init_store",)):
        done = _manage(*command, store=store)
        assert done.returncode != 0, command
        assert "sessions_admin.E001" in done.stderr and "is not a SQLite database" in done.stderr
        assert "Traceback" not in done.stderr
    assert file_digest(store) == digest


def test_init_store_refuses_in_read_only_mode(tmp_path):
    store = _make(tmp_path / "state.db", _complete_store_sql())
    digest = file_digest(store)
    done = _manage("init_store", store=store, SESSIONS_ADMIN_READ_ONLY="1")
    assert done.returncode != 0
    assert "read-only" in done.stderr and "Traceback" not in done.stderr
    assert file_digest(store) == digest


# --- read-only mode ----------------------------------------------------------------------------


def test_read_only_attach_reads_everything_and_writes_nothing(hermes, attach, admin, client):
    built = scenario.build(hermes)
    digests = (file_digest(hermes.state), file_digest(hermes.responses))
    attach(read_only=True)
    pages = [
        reverse("home"),
        reverse("health_panel"),
        reverse("session_list"),
        reverse("session_list") + "?q=mongoose",
        reverse("fork_list"),
        reverse("conversation_list"),
        reverse("audit_log"),
    ]
    for sid in built.message_ids:
        pages += [reverse("session_detail", args=[sid]), reverse("session_resume", args=[sid])]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
    detail = client.get(reverse("session_detail", args=["tg-new"]))
    assert detail.context["can_operate"] is False
    assert reverse("session_undo", args=["tg-new"]).encode() not in detail.content
    assert reverse("bulk_delete").encode() not in detail.content  # admin-only nav links hidden
    # Every action is refused at the edge and in the core; the schema is not touched.
    for url in (
        reverse("session_undo", args=["tg-new"]),
        reverse("session_reset", args=["tg-new"]),
        reverse("merge_execute"),
        reverse("cascade_delete_confirm", args=["tg-new"]),
    ):
        assert client.post(url, {"reason": "x"}).status_code == 403, url
    assert client.get(reverse("cascade_delete", args=["tg-new"])).status_code == 403
    with pytest.raises(core.ReadOnlyStore):
        core.undo_last_turn(session_id="tg-new")
    with pytest.raises(core.ReadOnlyStore):
        ensure_store_schema()
    from django.db import connections

    connections["store"].close()
    connections["responses"].close()
    assert (file_digest(hermes.state), file_digest(hermes.responses)) == digests
    tables = {r[0] for r in raw_rows(hermes.state, "SELECT name FROM sqlite_master")}
    assert not any(name.startswith("sessions_admin_") for name in tables)


def test_init_store_upgrades_an_old_store_the_check_rejects(tmp_path):
    store = _make(
        tmp_path / "old.db",
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, started_at REAL NOT NULL);"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, "
        "role TEXT NOT NULL, content TEXT, timestamp REAL NOT NULL);"
        "INSERT INTO sessions VALUES ('old-1', 'cli', 1.0);"
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('old-1', 'user', 'hi', 1.0);",
    )
    refused = _manage("init_store", store=store)
    assert refused.returncode != 0 and "sessions_admin.E005" in refused.stderr
    assert "Traceback" not in refused.stderr
    done = _manage("init_store", "--upgrade-runtime-tables", store=store)
    assert done.returncode == 0, done.stderr
    assert "added columns" in done.stdout
    assert _manage("check", store=store).returncode == 0
    assert raw_rows(store, "SELECT session_id, content, active FROM messages") == [
        ("old-1", "hi", 1)
    ]
