"""Attaching to a runtime's store: can the dashboard use it, and the read-only mode.

``inspect_store`` looks at the store (and response store) without writing anything: a SQLite
file is opened read-only with ``sqlite3``, never through Django (which would create a missing
file and switch the journal mode). It names what makes a store unusable: not SQLite, missing
tables or columns, a newer incompatible layout, a full-text table whose module or tokenizer
this SQLite lacks (every message write would fail). The system check turns those into start-up
errors, so commands and the demo stop with a message before anything is written.

Read-only mode (``SESSIONS_ADMIN_READ_ONLY=1``): SQLite connections open with ``mode=ro`` and
deferred transactions, get connection-local stand-ins for what attach would have added, then
``query_only``; the core refuses every operation, the permission backend below withholds
operate/delete, and the console hides its actions."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.core.checks import Error, Warning
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, connections

from sessions_admin.core import schema
from sessions_admin.core.db import read_only
from sessions_admin.core.schema import (
    MESSAGE_FIELDS,
    REQUIRED_MESSAGE_COLUMNS,
    REQUIRED_SESSION_COLUMNS,
)
from sessions_admin.routers import responses_alias, store_alias

# The newest Hermes Agent state.db layout this version was checked against.
NEWEST_KNOWN_SCHEMA_VERSION = 30
OWN_TABLES = schema.OWN_TABLES
OPERATE_PERMISSIONS = ("console.operate_sessions", "console.delete_sessions")

# Columns every session/message INSERT of the core supplies (restore and import
# may supply more); a NOT NULL column outside these needs a default.
INSERTED_SESSION_COLUMNS = frozenset(schema.INSERTED_SESSION_COLUMNS)
# Every message column the core writes except the id the database assigns.
INSERTED_MESSAGE_COLUMNS = frozenset(MESSAGE_FIELDS) - {"id"}
# Stable check ids for ``manage.py check`` (silence with SILENCED_SYSTEM_CHECKS).
CHECK_IDS = {
    ("error", "not_sqlite"): "E001",
    ("error", "missing_file"): "E002",
    ("error", "unreadable"): "E003",
    ("error", "missing_tables"): "E004",
    ("error", "not_a_store"): "E004",
    ("error", "missing_columns"): "E005",
    ("error", "incompatible_layout"): "E006",
    ("error", "missing_extension"): "E007",
    ("error", "unreachable"): "E008",
    ("warning", "newer_schema"): "W001",
    ("warning", "no_fts"): "W002",
    ("warning", "own_tables_missing"): "W003",
    ("warning", "blocking_foreign_keys"): "W004",
    ("warning", "missing_extension"): "W005",
    ("warning", "conversation_sessions"): "W006",
    ("warning", "missing_tables"): "W007",
    ("warning", "journal_mode"): "W008",
    ("warning", "own_columns_missing"): "W009",
}


@dataclass(frozen=True)
class Finding:
    level: str  # "error" (unusable: nothing may run) or "warning"
    code: str
    message: str
    hint: str = ""


@dataclass(frozen=True)
class StoreInspection:
    """What one database alias holds, as far as attaching is concerned."""

    alias: str
    role: str  # "store" or "responses"
    location: str
    vendor: str
    exists: bool = True
    tables: frozenset[str] = frozenset()
    schema_version: int | None = None
    fts_layout: str | None = None  # "inline", "external" or None (no messages_fts)
    findings: tuple[Finding, ...] = field(default=())

    @property
    def is_fresh(self) -> bool:
        return not (self.tables & {"sessions", "messages", "responses", "conversations"})

    @property
    def usable(self) -> bool:
        return not any(f.level == "error" for f in self.findings)

    def describe(self) -> str:
        if not self.exists:
            return f"{self.location}: does not exist yet"
        if self.is_fresh:
            return f"{self.location}: empty"
        parts = [self.location]
        if self.schema_version is not None:
            parts.append(f"schema version {self.schema_version}")
        if self.fts_layout:
            parts.append(f"{self.fts_layout} FTS5")
        return ", ".join(parts)


# --- reading a SQLite file without writing to it -------------------------------------------


def sqlite_path(settings_dict: dict) -> str:
    """The file a SQLite alias points at (its NAME may be a ``file:`` URI)."""
    name = str(settings_dict.get("NAME") or "")
    if name.startswith("file:"):
        return unquote(name[len("file:") :].split("?", 1)[0])
    return name


def database_file_named(path: str | Path) -> str | None:
    """The alias whose SQLite file (or its write-ahead, shared-memory or journal file) ``path``
    is, if any. A command given such a path for a file of its own (an export to write, an
    import or an id list to read) refuses it before opening it: writing would destroy the
    database, and even a read closes a handle, which drops this process's SQLite locks there
    (tests/store/test_inspect_keeps_locks.py says why that loses data)."""
    for alias, settings_dict in settings.DATABASES.items():
        if not settings_dict["ENGINE"].endswith("sqlite3"):
            continue
        database = sqlite_path(settings_dict)
        if not database or database == ":memory:":
            continue
        for name in (database, *(database + suffix for suffix in ("-wal", "-shm", "-journal"))):
            # The same file by any link, or the name it would have (a -wal not there right now
            # is still SQLite's to create).
            if os.path.realpath(path) == os.path.realpath(name):
                return alias
            with contextlib.suppress(OSError):
                if os.path.samefile(path, name):
                    return alias
    return None


def read_only_uri(path: str) -> str:
    return f"file:{quote(str(path))}?mode=ro"


def _open_read_only(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(read_only_uri(path), uri=True, timeout=1.0, isolation_level=None)
    conn.execute("PRAGMA query_only=ON")
    return conn


def _master(conn: sqlite3.Connection) -> list[tuple[str, str, str, str | None]]:
    return [
        (r[0], r[1], r[2], r[3])
        for r in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")
    ]


def _columns(conn: sqlite3.Connection, table: str) -> list[tuple]:
    """PRAGMA table_info rows: (cid, name, type, notnull, default, pk)."""
    return conn.execute(f"PRAGMA table_info({_quoted(table)})").fetchall()


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _open_problem(conn: sqlite3.Connection, name: str) -> str | None:
    """The error this process's SQLite gives when it opens table or view ``name``, if any.

    Opening an FTS5 table loads its module and tokenizer, so an extension the
    runtime loads and this process lacks shows up here, at prepare time.
    """
    try:
        conn.execute(f"SELECT * FROM {_quoted(name)} LIMIT 0").fetchall()
    except sqlite3.Error as error:
        return str(error)
    return None


def _tokenizer(sql: str | None) -> str | None:
    match = re.search(r"tokenize\s*=\s*['\"]([^'\"]+)['\"]", sql or "", re.IGNORECASE)
    return match.group(1) if match else None


# --- the inspection --------------------------------------------------------------------------


def inspect_sqlite(path: str, *, alias: str, role: str) -> StoreInspection:
    location = f"SQLite file {path}"

    def unusable(code: str, message: str, hint: str = "") -> StoreInspection:
        """A SQLite store that cannot be opened or read at all, and why."""
        finding = Finding("error", code, message, hint)
        return StoreInspection(alias, role, location, "sqlite", findings=(finding,))

    if not path or path == ":memory:":
        return StoreInspection(alias, role, location, "sqlite", exists=False)
    file = Path(path)
    if not file.exists():
        findings = []
        if read_only():
            findings.append(
                Finding(
                    "error",
                    "missing_file",
                    f"The {role} ({path}) does not exist: read-only mode cannot create it.",
                    "Point SESSIONS_ADMIN_STORE_URL at the runtime's state.db, or start without "
                    "SESSIONS_ADMIN_READ_ONLY.",
                )
            )
        return StoreInspection(
            alias, role, location, "sqlite", exists=False, findings=tuple(findings)
        )
    if file.is_dir():
        return unusable("not_sqlite", f"The {role} path {path} is a directory.")
    # Everything below reads the file through SQLite only, never open(): closing any other
    # handle on a database file drops every lock this process's SQLite connections hold on it
    # (POSIX record locks belong to the process), and a runtime closing its connection then
    # takes itself for the last one and deletes the -wal and -shm files from under ours
    # (tests/store/test_inspect_keeps_locks.py).
    try:
        conn = _open_read_only(path)
    except sqlite3.Error as error:
        return unusable("unreadable", f"Cannot open the {role} {path}: {error}.")
    try:
        found = _inspect_open_sqlite(conn, path=path, alias=alias, role=role, location=location)
        journal_mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    except sqlite3.DatabaseError as error:
        if "file is not a database" in str(error):
            return unusable(
                "not_sqlite",
                f"The {role} {path} is not a SQLite database (its header is not "
                "'SQLite format 3').",
                "Point the URL at Hermes's state.db (or response_store.db), not at another file.",
            )
        return unusable(
            "unreadable", f"The {role} {path} cannot be read as a SQLite database: {error}."
        )
    except OSError as error:
        return unusable("unreadable", f"Cannot read the {role} {path}: {error}.")
    finally:
        conn.close()
    if journal_mode != "wal" and found.tables and not read_only():
        extra = Finding(
            "warning",
            "journal_mode",
            f"The {role} is not in WAL mode (Hermes falls back to a rollback journal on "
            "network filesystems); the dashboard's connections switch it to WAL, which "
            "needs a filesystem with working shared memory and locks.",
            "On NFS/SMB, attach read-only (SESSIONS_ADMIN_READ_ONLY=1) or move the Hermes home "
            "to a local disk.",
        )
        found = dataclasses.replace(found, findings=(*found.findings, extra))
    return found


def _inspect_open_sqlite(
    conn: sqlite3.Connection, *, path: str, alias: str, role: str, location: str
) -> StoreInspection:
    master = _master(conn)
    tables = frozenset(
        name for kind, name, _t, _s in master if kind == "table" and not name.startswith("sqlite_")
    )
    findings: list[Finding] = []
    version = None
    if "schema_version" in tables:
        try:
            row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
            version = int(row[0]) if row and row[0] is not None else None
        except (sqlite3.Error, TypeError, ValueError):
            version = None
    fts_layout = None
    if role == "store":
        findings += _runtime_table_findings(conn, tables, role=role, path=path)
        fts_layout = _fts_layout(master)
        findings += _extension_findings(conn, master)
        if tables & {"sessions", "messages"}:
            if version is not None and version > NEWEST_KNOWN_SCHEMA_VERSION:
                findings.append(
                    Finding(
                        "warning",
                        "newer_schema",
                        f"The store is at schema version {version}, newer than the newest this "
                        f"dashboard was checked against ({NEWEST_KNOWN_SCHEMA_VERSION}); its "
                        "layout passed the compatibility checks.",
                    )
                )
            if "messages_fts" not in tables:
                findings.append(
                    Finding(
                        "warning",
                        "no_fts",
                        "The store has no messages_fts full-text index: message search is off.",
                    )
                )
            missing_own = [t for t in OWN_TABLES if t not in tables]
            if missing_own and not read_only():
                findings.append(
                    Finding(
                        "warning",
                        "own_tables_missing",
                        f"The store lacks the dashboard's own tables ({', '.join(missing_own)}): "
                        "merges, undos and switch events cannot be recorded yet.",
                        "Run `python manage.py init_store` once (docs/attach.md lists what it adds).",
                    )
                )
            if "sessions_admin_switch_events" in tables and not read_only():
                logged = {c[1] for c in _columns(conn, "sessions_admin_switch_events")}
                if not {"source", "origin"} <= logged:
                    findings.append(
                        Finding(
                            "warning",
                            "own_columns_missing",
                            "sessions_admin_switch_events predates its source and origin columns: "
                            "every session switch will fail until they are added.",
                            "Run `python manage.py init_store` (it adds those two columns).",
                        )
                    )
    if role == "responses" or responses_alias() == alias:
        findings += _responses_findings(conn, tables, role=role, path=path)
    return StoreInspection(
        alias,
        role,
        location,
        "sqlite",
        exists=True,
        tables=tables,
        schema_version=version,
        fts_layout=fts_layout,
        findings=tuple(findings),
    )


def _runtime_table_findings(
    conn: sqlite3.Connection, tables: frozenset[str], *, role: str, path: str
) -> list[Finding]:

    runtime = tables & {"sessions", "messages"}
    if not runtime:
        others = sorted(t for t in tables if t not in {*OWN_TABLES, "schema_version"})
        known = {"responses", "conversations"}
        if others and not set(others) <= known:
            return [
                Finding(
                    "error",
                    "not_a_store",
                    f"The {role} {path} has tables ({', '.join(others[:8])}) but no sessions "
                    "or messages table: it is not a session store.",
                    "Point SESSIONS_ADMIN_STORE_URL at Hermes's state.db.",
                )
            ]
        return []
    if runtime != {"sessions", "messages"}:
        (present,) = runtime
        (missing,) = {"sessions", "messages"} - runtime
        return [
            Finding(
                "error",
                "missing_tables",
                f"The store has a {present} table but no {missing} table.",
                "Attach never creates the runtime's tables; point the URL at a complete "
                "state.db, or run `python manage.py init_store --upgrade-runtime-tables`.",
            )
        ]
    findings = []
    for table, required, inserted in (
        ("sessions", REQUIRED_SESSION_COLUMNS, INSERTED_SESSION_COLUMNS),
        ("messages", REQUIRED_MESSAGE_COLUMNS, INSERTED_MESSAGE_COLUMNS),
    ):
        columns = _columns(conn, table)
        names = {c[1] for c in columns}
        missing = sorted(required - names)
        if missing:
            findings.append(
                Finding(
                    "error",
                    "missing_columns",
                    f"The store's {table} table lacks columns the dashboard reads: "
                    f"{', '.join(missing)} (an older runtime wrote it).",
                    "Open it once with a current Hermes Agent (it adds them), or run "
                    "`python manage.py init_store --upgrade-runtime-tables`.",
                )
            )
        blocking = sorted(
            c[1] for c in columns if c[3] and c[4] is None and not c[5] and c[1] not in inserted
        )
        if blocking:
            findings.append(
                Finding(
                    "error",
                    "incompatible_layout",
                    f"The store's {table} table has required columns without a default that "
                    f"the dashboard does not write ({', '.join(blocking)}): a newer runtime "
                    "layout this dashboard cannot write to.",
                    "Upgrade sessions_admin, or attach read-only (SESSIONS_ADMIN_READ_ONLY=1).",
                )
            )
    id_column = next((c for c in _columns(conn, "messages") if c[1] == "id"), None)
    if id_column is not None and (not id_column[5] or id_column[2].upper() != "INTEGER"):
        findings.append(
            Finding(
                "error",
                "incompatible_layout",
                "The store's messages.id is not an INTEGER PRIMARY KEY: message order (by id) "
                "cannot be kept.",
                "Upgrade sessions_admin, or attach read-only (SESSIONS_ADMIN_READ_ONLY=1).",
            )
        )
    findings += _foreign_key_findings(conn, tables)
    return findings


def _foreign_key_findings(conn: sqlite3.Connection, tables: frozenset[str]) -> list[Finding]:
    """Tables whose rows would block deleting a session (a foreign key without ON DELETE)."""
    blocking = []
    for table in sorted(tables - {"sessions", "messages"}):
        for row in conn.execute(f"PRAGMA foreign_key_list({_quoted(table)})").fetchall():
            target, on_delete = row[2], str(row[6] or "").upper()
            if target in {"sessions", "messages"} and on_delete not in {
                "CASCADE",
                "SET NULL",
                "SET DEFAULT",
            }:
                blocking.append(f"{table} -> {target}")
    if not blocking:
        return []
    return [
        Finding(
            "warning",
            "blocking_foreign_keys",
            "Rows of these tables keep a session from being deleted (a foreign key without "
            f"ON DELETE): {', '.join(blocking)}. Deleting such a session is refused by SQLite.",
        )
    ]


def _fts_layout(master: list[tuple[str, str, str, str | None]]) -> str | None:
    for kind, name, _t, sql in master:
        if kind == "table" and name == "messages_fts":
            return "external" if "content=" in re.sub(r"\s+", "", sql or "").lower() else "inline"
    return None


def _extension_findings(
    conn: sqlite3.Connection, master: list[tuple[str, str, str, str | None]]
) -> list[Finding]:
    findings = []
    triggers = [(name, tbl, sql or "") for kind, name, tbl, sql in master if kind == "trigger"]
    for kind, name, _t, sql in master:
        if kind != "table" or not (sql or "").upper().startswith("CREATE VIRTUAL TABLE"):
            continue
        problem = _open_problem(conn, name)
        if problem is None:
            continue
        tokenizer = _tokenizer(sql)
        what = f"the tokenizer {tokenizer!r}" if tokenizer else "its module"
        writers = [
            t
            for t, tbl, body in triggers
            if tbl in {"messages", "sessions"}
            and re.search(rf"\b{re.escape(name)}\b", body, re.IGNORECASE)
        ]
        if writers:
            findings.append(
                Finding(
                    "error",
                    "missing_extension",
                    f"The full-text table {name} needs {what}, which this process's SQLite "
                    f"lacks ({problem}); triggers {', '.join(sorted(writers))} write to it on "
                    "every message change, so every write would fail.",
                    "Load the runtime's SQLite extension in this process, or attach read-only "
                    "(SESSIONS_ADMIN_READ_ONLY=1).",
                )
            )
        else:
            findings.append(
                Finding(
                    "warning",
                    "missing_extension",
                    f"The full-text table {name} needs {what}, which this process's SQLite "
                    f"lacks ({problem}); searches through it are unavailable.",
                )
            )
    return findings


def _responses_findings(
    conn: sqlite3.Connection, tables: frozenset[str], *, role: str, path: str
) -> list[Finding]:
    present = tables & {"responses", "conversations"}
    if not present:
        return []
    findings = []
    if present != {"responses", "conversations"}:
        (found,) = present
        (missing,) = {"responses", "conversations"} - present
        findings.append(
            Finding(
                "warning",
                "missing_tables",
                f"The {role} has a {found} table but no {missing} table; "
                f"`init_store` creates {missing}.",
            )
        )
    if "conversations" in tables and "session_id" not in {
        c[1] for c in _columns(conn, "conversations")
    }:
        if not read_only():
            findings.append(
                Finding(
                    "warning",
                    "conversation_sessions",
                    "conversations has no session_id column yet: a slug whose responses were "
                    "evicted cannot be followed to its session.",
                    "Run `python manage.py init_store` (it adds that one column).",
                )
            )
    return findings


def inspect_alias(alias: str, *, role: str) -> StoreInspection:
    settings_dict = connections.settings[alias] if alias in connections.settings else None
    if settings_dict is None:
        return StoreInspection(alias, role, alias, "unknown", exists=False)
    engine = settings_dict.get("ENGINE", "")
    if engine.endswith("sqlite3"):
        return inspect_sqlite(sqlite_path(settings_dict), alias=alias, role=role)
    return _inspect_via_django(alias, role=role)


def _inspect_via_django(alias: str, *, role: str) -> StoreInspection:
    """A PostgreSQL store: connect and look at its tables (no writes)."""

    connection = connections[alias]
    location = f"{connection.vendor} database {connection.settings_dict.get('NAME')}"
    try:
        with connection.cursor() as cursor:
            tables = frozenset(connection.introspection.table_names(cursor))
            findings: list[Finding] = []
            runtime = tables & {"sessions", "messages"}
            if role == "store" and runtime and runtime != {"sessions", "messages"}:
                findings.append(
                    Finding("error", "missing_tables", f"The store has only {sorted(runtime)}.")
                )
            elif role == "store" and runtime:
                for table, required in (
                    ("sessions", REQUIRED_SESSION_COLUMNS),
                    ("messages", REQUIRED_MESSAGE_COLUMNS),
                ):
                    names = {
                        c.name
                        for c in connection.introspection.get_table_description(cursor, table)
                    }
                    if required - names:
                        findings.append(
                            Finding(
                                "error",
                                "missing_columns",
                                f"The store's {table} table lacks columns the dashboard reads: "
                                f"{', '.join(sorted(required - names))}.",
                                "Run `python manage.py init_store --upgrade-runtime-tables`.",
                            )
                        )
    except DatabaseError as error:
        return StoreInspection(
            alias,
            role,
            location,
            connection.vendor,
            findings=(Finding("error", "unreachable", f"Cannot read the {role}: {error}".strip()),),
        )
    return StoreInspection(
        alias, role, location, connection.vendor, tables=tables, findings=tuple(findings)
    )


def inspect_configured() -> list[StoreInspection]:
    """The store, and the separate response store if one is configured."""
    found = [inspect_alias(store_alias(), role="store")]
    if responses_alias() != store_alias():
        found.append(inspect_alias(responses_alias(), role="responses"))
    return found


# --- the start-up check ----------------------------------------------------------------------


CHECK_TAG = "sessions_admin_store"
# What ``init_store --upgrade-runtime-tables`` repairs (so it may run despite these errors).
UPGRADE_FIXES = frozenset({"missing_columns", "missing_tables"})


def _messages(inspections: list[StoreInspection]) -> list:
    messages = []
    for inspection in inspections:
        for finding in inspection.findings:
            text = f"{finding.message} [{inspection.describe()}]"
            ident = "sessions_admin." + CHECK_IDS.get((finding.level, finding.code), "E000")
            kind = Error if finding.level == "error" else Warning
            messages.append(kind(text, hint=finding.hint or None, id=ident))
    return messages


def check_store(app_configs=None, **kwargs) -> list:
    """Django system check: the configured store can be used (read-only, nothing written)."""
    return _messages(inspect_configured())


def blocking_problems(*, upgrading: bool = False) -> list[str]:
    """The check's errors as text, for commands that run it themselves (init_store)."""
    inspections = [
        dataclasses.replace(
            found,
            findings=tuple(
                f
                for f in found.findings
                if f.level == "error" and not (upgrading and f.code in UPGRADE_FIXES)
            ),
        )
        for found in inspect_configured()
    ]
    return [
        f"{message.id}: {message.msg}" + (f"\n\tHINT: {message.hint}" if message.hint else "")
        for message in _messages(inspections)
    ]


# --- read-only connections and permissions -------------------------------------------------

_RESPONSES_SHIMS = {
    "responses": "CREATE TEMP TABLE responses (response_id TEXT PRIMARY KEY, data TEXT NOT NULL, "
    "accessed_at REAL NOT NULL)",
    "conversations": "CREATE TEMP TABLE conversations (name TEXT PRIMARY KEY, "
    "response_id TEXT NOT NULL, session_id TEXT)",
}
_STORE_SHIMS = {
    "sessions_admin_switch_events": "CREATE TEMP TABLE sessions_admin_switch_events ("
    "seq BIGINT PRIMARY KEY, created_at REAL NOT NULL, new_session_id TEXT NOT NULL, "
    "previous_session_id TEXT, parent_session_id TEXT, reset INTEGER NOT NULL DEFAULT 0, "
    "reason TEXT NOT NULL, session_key TEXT, source TEXT, origin TEXT)",
    "sessions_admin_merges": "CREATE TEMP TABLE sessions_admin_merges (id INTEGER PRIMARY KEY, "
    "created_at REAL NOT NULL, target_session_id TEXT NOT NULL, absorbed_session_ids TEXT "
    "NOT NULL, prior_state TEXT NOT NULL, undone_at REAL)",
    "sessions_admin_undos": "CREATE TEMP TABLE sessions_admin_undos (id INTEGER PRIMARY KEY, "
    "created_at REAL NOT NULL, session_id TEXT NOT NULL, message_ids TEXT NOT NULL)",
    "sessions_admin_holds": "CREATE TEMP TABLE sessions_admin_holds (id INTEGER PRIMARY KEY, "
    "kind TEXT NOT NULL, subject TEXT NOT NULL, reason TEXT NOT NULL, placed_by TEXT NOT NULL, "
    "placed_at REAL NOT NULL, released_at REAL, released_by TEXT, release_reason TEXT)",
    "sessions_admin_deletions": "CREATE TEMP TABLE sessions_admin_deletions (session_id TEXT "
    "PRIMARY KEY, operation TEXT NOT NULL, actor TEXT NOT NULL, started_at REAL NOT NULL, "
    "keep_live INTEGER NOT NULL DEFAULT 0)",
    "sessions_admin_delete_claims": "CREATE TEMP TABLE sessions_admin_delete_claims (session_id "
    "TEXT PRIMARY KEY, operation TEXT NOT NULL, actor TEXT NOT NULL, owner TEXT NOT NULL, "
    "claimed_at REAL NOT NULL, renewed_at REAL NOT NULL)",
    "sessions_admin_end_marks": "CREATE TEMP TABLE sessions_admin_end_marks (session_id TEXT "
    "PRIMARY KEY, ended_at REAL NOT NULL, last_message_id BIGINT NOT NULL)",
    "sessions_admin_meta": "CREATE TEMP TABLE sessions_admin_meta (name TEXT PRIMARY KEY, "
    "value TEXT NOT NULL)",
    "sessions_admin_idempotency": "CREATE TEMP TABLE sessions_admin_idempotency (scope TEXT NOT "
    "NULL, key TEXT NOT NULL, request_hash TEXT NOT NULL, session_id TEXT NOT NULL, "
    "response_json TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (scope, key))",
}


def read_only_shims(alias: str, tables: set[str], conversation_columns: set[str]) -> list[str]:
    """Connection-local (TEMP) stand-ins for what attach would add, so reads work unchanged."""
    statements = []
    if alias == store_alias():
        statements += [sql for name, sql in _STORE_SHIMS.items() if name not in tables]
    if alias == responses_alias():
        statements += [sql for name, sql in _RESPONSES_SHIMS.items() if name not in tables]
        if "conversations" in tables and "session_id" not in conversation_columns:
            # Shadows main.conversations for unqualified names, on this connection only.
            statements.append(
                "CREATE TEMP VIEW conversations AS SELECT name, response_id, "
                "CAST(NULL AS TEXT) AS session_id FROM main.conversations"
            )
    return statements


def prepare_connection(sender, connection, **kwargs) -> None:
    """``connection_created``: in read-only mode, add the shims and make the connection query-only."""
    if not read_only() or connection.vendor != "sqlite":
        return
    if connection.alias not in {store_alias(), responses_alias()}:
        return
    raw = connection.connection
    tables = {r[0] for r in raw.execute("SELECT name FROM main.sqlite_master WHERE type='table'")}
    columns = (
        {r[1] for r in raw.execute("PRAGMA main.table_info(conversations)")}
        if "conversations" in tables
        else set()
    )
    for statement in read_only_shims(connection.alias, tables, columns):
        raw.execute(statement)
    raw.execute("PRAGMA query_only=ON")


class ReadOnlyPermissionBackend(ModelBackend):
    """Django's model backend that withholds operate/delete while the store is attached read-only.

    Listed first in AUTHENTICATION_BACKENDS: raising PermissionDenied from
    ``has_perm`` makes Django deny the permission whatever later backends say,
    so templates (``perms``) and views (``has_perm``) hide and refuse actions alike.
    """

    def has_perm(self, user_obj, perm, obj=None):
        if read_only() and perm in OPERATE_PERMISSIONS:
            raise PermissionDenied("The store is attached read-only.")
        return super().has_perm(user_obj, perm, obj)
