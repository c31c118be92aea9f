"""A store in the layout of newer Hermes Agent releases (schema version 30), built by hand.

hermes-agent 0.19 writes schema version 22; later releases (the upstream
``hermes_state_common.py``) add columns with defaults, a content-addressed
``system_prompts`` table, per-model usage rows, display-order triggers, and
replace the inline FTS tables by external-content FTS5 tables reading
through views:

- ``messages_fts`` reads ``messages_fts_src`` (tool rows cut to a prefix) and
  indexes content, tool_name and tool_calls as separate columns;
- ``messages_fts_trigram`` reads ``messages_fts_trigram_src``, a view joining
  ``sessions`` that leaves out tool rows and cron, subagent and delegate
  sessions: which messages it holds depends on their session's row;
- every FTS trigger is gated on the ``state_meta`` rebuild markers and the
  update triggers fire only on ``UPDATE OF`` the indexed columns.

This module writes that layout in its own words, with just enough of it for
the dashboard's reads and writes to meet every part, and the rows the tests use.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

TOOL_PREFIX = 8192
_GATE = (
    "({row}.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta "
    "WHERE key = 'fts_rebuild_high_water'), -1) "
    "OR {row}.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta "
    "WHERE key = 'fts_rebuild_progress'), -1))"
)
_INDEXED = (
    "CASE WHEN {row}.role = 'tool' THEN substr(COALESCE({row}.content, ''), 1, "
    + str(TOOL_PREFIX)
    + ") ELSE {row}.content END"
)


def _trigram_session(prefix: str = "") -> str:
    """Sessions whose messages the trigram index holds: not cron, subagent or a delegate."""
    config = f"{prefix}model_config"
    return (
        f"{prefix}source NOT IN ('cron', 'subagent') AND json_extract(CASE WHEN "
        f"json_valid({config}) THEN {config} ELSE '{{}}' END, '$._delegate_from') IS NULL"
    )


def _ddl() -> str:
    new_gate, old_gate = _GATE.format(row="new"), _GATE.format(row="old")
    new_text, old_text = _INDEXED.format(row="new"), _INDEXED.format(row="old")
    trigram_session = _trigram_session()
    return f"""
CREATE TABLE schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version VALUES (30);
CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE system_prompts (hash TEXT PRIMARY KEY, prompt TEXT NOT NULL);
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, source TEXT NOT NULL, created_source TEXT, user_id TEXT,
    session_key TEXT, chat_id TEXT, chat_type TEXT, thread_id TEXT, display_name TEXT,
    origin_json TEXT, expiry_finalized INTEGER DEFAULT 0, model TEXT, model_config TEXT,
    system_prompt TEXT, system_prompt_hash TEXT, parent_session_id TEXT,
    started_at REAL NOT NULL, ended_at REAL, end_reason TEXT,
    message_count INTEGER DEFAULT 0, tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0, output_tokens INTEGER DEFAULT 0,
    cache_read_tokens INTEGER DEFAULT 0, cache_write_tokens INTEGER DEFAULT 0,
    reasoning_tokens INTEGER DEFAULT 0, cwd TEXT, git_branch TEXT, git_repo_root TEXT,
    git_metadata_generation INTEGER NOT NULL DEFAULT 0, billing_provider TEXT,
    billing_base_url TEXT, billing_mode TEXT, estimated_cost_usd REAL, actual_cost_usd REAL,
    cost_status TEXT, cost_source TEXT, pricing_version TEXT, title TEXT, title_source TEXT,
    last_activity_at REAL, last_activity_description TEXT, last_activity_provenance TEXT,
    api_call_count INTEGER DEFAULT 0, handoff_state TEXT, handoff_platform TEXT,
    handoff_error TEXT, compression_failure_cooldown_until REAL, compression_failure_error TEXT,
    compression_fallback_streak INTEGER NOT NULL DEFAULT 0,
    compression_ineffective_count INTEGER NOT NULL DEFAULT 0,
    compression_recovery_deadline REAL, compression_overload_streak INTEGER NOT NULL DEFAULT 0,
    profile_name TEXT, transport_profile TEXT, rewind_count INTEGER NOT NULL DEFAULT 0,
    archived INTEGER NOT NULL DEFAULT 0, pinned INTEGER NOT NULL DEFAULT 0,
    hidden INTEGER NOT NULL DEFAULT 0, last_read_at REAL, tool_names TEXT,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id),
    FOREIGN KEY (system_prompt_hash) REFERENCES system_prompts(hash)
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT,
    effect_disposition TEXT, timestamp REAL NOT NULL, token_count INTEGER, finish_reason TEXT,
    reasoning TEXT, reasoning_content TEXT, reasoning_details TEXT, codex_reasoning_items TEXT,
    codex_message_items TEXT, platform_message_id TEXT, observed INTEGER DEFAULT 0,
    _compressed_summary INTEGER NOT NULL DEFAULT 0, active INTEGER NOT NULL DEFAULT 1,
    compacted INTEGER NOT NULL DEFAULT 0, api_content TEXT, display_kind TEXT,
    display_metadata TEXT, display_identity BLOB, display_order INTEGER
);
CREATE TABLE session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    model TEXT NOT NULL, input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (session_id, model)
);
CREATE INDEX idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX idx_messages_session_id ON messages(session_id, id);
CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions(title) WHERE title IS NOT NULL;

CREATE TRIGGER messages_display_order_insert AFTER INSERT ON messages
WHEN new.display_order IS NULL
BEGIN
    UPDATE messages SET display_order = new.id WHERE id = new.id;
END;

CREATE VIEW messages_fts_src AS
    SELECT id, CASE WHEN role = 'tool' THEN substr(COALESCE(content, ''), 1, {TOOL_PREFIX})
           ELSE content END AS content, tool_name, tool_calls
    FROM messages;
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, tool_name, tool_calls, content='messages_fts_src', content_rowid='id'
);
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN {new_gate}
BEGIN
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (new.id, {new_text}, new.tool_name, new.tool_calls);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN {old_gate}
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, {old_text}, old.tool_name, old.tool_calls);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, tool_name, tool_calls, role ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
      OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role) AND {old_gate}
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, {old_text}, old.tool_name, old.tool_calls);
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (new.id, {new_text}, new.tool_name, new.tool_calls);
END;

CREATE VIEW messages_fts_trigram_src AS
    SELECT m.id, m.content, m.tool_name FROM messages m JOIN sessions s ON s.id = m.session_id
    WHERE m.role <> 'tool' AND {_trigram_session("s.")};
CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(
    content, tool_name, content='messages_fts_trigram_src', content_rowid='id',
    tokenize='trigram'
);
CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages
WHEN new.role <> 'tool'
  AND EXISTS (SELECT 1 FROM sessions WHERE id = new.session_id AND {trigram_session})
  AND {new_gate}
BEGIN
    INSERT INTO messages_fts_trigram(rowid, content, tool_name)
    VALUES (new.id, new.content, new.tool_name);
END;
CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages
WHEN old.role <> 'tool'
  AND EXISTS (SELECT 1 FROM sessions WHERE id = old.session_id AND {trigram_session})
  AND {old_gate}
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name)
    VALUES ('delete', old.id, old.content, old.tool_name);
END;
CREATE TRIGGER messages_fts_trigram_update AFTER UPDATE OF content, tool_name, role ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
      OR old.role IS NOT new.role) AND {old_gate}
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name)
    SELECT 'delete', old.id, old.content, old.tool_name WHERE old.role <> 'tool'
      AND EXISTS (SELECT 1 FROM sessions WHERE id = old.session_id AND {trigram_session});
    INSERT INTO messages_fts_trigram(rowid, content, tool_name)
    SELECT new.id, new.content, new.tool_name WHERE new.role <> 'tool'
      AND EXISTS (SELECT 1 FROM sessions WHERE id = new.session_id AND {trigram_session});
END;
"""


def create(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript("PRAGMA journal_mode=WAL;" + _ddl())
    conn.commit()
    conn.close()


class Writer:
    """Writes rows the way the newer runtime does (one connection, its own transactions)."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.clock = time.time() - 3600

    def session(self, session_id: str, source: str = "cli", **columns) -> None:
        self.clock += 1
        fields = {"id": session_id, "source": source, "started_at": self.clock, **columns}
        names = ", ".join(fields)
        marks = ", ".join("?" for _ in fields)
        self.conn.execute(f"INSERT INTO sessions ({names}) VALUES ({marks})", list(fields.values()))

    def message(self, session_id: str, role: str, content: str, **columns) -> int:
        self.clock += 1
        fields = {
            "session_id": session_id,
            "role": role,
            "content": content,
            "timestamp": self.clock,
            **columns,
        }
        names = ", ".join(fields)
        marks = ", ".join("?" for _ in fields)
        cursor = self.conn.execute(
            f"INSERT INTO messages ({names}) VALUES ({marks})", list(fields.values())
        )
        self.conn.execute(
            "UPDATE sessions SET message_count = message_count + 1 WHERE id = ?", [session_id]
        )
        return int(cursor.lastrowid)

    def close(self) -> None:
        self.conn.close()


def fts_problems(path: Path) -> list[str]:
    """FTS5's own check of both indexes against their external content (rank 1 compares them)."""
    conn = sqlite3.connect(path)
    problems = []
    try:
        for table in ("messages_fts", "messages_fts_trigram"):
            try:
                conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
            except sqlite3.DatabaseError as error:
                problems.append(f"{table}: {error}")
        problems += [
            f"foreign key: {row}" for row in conn.execute("PRAGMA foreign_key_check").fetchall()
        ]
        integrity = conn.execute("PRAGMA integrity_check").fetchall()
        if integrity != [("ok",)]:
            problems.append(f"integrity: {integrity}")
    finally:
        conn.close()
    return problems


def search(path: Path, word: str, table: str = "messages_fts") -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {
            row[0]
            for row in conn.execute(
                f"SELECT m.session_id FROM {table} f JOIN messages m ON m.id = f.rowid "
                f"WHERE {table} MATCH ?",
                [word],
            )
        }
    finally:
        conn.close()
