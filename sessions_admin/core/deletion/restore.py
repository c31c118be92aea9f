"""Restoring: a trash operation back into the store, all of it in one store transaction."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from sessions_admin.core import db, faults, idempotency, lineage
from sessions_admin.core.db import store_operation
from sessions_admin.core.deletion.batches import DatabaseNotWritten
from sessions_admin.core.deletion.plan import _chunks
from sessions_admin.core.deletion.trash import (
    TRASH_DATABASE,
    Trash,
    TrashContents,
    _advance_message_sequence,
    _insert_rows,
    _trash_or_default,
)
from sessions_admin.core.errors import InvalidInput, StoreError
from sessions_admin.core.lifecycle import end_switched, keep_one_live
from sessions_admin.core.rows import conversation_session, response_session
from sessions_admin.routers import responses_alias


@dataclass(frozen=True)
class WaitingLink:
    """A restored session whose parent is in another trash operation: back without its parent
    link, which that operation's restore puts back (``Trash.keep_waiting_link``)."""

    session_id: str
    parent_id: str
    entry_id: int  # the first entry of the operation holding the parent: restore it too

    def describe(self) -> str:
        return (
            f"session {self.session_id} waits for its parent {self.parent_id} "
            f"(restore trash entry #{self.entry_id} to link it again)"
        )


@dataclass(frozen=True)
class LostLink:
    """A restored session whose parent is neither in the store nor in the trash (purged, or
    erased): its link could not be put back."""

    session_id: str
    parent_id: str

    def describe(self) -> str:
        return f"session {self.session_id} lost its parent {self.parent_id} (no longer anywhere)"


@dataclass(frozen=True)
class RestoreResult:
    trash_entry_id: int  # the entry asked for
    restored_sessions: tuple[str, ...]
    restored_messages: int
    skipped_conversations: tuple[str, ...]
    # Every entry put back: the asked one and the rest of its operation's batches.
    trash_entry_ids: tuple[int, ...] = ()
    # Links this restore could not put back yet (their parent is in another trash operation)
    # or at all (their parent is gone): every link is one of restored, waiting or lost.
    waiting_links: tuple[WaitingLink, ...] = ()
    lost_links: tuple[LostLink, ...] = ()


class RestoreConflict(StoreError):
    pass


def _merged_rows(entries: Sequence[TrashContents]) -> dict:
    """One payload holding every entry's rows (the batches of one operation)."""
    merged: dict = {
        "sessions": [],
        "messages": [],
        "conversations": [],
        "responses": [],
        "kept_children": [],
        "dependents": {},
        "idempotency": [],
    }
    for entry in entries:
        for key in (
            "sessions",
            "messages",
            "conversations",
            "responses",
            "kept_children",
            "idempotency",
        ):
            merged[key] += entry.rows.get(key, [])
        for table, rows in entry.rows.get("dependents", {}).items():
            merged["dependents"].setdefault(table, []).extend(rows)
    merged["messages"].sort(key=lambda m: m["id"])
    return merged


RESTORE_LOCK = "trash:restore"


@store_operation
def settle_in_store(*, trash: Trash | None = None) -> None:
    """Let the trash settle what dead or refused writes left unmarked (``Trash.settle``),
    under the restore lock, in a store transaction of its own."""
    db.lock_names(RESTORE_LOCK)
    _trash_or_default(trash).settle()


@store_operation
def restore_trash_entry(*, entry_id: int, actor: str, trash: Trash | None = None) -> RestoreResult:
    """Put a trash entry's rows back: sessions, messages (same ids), lineage, slugs, responses.

    The entry comes back with the rest of its operation (every batch of the one
    operator action that made it) in this one store transaction: all of it, or,
    on a conflict, nothing.

    Every parent link of a restored session is put back, waits (its parent is in another
    trash operation, whose restore links it: ``waiting_links``) or is named lost (its parent
    is gone for good: ``lost_links``); none is dropped without a word.
    """
    # One restore at a time: one bringing a session back before its parent links it (the
    # parent is in the store) or leaves the link waiting in the parent's operation (it is in
    # the trash); a restore of that operation running meanwhile would see neither.
    db.lock_names(RESTORE_LOCK)
    trash = _trash_or_default(trash)
    # An earlier restore that died after its store commit, or whose marks the dashboard
    # refused, is marked now: its entries are not offered (or taken) a second time.
    trash.settle()
    asked, entries = _entries_to_restore(entry_id, trash)
    payload = _merged_rows(entries)
    sessions = payload["sessions"]
    ids = [s["id"] for s in sessions]
    # Parts of a session deleted in parts whose last step is not in this operation (it was
    # killed, or stopped, between parts): the session is still in the store, marked being
    # deleted, and its parts go back into it.
    part_sessions = sorted({m["session_id"] for m in payload["messages"]} - set(ids))
    _refuse_conflicts(payload, part_sessions, trash)
    # The key may have moved on while these sessions were in the trash: its live
    # session now stays live, and a restored one that was live ends (one live per key).
    keys = {s["session_key"] for s in sessions if s.get("session_key")}
    db.lock_names(*(db.key_lock_name(k) for k in keys))
    live_now = [lineage.live_session_for_key(k) for k in sorted(keys)]
    restored_ids = tuple(e.entry_id for e in entries)
    _begin_restore(restored_ids, actor, trash)
    try:
        waiting, lost = _insert_sessions(sessions, keys, live_now, trash)
        _insert_messages(payload, part_sessions)
        _restore_idempotency_keys(payload)
    except IntegrityError as error:
        # A row the checks above did not foresee (a runtime wrote it meanwhile without the
        # lock): refused, the transaction rolled back, never a bare error.
        raise RestoreConflict(
            f"Cannot restore: a row of it is in the store again ({error})."
        ) from error
    skipped = _restore_conversations(payload)
    _end_sessions_whose_slug_moved_on(payload, skipped)
    _link_kept_children(payload["kept_children"], trash)
    faults.checkpoint("restore.before_commit")
    _mark_restored_on_commit(restored_ids, actor, trash)
    return RestoreResult(
        asked.entry_id,
        tuple(ids),
        len(payload["messages"]),
        tuple(skipped),
        restored_ids,
        waiting_links=tuple(waiting),
        lost_links=tuple(lost),
    )


def _entries_to_restore(entry_id: int, trash: Trash) -> tuple[TrashContents, list[TrashContents]]:
    """The entry asked for, and every entry that comes back with it, oldest first."""
    asked = trash.contents(entry_id)
    if asked is None:
        raise InvalidInput(f"No trash entry {entry_id}.")
    if asked.restored:
        raise InvalidInput(f"Trash entry {entry_id} was already restored.")
    entries = [asked]
    for other_id in trash.operation_entries(entry_id):
        if other_id != entry_id:
            other = trash.contents(other_id)
            if other is not None and not other.restored:
                entries.append(other)
    # A session comes back whole. Parts of it another operation took (a delete killed between
    # its parts, then run again; two deletes of it at once) come back with its row; and a part
    # whose session's row is in another operation brings that operation back too (two deletes
    # can split two sessions crosswise, so neither could go back first). Until nothing grows.
    taken = {e.entry_id for e in entries}

    def take(entry_id: int) -> bool:
        if entry_id in taken:
            return False
        found = trash.contents(entry_id)
        taken.add(entry_id)
        if found is None or found.restored:
            return False
        entries.append(found)
        return True

    grew = True
    while grew:
        grew = False
        row_ids = {s["id"] for e in entries for s in e.rows.get("sessions", [])}
        for part_id in trash.part_entries(sorted(row_ids)) if row_ids else ():
            grew |= take(part_id)
        parts_of = {e.rows["part_of"] for e in entries if e.rows.get("part_of")} - row_ids
        in_store = lineage.existing_session_ids(sorted(parts_of)) if parts_of else set()
        for session_id in sorted(parts_of - set(in_store)):
            holder = trash.holder_of(session_id)
            if holder is not None:
                for other_id in (holder, *trash.operation_entries(holder)):
                    grew |= take(other_id)
    entries.sort(key=lambda e: e.entry_id)
    return asked, entries


def _refuse_conflicts(payload: dict, part_sessions: list[str], trash: Trash) -> None:
    """``RestoreConflict`` if a row cannot come back as it was: its session id, title or
    message id is in use again, or a part's session is neither in the store nor restored."""
    counted = Counter(m["id"] for m in payload["messages"])
    if len(counted) != len(payload["messages"]):
        twice = sorted(i for i, n in counted.items() if n > 1)[:5]
        raise RestoreConflict(
            f"Cannot restore: the trash holds message(s) {', '.join(map(str, twice))} twice, in "
            "two of the entries this restore takes. Nothing was restored."
        )
    sessions = payload["sessions"]
    ids = [s["id"] for s in sessions]
    found = lineage.existing_session_ids(ids)
    existing = [sid for sid in ids if sid in found]
    if existing:
        raise RestoreConflict(
            f"Cannot restore: session(s) {', '.join(existing[:5])} exist in the store again."
        )
    titles = [s["title"] for s in sessions if s.get("title")]
    for chunk in _chunks(titles):
        taken = db.fetchone(
            f"SELECT title, id FROM sessions WHERE title IN ({db.placeholders(chunk)}) LIMIT 1",
            list(chunk),
        )
        if taken:
            # Titles are unique (Hermes enforces it with a unique index too).
            raise RestoreConflict(
                f"Cannot restore: the title {taken[0]!r} is now used by session {taken[1]}. "
                "Rename that session first."
            )
    if part_sessions:
        still_here = lineage.existing_session_ids(part_sessions)
        missing = [sid for sid in part_sessions if sid not in still_here]
        if missing:
            holder = trash.holder_of(missing[0])
            first = (
                f"restore trash entry #{holder} first"
                if holder is not None
                else "no trash entry holds it any more"
            )
            raise RestoreConflict(
                f"Cannot restore: messages of session {missing[0]} are in this trash entry, but "
                "the session is neither in the store nor in the entry (another delete took its "
                f"row: {first})."
            )
    message_ids = [m["id"] for m in payload["messages"]]
    for chunk in _chunks(message_ids):
        clash = db.fetchone(
            f"SELECT id FROM messages WHERE id IN ({db.placeholders(chunk)}) LIMIT 1", list(chunk)
        )
        if clash:
            raise RestoreConflict(f"Cannot restore: message id {clash[0]} is in use again.")


def _begin_restore(restored_ids: tuple[int, ...], actor: str, trash: Trash) -> None:
    """The restore's intent, committed in the trash before the store is written."""
    try:
        trash.begin_restore(restored_ids, actor=actor)
    except Exception as error:
        if storage := db.storage_failure(error):
            raise DatabaseNotWritten(TRASH_DATABASE, storage) from error
        raise


def _insert_sessions(
    sessions: list[dict], keys: set[str], live_now: list, trash: Trash
) -> tuple[list[WaitingLink], list[LostLink]]:
    """The session rows, then their parent links: the links that wait, and those lost."""
    # Parents first: insert without links, then put the links back. A parent that is neither
    # here nor in the store (the store's foreign key refuses a link to it) is in another trash
    # operation, whose restore links the session again, or gone for good: either is said.
    parents = {s["id"]: s.get("parent_session_id") for s in sessions}
    _insert_rows("sessions", [{**s, "parent_session_id": None} for s in sessions])
    for key in sorted(keys):
        keep_one_live(key, prefer=live_now)
    waiting: list[WaitingLink] = []
    lost: list[LostLink] = []
    for sid, parent in parents.items():
        if not parent:
            continue
        if parent in parents or lineage.session_row(parent) is not None:
            db.execute("UPDATE sessions SET parent_session_id = %s WHERE id = %s", [parent, sid])
            continue
        held_in = trash.keep_waiting_link(child=sid, parent=parent)
        if held_in is None:
            lost.append(LostLink(sid, parent))
        else:
            waiting.append(WaitingLink(sid, parent, held_in))
    return waiting, lost


def _insert_messages(payload: dict, part_sessions: list[str]) -> None:
    """The messages (same ids) and the runtime's dependent rows; a part's session is no longer
    being deleted."""
    _insert_rows("messages", payload["messages"])
    if part_sessions:
        db.execute(
            "DELETE FROM sessions_admin_deletions WHERE session_id IN "
            f"({db.placeholders(part_sessions)})",
            part_sessions,
        )
    for table, rows in payload.get("dependents", {}).items():
        _insert_rows(table, rows)
    if payload["messages"]:
        _advance_message_sequence()


def _restore_idempotency_keys(payload: dict) -> None:
    """The API's idempotency keys of the restored sessions' appends (entries written before
    they were kept have none); a key in use again keeps its new request."""
    for row in payload.get("idempotency", []):
        if not db.fetchone(
            f"SELECT 1 FROM {idempotency.TABLE} WHERE scope = %s AND key = %s",
            [row["scope"], row["key"]],
        ):
            _insert_rows(idempotency.TABLE, [row])


def _restore_conversations(payload: dict) -> list[str]:
    """The slugs and responses, in the responses database; the slugs skipped (in use again)."""
    skipped: list[str] = []
    with transaction.atomic(using=responses_alias()):
        for row in payload["conversations"]:
            taken = db.fetchone(
                "SELECT 1 FROM conversations WHERE name = %s",
                [row["name"]],
                alias=responses_alias(),
            )
            if taken:
                skipped.append(row["name"])
            else:
                _insert_rows("conversations", [row], alias=responses_alias())
        for row in payload["responses"]:
            if not db.fetchone(
                "SELECT 1 FROM responses WHERE response_id = %s",
                [row["response_id"]],
                alias=responses_alias(),
            ):
                _insert_rows("responses", [row], alias=responses_alias())
    return skipped


def _end_sessions_whose_slug_moved_on(payload: dict, skipped: Sequence[str]) -> list[str]:
    """A restored live session whose conversation slug the runtime continued elsewhere while
    it was in the trash ends ``session_switch``, as one of a key that moved on does: one live
    session per conversation. The ended ids."""
    restored = {s["id"] for s in payload["sessions"]}
    ended = []
    for row in payload["conversations"]:
        if row["name"] not in skipped:
            continue
        # Its session then (the column, which Hermes's INSERT OR REPLACE nulls, else the
        # session its latest response names) and the session the slug records now.
        then = row.get("session_id") or response_session(row.get("response_id"))
        now = conversation_session(row["name"])
        if then in restored and now and now not in restored and end_switched(then):
            ended.append(then)
    return ended


def _link_kept_children(kept_children: list, trash: Trash) -> None:
    # Children the delete left in the store, and children an earlier restore brought back
    # before this operation (``keep_waiting_link``): their parent is back. A kept child another
    # delete took since comes back from that operation's trash without the link (the first
    # delete had cut it): the link waits in that operation, whichever is restored first.
    for child, parent in kept_children:
        if lineage.session_row(child) is None:
            trash.keep_waiting_link(child=child, parent=parent, holder=child)
        elif lineage.session_row(parent) is None:
            trash.keep_waiting_link(child=child, parent=parent)
        else:
            db.execute(
                "UPDATE sessions SET parent_session_id = %s WHERE id = %s "
                "AND parent_session_id IS NULL",
                [parent, child],
            )


def _mark_restored_on_commit(restored_ids: tuple[int, ...], actor: str, trash: Trash) -> None:
    """The entries are marked restored once the store commits."""

    def mark_restored() -> None:
        faults.checkpoint("restore.after_commit")
        trash.mark_restored(restored_ids, actor=actor)

    # Only once the rows are back: marked earlier (the dashboard's database commits on its
    # own), a store transaction that then failed or died would leave the entry "restored",
    # purgeable and not restorable again, while its rows are nowhere. A mark the dashboard
    # refuses (its disk is full) does not undo the restore: the intent ``_begin_restore``
    # recorded stays, and ``settle`` marks the entries from the store later.
    transaction.on_commit(mark_restored, using="store", robust=True)
