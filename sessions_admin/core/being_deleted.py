"""Sessions a delete is removing in parts: the state the core and a runtime respect.

A session larger than one batch (``deletion.BATCH_MESSAGES``) is deleted in parts
(``core.deletion.parts``), each in its own short store transaction, then its row with the rest.
The mark lives here, not there, because the core's writers (lifecycle, merge, stray, erasure)
check it and ``core.deletion`` imports them. While a row in ``sessions_admin_deletions`` (in the
store: every process sees it) names the delete's trash operation, the core refuses every write to
the session (``refuse_being_deleted``), so nothing is added to a half-trashed transcript; a
runtime writing its own SQL (Hermes) is not stopped, and the next part copies what it wrote. The
row goes with the session row, or when the delete gives the session back (it went live, a hold
landed, its job was cancelled) in the transaction putting the parts back (a purge's from the
store's copy); the last step runs only while it stands. A delete killed between parts leaves it
standing: the job resumes, or restoring the operation puts the parts back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connections

from sessions_admin.core import db
from sessions_admin.core.errors import SessionBeingDeleted
from sessions_admin.core.schema import DELETIONS_SQL, existing_columns, existing_tables
from sessions_admin.routers import store_alias

TABLE = "sessions_admin_deletions"
# Stores known to have the table (it is never dropped): a store attached by an older version
# has none until ``init_store`` runs or a delete in parts creates it, and meanwhile nothing
# can be marked in it, so every read here answers "nothing is being deleted" instead of failing
# a runtime's append.
_present_in: set[tuple] = set()
# Where it is missing, looked for again after this long, not on every append: another process
# creating it meanwhile only means a write may land in a session being deleted, and the delete's
# next part then copies that message to the trash with the rest (nothing is lost).
MISSING_RECHECK_SECONDS = 10.0
_missing_until: dict[tuple, float] = {}


def _store_identity() -> tuple:
    settings = connections[store_alias()].settings_dict
    return (settings.get("ENGINE"), settings.get("HOST"), settings.get("PORT"), settings["NAME"])


def table_present() -> bool:
    identity = _store_identity()
    if identity in _present_in:
        return True
    if time.monotonic() < _missing_until.get(identity, 0.0):
        return False
    if TABLE in existing_tables(store_alias()):
        _present_in.add(identity)
        return True
    _missing_until[identity] = time.monotonic() + MISSING_RECHECK_SECONDS
    return False


def ensure_table() -> None:
    """Create the table where an older version attached the store (the delete that marks)."""
    if not table_present():
        real = "DOUBLE PRECISION" if db.vendor() == "postgresql" else "REAL"
        db.execute(DELETIONS_SQL.format(real=real))
        _missing_until.pop(_store_identity(), None)


@dataclass(frozen=True)
class DeletionMark:
    session_id: str
    operation: str
    actor: str
    started_at: float
    keep_live: bool


def marks_on(session_ids: Sequence[str]) -> dict[str, DeletionMark]:
    """The sessions among these that a delete is removing in parts, with its mark."""
    found: dict[str, DeletionMark] = {}
    ids = list(dict.fromkeys(session_ids))
    if not ids or not table_present():
        return found
    for row in db.fetchall_in(
        "SELECT session_id, operation, actor, started_at, keep_live "
        "FROM sessions_admin_deletions WHERE session_id IN ({marks})",
        ids,
    ):
        found[row[0]] = DeletionMark(row[0], row[1], row[2], float(row[3]), bool(row[4]))
    return found


def refuse_being_deleted(session_ids: Sequence[str]) -> None:
    """Raise ``SessionBeingDeleted`` if a delete is removing any of these sessions in parts.

    Called by every core write to an existing session, after it locked the row:
    the mark is set under the same row lock, so a write either commits before
    the mark (and the delete's parts take what it wrote) or sees it.
    """
    marks = marks_on(session_ids)
    if marks:
        mark = marks[next(sid for sid in session_ids if sid in marks)]
        raise SessionBeingDeleted(mark.session_id, mark.operation)


def lock_and_refuse(session_ids: Sequence[str]) -> None:
    """Lock these sessions' rows (PostgreSQL; SQLite's write transaction already excludes the
    delete) and refuse if a delete is removing any of them in parts."""
    ids = [sid for sid in dict.fromkeys(session_ids) if sid]
    if ids:
        db.fetchall(
            f"SELECT id FROM sessions WHERE id IN ({db.placeholders(ids)}) ORDER BY id"
            + db.for_update(),
            ids,
        )
        refuse_being_deleted(ids)


def all_marks() -> list[DeletionMark]:
    """Every session being deleted in parts (a handful at most: one per running delete)."""
    if not table_present():
        return []
    return [
        DeletionMark(row[0], row[1], row[2], float(row[3]), bool(row[4]))
        for row in db.fetchall(
            "SELECT session_id, operation, actor, started_at, keep_live "
            "FROM sessions_admin_deletions ORDER BY started_at, session_id"
        )
    ]


# --- a purge's parts: kept in the store until the session is gone -------------------------
# A purge (``deletion.NO_TRASH``) keeps no trash copy, yet a session it deletes in parts must
# come back whole as in any other delete (a hold landed, it went live, its job was cancelled).
# Each part's messages are copied, in the part's own transaction, into this table, which has
# the messages table's columns (SQLite: untyped, so every value is kept exactly as stored;
# PostgreSQL: the same types). The copies go in the transaction that deletes the session row
# (the purge is then complete) or that puts them back (``put_back_parts``). They stay in the
# store: nothing of a purge, or of an erasure, is ever written to the dashboard's database.
PARTS_TABLE = "sessions_admin_deletion_parts"


def _message_columns() -> list[tuple[str, str]]:
    """(column, type) of the messages table, in order; the type is empty on SQLite."""
    if db.vendor() == "postgresql":
        return [
            (name, kind)
            for name, kind in db.fetchall(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'messages'::regclass AND attnum > 0 AND NOT attisdropped "
                "ORDER BY attnum"
            )
        ]
    return [(row[1], "") for row in db.fetchall("PRAGMA table_info(messages)")]


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def parts_table_present() -> bool:
    return PARTS_TABLE in existing_tables(store_alias())


def ensure_parts_table() -> None:
    """The table a purge keeps its parts in, with every column the messages table has now
    (a runtime's migration may have added one since it was created)."""
    columns = _message_columns()
    if not parts_table_present():
        body = ", ".join(f"{_quoted(name)} {kind}".strip() for name, kind in columns)
        db.execute(f"CREATE TABLE {PARTS_TABLE} ({body})")
        db.execute(f"CREATE INDEX {PARTS_TABLE}_session ON {PARTS_TABLE} (session_id, id)")
        return
    present = existing_columns(store_alias(), PARTS_TABLE)
    for name, kind in columns:
        if name not in present:
            db.execute(f"ALTER TABLE {PARTS_TABLE} ADD COLUMN {_quoted(name)} {kind}".strip())


def _common_columns() -> str:
    kept = existing_columns(store_alias(), PARTS_TABLE)
    return ", ".join(_quoted(name) for name, _ in _message_columns() if name in kept)


def keep_part(session_id: str, message_ids: Sequence[int]) -> None:
    """In the part's transaction, before its delete: copy these messages of the session."""
    columns = _common_columns()
    db.execute(
        f"INSERT INTO {PARTS_TABLE} ({columns}) SELECT {columns} FROM messages "
        f"WHERE id IN ({db.placeholders(message_ids)}) AND session_id = %s",
        [*message_ids, session_id],
    )


def put_back_parts(session_id: str) -> int:
    """In the caller's transaction: the purge's parts of the session back into messages, and
    their copies dropped. How many messages came back."""
    if not parts_table_present():
        return 0
    columns = _common_columns()
    back = db.execute(
        f"INSERT INTO messages ({columns}) SELECT {columns} FROM {PARTS_TABLE} "
        "WHERE session_id = %s ORDER BY id",
        [session_id],
    )
    db.execute(f"DELETE FROM {PARTS_TABLE} WHERE session_id = %s", [session_id])
    return back


def drop_parts(session_ids: Sequence[str]) -> int:
    """In the transaction that deletes these sessions' rows: their parts' copies go too."""
    ids = list(session_ids)
    if not ids or not parts_table_present():
        return 0
    return db.execute(
        f"DELETE FROM {PARTS_TABLE} WHERE session_id IN ({db.placeholders(ids)})", ids
    )


def kept_part_ids(session_ids: Sequence[str]) -> list[int]:
    """The ids of the messages a purge's parts keep of these sessions (none outside a purge)."""
    ids = list(session_ids)
    if not ids or not parts_table_present():
        return []
    return [
        int(row[0])
        for row in db.fetchall(
            f"SELECT id FROM {PARTS_TABLE} WHERE session_id IN ({db.placeholders(ids)})", ids
        )
    ]


def kept_part_messages(session_id: str) -> int:
    """How many messages of the session a purge's parts keep (none outside a purge)."""
    if not parts_table_present():
        return 0
    return int(
        db.fetchone(f"SELECT COUNT(*) FROM {PARTS_TABLE} WHERE session_id = %s", [session_id])[0]
    )
