"""Grow a seeded store to a million sessions by copying it inside the database.

``seed_demo`` writes a fifth of its sessions one core operation at a time (lineage, forks,
undone turns), about 330 sessions/s on SQLite and far fewer on PostgreSQL: an hour or more for
a million. A bench store that big is built instead from a seeded base (10,000 sessions) and
``copies`` copies of it made by ``INSERT ... SELECT`` inside the database, one transaction per
copy, so no row crosses into Python:

- each copy is a different set of customers (user, chat and session key get a ``c<k>``
  suffix, conversation slugs and response ids ``~<k>``, titles `` #<k>``), started ``k`` steps
  of :data:`STEP_SECONDS` earlier, with the same lineage shapes, forks, tool calls and undone
  turns as the base;
- message ids are the base's plus ``k`` times an offset, so the undo records' message lists
  are translated in SQL;
- the base's one very large transcript (and its lineage) is not copied: a million-session
  store with a hundred 20,000-message sessions would measure something else.

On SQLite the full-text triggers index every copied message as the runtime's own inserts
would. On PostgreSQL the secondary indexes of ``sessions`` and ``messages`` (the GIN full-text
index included) are dropped for the load and built again once at the end, foreign keys are
not checked row by row (``session_replication_role = replica``: the copies come from rows that
already satisfied them), and the table is analysed.
"""

from __future__ import annotations

import time

# How much earlier each copy starts than the one before (10 h 50 min): a hundred copies spread
# the store over 45 more days, so the list's first pages mix copies as a busy store would.
STEP_SECONDS = 39_000
# Sessions bigger than this (and their lineage) stay in the base only.
LARGEST_COPIED_SESSION = 2_000

_COPIED = "sa_bench_copied"
_IDMAP = "sa_bench_idmap"


def _columns(cursor, table: str, postgres: bool) -> list[str]:
    if postgres:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
            [table],
        )
    else:
        cursor.execute(f"PRAGMA table_info({table})")
        return [row[1] for row in cursor.fetchall()]
    return [row[0] for row in cursor.fetchall()]


def _select_list(columns: list[str], overrides: dict[str, str], alias: str) -> str:
    return ", ".join(overrides.get(name, f"{alias}.{name}") for name in columns)


def _copy_statements(cursor, postgres: bool, offset: int) -> list[str]:
    """The statements making copy ``k`` (bound as %(k)s / :k, shift as %(shift)s / :shift)."""
    p = (lambda name: f"%({name})s") if postgres else (lambda name: f":{name}")
    k, shift = p("k"), p("shift")
    if postgres:
        new_id = (
            f"to_char(to_timestamp(s.started_at - {shift}) AT TIME ZONE 'UTC', "
            f"'YYYYMMDD_HH24MISS') || '_' || substr(s.id, 17)"
        )
        undo_ids = (
            f"(SELECT json_agg(value::bigint + {k} * {offset})::text "
            "FROM json_array_elements_text(u.message_ids::json))"
        )
    else:
        new_id = (
            f"strftime('%Y%m%d_%H%M%S', s.started_at - {shift}, 'unixepoch') "
            "|| '_' || substr(s.id, 17)"
        )
        undo_ids = (
            f"(SELECT json_group_array(value + {k} * {offset}) FROM json_each(u.message_ids))"
        )
    suffix = f"'c' || {k}"
    session_columns = _columns(cursor, "sessions", postgres)
    session_overrides = {
        "id": "m.new_id",
        "parent_session_id": "pm.new_id",
        "started_at": f"s.started_at - {shift}",
        "ended_at": f"s.ended_at - {shift}",
        "title": f"s.title || ' #' || {k}",
        "user_id": f"s.user_id || {suffix}",
        "chat_id": f"s.chat_id || {suffix}",
        "session_key": f"s.session_key || {suffix}",
    }
    message_columns = _columns(cursor, "messages", postgres)
    message_overrides = {
        "id": f"x.id + {k} * {offset}",
        "session_id": "m.new_id",
        "timestamp": f"x.timestamp - {shift}",
    }
    statements = [
        f"DELETE FROM {_IDMAP}",
        f"INSERT INTO {_IDMAP} (old_id, new_id) SELECT s.id, {new_id} "
        f"FROM sessions s JOIN {_COPIED} c ON c.id = s.id",
        f"INSERT INTO sessions ({', '.join(session_columns)}) "
        f"SELECT {_select_list(session_columns, session_overrides, 's')} "
        f"FROM sessions s JOIN {_IDMAP} m ON m.old_id = s.id "
        f"LEFT JOIN {_IDMAP} pm ON pm.old_id = s.parent_session_id",
        f"INSERT INTO messages ({', '.join(message_columns)}) "
        f"SELECT {_select_list(message_columns, message_overrides, 'x')} "
        # The base's messages by primary key range (ids below the offset), not by a scan of
        # every message (the copies' too: no index on session_id during the load).
        f"FROM messages x JOIN {_IDMAP} m ON m.old_id = x.session_id "
        f"WHERE x.id < {offset} ORDER BY x.id",
        "INSERT INTO responses (response_id, data, accessed_at) "
        f"SELECT r.response_id || '~' || {k}, r.data, r.accessed_at - {shift} FROM responses r "
        "WHERE r.response_id IN (SELECT c.response_id FROM conversations c "
        f"JOIN {_IDMAP} m ON m.old_id = c.session_id)",
        "INSERT INTO conversations (name, response_id, session_id) "
        f"SELECT c.name || '~' || {k}, c.response_id || '~' || {k}, m.new_id "
        f"FROM conversations c JOIN {_IDMAP} m ON m.old_id = c.session_id",
        "INSERT INTO sessions_admin_undos (created_at, session_id, message_ids) "
        f"SELECT u.created_at - {shift}, m.new_id, {undo_ids} "
        f"FROM sessions_admin_undos u JOIN {_IDMAP} m ON m.old_id = u.session_id",
    ]
    # A store whose responses live in a separate file has no responses table here.
    if not _columns(cursor, "responses", postgres):
        statements = [s for s in statements if not s.startswith("INSERT INTO responses")]
    return statements


def _choose_copied(cursor) -> None:
    """The base's sessions that every copy repeats: all but the very large lineages."""
    cursor.execute(f"DROP TABLE IF EXISTS {_COPIED}")
    cursor.execute(f"CREATE TABLE {_COPIED} (id TEXT PRIMARY KEY)")
    cursor.execute(f"INSERT INTO {_COPIED} (id) SELECT id FROM sessions")
    # Leave out every session in a lineage (down from its root) that holds a very large one.
    cursor.execute(
        f"""
        WITH RECURSIVE up(id, parent) AS (
            SELECT id, parent_session_id FROM sessions
            WHERE COALESCE(message_count, 0) > {LARGEST_COPIED_SESSION}
            UNION
            SELECT s.id, s.parent_session_id FROM sessions s JOIN up ON s.id = up.parent
        ),
        down(id) AS (
            SELECT id FROM up
            UNION
            SELECT s.id FROM sessions s JOIN down ON s.parent_session_id = down.id
        )
        DELETE FROM {_COPIED} WHERE id IN (SELECT id FROM down)
        """
    )
    cursor.execute(f"DROP TABLE IF EXISTS {_IDMAP}")
    cursor.execute(f"CREATE TABLE {_IDMAP} (old_id TEXT PRIMARY KEY, new_id TEXT NOT NULL)")


def _finish(cursor) -> None:
    cursor.execute(f"DROP TABLE IF EXISTS {_IDMAP}")
    cursor.execute(f"DROP TABLE IF EXISTS {_COPIED}")


def _report(k: int, copies: int, started: float) -> None:
    if k == copies or k % 10 == 0:
        elapsed = time.monotonic() - started
        print(f"  copy {k}/{copies} done after {elapsed:.0f} s", flush=True)


def multiply_sqlite(path: str, copies: int) -> None:
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")  # a bench store: a crash means seeding again
        conn.execute("PRAGMA cache_size = -262144")  # 256 MB
        cursor = conn.cursor()
        cursor.execute("BEGIN")
        _choose_copied(cursor)
        offset = cursor.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM messages").fetchone()[0]
        statements = _copy_statements(cursor, False, offset)
        fts_tables = [
            name
            for (name,) in cursor.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name IN ('messages_fts', 'messages_fts_trigram')"
            ).fetchall()
        ]
        # FTS5 flushes a segment each time its pending terms pass 1 MB (about 190 a copy for
        # the trigram index) and, with its default automerge, merges them as it goes at a fan-in
        # of 4: most of a copy's cost (the trigram index: 11.8 s a copy merging as it goes, 3.2 s
        # not merging). During the load it merges only when 64 segments pile up at one level
        # (crisismerge): each message is rewritten about twice instead of five times. The
        # tables keep that layered structure (what a runtime's store has, only with wider
        # levels) and get back exactly the settings they had.
        fts_settings = {
            table: cursor.execute(f"SELECT k, v FROM {table}_config").fetchall()
            for table in fts_tables
        }
        for table in fts_tables:
            for option, value in (("automerge", 0), ("crisismerge", 64)):
                cursor.execute(f"INSERT INTO {table}({table}, rank) VALUES ('{option}', {value})")
        # Index entries are cheaper built once from sorted rows than inserted one at a time
        # into B-trees that outgrow the cache: drop the secondary indexes, build them at the end.
        indexes = cursor.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' "
            "AND tbl_name IN ('sessions', 'messages') AND sql IS NOT NULL"
        ).fetchall()
        for name, _definition in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
        cursor.execute("COMMIT")
        started = time.monotonic()
        for k in range(1, copies + 1):
            cursor.execute("BEGIN")
            for statement in statements:
                cursor.execute(statement, {"k": k, "shift": k * STEP_SECONDS})
            cursor.execute("COMMIT")
            _report(k, copies, started)
        cursor.execute("BEGIN")
        _finish(cursor)
        building = time.monotonic()
        for _name, definition in indexes:
            cursor.execute(definition)
        cursor.execute("COMMIT")
        print(f"  {len(indexes)} indexes built in {time.monotonic() - building:.0f} s", flush=True)
        cursor.execute("BEGIN")
        for table in fts_tables:
            cursor.execute(f"DELETE FROM {table}_config")
            cursor.executemany(
                f"INSERT INTO {table}_config (k, v) VALUES (?, ?)", fts_settings[table]
            )
        cursor.execute("COMMIT")
        for table in fts_tables:
            # One segment each, as a store whose runtime merged as it went has more or less. Left
            # with its load-time levels (up to 63 segments a level) an index is no store a
            # runtime makes: the console's searches read messages_fts (a selective word took 65
            # ms instead of 11), and the first writes after the load, with the default settings
            # back, merge whole levels of the trigram index at once (one delete batch of a bulk
            # delete waited 146 s for it).
            merging = time.monotonic()
            cursor.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
            print(f"  {table} merged in {time.monotonic() - merging:.0f} s", flush=True)
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def _secondary_indexes(cursor) -> list[tuple[str, str]]:
    """(name, definition) of every index on sessions and messages that is not a key."""
    cursor.execute(
        """
        SELECT i.indexname, i.indexdef FROM pg_indexes i
        JOIN pg_class c ON c.relname = i.indexname
        JOIN pg_index x ON x.indexrelid = c.oid
        WHERE i.schemaname = current_schema() AND i.tablename IN ('sessions', 'messages')
          AND NOT x.indisprimary
        """
    )
    return list(cursor.fetchall())


def multiply_postgres(url: str, copies: int) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.cursor()
        cursor.execute("SET synchronous_commit = off")
        cursor.execute("SET session_replication_role = replica")  # no per-row FK checks
        cursor.execute("SET maintenance_work_mem = '1GB'")
        indexes = _secondary_indexes(cursor)
        _choose_copied(cursor)
        cursor.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM messages")
        offset = cursor.fetchone()[0]
        statements = _copy_statements(cursor, True, offset)
        for name, _definition in indexes:
            cursor.execute(f'DROP INDEX IF EXISTS "{name}"')
        started = time.monotonic()
        try:
            for k in range(1, copies + 1):
                with conn.transaction():
                    for statement in statements:
                        cursor.execute(statement, {"k": k, "shift": k * STEP_SECONDS})
                _report(k, copies, started)
        finally:
            print(f"  building {len(indexes)} indexes again...", flush=True)
            for _name, definition in indexes:
                cursor.execute(definition)
        _finish(cursor)
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('messages', 'id'), "
            "(SELECT MAX(id) FROM messages))"
        )
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('sessions_admin_undos', 'id'), "
            "(SELECT MAX(id) FROM sessions_admin_undos))"
        )
        cursor.execute("VACUUM ANALYZE")
