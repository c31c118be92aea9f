"""The trash: the rows a delete removed from the store, kept as JSON in the dashboard's database.

``LedgerTrash`` is the core's ``deletion.Trash`` (its default since ``LedgerConfig.ready``): a
batch's rows are committed here as a pending entry before the store delete, completed after. An
action's entries share an ``operation``; restore and purge take whole operations, and a delete in
parts that stops gives its parts back and drops their entries (``give_back``): the trash holds
only what the store lost, never half an action. Sessions restored before their parent (one delete
split over operations) are relinked from ``keep_waiting_link``; ``parents_elsewhere`` names the
operation to restore first. Purge keeps held operations (``held_trash``) and writes what it drops on
its audit entry with its commit (``PURGING``); holds see trashed lineage.

Over 800 lines on purpose: the trash's writer (the core's Trash protocol), its settling of what
dead writes left, its purge and the holds' view of trashed lineage all read the same entries and
their states.
"""

from __future__ import annotations

import base64
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import Count, Max, Min, Q, Sum
from django.utils import timezone

from sessions_admin.core import being_deleted, db, faults, holds
from sessions_admin.core.deletion import TrashContents, settle_in_store
from sessions_admin.core.errors import InvalidInput, StoreBusy, StoreError
from sessions_admin.core.lineage import existing_session_ids
from sessions_admin.core.merge import undoable_merges_of
from sessions_admin.core.processes import process_dead, this_process
from sessions_admin.core.rows import parse_model_config
from sessions_admin.ledger.context import current_audit_entry
from sessions_admin.ledger.models import (
    AuditAction,
    AuditEntry,
    DeleteJob,
    TrashEntry,
    TrashSession,
)

# A store row holds SQLite values JSON cannot carry or jsonb would change: BLOBs (schema 30's
# ``display_identity`` is a sha256 digest), integers beyond 2**53 (exact in Python's JSON, not
# in every JSON reader), floats whose text jsonb rewrites (1e+16 comes back as the integer
# 10000000000000000, -0.0 as 0.0; inf and nan are not JSON at all) and text holding NUL (jsonb
# refuses it). Those values are stored as a one-key object naming their type; every other
# value stays plain JSON, so a store value is never an object and old entries (plain JSON
# only) decode unchanged.
_TAG_BYTES = "$bytes"  # base64 of the bytes
_TAG_INT = "$int"  # decimal text
_TAG_FLOAT = "$float"  # repr(), which float() reads back to the same double
_TAG_TEXT = "$text"  # base64 of the UTF-8 text
_JSON_SAFE_INT = 2**53


def encode_trash_value(value: object) -> object:
    """A store value as JSON that gives back exactly this value (see above)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {_TAG_BYTES: base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, int):
        return value if -_JSON_SAFE_INT <= value <= _JSON_SAFE_INT else {_TAG_INT: str(value)}
    if isinstance(value, float):
        text = repr(value)
        plain = math.isfinite(value) and "e" not in text and text != "-0.0"
        return value if plain else {_TAG_FLOAT: text}
    if isinstance(value, str):
        if "\x00" in value:
            return {_TAG_TEXT: base64.b64encode(value.encode("utf-8", "surrogatepass")).decode()}
        return value
    return value


def decode_trash_value(value: object) -> object:
    """The store value ``encode_trash_value`` wrote (plain JSON values pass unchanged)."""
    if not isinstance(value, dict) or len(value) != 1:
        return value
    ((tag, text),) = value.items()
    if tag == _TAG_BYTES:
        return base64.b64decode(text)
    if tag == _TAG_INT:
        return int(text)
    if tag == _TAG_FLOAT:
        return float(text)
    if tag == _TAG_TEXT:
        return base64.b64decode(text).decode("utf-8", "surrogatepass")
    return value


def _encode_rows(rows: list[dict]) -> list[dict]:
    return [_encode_row(row) for row in rows]


def _encode_row(row: dict) -> dict:
    # Most values are None, text or a small number, which JSON carries as they are: only the
    # others go through encode_trash_value (a call per value was a tenth of a bulk delete).
    if all(
        v is None
        or (type(v) is str and "\x00" not in v)
        or (type(v) is int and -_JSON_SAFE_INT <= v <= _JSON_SAFE_INT)
        # repr() writes these without an exponent (NaN and the infinities fail the test)
        or (type(v) is float and 1e-4 <= abs(v) < 1e16)
        for v in row.values()
    ):
        return row
    return {column: encode_trash_value(v) for column, v in row.items()}


def decode_trash_rows(rows: list[dict]) -> list[dict]:
    """A trash payload's rows with their store values (old entries' plain JSON included)."""
    return [{column: decode_trash_value(v) for column, v in row.items()} for row in rows]


# The lists of store rows in a payload (the core's ``deletion.snapshot_rows`` builds it);
# its "kept_children" are pairs of ids, stored as they are.
_ROW_LISTS = ("sessions", "messages", "conversations", "responses", "idempotency")


def encode_payload(payload: dict) -> dict:
    """The rows as the trash stores them: every row value through ``encode_trash_value``."""
    return _each_row_list(payload, _encode_rows)


def decode_payload(payload: dict) -> dict:
    """The rows ``encode_payload`` stored, with their store values."""
    return _each_row_list(payload, decode_trash_rows)


def _each_row_list(payload: dict, convert: Callable[[list], list]) -> dict:
    converted = dict(payload)
    for key in _ROW_LISTS:
        converted[key] = convert(payload.get(key, []))
    converted["dependents"] = {
        table: convert(rows) for table, rows in payload.get("dependents", {}).items()
    }
    return converted


class LedgerTrash:
    """The core's ``deletion.Trash`` in the dashboard's database (TrashEntry, TrashSession)."""

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
        with transaction.atomic(using="default"):
            entry = TrashEntry.objects.create(
                operation=operation,
                actor_name=actor,
                reason=reason,
                job_id=job_id,
                session_ids=list(session_ids),
                session_count=len(rows["sessions"]),
                message_count=len(rows["messages"]),
                payload=encode_payload(rows),
                owner=this_process(),
            )
            TrashSession.objects.bulk_create(
                TrashSession(
                    entry=entry,
                    session_id=s["id"],
                    title=s.get("title") or "",
                    source=s.get("source") or "",
                )
                for s in rows["sessions"]
            )
            if rows.get("part_of"):
                # Some messages of a session deleted in parts: found by the session's id (the
                # trash search, a hold on it) though its row is not in this entry.
                TrashSession.objects.create(entry=entry, session_id=rows["part_of"])
        return entry.pk

    def is_pending(self, entry_id: int) -> bool:
        return TrashEntry.objects.filter(pk=entry_id, state=TrashEntry.PENDING).exists()

    def discard(self, entry_id: int) -> None:
        TrashEntry.objects.filter(pk=entry_id, state=TrashEntry.PENDING).delete()

    def discard_unfinished(self, session_ids: Sequence[str], *, keep: int | None = None) -> None:
        unfinished = set(
            TrashSession.objects.filter(
                # Not a part (session_count 0): its session is in the store after it committed
                # too, so that says nothing; _settle_pending_parts looks at its messages.
                entry__state=TrashEntry.PENDING,
                entry__session_count__gt=0,
                session_id__in=list(session_ids),
            ).values_list("entry_id", flat=True)
        ) - {keep}
        if unfinished:
            TrashEntry.objects.filter(pk__in=unfinished, state=TrashEntry.PENDING).delete()
        _settle_pending_parts(session_ids=set(session_ids), keep=keep)

    def operation_entries(self, entry_id: int) -> tuple[int, ...]:
        operation = (
            TrashEntry.objects.filter(pk=entry_id).values_list("operation", flat=True).first()
        )
        if operation is None:
            return ()
        # A batch that committed in the store but died before marking its entry complete
        # holds rows that are only here: settle it first, so the restore takes it too.
        stale_pending_trash(operation=operation)
        others = TrashEntry.objects.filter(operation=operation, state=TrashEntry.COMPLETE)
        return tuple(sorted({entry_id, *others.values_list("pk", flat=True)}))

    def mark_complete(self, entry_id: int) -> None:
        TrashEntry.objects.filter(pk=entry_id).update(state=TrashEntry.COMPLETE)

    def contents(self, entry_id: int) -> TrashContents | None:
        entry = TrashEntry.objects.filter(pk=entry_id).first()
        if entry is None:
            return None
        return TrashContents(
            entry_id=entry.pk,
            restored=entry.state == TrashEntry.RESTORED,
            rows=decode_payload(entry.payload),
        )

    def begin_restore(self, entry_ids: Sequence[int], *, actor: str) -> None:
        TrashEntry.objects.filter(pk__in=list(entry_ids)).update(
            restoring_since=timezone.now(),
            restoring_by=actor,
            owner=this_process(),
            restore_audit=current_audit_entry(),
        )

    def mark_restored(self, entry_ids: Sequence[int], *, actor: str) -> None:
        with transaction.atomic(using="default"):
            TrashEntry.objects.filter(pk__in=list(entry_ids)).update(
                state=TrashEntry.RESTORED,
                restored_at=timezone.now(),
                restored_by=actor,
                restoring_since=None,
            )

    def settle(self) -> None:
        _settle_restores()
        _settle_pending()

    def give_back(self, entry_id: int) -> None:
        # Only a part (session_count 0): an entry holding a session row is never given back.
        # Its TrashSession row goes with it, so the trash search no longer finds the session.
        TrashEntry.objects.filter(pk=entry_id, session_count=0).delete()

    def keep_waiting_link(
        self, *, child: str, parent: str, holder: str | None = None
    ) -> int | None:
        held_row = holder or parent
        with transaction.atomic(using="default"):
            entry = (
                TrashEntry.objects.select_for_update()
                .filter(session_count__gt=0, sessions__session_id=held_row)
                .exclude(state=TrashEntry.RESTORED)
                .order_by("-pk")
                .first()
            )
            if entry is None:
                return None
            kept = entry.payload.get("kept_children") or []
            if [child, parent] not in kept:
                entry.payload = {**entry.payload, "kept_children": [*kept, [child, parent]]}
                entry.save(update_fields=["payload"])
            first = (
                TrashEntry.objects.filter(operation=entry.operation)
                .order_by("pk")
                .values_list("pk", flat=True)
                .first()
            )
        return first

    def holder_of(self, session_id: str) -> int | None:
        holder = (
            TrashEntry.objects.filter(session_count__gt=0, sessions__session_id=session_id)
            .exclude(state=TrashEntry.RESTORED)
            .order_by("-pk")
            .values_list("operation", flat=True)
            .first()
        )
        if holder is None:
            return None
        return (
            TrashEntry.objects.filter(operation=holder)
            .exclude(state=TrashEntry.RESTORED)
            .order_by("pk")
            .values_list("pk", flat=True)
            .first()
        )

    def part_entries(self, session_ids: Sequence[str]) -> tuple[int, ...]:
        parts = TrashEntry.objects.filter(
            session_count=0, sessions__session_id__in=list(session_ids)
        ).distinct()
        _settle_pending_parts(session_ids=set(session_ids), keep=None, among=parts)
        return tuple(
            parts.filter(state=TrashEntry.COMPLETE).order_by("pk").values_list("pk", flat=True)
        )


LEDGER_TRASH = LedgerTrash()


def job_operation(job_id: int) -> str:
    """The trash operation of a bulk delete job: every batch it deletes, restored together."""
    return f"job-{job_id}"


def purgeable_operations(
    *, older_than_days: float | None = None, held: dict | None = None
) -> list[str]:
    """The operations a purge drops: all, or those whose newest entry is older than the days.

    An operation with a pending entry is never purged: that batch may still be
    committing, and its trash copy is then the only copy. An operation goes whole
    (its last batch decides its age), never leaving part of an action restorable.
    An operation holding a session a legal hold covers is kept (``held_trash``; ``held``:
    its answer, already read). So is one still being written (``still_deleting``): purged
    midway, its later batches would come back as an operation of their own, half an action.
    """
    return _purgeable(older_than_days, held_trash() if held is None else held)


def still_deleting() -> set[str]:
    """Operations whose delete is still adding entries: a bulk delete job not finished (pending
    or running), a cascade whose audit entry is still pending (running, or dead and not yet
    completed by ``actions.complete_stale_deletes``)."""
    running = set(
        DeleteJob.objects.filter(state__in=[DeleteJob.PENDING, DeleteJob.RUNNING]).values_list(
            "pk", flat=True
        )
    )
    operations = {job_operation(job_id) for job_id in running}
    operations.update(operation for _entry, operation in pending_cascades_any())
    return operations


def _purgeable_rows(held: dict) -> list[dict]:
    """Each operation a purge of everything would drop: its newest entry's time and the
    sessions and messages of its entries not restored. One grouped query over the trash."""
    not_restored = ~Q(state=TrashEntry.RESTORED)
    operations = (
        TrashEntry.objects.values("operation")
        .annotate(
            newest=Max("created_at"),
            pending=Count("pk", filter=Q(state=TrashEntry.PENDING)),
            sessions=Sum("session_count", filter=not_restored),
            messages=Sum("message_count", filter=not_restored),
        )
        .filter(pending=0)
        .order_by("operation")
    )
    writing = still_deleting()
    return [
        row
        for row in operations
        if row["operation"] not in held and row["operation"] not in writing
    ]


def _older_than(older_than_days: float | None):
    if older_than_days is not None and older_than_days < 0:
        raise InvalidInput("older_than_days must be zero or more.")
    if older_than_days is None:
        return None
    return timezone.now() - timezone.timedelta(days=older_than_days)


def _purgeable(older_than_days: float | None, held: dict) -> list[str]:
    cutoff = _older_than(older_than_days)
    return [
        row["operation"]
        for row in _purgeable_rows(held)
        if cutoff is None or row["newest"] < cutoff
    ]


@dataclass(frozen=True)
class PurgeSize:
    """What one purge drops: whole operations, their sessions and messages (not restored)."""

    operations: int
    sessions: int
    messages: int


def purge_sizes(*, older_than_days: float, held: dict) -> tuple[PurgeSize, PurgeSize]:
    """The sizes of a purge of everything and of one of the operations older than the days,
    from one read of the trash (``purgeable_operations``' rule)."""
    cutoff = _older_than(older_than_days)
    rows = _purgeable_rows(held)
    expired = [row for row in rows if row["newest"] < cutoff]

    def size(chosen: list[dict]) -> PurgeSize:
        return PurgeSize(
            len(chosen),
            sum(row["sessions"] or 0 for row in chosen),
            sum(row["messages"] or 0 for row in chosen),
        )

    return size(rows), size(expired)


# --- legal holds and the trash --------------------------------------------------------------
# The trash keeps the lineage links of the sessions it holds (their parent, the session a reset
# started from, and the parent a kept child lost): ``trashed_lineage`` gives them to the core's
# holds (``holds.set_lineage_elsewhere``, set by ``LedgerConfig.ready``), so a hold covers a
# conversation whether its segments are in the store or here. An entry's rows never change, so
# each entry's links are read once per process. Its kept children grow only when a restore
# leaves a child waiting for a parent the entry holds (``keep_waiting_link``, written before
# that restore's entries are marked restored): once a process sees a restore it had not seen,
# it reads every entry's links again, so the waiting child stays covered with its parent.

_links_lock = threading.Lock()
# Per entry (pk, created_at): its rows' links, its kept children's lost links, its users, its
# rows' parent_session_id links (a session a reset started from is no parent a restore links).
_links_seen: dict[tuple[int, str], tuple[tuple, tuple, tuple, tuple]] = {}
# The last answer and the entries it was built from: a bulk job adds an entry per batch, and
# each batch asks again under the store's lock, so an answer grows instead of being rebuilt.
_assembled: list = [frozenset(), holds.NOWHERE]
# (how many, the newest) restored entries when ``_links_seen`` was read.
_restores_read: list = [None]


def _entry_links(sessions: object, kept: object) -> tuple[tuple, tuple, tuple, tuple]:
    """(rows' (child, parent) links, kept children's (child, lost parent) links,
    (session, user) pairs, rows' (child, parent_session_id) links) of one entry's payload."""
    rows: list[tuple[str, str]] = []
    parents: list[tuple[str, str]] = []
    lost: list[tuple[str, str]] = []
    users: list[tuple[str, str | None]] = []
    for row in sessions if isinstance(sessions, list) else []:
        if not isinstance(row, dict):
            continue
        row = decode_trash_rows([row])[0]
        session_id = row.get("id")
        if not isinstance(session_id, str):
            continue
        user_id = row.get("user_id")
        users.append((session_id, user_id if isinstance(user_id, str) else None))
        linked = row.get("parent_session_id")
        if isinstance(linked, str) and linked:
            parents.append((session_id, linked))
        parent = linked or parse_model_config(row.get("model_config")).get("_reset_from")
        if isinstance(parent, str) and parent:
            rows.append((session_id, parent))
    for pair in kept if isinstance(kept, list) else []:
        if (
            isinstance(pair, list | tuple)
            and len(pair) == 2
            and all(isinstance(p, str) for p in pair)
        ):
            lost.append((pair[0], pair[1]))
    return tuple(rows), tuple(lost), tuple(users), tuple(parents)


def _add_links(up: dict, users: dict, entries: list[tuple[tuple, tuple, tuple, tuple]]) -> None:
    # A session's own row's link first; a kept child's lost parent where it has none.
    for rows, _lost, owners, _parents in entries:
        users.update(owners)
        up.update(rows)
    for _rows, lost, _owners, _parents in entries:
        for child, parent in lost:
            up.setdefault(child, parent)


def trashed_lineage() -> holds.Elsewhere:
    """The lineage links and users of every session the trash holds (not restored)."""
    current = frozenset(
        (pk, str(created))
        for pk, created in TrashEntry.objects.exclude(state=TrashEntry.RESTORED)
        .filter(session_count__gt=0)
        .values_list("pk", "created_at")
    )
    restores = TrashEntry.objects.filter(state=TrashEntry.RESTORED).aggregate(
        count=Count("pk"), newest=Max("restored_at")
    )
    restores_now = (restores["count"], str(restores["newest"]))
    with _links_lock:
        if _restores_read[0] != restores_now:
            # A restore may have left children waiting in entries read before it.
            _links_seen.clear()
            _assembled[:] = [frozenset(), holds.NOWHERE]
            _restores_read[0] = restores_now
        built_from, answer = _assembled
        if current == built_from:
            return answer
        missing = [key for key in current if key not in _links_seen]
    for start in range(0, len(missing), 200):
        chunk = dict(missing[start : start + 200])
        read = TrashEntry.objects.filter(pk__in=list(chunk)).values_list(
            "pk", "created_at", "payload__sessions", "payload__kept_children"
        )
        found = {
            (pk, str(created)): _entry_links(sessions, kept) for pk, created, sessions, kept in read
        }
        with _links_lock:
            _links_seen.update(found)
    with _links_lock:
        for key in [key for key in _links_seen if key not in current]:
            del _links_seen[key]
        built_from, answer = _assembled
        if built_from <= current:
            # Only added entries: the last answer's links (copied: a caller may still read
            # them) plus the new ones.
            up, users = dict(answer.up), dict(answer.users)
            added = sorted(current - built_from)
        else:
            up, users = {}, {}
            added = sorted(current)
        _add_links(up, users, [_links_seen[key] for key in added if key in _links_seen])
        answer = holds.Elsewhere(up=up, users=users)
        _assembled[:] = [current, answer]
    return answer


@dataclass(frozen=True)
class HeldTrash:
    """A trash operation a purge keeps: one of its sessions and the hold covering it."""

    operation: str
    entry_id: int  # the operation's first entry, as the trash page lists it
    session_id: str
    hold: holds.Hold

    def describe(self) -> str:
        return f"trash entry #{self.entry_id} (session {self.session_id}), hold #{self.hold.id}"


def held_trash() -> dict[str, HeldTrash]:
    """Trash operations holding a session a legal hold covers, each with that session and hold.

    A session in the trash is covered as in the store: by its lineage (walked through the
    trash and the store alike) or its user. Without a standing hold this is one read of the
    holds table.
    """
    if not holds.active_holds():
        return {}
    held: dict[str, HeldTrash] = {}
    ids_of: dict[str, list[str]] = {}
    first_entry: dict[str, int] = {}
    for pk, operation, session_ids in (
        TrashEntry.objects.exclude(state=TrashEntry.RESTORED)
        .order_by("pk")
        .values_list("pk", "operation", "session_ids")
    ):
        first_entry.setdefault(operation, pk)
        ids_of.setdefault(operation, []).extend(s for s in session_ids or [] if isinstance(s, str))
    # A session a delete left half done (killed between parts) is still in the store: its
    # parts' operation is kept while a hold covers the session.
    marks = being_deleted.all_marks()
    for mark in marks:
        ids_of.setdefault(mark.operation, []).append(mark.session_id)
    covering = holds.holds_on([sid for ids in ids_of.values() for sid in ids])
    for operation, ids in ids_of.items():
        for session_id in ids:
            hold = covering.get(session_id)
            if hold is not None:
                entry = first_entry.get(operation)
                if entry is None:
                    continue  # a mark whose parts are not (or no longer) in the trash
                held[operation] = HeldTrash(operation, entry, session_id, hold)
                break
    return held


def merges_waiting_on(operations: Sequence[str]) -> dict[str, tuple[tuple[int, str, str], ...]]:
    """For each of these trash operations, the merges that can be undone again only once it is
    restored: (merge id, "target" or "absorbed", session) for each of its sessions (not
    restored) that a merge not undone needs (``merge.undoable_merges_of``). A cascade
    delete that lost a merge's undo, confirmed by the operator, links to the merge this way.
    """
    in_trash: dict[str, set[str]] = {}
    for operation, session_id in (
        TrashSession.objects.filter(
            entry__operation__in=list(operations), entry__session_count__gt=0
        )
        .exclude(entry__state=TrashEntry.RESTORED)
        .values_list("entry__operation", "session_id")
    ):
        in_trash.setdefault(session_id, set()).add(operation)
    if not in_trash:
        return {}
    waiting: dict[str, list[tuple[int, str, str]]] = {}
    for session_id, merge in undoable_merges_of(in_trash).items():
        for operation in in_trash[session_id]:
            waiting.setdefault(operation, []).append((merge.merge_id, merge.role, session_id))
    return {operation: tuple(sorted(found)) for operation, found in waiting.items()}


def held_trash_operations() -> dict[str, str]:
    """Trash operations holding a session a legal hold covers, each with the hold in words
    (``held_trash``). A purge keeps these operations."""
    return {operation: found.hold.describe() for operation, found in held_trash().items()}


@dataclass(frozen=True)
class PurgeReport:
    purged: int  # operations dropped (what the trash page lists as entries)
    kept: tuple[HeldTrash, ...]  # operations it would have dropped, kept under a legal hold
    sessions: int = 0  # what the dropped operations held (their entries not restored)
    messages: int = 0
    # Those sessions' ids: the purge's audit entry links them, so a session's history in the
    # audit log ends with the purge that dropped it.
    session_ids: tuple[str, ...] = ()

    def kept_text(self, verb: str = "Kept") -> str:
        """ "Kept 1 trash entry under legal hold: trash entry #4 (session s-1), hold #3"
        (a dry run's verb: "Would keep")."""
        if not self.kept:
            return ""
        count = len(self.kept)
        named = "; ".join(found.describe() for found in self.kept[:20])
        more = f"; and {count - 20} more" if count > 20 else ""
        which = "1 trash entry" if count == 1 else f"{count} trash entries"
        return f"{verb} {which} under legal hold: {named}{more}."


class _HoldsChanged(Exception):
    """A hold was placed or released while a purge chose what to drop: it chooses again."""


PURGE_ATTEMPTS = 5


# A cascade's audit entry left pending (its process died, the dashboard refused its outcome)
# is completed later from what its trash operation holds (``actions.complete_stale_deletes``).
# What takes that trash away first (a purge, an erasure) notes on the entry what it held, so
# the entry is not completed as "nothing was deleted".
PURGED_TRASH = "trash_purged"
ERASED_TRASH = "trash_erased_by"
# A purge's own audit entry: what it drops, written on it (``before``) in the transaction that
# drops it, so a purge killed after its commit is completed from it
# (``actions.complete_stale_purges``): recorded means committed, absent means nothing went.
PURGING = "purging"


def pending_cascades_any() -> list[tuple[AuditEntry, str]]:
    """Cascade deletes whose audit entry is still pending, with their trash operation."""
    pending = AuditEntry.objects.filter(
        action=AuditAction.CASCADE_DELETE, outcome=AuditEntry.PENDING
    )
    return [
        (entry, operation)
        for entry in pending.order_by("pk")
        if (operation := (entry.before or {}).get("trash_operation"))
    ]


def pending_cascades(operations: Sequence[str]) -> list[tuple[AuditEntry, str]]:
    """Cascade deletes whose audit entry is still pending and whose trash operation is one of
    ``operations``."""
    wanted = set(operations)
    return [(entry, op) for entry, op in pending_cascades_any() if op in wanted] if wanted else []


def note_pending_cascades(operations: Sequence[str], *, key: str, cause: dict) -> int:
    """On each pending cascade entry whose trash operation is one of ``operations``, about to
    be taken away: what that trash held (counts and entry numbers only, nothing naming a
    person) and whether every session asked for went, under ``key`` with ``cause``. A note an
    earlier taker left stays (it saw the fuller trash). Returns how many entries were noted."""
    noted = 0
    for entry, operation in pending_cascades(operations):
        if any(k in (entry.after or {}) for k in (PURGED_TRASH, ERASED_TRASH)):
            continue
        entries = list(
            TrashEntry.objects.filter(operation=operation)
            .exclude(state=TrashEntry.PENDING)
            .order_by("pk")
        )
        trashed = set(
            TrashSession.objects.filter(entry__in=entries).values_list("session_id", flat=True)
        )
        after = {
            "deleted_sessions": sum(e.session_count for e in entries),
            "deleted_messages": sum(e.message_count for e in entries),
            "trash_entries": [e.pk for e in entries],
            "trash_operation": operation,
            key: {
                **cause,
                "every_session_deleted": bool(entry.session_ids)
                and set(entry.session_ids) <= trashed,
            },
        }
        noted += AuditEntry.objects.filter(pk=entry.pk, outcome=AuditEntry.PENDING).update(
            after=after
        )
    return noted


def purge_trash_report(*, older_than_days: float | None = None) -> PurgeReport:
    """Drop whole trash operations (``purgeable_operations``); say which a hold kept.

    In one transaction of the dashboard's database, which commits only if the standing
    holds are still those the choice was made with (a hold placed meanwhile makes it
    choose again), so a hold placed before the purge's end is never purged past.
    """
    for _ in range(PURGE_ATTEMPTS):
        try:
            with transaction.atomic(using="default"):
                standing = [hold.id for hold in holds.active_holds()]
                held = held_trash()
                operations = _purgeable(older_than_days, held)
                note_pending_cascades(operations, key=PURGED_TRASH, cause={"purged": True})
                plan, dropped = _purge_plan(operations)
                _note_purge_plan(plan)
                for start in range(0, len(operations), 500):
                    TrashEntry.objects.filter(
                        operation__in=operations[start : start + 500]
                    ).exclude(state=TrashEntry.PENDING).delete()
                if [hold.id for hold in holds.active_holds()] != standing:
                    raise _HoldsChanged
                faults.checkpoint("purge.before_commit")
        except _HoldsChanged:
            continue
        faults.checkpoint("purge.after_commit")
        return PurgeReport(
            purged=len(operations),
            kept=kept_under_hold(older_than_days=older_than_days, held=held),
            sessions=plan["purged_sessions"],
            messages=plan["purged_messages"],
            session_ids=dropped,
        )
    raise StoreBusy("purging the trash while legal holds change", PURGE_ATTEMPTS)


def kept_under_hold(
    *, older_than_days: float | None, held: dict[str, HeldTrash]
) -> tuple[HeldTrash, ...]:
    """The operations a purge of ``older_than_days`` (None: everything) would drop but for a
    legal hold (``held``, from ``held_trash``): what it keeps, and a dry run names."""
    due = set(_purgeable(older_than_days, {}))
    return tuple(found for operation, found in sorted(held.items()) if operation in due)


def _purge_plan(operations: Sequence[str]) -> tuple[dict, tuple[str, ...]]:
    """What a purge of ``operations`` drops: each operation's entry numbers (every entry but a
    pending one, as the purge deletes them) and the sessions and messages they hold (entries
    not restored, as ``purge_size`` counts them), numbers and counts only, nothing naming a
    person (it is recorded on the purge's audit entry); and those sessions' ids, which the
    audit entry links."""
    entries: dict[str, list[int]] = {operation: [] for operation in operations}
    sessions = messages = 0
    dropped: dict[str, None] = {}
    for start in range(0, len(operations), 500):
        rows = (
            TrashEntry.objects.filter(operation__in=operations[start : start + 500])
            .exclude(state=TrashEntry.PENDING)
            .order_by("pk")
            .values_list(
                "pk", "operation", "state", "session_count", "message_count", "session_ids"
            )
        )
        for pk, operation, state, session_count, message_count, session_ids in rows:
            entries[operation].append(pk)
            if state != TrashEntry.RESTORED:
                sessions += session_count
                messages += message_count
                dropped.update(dict.fromkeys(session_ids or ()))
    plan = {
        "purged_entries": len(entries),
        "purged_sessions": sessions,
        "purged_messages": messages,
        "operations": entries,
    }
    return plan, tuple(dropped)


def _note_purge_plan(plan: dict) -> None:
    """On the running purge's pending audit entry (if any): ``plan``, under ``PURGING``. Called
    inside the purge's transaction, so it commits with what it describes, or not at all."""
    entry_id = current_audit_entry()
    if entry_id is None:
        return
    entry = AuditEntry.objects.filter(pk=entry_id, action=AuditAction.PURGE_TRASH)
    before = entry.values_list("before", flat=True).first()
    if before is None:
        return  # not a purge's entry
    if not entry.filter(outcome=AuditEntry.PENDING).update(before={**before, PURGING: plan}):
        # Completed meanwhile as failed, its purge taken for dead: it must not purge now.
        raise StoreError(
            f"This purge's audit entry #{entry_id} was completed meanwhile (the purge was "
            "taken for dead): nothing was purged; purge again."
        )


def purge_trash(*, older_than_days: float | None = None) -> int:
    """Drop whole trash operations (all, or the older ones: ``purgeable_operations``).

    Returns how many operations (what the trash page lists as entries) were dropped.
    """
    return purge_trash_report(older_than_days=older_than_days).purged


def stale_pending_trash(*, operation: str | None = None) -> list[int]:
    """Pending entries whose rows are all still in the store: their delete never committed.

    A pending entry none of whose rows is left in the store belongs to a batch that
    committed but died before marking it: it is marked complete here (``_settle_pending_entry``,
    without the store's lock: an uncommitted one is only named, its batch may still run).
    ``operation``: look at that operation's entries only.
    """
    pending = TrashEntry.objects.filter(state=TrashEntry.PENDING)
    if operation is not None:
        pending = pending.filter(operation=operation)
    return [
        entry.pk
        for entry in pending
        if _settle_pending_entry(entry, lock=False, drop_uncommitted=False) == "all"
    ]


def _committed_or_duplicate(entry: TrashEntry) -> None:
    """A pending entry whose rows left the store: complete, unless another delete that copied
    them too committed them (``_held_elsewhere``): then this copy is dropped."""
    if _held_elsewhere(entry):
        TrashEntry.objects.filter(pk=entry.pk, state=TrashEntry.PENDING).delete()
    else:
        TrashEntry.objects.filter(pk=entry.pk, state=TrashEntry.PENDING).update(
            state=TrashEntry.COMPLETE
        )


# --- settling: work a process left unfinished when it died or a database refused a write ---
# Each store transaction of a delete or a restore is recorded here before it runs (a pending
# entry, a restore's intent) and marked after it commits; a process that dies, or a dashboard
# database that refuses the mark, leaves the record unmarked. ``settle_trash`` reads the store,
# under the locks those transactions hold, to tell whether each one committed, and marks it so.
# A restore's intent is settled at once (its restore held the lock to its end); a pending
# delete batch whose rows are all still in the store only once its process is dead or its
# entry is old (a live batch between its copy and its lock is not disturbed).
STALE_OWNER = timedelta(minutes=10)


def _owner_gone(entry: TrashEntry) -> bool:
    return process_dead(entry.owner) or entry.created_at < timezone.now() - STALE_OWNER


def _rows_in_store(entry: TrashEntry, *, lock: bool) -> str:
    """ "all", "none" or "some" of the entry's rows are in the store (its sessions' rows; a
    part's messages). ``lock``: locked for the caller's store transaction."""
    if _part_of(entry.payload):
        state = _part_state(entry.payload, lock=lock)
        return {"uncommitted": "all", "committed": "none"}.get(state, "some")
    ids = list(entry.session_ids)
    if not ids:
        return "none"
    present = len(
        db.fetchall(
            f"SELECT id FROM sessions WHERE id IN ({db.placeholders(ids)})"
            + (db.for_update() if lock else ""),
            ids,
        )
    )
    return "all" if present == len(ids) else "none" if present == 0 else "some"


def _settle_restores() -> None:
    """Under the restore lock: each restore intent left behind is either done (its rows are in
    the store: marked restored, as its process would have) or undone (none are: cleared)."""
    for entry in TrashEntry.objects.filter(restoring_since__isnull=False).exclude(
        state=TrashEntry.RESTORED
    ):
        back = _rows_in_store(entry, lock=True)
        if back == "all":
            TrashEntry.objects.filter(pk=entry.pk).update(
                state=TrashEntry.RESTORED,
                restored_at=entry.restoring_since,
                restored_by=entry.restoring_by,
                restoring_since=None,
            )
        elif back == "none":
            TrashEntry.objects.filter(pk=entry.pk).update(restoring_since=None)
    TrashEntry.objects.filter(state=TrashEntry.RESTORED, restoring_since__isnull=False).update(
        restoring_since=None
    )


def _settle_pending() -> None:
    """Pending entries of dead (or long silent) batches: complete if their delete committed
    (their rows left the store, and no other entry holds them), dropped if it did not (every
    row is still there) or if another delete took those rows. A live batch's entry is its
    own process's to settle: it may still lock, find its rows gone and drop it."""
    for entry in TrashEntry.objects.filter(state=TrashEntry.PENDING):
        if _owner_gone(entry):
            _settle_pending_entry(entry, lock=True, drop_uncommitted=True)


def _settle_pending_entry(entry: TrashEntry, *, lock: bool, drop_uncommitted: bool) -> str:
    """The one rule for a pending entry, read from the store (``_rows_in_store``): none of its
    rows is left there, so its delete committed: complete, or dropped when another delete's
    entry holds them (``_committed_or_duplicate``); all are still there, so it never committed:
    dropped if ``drop_uncommitted`` (the caller knows no process can still commit it); some:
    left as it is. Returns what the store holds ("all", "none" or "some")."""
    back = _rows_in_store(entry, lock=lock)
    if back == "none":
        _committed_or_duplicate(entry)
    elif back == "all" and drop_uncommitted:
        TrashEntry.objects.filter(pk=entry.pk, state=TrashEntry.PENDING).delete()
    return back


def _message_ids(payload: dict) -> set:
    return {decode_trash_value(m.get("id")) for m in payload.get("messages", [])}


def _held_elsewhere(entry: TrashEntry) -> bool:
    """Whether another entry not restored (complete) holds this pending entry's rows: two
    deletes copied them, the other one committed, so this copy is a duplicate to drop."""
    others = TrashEntry.objects.filter(state=TrashEntry.COMPLETE).exclude(pk=entry.pk)
    part_of = _part_of(entry.payload)
    if part_of is None:
        ids = list(entry.session_ids)
        return (
            bool(ids)
            and TrashSession.objects.filter(
                entry__in=others.filter(session_count__gt=0), session_id__in=ids
            ).exists()
        )
    mine = _message_ids(entry.payload)
    return any(
        mine & _message_ids(payload)
        for payload in others.filter(sessions__session_id=part_of).values_list("payload", flat=True)
    )


def needs_settling() -> bool:
    """Whether ``settle_trash`` has anything to look at (read from the dashboard only)."""
    if TrashEntry.objects.filter(restoring_since__isnull=False).exists():
        return True
    return TrashEntry.objects.filter(state=TrashEntry.PENDING).exists()


def settle_trash() -> bool:
    """Settle what dead or refused writes left in the trash (see above); False when the store
    cannot be written now (read-only, busy): nothing was settled, a later call does it."""
    if not needs_settling():
        return True
    try:
        settle_in_store(trash=LEDGER_TRASH)
    except StoreError:
        return False
    return True


# --- parts: some messages of a session deleted in parts (core.being_deleted) ---------------
# A part's entry names its session, but the session is still in the store after the part
# committed: whether it committed is read from its messages instead (a part's delete is one
# transaction, so they are either all still there or all gone).


def _part_of(payload: object) -> str | None:
    return payload.get("part_of") if isinstance(payload, dict) else None


def _part_state(payload: dict, *, lock: bool = False) -> str:
    """ "uncommitted" (every message still in the store), "committed" (none) or "mixed"."""
    ids = [decode_trash_value(m.get("id")) for m in payload.get("messages", [])]
    present = 0
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        present += len(
            db.fetchall(
                f"SELECT id FROM messages WHERE id IN ({db.placeholders(chunk)})"
                + (db.for_update() if lock else ""),
                chunk,
            )
        )
    if present == len(ids):
        return "uncommitted"
    return "committed" if present == 0 else "mixed"


def _settle_pending_parts(*, session_ids: set[str], keep: int | None, among=None) -> None:
    """Under the store's lock on these sessions: drop the pending part entries whose delete
    never committed (their rows are still in the store), mark complete those that did.
    ``among``: a query of the entries to look at (default: every entry)."""
    entries = TrashEntry.objects.all() if among is None else among
    pending = entries.filter(state=TrashEntry.PENDING, session_count=0).exclude(pk=keep)
    for entry in pending:
        if _part_of(entry.payload) in session_ids:
            _settle_pending_entry(entry, lock=False, drop_uncommitted=True)


def part_rows_elsewhere(operations: Sequence[str]) -> dict[str, tuple[tuple[str, int], ...]]:
    """For each of these operations holding parts of sessions (some of their messages) whose
    row is not in the store but in another operation of the trash: (session, that operation's
    first entry). Restoring that operation brings the parts back with the row; this one alone
    is refused (``restore_trash_entry``), so the trash page says to restore that one."""
    parts = list(
        TrashSession.objects.filter(entry__operation__in=list(operations), entry__session_count=0)
        .exclude(entry__state=TrashEntry.RESTORED)
        .values_list("entry__operation", "session_id")
        .distinct()
    )
    if not parts:
        return {}
    wanted = sorted({sid for _op, sid in parts})
    in_store = existing_session_ids(wanted)
    holder = dict(
        TrashSession.objects.filter(
            session_id__in=[s for s in wanted if s not in in_store], entry__session_count__gt=0
        )
        .exclude(entry__state=TrashEntry.RESTORED)
        .order_by("entry_id")
        .values_list("session_id", "entry__operation")
    )
    firsts = dict(
        TrashEntry.objects.filter(operation__in=set(holder.values()))
        .exclude(state=TrashEntry.RESTORED)
        .values("operation")
        .annotate(first=Min("pk"))
        .values_list("operation", "first")
    )
    answer: dict[str, list[tuple[str, int]]] = {}
    for operation, sid in parts:
        where = holder.get(sid)
        if where is not None and where != operation and where in firsts:
            answer.setdefault(operation, []).append((sid, firsts[where]))
    return {operation: tuple(sorted(found)) for operation, found in answer.items()}


@dataclass(frozen=True)
class ParentsElsewhere:
    """Another trash operation holding the parents of some sessions of one operation."""

    entry_id: int  # that operation's first entry, as the trash page lists it
    sessions: int  # how many sessions of this operation have their parent there


def parents_elsewhere(operations: Sequence[str]) -> dict[str, tuple[ParentsElsewhere, ...]]:
    """For each of these trash operations (what of it is not restored), the other operations
    not restored that hold the parents of its sessions, oldest first.

    Restoring such an operation first brings those sessions back without their parent link;
    the link waits in the parent's operation and comes back with it
    (``LedgerTrash.keep_waiting_link``). The trash page names the operation to restore first.
    Read from the links ``trashed_lineage`` keeps (each entry's payload read once per process).
    """
    trashed_lineage()
    entries = (
        TrashEntry.objects.filter(operation__in=list(operations), session_count__gt=0)
        .exclude(state=TrashEntry.RESTORED)
        .values_list("pk", "created_at", "operation")
    )
    parent_of: dict[str, dict[str, str]] = {}
    with _links_lock:
        for pk, created, operation in entries:
            links = _links_seen.get((pk, str(created)))
            if links is not None:
                parent_of.setdefault(operation, {}).update(links[3])
    wanted = {p for links in parent_of.values() for p in links.values()}
    if not wanted:
        return {}
    holder: dict[str, str] = dict(
        TrashSession.objects.filter(session_id__in=list(wanted), entry__session_count__gt=0)
        .exclude(entry__state=TrashEntry.RESTORED)
        .order_by("entry_id")
        .values_list("session_id", "entry__operation")
    )
    firsts = dict(
        TrashEntry.objects.filter(operation__in=set(holder.values()))
        .values("operation")
        .annotate(first=Min("pk"))
        .values_list("operation", "first")
    )
    answer: dict[str, tuple[ParentsElsewhere, ...]] = {}
    for operation, links in parent_of.items():
        counts: dict[str, int] = {}
        for parent in links.values():
            where = holder.get(parent)
            if where is not None and where != operation:
                counts[where] = counts.get(where, 0) + 1
        if counts:
            answer[operation] = tuple(
                sorted(
                    (ParentsElsewhere(firsts[o], n) for o, n in counts.items() if o in firsts),
                    key=lambda found: found.entry_id,
                )
            )
    return answer


@dataclass(frozen=True)
class DeletedSession:
    """Where a session no longer in the store went: the trash operation holding its row."""

    session_id: str
    title: str
    source: str
    entry: TrashEntry  # the operation's first batch: its id names it on the trash page
    restorable: TrashEntry | None  # an entry of it not yet restored (its restore form's)


def _unrestored_rows():
    """Trash rows of sessions that are in the trash now: their entry holds the row and was not
    restored (purged and erased rows are gone from it)."""
    return TrashSession.objects.filter(entry__session_count__gt=0).exclude(
        entry__state=TrashEntry.RESTORED
    )


def trashed_among(session_ids: Sequence[str]) -> dict[str, int]:
    """Those of ``session_ids`` that are in the trash, each with an entry holding it."""
    found: dict[str, int] = {}
    ids = list(dict.fromkeys(session_ids))
    for start in range(0, len(ids), 500):
        rows = _unrestored_rows().filter(session_id__in=ids[start : start + 500])
        for session_id, entry_id in rows.values_list("session_id", "entry_id"):
            found.setdefault(session_id, entry_id)
    return found


def trashed_titles_among(titles: Sequence[str]) -> dict[str, str]:
    """Those of ``titles`` a deleted session in the trash holds, each with such a session."""
    found: dict[str, str] = {}
    wanted = [t for t in dict.fromkeys(titles) if t]
    for start in range(0, len(wanted), 500):
        rows = _unrestored_rows().filter(title__in=wanted[start : start + 500])
        for title, session_id in rows.values_list("title", "session_id"):
            found.setdefault(title, session_id)
    return found


def trashed_title_holder(title: str) -> DeletedSession | None:
    """A deleted session in the trash titled ``title`` (titles are unique, and the restore of
    one whose title another session took is refused), or None."""
    found = _unrestored_rows().filter(title=title).order_by("-entry_id").first()
    return deleted_session(found.session_id) if found is not None else None


def deleted_session(session_id: str) -> DeletedSession | None:
    """The newest trash operation holding ``session_id``'s row and not restored since, or
    None (never deleted, restored, purged, or erased: an erasure drops the subject's rows)."""
    found = (
        _unrestored_rows()
        .filter(session_id=session_id)
        .select_related("entry")
        .defer("entry__payload")
        .order_by("-entry__created_at", "-entry_id")
        .first()
    )
    if found is None:
        return None
    batches = list(
        TrashEntry.objects.defer("payload").filter(operation=found.entry.operation).order_by("pk")
    )
    return DeletedSession(
        session_id=session_id,
        title=found.title,
        source=found.source,
        entry=batches[0] if batches else found.entry,
        restorable=next((e for e in batches if e.state != TrashEntry.RESTORED), None),
    )
