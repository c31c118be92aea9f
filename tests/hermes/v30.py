"""A store in upstream Hermes Agent's schema-30 layout, with rows written as upstream writes them.

hermes-agent 0.19 writes schema version 22. The layout below follows upstream's
``hermes_state_common.py`` (``SCHEMA_SQL``, ``DEFERRED_INDEX_SQL``, ``FTS_SQL``,
``FTS_TRIGRAM_SQL``) as a fresh install creates it (``hermes_state_schema.py``
``_init_schema``), restated here in this module's own words:

- the tables (``system_prompts``, ``sessions`` with 61 columns, ``messages`` with
  the display columns, ``session_model_usage`` with its 18 columns and 6-column
  key, ``state_meta``, the gateway's routing, hygiene, generation and heartbeat
  tables, compression locks, turn leases, async delegations) and their indexes;
- the four display triggers: a new row's ``display_order`` (the first active
  peer with the same ``display_identity``), visibility changes, identity
  changes and deletes re-deriving it;
- ``messages_fts``: external content read through the ``messages_fts_src``
  view (tool rows cut to an 8,192-character prefix), content, tool_name and
  tool_calls as separate columns;
- ``messages_fts_trigram``: external content read through
  ``messages_fts_trigram_src``, a view joining ``sessions`` that leaves out tool
  rows and cron, subagent and delegate sessions;
- every FTS trigger gated on the ``state_meta`` rebuild markers; the update
  triggers fire only on ``UPDATE OF`` the indexed columns.

Not created: ``messages_fts_cjk``, which upstream creates only where its
``cjk_unicode61`` tokenizer extension loads (it soft-fails without it, as here).

Rows: ``Writer.message`` writes ``display_identity`` as upstream's
``SessionMessagesMixin`` does, the sha256 digest (32 bytes, a BLOB) of the
``repr`` of (role, content, timestamp, tool_call_id, tool_calls, tool_name);
``Writer.usage`` writes a full ``session_model_usage`` row.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path

SCHEMA_VERSION = 30
FTS_STORAGE_VERSION = 3
TOOL_PREFIX = 8192
TRIGRAM_EXCLUDED_SOURCES = ("cron", "subagent")


def _gate(row: str) -> str:
    """Rows a pending FTS rebuild has not reached yet are not in the index: triggers skip them."""
    marker = "COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = '{key}'), -1)"
    return (
        f"({row}.id > {marker.format(key='fts_rebuild_high_water')} "
        f"OR {row}.id <= {marker.format(key='fts_rebuild_progress')})"
    )


def _indexed_content(row: str) -> str:
    return (
        f"CASE WHEN {row}.role = 'tool' THEN substr(COALESCE({row}.content, ''), 1, "
        f"{TOOL_PREFIX}) ELSE {row}.content END"
    )


def _json_marker(column: str, path: str) -> str:
    return (
        f"json_extract((CASE WHEN json_valid({column}) THEN {column} ELSE json_object() END), "
        f"'{path}')"
    )


def _trigram_session(prefix: str = "") -> str:
    """Sessions whose messages the trigram index holds: not cron, subagent or a delegate."""
    excluded = ", ".join(f"'{source}'" for source in TRIGRAM_EXCLUDED_SOURCES)
    return (
        f"{prefix}source NOT IN ({excluded}) AND "
        f"{_json_marker(prefix + 'model_config', '$._delegate_from')} IS NULL"
    )


TABLES = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
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
    model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '', billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '', task TEXT NOT NULL DEFAULT '',
    api_call_count INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0, reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL NOT NULL DEFAULT 0, actual_cost_usd REAL NOT NULL DEFAULT 0,
    cost_status TEXT, cost_source TEXT, first_seen REAL, last_seen REAL,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task)
);
CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE gateway_routing (
    scope TEXT NOT NULL DEFAULT '', session_key TEXT NOT NULL, entry_json TEXT NOT NULL,
    updated_at REAL NOT NULL, PRIMARY KEY (scope, session_key)
);
CREATE TABLE gateway_hygiene_state (
    session_key TEXT PRIMARY KEY, failure_streak INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE conversation_generations (
    source TEXT NOT NULL, session_key TEXT NOT NULL, generation INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (source, session_key)
);
CREATE TABLE gateway_heartbeats (
    backend_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, started_at REAL NOT NULL,
    last_heartbeat REAL NOT NULL, profile TEXT NOT NULL DEFAULT '', host TEXT NOT NULL DEFAULT ''
);
CREATE TABLE compression_locks (
    session_id TEXT PRIMARY KEY, holder TEXT NOT NULL, acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE TABLE session_turn_leases (
    conversation_id TEXT PRIMARY KEY, holder TEXT NOT NULL, acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE TABLE async_delegations (
    delegation_id TEXT PRIMARY KEY, origin_session TEXT NOT NULL,
    origin_ui_session_id TEXT NOT NULL DEFAULT '', parent_session_id TEXT, state TEXT NOT NULL,
    dispatched_at REAL NOT NULL, completed_at REAL, updated_at REAL NOT NULL, event_json TEXT,
    result_json TEXT, delivery_state TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0, delivered_at REAL, owner_pid INTEGER,
    owner_started_at INTEGER, task_json TEXT, delivery_claim TEXT, delivery_claimed_at REAL,
    origin_session_id TEXT NOT NULL DEFAULT ''
);
CREATE INDEX idx_sessions_source ON sessions(source);
CREATE INDEX idx_sessions_source_id ON sessions(source, id);
CREATE INDEX idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX idx_sessions_started ON sessions(started_at DESC);
CREATE INDEX idx_messages_session ON messages(session_id, timestamp);
CREATE INDEX idx_messages_session_id ON messages(session_id, id);
CREATE INDEX idx_messages_assistant_calls_by_session ON messages(session_id)
    WHERE role = 'assistant' AND tool_calls IS NOT NULL;
CREATE INDEX idx_compression_locks_expires ON compression_locks(expires_at);
CREATE INDEX idx_session_turn_leases_expires ON session_turn_leases(expires_at);
CREATE INDEX idx_session_model_usage_session ON session_model_usage(session_id);
CREATE INDEX idx_session_model_usage_model ON session_model_usage(model);
CREATE INDEX idx_async_delegations_delivery ON async_delegations(delivery_state, completed_at);
CREATE INDEX idx_messages_platform_msg_id ON messages(session_id, platform_message_id)
    WHERE platform_message_id IS NOT NULL;
CREATE INDEX idx_messages_session_active ON messages(session_id, active, timestamp);
CREATE INDEX idx_messages_display_page ON messages(session_id, display_order, active DESC, id DESC)
    WHERE active = 1 OR compacted = 1;
CREATE INDEX idx_messages_display_backfill ON messages(session_id)
    WHERE (display_order IS NULL OR display_identity IS NULL) AND (active = 1 OR compacted = 1);
CREATE INDEX idx_messages_display_identity ON messages(session_id, display_identity, display_order)
    WHERE display_identity IS NOT NULL AND (active = 1 OR compacted = 1);
CREATE INDEX idx_messages_active_null ON messages(active) WHERE active IS NULL;
CREATE INDEX idx_sessions_session_key ON sessions(session_key, started_at DESC);
CREATE INDEX idx_sessions_gateway_peer
    ON sessions(source, user_id, chat_id, chat_type, thread_id, started_at DESC);
CREATE INDEX idx_sessions_handoff_state ON sessions(handoff_state, started_at);
CREATE INDEX idx_sessions_system_prompt_hash ON sessions(system_prompt_hash);
CREATE INDEX idx_sessions_tool_names ON sessions(tool_names);
CREATE INDEX idx_sessions_effective_activity
    ON sessions(COALESCE(last_activity_at, started_at) DESC, started_at DESC);
CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions(title) WHERE title IS NOT NULL;
"""

# A row's visible peers (same session, same display_identity, active or compacted) share the
# display_order of the first of them.
_VISIBLE = "(active = 1 OR compacted = 1)"
_PEER_ORDER = (
    "SELECT display_order FROM messages WHERE session_id = new.session_id AND id <> new.id "
    f"AND {_VISIBLE} AND display_identity = new.display_identity "
    "AND display_order IS NOT NULL ORDER BY display_order LIMIT 1"
)
_FIRST_PEER = (
    "SELECT MIN(peer.id) FROM messages AS peer WHERE peer.session_id = old.session_id "
    "AND (peer.active = 1 OR peer.compacted = 1) AND peer.display_identity = old.display_identity"
)
_NEW_VISIBLE = "(new.active = 1 OR new.compacted = 1)"

DISPLAY_TRIGGERS = f"""
CREATE TRIGGER messages_display_order_insert AFTER INSERT ON messages
WHEN new.display_order IS NULL
BEGIN
    UPDATE messages SET display_order = COALESCE(({_PEER_ORDER}), new.id) WHERE id = new.id;
END;
CREATE TRIGGER messages_display_visibility_update AFTER UPDATE OF active, compacted ON messages
WHEN {_NEW_VISIBLE} <> (old.active = 1 OR old.compacted = 1)
BEGIN
    UPDATE messages SET display_order = MIN(new.id, COALESCE(({_PEER_ORDER}), new.id))
    WHERE id = new.id AND {_NEW_VISIBLE};
    UPDATE messages SET display_order = (SELECT display_order FROM messages WHERE id = new.id)
    WHERE session_id = new.session_id AND id <> new.id AND {_VISIBLE}
      AND display_identity = new.display_identity AND {_NEW_VISIBLE};
    UPDATE messages SET display_order = ({_FIRST_PEER})
    WHERE session_id = old.session_id AND {_VISIBLE}
      AND display_identity = old.display_identity AND NOT {_NEW_VISIBLE};
END;
CREATE TRIGGER messages_display_identity_update
AFTER UPDATE OF role, content, timestamp, tool_call_id, tool_calls, tool_name, display_kind
ON messages
WHEN new.role IS NOT old.role OR new.content IS NOT old.content
  OR new.timestamp IS NOT old.timestamp OR new.tool_call_id IS NOT old.tool_call_id
  OR new.tool_calls IS NOT old.tool_calls OR new.tool_name IS NOT old.tool_name
  OR new.display_kind IS NOT old.display_kind
BEGIN
    UPDATE messages SET display_identity = NULL, display_order = NULL
    WHERE id = new.id OR (session_id = old.session_id
        AND display_identity = old.display_identity AND {_VISIBLE});
END;
CREATE TRIGGER messages_display_identity_delete AFTER DELETE ON messages
WHEN old.active = 1 OR old.compacted = 1
BEGIN
    UPDATE messages SET display_order = ({_FIRST_PEER})
    WHERE session_id = old.session_id AND {_VISIBLE}
      AND display_identity = old.display_identity;
END;
"""


def _fts_ddl() -> str:
    new_gate, old_gate = _gate("new"), _gate("old")
    new_text, old_text = _indexed_content("new"), _indexed_content("old")
    in_trigram = _trigram_session()
    return f"""
CREATE VIEW messages_fts_src AS
    SELECT id, {_indexed_content("messages")} AS content, tool_name, tool_calls FROM messages;
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
    SELECT m.id, m.role, m.content, m.tool_name FROM messages AS m
    JOIN sessions AS s ON s.id = m.session_id
    WHERE m.role <> 'tool' AND {_trigram_session("s.")};
CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(
    content, tool_name, content='messages_fts_trigram_src', content_rowid='id',
    tokenize='trigram'
);
CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages
WHEN new.role <> 'tool'
  AND EXISTS (SELECT 1 FROM sessions WHERE id = new.session_id AND {in_trigram})
  AND {new_gate}
BEGIN
    INSERT INTO messages_fts_trigram(rowid, content, tool_name)
    VALUES (new.id, new.content, new.tool_name);
END;
CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages
WHEN old.role <> 'tool'
  AND EXISTS (SELECT 1 FROM sessions WHERE id = old.session_id AND {in_trigram})
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
      AND EXISTS (SELECT 1 FROM sessions WHERE id = old.session_id AND {in_trigram});
    INSERT INTO messages_fts_trigram(rowid, content, tool_name)
    SELECT new.id, new.content, new.tool_name WHERE new.role <> 'tool'
      AND EXISTS (SELECT 1 FROM sessions WHERE id = new.session_id AND {in_trigram});
END;
"""


def _ddl() -> str:
    return (
        TABLES
        + DISPLAY_TRIGGERS
        + _fts_ddl()
        + f"INSERT INTO schema_version VALUES ({SCHEMA_VERSION});\n"
        + "INSERT INTO state_meta VALUES ('fts_storage_version', "
        + f"'{FTS_STORAGE_VERSION}');\n"
    )


def create(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript("PRAGMA journal_mode=WAL;" + _ddl())
    conn.commit()
    conn.close()


def display_identity(
    role: str,
    content: str | None,
    timestamp: float,
    tool_call_id: str | None = None,
    tool_calls: str | None = None,
    tool_name: str | None = None,
) -> bytes:
    """Upstream's display identity: the sha256 digest of the repr of the row's display key."""
    key = (role, content, timestamp, tool_call_id, tool_calls, tool_name)
    return hashlib.sha256(repr(key).encode("utf-8", "surrogatepass")).digest()


class Writer:
    """Writes rows the way the newer runtime does (one connection, its own transactions)."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.clock = time.time() - 3600

    def session(self, session_id: str, source: str = "cli", **columns) -> None:
        self.clock += 1
        fields = {
            "id": session_id,
            "source": source,
            "created_source": source,
            "started_at": self.clock,
            "last_activity_at": self.clock,
            **columns,
        }
        self._insert("sessions", fields)

    def message(self, session_id: str, role: str, content: str, **columns) -> int:
        self.clock += 1.000123
        tool_calls = columns.pop("tool_calls", None)
        if tool_calls is not None and not isinstance(tool_calls, str):
            tool_calls = json.dumps(tool_calls)
        fields = {
            "session_id": session_id,
            "role": role,
            "content": content,
            "tool_calls": tool_calls,
            "timestamp": self.clock,
            "active": 1,
            **columns,
        }
        fields["display_identity"] = display_identity(
            role,
            content,
            fields["timestamp"],
            fields.get("tool_call_id"),
            tool_calls,
            fields.get("tool_name"),
        )
        message_id = self._insert("messages", fields)
        self.conn.execute(
            "UPDATE sessions SET message_count = message_count + 1, "
            "tool_call_count = tool_call_count + ?, last_activity_at = ? WHERE id = ?",
            [len(json.loads(tool_calls)) if tool_calls else 0, self.clock, session_id],
        )
        return message_id

    def usage(self, session_id: str, model: str, **columns) -> None:
        """One per-model usage row as the runtime records an API call (all 18 columns)."""
        fields = {
            "session_id": session_id,
            "model": model,
            "billing_provider": "openrouter",
            "billing_base_url": "https://openrouter.ai/api/v1",
            "billing_mode": "metered",
            "task": "",
            "api_call_count": 3,
            "input_tokens": 1200,
            "output_tokens": 340,
            "cache_read_tokens": 800,
            "cache_write_tokens": 0,
            "reasoning_tokens": 57,
            "estimated_cost_usd": 0.0012345678901234567,
            "actual_cost_usd": 0.0,
            "cost_status": "estimated",
            "cost_source": "pricing_table",
            "first_seen": self.clock - 10.5,
            "last_seen": self.clock,
            **columns,
        }
        self._insert("session_model_usage", fields)

    def _insert(self, table: str, fields: dict) -> int:
        names = ", ".join(fields)
        marks = ", ".join("?" for _ in fields)
        cursor = self.conn.execute(
            f"INSERT INTO {table} ({names}) VALUES ({marks})", list(fields.values())
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


def typed_rows(path: Path, table: str, where: str = "1") -> list[tuple]:
    """Every column of ``table``'s rows as (typeof, quote): the exact stored values, by rowid."""
    conn = sqlite3.connect(path)
    try:
        columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        shown = ", ".join(f"typeof({c}), quote({c})" for c in columns)
        return conn.execute(f"SELECT {shown} FROM {table} WHERE {where} ORDER BY rowid").fetchall()
    finally:
        conn.close()


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
