"""The trash protocol, and the row snapshots a delete keeps in it.

The trash is not the core's: a delete writes it through ``Trash``, which the caller passes,
else the process's default (``set_default_trash``; a dashboard process uses the ledger's,
``sessions_admin.ledger.trash``). ``snapshot_rows`` reads every row deleting a batch removes;
``_insert_rows`` puts such rows back.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from sessions_admin.core import db, idempotency
from sessions_admin.core.deletion.plan import conversation_names_of, response_ids_of
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.schema import existing_columns, existing_tables
from sessions_admin.routers import responses_alias, store_alias

TRASH_DATABASE = "trash"  # ``error.database`` of a failure writing the trash (not the store)


def new_operation_id() -> str:
    """A fresh id for one operator action's trash entries (all its batches share it)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class TrashContents:
    entry_id: int
    restored: bool
    rows: dict  # as ``snapshot_rows`` took them, with their store values


class Trash(Protocol):
    """Where a delete keeps the rows it removes, restorable (the ledger's ``LedgerTrash``).

    ``rows`` is the payload ``snapshot_rows`` builds (store rows by table, the
    parent links cleared, the runtime's dependent rows); a trash gives it back
    from ``contents`` exactly, every value of the same type.

    Each batch of a delete is one entry; the entries of one operator action share
    an ``operation`` id, and a restore puts the whole operation back at once
    (``operation_entries``): restoring one batch of a cascade alone would leave
    half a lineage.
    """

    def open_entry(
        self,
        *,
        session_ids: Sequence[str],
        rows: dict,
        actor: str,
        reason: str,
        job_id: int | None,
        operation: str,
    ) -> int:
        """Commit a pending entry of ``operation`` holding ``rows``, before the store delete; its id."""
        ...

    def operation_entries(self, entry_id: int) -> tuple[int, ...]:
        """The entries a restore of ``entry_id`` puts back, oldest first: the entry and every
        other entry of its operation whose rows are only in the trash (complete, not restored)."""
        ...

    def is_pending(self, entry_id: int) -> bool:
        """The entry exists and is still pending (no other batch dropped it)."""
        ...

    def discard(self, entry_id: int) -> None:
        """Drop the entry if it is still pending: its store delete did not happen."""
        ...

    def discard_unfinished(self, session_ids: Sequence[str], *, keep: int | None = None) -> None:
        """Drop pending entries naming any of these sessions, but ``keep``.

        Called under the store's lock on those sessions. Such an entry belongs to
        a batch whose process died (or whose transaction rolled back) before its
        store delete committed, or to a batch that copied its rows but has not
        locked them yet. Either way its rows are still in the store and this
        batch copies them too; a batch deletes only after finding its own entry
        still pending under the lock (``is_pending``), so one whose entry was
        dropped here copies again instead of deleting uncopied rows.
        """
        ...

    def mark_complete(self, entry_id: int) -> None:
        """The entry's store delete committed: its rows are now only here."""
        ...

    def contents(self, entry_id: int) -> TrashContents | None:
        """The entry's rows and whether it was restored (None: no such entry)."""
        ...

    def begin_restore(self, entry_ids: Sequence[int], *, actor: str) -> None:
        """A restore of these entries is about to write the store: recorded, committed on its
        own, before the store transaction (under the restore lock). A restore that then dies,
        or whose ``mark_restored`` is refused, is settled from it (``settle``)."""
        ...

    def mark_restored(self, entry_ids: Sequence[int], *, actor: str) -> None:
        """These entries' rows are back in the store (called once the store committed)."""
        ...

    def settle(self) -> None:
        """Under the restore lock (in the store transaction of ``settle_in_store`` or of a
        restore): mark what dead or refused writes left unmarked, reading the store to tell
        whether each committed. A restore intent whose rows are back is restored, one whose
        rows are not is cleared; a pending delete batch whose rows left the store is complete,
        one of a dead process whose rows are all still there is dropped."""
        ...

    def give_back(self, entry_id: int) -> None:
        """A part's rows are back in the store because the delete that took it stopped (called
        once the store committed): the trash no longer holds anything of that part, so it
        drops the entry (an operator restored nothing, and the trash must not show it)."""
        ...

    def keep_waiting_link(
        self, *, child: str, parent: str, holder: str | None = None
    ) -> int | None:
        """``child`` is being restored while ``parent`` is in neither the store nor its
        operation: if an entry not restored holds ``parent``'s row, record (child, parent)
        among that entry's kept children, so restoring its operation links ``child`` again
        (as it does a child the delete left in the store), and answer the operation's first
        entry. None: the trash holds no row of ``parent`` (purged), the link is lost.
        ``holder``: record it in the entry holding that session's row instead (a child whose
        parent is back, itself in another operation's trash).

        Called before the restore's store transaction commits, and committed on its own: a
        restore that then fails leaves a pair naming a child not in the store, which links
        nothing (the restore sets a kept child's parent only where the child has none)."""
        ...

    def holder_of(self, session_id: str) -> int | None:
        """The first entry of the operation (not restored) whose entries hold ``session_id``'s
        row, or None: where a restore that needs that row sends the operator first."""
        ...

    def part_entries(self, session_ids: Sequence[str]) -> tuple[int, ...]:
        """The entries holding a part of one of ``session_ids`` (some of its messages,
        ``rows["part_of"]``), whatever operation took it (a delete killed between parts, then
        run again, leaves parts in two), whose rows are only in the trash: complete, not
        restored (a part committed but not yet marked is settled first). Oldest first."""
        ...


class NoTrash:
    """A ``Trash`` that keeps nothing: the delete purges (a retention policy set to purge,
    an erasure). Nothing it deletes can be restored."""

    def open_entry(self, **_kw) -> int:
        return 0

    def operation_entries(self, entry_id: int) -> tuple[int, ...]:
        return ()

    def is_pending(self, entry_id: int) -> bool:
        return True  # nothing was copied, so nothing can have been dropped meanwhile

    def discard(self, entry_id: int) -> None:
        pass

    def discard_unfinished(self, session_ids: Sequence[str], *, keep: int | None = None) -> None:
        pass

    def mark_complete(self, entry_id: int) -> None:
        pass

    def contents(self, entry_id: int) -> TrashContents | None:
        return None

    def begin_restore(self, entry_ids: Sequence[int], *, actor: str) -> None:
        raise InvalidInput("A purge keeps nothing to restore.")

    def mark_restored(self, entry_ids: Sequence[int], *, actor: str) -> None:
        raise InvalidInput("A purge keeps nothing to restore.")

    def settle(self) -> None:
        pass

    def give_back(self, entry_id: int) -> None:
        pass

    def keep_waiting_link(
        self, *, child: str, parent: str, holder: str | None = None
    ) -> int | None:
        return None

    def holder_of(self, session_id: str) -> int | None:
        return None

    def part_entries(self, session_ids: Sequence[str]) -> tuple[int, ...]:
        return ()


NO_TRASH = NoTrash()


_default_trash: Trash | None = None


def set_default_trash(trash: Trash | None) -> None:
    """The trash a delete or restore uses when its caller passes none (this process's)."""
    global _default_trash
    _default_trash = trash


def _trash_or_default(trash: Trash | None) -> Trash:
    if trash is not None:
        return trash
    if _default_trash is None:
        raise ImproperlyConfigured(
            "No trash to keep deleted rows in: pass trash=..., or call "
            "deletion.set_default_trash (the dashboard's ledger app does, when it is installed)."
        )
    return _default_trash


# --- row snapshots: what a delete copies to the trash, compared again under the lock ------


def _exact(value: object) -> object:
    """``value`` for comparing two reads of the same rows: a float by its text, so a NaN
    (PostgreSQL's double precision holds one) equals itself and -0.0 is not 0.0."""
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, dict):
        return {key: _exact(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return [_exact(v) for v in value]
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def rows_key(payload: object) -> bytes:
    """Bytes that are equal for two reads of the same rows only if they hold exactly the same
    values: pickled, so a value keeps its type and a float its bits (-0.0 is not 0.0, a NaN
    equals itself), as ``_exact`` compares them, in one C call where ``_exact`` made a
    Python call per value (a third of a bulk delete's time in its profile)."""
    try:
        return pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    except TypeError:  # a memoryview (a driver's BLOB) cannot be pickled
        return pickle.dumps(_exact(payload), protocol=pickle.HIGHEST_PROTOCOL)


def same_rows(first: object, second_key: bytes, second: object) -> bool:
    """Whether ``first`` holds exactly the rows of ``second`` (whose ``rows_key`` is given).

    Equal keys mean equal rows. Different keys may still be equal rows (pickle shares a
    value that occurs twice as one object, which two reads need not do alike), so only
    then are they compared value by value.
    """
    return rows_key(first) == second_key or _exact(first) == _exact(second)


def _all_columns(table: str, where: str, params: list, *, alias: str | None = None) -> list[dict]:
    return db.fetchdicts(f"SELECT * FROM {table} WHERE {where}", params, alias=alias)


# _dependent_tables' answer per store file, while its schema version stays the same.
_dependents_seen: dict[tuple[str, int], list[tuple[str, str]]] = {}


def _dependent_tables() -> list[tuple[str, str]]:
    """(table, column) whose rows the store deletes with their session (ON DELETE CASCADE).

    A runtime's own per-session tables (Hermes's ``session_model_usage``) go
    with the session row; the trash keeps them so a restore brings them back.
    SQLite only (Hermes's store); our PostgreSQL schema has no such table.

    Read from the schema once per schema version (SQLite bumps it on every CREATE, ALTER
    and DROP, the runtime's included): the lookup is a statement per table, and every
    batch of a bulk delete asks twice.
    """
    if db.vendor() != "sqlite":
        return []
    key = (str(connections[store_alias()].settings_dict["NAME"]), _schema_version())
    found = _dependents_seen.get(key)
    if found is None:  # read into a local: another thread may clear the dict meanwhile
        found = _read_dependent_tables()
        _dependents_seen.clear()
        _dependents_seen[key] = found
    return found


def _schema_version() -> int:
    return int(db.fetchone("PRAGMA schema_version")[0])


def _read_dependent_tables() -> list[tuple[str, str]]:
    found = []
    for (table,) in db.fetchall(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "AND name NOT IN ('sessions', 'messages') ORDER BY name"
    ):
        quoted = '"' + table.replace('"', '""') + '"'
        for key in db.fetchall(f"PRAGMA foreign_key_list({quoted})"):
            # (id, seq, table, from, to, on_update, on_delete, match)
            if key[2] == "sessions" and key[4] in (None, "id") and str(key[6]).upper() == "CASCADE":
                found.append((quoted, key[3]))
    return found


def snapshot_rows(batch: list[str], *, lock: bool) -> tuple[list[str], dict]:
    """The batch's sessions still present (in the given order) and every row deleting them removes.

    The rows are what the trash keeps (``Trash.open_entry``) and a restore puts back.
    """
    marks = db.placeholders(batch)
    present = {
        r[0]
        for r in db.fetchall(
            f"SELECT id FROM sessions WHERE id IN ({marks})" + (db.for_update() if lock else ""),
            batch,
        )
    }
    batch = [sid for sid in batch if sid in present]
    if not batch:
        return [], {}
    marks = db.placeholders(batch)
    response_ids = response_ids_of(batch)
    names = conversation_names_of(batch, response_ids=response_ids)
    return batch, {
        "sessions": _all_columns("sessions", f"id IN ({marks}) ORDER BY id", batch),
        "messages": _all_columns("messages", f"session_id IN ({marks}) ORDER BY id", batch),
        "conversations": (
            _all_columns(
                "conversations",
                f"name IN ({db.placeholders(names)}) ORDER BY name",
                names,
                alias=responses_alias(),
            )
            if names
            else []
        ),
        "responses": (
            _all_columns(
                "responses",
                f"response_id IN ({db.placeholders(response_ids)}) ORDER BY response_id",
                response_ids,
                alias=responses_alias(),
            )
            if response_ids
            else []
        ),
        "kept_children": [
            [r[0], r[1]]
            for r in db.fetchall(
                f"SELECT id, parent_session_id FROM sessions WHERE parent_session_id IN ({marks}) "
                f"AND id NOT IN ({marks}) ORDER BY id",
                [*batch, *batch],
            )
        ],
        "dependents": {
            table: rows
            for table, column in _dependent_tables()
            if (rows := _all_columns(table, f"{column} IN ({marks})", batch))
        },
        # The API's idempotency keys of appends to these sessions: a restore brings them
        # back, so a retry after it replays the first answer instead of storing it twice.
        "idempotency": (
            _all_columns(idempotency.TABLE, f"session_id IN ({marks}) ORDER BY scope, key", batch)
            if idempotency.TABLE in existing_tables(store_alias())
            else []
        ),
    }


def _insert_rows(table: str, rows: list[dict], *, alias: str | None = None) -> None:
    if not rows:
        return
    columns = [c for c in rows[0] if c in existing_columns(alias or "store", table)]
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({db.placeholders(columns)})"
    with db.cursor(alias) as c:
        c.executemany(sql, [[row.get(col) for col in columns] for row in rows])


def _advance_message_sequence() -> None:
    if db.vendor() == "postgresql":
        # Only ever forward: a concurrent append may hold a higher id not yet committed
        # (so MAX(id) cannot see it); moving back would hand that id out again.
        db.execute(
            "SELECT setval(pg_get_serial_sequence('messages', 'id'), "
            "GREATEST((SELECT MAX(id) FROM messages), "
            "nextval(pg_get_serial_sequence('messages', 'id'))))"
        )
