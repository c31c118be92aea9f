"""The store schema: idempotent, additive only, tolerant of a runtime's extra columns."""

from __future__ import annotations

import sqlite3

import pytest
from django.db import connections, transaction

from sessions_admin import core
from sessions_admin.core import bulk_insert, db, schema
from sessions_admin.core.schema import ensure_store_schema, existing_columns, existing_tables
from sessions_admin.routers import responses_alias, store_alias


@pytest.fixture
def runtime_store(tmp_path, django_db_blocker):
    """A SQLite store written by an older runtime: fewer columns, one we do not know, data."""
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, user_id TEXT,
            model TEXT, model_config TEXT, parent_session_id TEXT REFERENCES sessions(id),
            started_at REAL NOT NULL, ended_at REAL, end_reason TEXT,
            message_count INTEGER DEFAULT 0, tool_call_count INTEGER DEFAULT 0,
            input_tokens INTEGER DEFAULT 0, output_tokens INTEGER DEFAULT 0, title TEXT,
            runtime_only_column TEXT);
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id), role TEXT NOT NULL, content TEXT,
            tool_call_id TEXT, tool_calls TEXT, tool_name TEXT, timestamp REAL NOT NULL,
            token_count INTEGER, finish_reason TEXT, reasoning TEXT);
        CREATE TABLE conversations (name TEXT PRIMARY KEY, response_id TEXT NOT NULL);
        INSERT INTO sessions (id, source, started_at, runtime_only_column, message_count)
            VALUES ('old-1', 'cli', 1.0, 'keep me', 1);
        INSERT INTO messages (session_id, role, content, timestamp)
            VALUES ('old-1', 'user', 'searchable needle', 1.0);
        INSERT INTO conversations VALUES ('slug', 'resp-1');
        """
    )
    conn.commit()
    conn.close()
    yield from _as_database("runtime_store", path, django_db_blocker)


def _as_database(alias: str, path, django_db_blocker):
    """The SQLite file at ``path`` as database ``alias`` for the test (a fixture's yield)."""
    connections.settings[alias] = {**connections["store"].settings_dict, "NAME": str(path)}
    try:
        with django_db_blocker.unblock():
            yield alias, path
    finally:
        connections[alias].close()
        del connections.settings[alias]
        try:
            del connections[alias]
        except AttributeError:
            pass


sqlite_only = pytest.mark.skipif(
    "connections['store'].vendor != 'sqlite'", reason="a runtime's own store is a SQLite file"
)


@sqlite_only
@pytest.mark.own_db
def test_attaching_changes_nothing_in_the_runtimes_own_tables(runtime_store):
    alias, path = runtime_store
    conn = sqlite3.connect(path)
    runtime_schema = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE tbl_name IN ('sessions', 'messages') "
        "ORDER BY name"
    ).fetchall()
    conn.close()
    report = ensure_store_schema(alias)
    assert report.added_columns == ("conversations.session_id",)
    assert set(report.created_tables) == {
        "responses",
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
    assert "missing column sessions.session_key" in report.problems
    conn = sqlite3.connect(path)
    assert (
        conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE tbl_name IN ('sessions', 'messages') "
            "ORDER BY name"
        ).fetchall()
        == runtime_schema
    )
    conn.close()


@sqlite_only
@pytest.mark.own_db
def test_upgrading_the_runtime_tables_only_adds_to_them(runtime_store):
    alias, path = runtime_store
    report = ensure_store_schema(alias, upgrade_runtime_tables=True)
    assert "runtime_only_column" in existing_columns(alias, "sessions")
    assert {"session_key", "archived", "rewind_count"} <= existing_columns(alias, "sessions")
    assert {"active", "compacted"} <= existing_columns(alias, "messages")
    assert "conversations.session_id" in report.added_columns
    assert "sessions" not in report.created_tables
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT runtime_only_column, message_count FROM sessions").fetchall() == [
        ("keep me", 1)
    ]
    assert conn.execute("SELECT active, compacted FROM messages").fetchall() == [(1, 0)]
    assert conn.execute("SELECT * FROM conversations").fetchall() == [("slug", "resp-1", None)]
    # Messages already stored are indexed for search.
    hits = conn.execute(
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'needle'"
    ).fetchall()
    assert hits == [(1,)]
    conn.close()


@sqlite_only
@pytest.mark.own_db
def test_running_it_again_changes_nothing(runtime_store):
    alias, path = runtime_store
    ensure_store_schema(alias)
    conn = sqlite3.connect(path)
    schema_before = conn.execute(
        "SELECT type, name, sql FROM sqlite_master ORDER BY name"
    ).fetchall()
    conn.close()
    report = ensure_store_schema(alias)
    assert (report.created_tables, report.added_columns) == ((), ())
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall() == (
        schema_before
    )
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()


def test_the_test_store_is_complete_and_a_second_run_is_a_no_op():
    report = ensure_store_schema()
    assert (report.created_tables, report.added_columns) == ((), ())
    tables = existing_tables("store")
    assert {
        "sessions",
        "messages",
        "conversations",
        "responses",
        "sessions_admin_switch_events",
    } <= tables


def test_search_index_follows_inserts_updates_and_deletes():
    from sessions_admin import core

    ref = core.create_session(source="cli").session_id
    ids = core.append_messages(
        session_id=ref,
        messages=[
            {"role": "user", "content": "the zebra crossing"},
            {"role": "assistant", "content": "use_tool", "tool_name": "giraffe_lookup"},
        ],
    ).message_ids

    def hits(word: str) -> list[int]:
        if db.vendor() == "sqlite":
            sql = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH %s ORDER BY rowid"
        else:
            sql = (
                "SELECT id FROM messages WHERE to_tsvector('simple', COALESCE(content, '') || ' ' "
                "|| COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '')) "
                "@@ plainto_tsquery('simple', %s) ORDER BY id"
            )
        return [r[0] for r in db.fetchall(sql, [word])]

    assert hits("zebra") == [ids[0]]
    assert hits("giraffe_lookup") == [ids[1]]
    db.execute("UPDATE messages SET content = 'the okapi crossing' WHERE id = %s", [ids[0]])
    assert hits("zebra") == [] and hits("okapi") == [ids[0]]
    db.execute("DELETE FROM messages WHERE id = %s", [ids[0]])
    assert hits("okapi") == []


def test_read_only_mode_refuses_every_write_and_the_schema(settings):
    from sessions_admin import core

    ref = core.create_session(source="cli").session_id
    settings.SESSIONS_ADMIN_READ_ONLY = True
    with pytest.raises(core.ReadOnlyStore, match="read-only"):
        core.append_message(session_id=ref, role="user", content="hi")
    with pytest.raises(core.ReadOnlyStore):
        core.create_session(source="cli")
    with pytest.raises(core.ReadOnlyStore):
        ensure_store_schema()
    assert db.fetchone("SELECT COUNT(*) FROM messages")[0] == 0


def test_every_named_session_column_is_one_the_schema_creates():
    created = {name for name, _lite, _pg in schema.SESSION_COLUMNS}
    for named in (
        schema.SESSION_METADATA_COLUMNS,
        schema.INSERTED_SESSION_COLUMNS,
        schema.SESSION_ROW_COLUMNS,
        schema.USAGE_COLUMNS,
        schema.REQUIRED_SESSION_COLUMNS,
    ):
        assert set(named) <= created
    assert set(schema.INSERTED_SESSION_COLUMNS) <= schema.REQUIRED_SESSION_COLUMNS
    assert schema.REQUIRED_MESSAGE_COLUMNS <= {name for name, _lite, _pg in schema.MESSAGE_COLUMNS}


def test_a_session_row_holds_the_row_columns_as_created():
    sid = core.create_session(
        source="cli", session_key="k", chat_id="c", model="m", title="t", model_config={"a": 1}
    ).session_id
    row = core.lineage.session_row(sid)
    assert tuple(row) == schema.SESSION_ROW_COLUMNS
    assert [row[c] for c in ("source", "session_key", "chat_id", "model", "title")] == [
        "cli",
        "k",
        "c",
        "m",
        "t",
    ]


@pytest.fixture
def response_store(tmp_path, django_db_blocker):
    """Hermes's response store as its gateway creates it: both tables, no index of ours."""
    path = tmp_path / "response_store.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE responses (response_id TEXT PRIMARY KEY, data TEXT NOT NULL,
            accessed_at REAL NOT NULL);
        CREATE TABLE conversations (name TEXT PRIMARY KEY, response_id TEXT NOT NULL);
        INSERT INTO responses VALUES ('resp-1', '{"session_id": "s-1"}', 1.0);
        INSERT INTO responses VALUES ('resp-2', 'not json at all', 2.0);
        """
    )
    conn.commit()
    conn.close()
    yield from _as_database("response_store", path, django_db_blocker)


def _index_names(path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'responses'"
            )
        }
    finally:
        conn.close()


@sqlite_only
@pytest.mark.own_db
def test_the_responses_session_index_comes_only_with_a_new_table_or_the_upgrade(response_store):
    """A delete asks which responses name its sessions; the index answers without a scan.

    Like the runtime's other indexes it is added to an existing response store only by
    ``--upgrade-runtime-tables``, and a malformed response still stores (json_valid guard).
    """
    alias, path = response_store
    schema._ensure_responses_schema(alias)
    assert "idx_sa_responses_session" not in _index_names(path)
    schema._ensure_responses_schema(alias, upgrade=True)
    assert "idx_sa_responses_session" in _index_names(path)
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO responses VALUES ('resp-3', '{broken', 3.0)")
    conn.commit()
    field = db.json_field("data", "session_id", alias=alias)
    plan = conn.execute(
        f"EXPLAIN QUERY PLAN SELECT response_id FROM responses WHERE {field} IN ('s-1')"
    ).fetchall()
    assert "idx_sa_responses_session" in str(plan)
    found = conn.execute(f"SELECT response_id FROM responses WHERE {field} IN ('s-1')").fetchall()
    assert found == [("resp-1",)]
    conn.close()


@sqlite_only
def test_a_new_store_has_the_responses_session_index():
    assert "idx_sa_responses_session" in {
        r[0]
        for r in db.fetchall(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'responses'",
            alias=responses_alias(),
        )
    }


@pytest.mark.skipif(
    "connections['store'].vendor != 'postgresql'", reason="SQLite's title filter has no index"
)
def test_the_title_filter_reads_the_title_trigram_index_on_postgresql():
    from sessions_admin.store import listing

    if not db.fetchone("SELECT COUNT(*) FROM pg_available_extensions WHERE name = 'pg_trgm'")[0]:
        pytest.skip("this PostgreSQL has no pg_trgm (contrib): the title filter scans")
    assert db.fetchone(
        "SELECT COUNT(*) FROM pg_indexes WHERE indexname = 'idx_sa_sessions_title_trgm'"
    ) == (1,)
    bulk_insert.insert_sessions(
        sessions=[
            {"id": f"t-{n}", "source": "cli", "started_at": 1.0 + n, "title": f"weekly sync {n}"}
            for n in range(3000)
        ]
    )
    # New entries wait in the index's pending list, which the planner counts against it.
    db.fetchone("SELECT gin_clean_pending_list('idx_sa_sessions_title_trgm')")
    db.execute("ANALYZE sessions")
    where, params = listing.where_sql(listing.Filters(title="roll_out 100%"), scope=False)
    with transaction.atomic(using=store_alias()), db.cursor() as c:
        # A few thousand rows are still cheaper to scan than to look up.
        c.execute("SET LOCAL enable_seqscan = off")
        c.execute(f"EXPLAIN SELECT s.id FROM sessions s WHERE {where}", params)
        plan = "\n".join(r[0] for r in c.fetchall())
    assert "idx_sa_sessions_title_trgm" in plan, plan


@pytest.mark.skipif(
    connections[store_alias()].vendor != "postgresql", reason="PostgreSQL's extension"
)
def test_without_pg_trgm_the_schema_is_still_made_and_the_filter_scans(monkeypatch):
    """A PostgreSQL without the extension (or without the right to create it): init_store goes
    on without the index, in a transaction that is still usable, and the filter still finds."""
    from sessions_admin.store import listing

    monkeypatch.setattr(schema, "PG_TITLE_TRIGRAM_SQL", "CREATE EXTENSION no_such_extension_here")
    assert schema._ensure_title_trigram_index(store_alias()) is False
    report = ensure_store_schema()
    assert report.problems == ()
    bulk_insert.insert_sessions(
        sessions=[{"id": "t-1", "source": "cli", "started_at": 1.0, "title": "x"}]
    )
    page = listing.list_sessions(listing.Filters(title="x", scope="all"))
    assert [row.id for row in page.rows] == ["t-1"]
