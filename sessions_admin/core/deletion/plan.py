"""Cascade delete, bulk delete and the trash.

Destructive work has two phases. ``plan_cascade_delete`` says exactly what
will go, grouped by relation, with counts computed by SQL; execution checks
the plan's fingerprint so it deletes the set that was shown. Every batch
first copies its rows into the trash (the dashboard's own database) and then
deletes them from the store in one short store transaction, children before
parents: nothing is lost silently, no message is left without its session,
no conversation points at a deleted session, and the FTS triggers keep the
search index in step. A delete that fails after some batches committed (a full
disk, a database restart) raises ``DeletePartlyApplied`` with exactly what committed
and its trash operation, never the bare error of the batch that failed: those
batches stay deleted, restorable as one operation, and the rest stays in the store.

The trash is not the core's: a delete writes it through ``Trash``, which the
caller passes, else the process's default (``set_default_trash``; a dashboard
process uses the ledger's, ``sessions_admin.ledger.trash``).

A bulk delete's selection lives here too (the presets, ``preview_bulk_delete``);
the job that works through it in the background is the ledger's
(``sessions_admin.ledger.jobs``). So does the rule a delete of a previewed set (a
job, a cascade) follows in every batch, under the store's lock: a conversation stays
whole (``kept_whole``), so a session the runtime linked to one being deleted after the
preview, or a merge made meanwhile, keeps it instead of being cut off.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import time
import uuid
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction

from sessions_admin.core import being_deleted, db, faults, holds, lineage
from sessions_admin.core.db import store_operation
from sessions_admin.core.errors import InvalidInput, SessionNotFound, StoreBusy, StoreError
from sessions_admin.core.lifecycle import keep_one_live
from sessions_admin.core.merge import PlanChanged, undoable_merges_of
from sessions_admin.core.rows import slugs_of_sessions
from sessions_admin.core.schema import existing_columns
from sessions_admin.routers import responses_alias, store_alias

# A delete this large asks the operator to type the number of sessions to confirm: one rule
# for a cascade and a bulk delete alike (``needs_typed_confirmation``).
TYPED_CONFIRMATION_SESSIONS = 20
TYPED_CONFIRMATION_MESSAGES = 1_000
# One store transaction deletes at most this many sessions / messages, so a
# runtime writer waits on us for tens of milliseconds, not seconds (a session
# larger than that goes in a batch of its own). Deleting a message costs its
# full-text index entry too: about 0.1 ms a message on a 2-core machine, so
# 2,000 held the write lock for over 250 ms where 500 hold it under 100 ms
# (bench/writes.py).
BATCH_SESSIONS = 200
BATCH_MESSAGES = 500
CHUNK = 500
# A batch whose rows keep changing between its trash copy and the store lock is
# copied again this many times, then copied under the lock.
COPY_ATTEMPTS = 3


def needs_typed_confirmation(*, sessions: int, messages: int) -> bool:
    """Whether deleting this many sessions and messages needs the session count typed.

    The one rule: the cascade page and the bulk delete page (and their confirm
    steps) both ask it, so 48 sessions need the same confirmation either way.
    """
    return sessions >= TYPED_CONFIRMATION_SESSIONS or messages >= TYPED_CONFIRMATION_MESSAGES


def new_operation_id() -> str:
    """A fresh id for one operator action's trash entries (all its batches share it)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class DeletePlan:
    picked_ids: tuple[str, ...]
    session_ids: tuple[str, ...]  # children before parents
    relations: tuple[tuple[str, int], ...]  # (relation, sessions)
    # (session, relation) in session_ids' order, as the cascade page groups them: "picked"
    # for a first segment, else lineage.edge_kind of its link to its parent.
    session_relations: tuple[tuple[str, str], ...]
    kept_children: tuple[tuple[str, str], ...]  # (child, relation): kept, parent link cleared
    live_session_ids: tuple[str, ...]
    message_count: int
    conversation_names: tuple[str, ...]
    response_count: int
    include_branches: bool
    fingerprint: str
    # (session, the hold's words) for each session a legal hold covers: the plan cannot run.
    held: tuple[tuple[str, str], ...] = ()
    # (session, merge id, "target" or "absorbed") for each session a merge that can still be
    # undone needs (``merge.undoable_merges_of``): deleting it loses that undo, so the plan
    # runs only when the operator confirms that (``execute_cascade_delete(lose_undo=True)``).
    merges: tuple[tuple[str, int, str], ...] = ()

    @property
    def needs_typed_confirmation(self) -> bool:
        return needs_typed_confirmation(sessions=len(self.session_ids), messages=self.message_count)

    @property
    def lost_undos(self) -> tuple[int, ...]:
        """The merges whose undo this delete loses."""
        return tuple(sorted({merge_id for _sid, merge_id, _role in self.merges}))


@dataclass(frozen=True)
class DeleteResult:
    deleted_sessions: int
    deleted_messages: int
    trash_entry_ids: tuple[int, ...]  # one per batch, all of one operation
    operation: str = ""  # the trash operation they share: restored together
    # The merges whose undo this delete lost (confirmed by the operator): each needs a session
    # this delete put in the trash.
    lost_undos: tuple[int, ...] = ()


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


class SessionsWentLive(StoreError):
    """A delete that keeps live sessions found some of its sessions live under the store's lock
    (a runtime reopened them after the preview): they were kept, whole, and nothing else changed."""

    def __init__(self, session_ids: Sequence[str]):
        self.session_ids = tuple(session_ids)
        count = len(self.session_ids)
        which = "1 session" if count == 1 else f"{count} sessions"
        super().__init__(
            f"{which} went live again while being deleted ({', '.join(self.session_ids[:5])}): "
            "kept, with every message."
        )


class DeleteGivenBack(StoreError):
    """A session being deleted in parts was given back meanwhile (restored from the trash, or
    kept by another delete): this delete stopped and left it as it is."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        super().__init__(
            f"Session {session_id} was given back while being deleted (restored from the trash, "
            "or kept by another delete): it was left as it is."
        )


class RestoreConflict(StoreError):
    pass


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

    def keep_waiting_link(self, *, child: str, parent: str) -> int | None:
        """``child`` is being restored while ``parent`` is in neither the store nor its
        operation: if an entry not restored holds ``parent``'s row, record (child, parent)
        among that entry's kept children, so restoring its operation links ``child`` again
        (as it does a child the delete left in the store), and answer the operation's first
        entry. None: the trash holds no row of ``parent`` (purged), the link is lost.

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

    def keep_waiting_link(self, *, child: str, parent: str) -> int | None:
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


def _chunks(items: Sequence, size: int = CHUNK) -> Iterable[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def lineage_closure(roots: list[str], include_branches: bool) -> dict[str, str]:
    """session -> relation, for the roots and every descendant that goes with them."""
    kind = lineage.link_kind_sql("c", "p")
    followed = (
        ("compression", "delegate", "branch") if include_branches else ("compression", "delegate")
    )
    found: dict[str, str] = {root: "picked" for root in roots}
    for chunk in _chunks(roots):
        rows = db.fetchall(
            f"""
            WITH RECURSIVE closure(id, relation, depth) AS (
                SELECT id, 'picked', 0 FROM sessions WHERE id IN ({db.placeholders(chunk)})
                UNION
                SELECT c.id, {kind}, closure.depth + 1
                FROM closure
                JOIN sessions p ON p.id = closure.id
                JOIN sessions c ON c.parent_session_id = p.id
                WHERE closure.depth < %s AND {kind} IN ({db.placeholders(followed)})
            )
            SELECT id, relation FROM closure
            """,
            [*chunk, lineage.MAX_DEPTH, *followed],
        )
        for session_id, relation in rows:
            found.setdefault(session_id, relation)
    return found


def ordered_children_first(ids: list[str]) -> list[str]:
    """Order a set so every session comes before its parent (if the parent is in the set)."""
    parents: dict[str, str | None] = {}
    for chunk in _chunks(ids):
        for sid, parent in db.fetchall(
            f"SELECT id, parent_session_id FROM sessions WHERE id IN ({db.placeholders(chunk)})",
            list(chunk),
        ):
            parents[sid] = parent
    depth: dict[str, int] = {}

    def depth_of(sid: str) -> int:
        seen = []
        current = sid
        while current in parents and current not in depth and current not in seen:
            seen.append(current)
            current = parents[current]
        base = depth.get(current, -1) if current in parents else -1
        for offset, node in enumerate(reversed(seen), start=1):
            depth[node] = base + offset
        return depth.get(sid, 0)

    present = [sid for sid in ids if sid in parents]
    return sorted(present, key=lambda sid: (-depth_of(sid), sid))


def ordered_by_conversation(ids: list[str]) -> list[str]:
    """``ordered_children_first``, one conversation after another: the sessions of one tree
    (linked by parent links within the set) are next to each other, children before parents,
    the trees in the order of their first session in ``ids``. A job's batches then take a
    conversation in one transaction, unless it is larger than a batch."""
    parents: dict[str, str | None] = {}
    for chunk in _chunks(ids):
        for sid, parent in db.fetchall(
            f"SELECT id, parent_session_id FROM sessions WHERE id IN ({db.placeholders(chunk)})",
            list(chunk),
        ):
            parents[sid] = parent
    rank = {sid: n for n, sid in reversed(list(enumerate(ids)))}

    def root_and_depth(sid: str) -> tuple[str, int]:
        seen = [sid]
        current = sid
        while parents.get(current) in parents and parents[current] not in seen:
            current = parents[current]
            seen.append(current)
        return current, len(seen) - 1

    keys = {}
    for sid in parents:
        root, depth = root_and_depth(sid)
        keys[sid] = (rank.get(root, len(ids)), root, -depth, sid)
    present = [sid for sid in dict.fromkeys(ids) if sid in parents]
    return sorted(present, key=keys.__getitem__)


# --- a delete keeps each conversation whole ---------------------------------------------


def _together_sql(child: str, parent: str, every_link: bool) -> str:
    """SQL: session ``child``'s link to its parent ``parent`` keeps them in one conversation.

    A compression continuation, a delegate and an API conversation's continuation
    (``_continued_from``) always do; a branch or an untyped child starts a conversation of
    its own (a delete keeps it, its link cleared) unless ``every_link`` (a retention run,
    whose conversations hold every parent link).
    """
    if every_link:
        return "1 = 1"
    kind = lineage.link_kind_sql(child, parent)
    return (
        f"({kind} IN ('compression', 'delegate') "
        f"OR ({kind} = 'child' AND {lineage.marker('_continued_from', child)} IS NOT NULL))"
    )


def _linked(ids: Sequence[str], *, every_link: bool) -> list[tuple[str, str]]:
    """(child, parent) for each link that keeps a conversation together and touches ``ids``."""
    together = _together_sql("c", "p", every_link)
    pairs: list[tuple[str, str]] = []
    for chunk in _chunks(list(ids)):
        marks = db.placeholders(chunk)
        pairs += db.fetchall(
            f"SELECT c.id, p.id FROM sessions c JOIN sessions p ON p.id = c.parent_session_id "
            f"WHERE (c.parent_session_id IN ({marks}) OR c.id IN ({marks})) AND {together}",
            [*chunk, *chunk],
        )
        if every_link:
            # A continuation the runtime marked ``_continued_from`` without a parent link.
            continued = lineage.marker("_continued_from", "c")
            pairs += db.fetchall(
                f"SELECT c.id, p.id FROM sessions c JOIN sessions p ON p.id = {continued} "
                "WHERE c.parent_session_id IS NULL AND c.model_config LIKE '%%_continued_from%%' "
                f"AND ({continued} IN ({marks}) OR c.id IN ({marks}))",
                [*chunk, *chunk],
            )
    return pairs


def _conversation_links(
    session_ids: Iterable[str], within: Container[str], *, every_link: bool
) -> tuple[set[str], list[tuple[str, str]]]:
    """``conversation_within``'s sessions, and the links between them it followed."""
    found = set(session_ids)
    links: list[tuple[str, str]] = []
    frontier = list(found)
    while frontier:
        step: list[str] = []
        for child, parent in _linked(frontier, every_link=every_link):
            if child in found or child in within:
                if parent in found or parent in within:
                    links.append((child, parent))
            for sid in (child, parent):
                if sid not in found and sid in within:
                    found.add(sid)
                    step.append(sid)
        frontier = step
    return found, links


def conversation_within(
    session_ids: Iterable[str], within: Container[str], *, every_link: bool = False
) -> set[str]:
    """``session_ids`` and every session of ``within`` linked to one of them, either way and
    through sessions of ``within`` only, by a link that keeps a conversation together."""
    return _conversation_links(session_ids, within, every_link=every_link)[0]


def conversation_groups(
    session_ids: Sequence[str], within: Container[str], *, every_link: bool = False
) -> list[list[str]]:
    """The conversations of ``session_ids``: each the sessions ``conversation_within`` finds
    for one of them (some may not be among ``session_ids``), in ``session_ids``' order and
    then sorted. Ordered by their last session in ``session_ids`` (one with a session not
    among them last): given children first, a conversation whose first session is a child
    of another's (a branch, linked by no link that keeps them together) comes first too."""
    found, links = _conversation_links(session_ids, within, every_link=every_link)
    parent = {sid: sid for sid in found}

    def root(sid: str) -> str:
        while parent[sid] != sid:
            parent[sid] = parent[parent[sid]]
            sid = parent[sid]
        return sid

    for child, up in links:
        if child in parent and up in parent:
            parent[root(child)] = root(up)
    rank = {sid: n for n, sid in reversed(list(enumerate(session_ids)))}
    groups: dict[str, list[str]] = {}
    for sid in sorted(found, key=lambda sid: (rank.get(sid, len(rank)), sid)):
        groups.setdefault(root(sid), []).append(sid)
    missing = len(rank)
    return sorted(
        groups.values(),
        key=lambda group: (max(rank.get(sid, missing) for sid in group), rank.get(group[0])),
    )


@dataclass(frozen=True)
class WholeConversations:
    """What a delete of a previewed set (a bulk delete job, a retention run) checks under the
    store's lock, batch by batch: ``remaining`` is what it still deletes, the batch included.

    A session of the batch stays, with every session of its conversation among
    ``remaining``, when that conversation has a session the delete does not take (a
    continuation, compression segment or delegate the runtime started after the preview,
    or one kept live or held: ``left_out``, or with ``every_link`` any session it continues)
    or when a merge that can still be undone needs one of them.
    """

    remaining: Container[str]
    every_link: bool = False
    # Sessions the plan showed as kept with their link cleared (a cascade's kept children).
    cut: Container[str] = frozenset()
    # Merges whose undo the operator confirmed losing (a cascade's ``lose_undo``).
    lose_undo_of: frozenset[int] = frozenset()
    # Sessions of the plan the delete left out when their turn came (live again, held): a
    # session continuing one of them stays too.
    left_out: Container[str] = frozenset()
    # A retention run's cutoff (a Unix time): a session of these conversations written to,
    # started or ended since is no longer quiet, and keeps its conversation.
    quiet_before: float | None = None


def kept_whole(
    session_ids: Sequence[str], plan: WholeConversations, *, lock: bool = False
) -> dict[str, str]:
    """The sessions of these conversations (within ``plan.remaining``) that must stay, each
    with why ("its conversation continued in s-9", "target of merge #5, which can still be
    undone", "with s-3, whose conversation continued in s-9"); empty: all of them may go.

    ``lock``: the conversations' sessions are locked first (PostgreSQL), so a runtime
    linking a session to one of them waits for the delete's commit.
    """
    members = conversation_within(session_ids, plan.remaining, every_link=plan.every_link)
    if not members:
        return {}
    if lock and db.vendor() == "postgresql":
        for chunk in _chunks(sorted(members)):
            db.fetchall(
                f"SELECT id FROM sessions WHERE id IN ({db.placeholders(chunk)}) ORDER BY id"
                + db.for_update(),
                list(chunk),
            )
    why: dict[str, str] = {}
    for child, parent in sorted(_linked(sorted(members), every_link=plan.every_link)):
        if (
            parent in members
            and child not in plan.remaining
            and child not in plan.cut
            and parent not in why
        ):
            why[parent] = f"its conversation continued in {child}"
        elif (
            child in members
            and parent not in plan.remaining
            and (plan.every_link or parent in plan.left_out)
            and child not in why
        ):
            why[child] = f"its conversation goes on in {parent}"
    for sid, merge in sorted(undoable_merges_of(members).items()):
        if merge.merge_id not in plan.lose_undo_of:
            why.setdefault(sid, merge.describe())
    if plan.quiet_before is not None:
        for sid in sorted(active_since(sorted(members), plan.quiet_before)):
            why.setdefault(sid, "active again since the run's preview")
    for flagged in sorted(why):
        for other in sorted(
            conversation_within([flagged], plan.remaining, every_link=plan.every_link)
        ):
            if other not in why:
                words = why[flagged].removeprefix("its conversation ")
                why[other] = (
                    f"with {flagged}, whose conversation {words}"
                    if words != why[flagged]
                    else f"with {flagged}, {why[flagged]}"
                )
    return why


def active_since(ids: Sequence[str], since: float) -> set[str]:
    """Which of ``ids`` started, ended or had a message stamped at or after ``since``."""
    active: set[str] = set()
    for chunk in _chunks(list(ids)):
        active.update(
            r[0]
            for r in db.fetchall(
                f"SELECT s.id FROM sessions s WHERE s.id IN ({db.placeholders(chunk)}) AND "
                "(s.started_at >= %s OR s.ended_at >= %s OR EXISTS (SELECT 1 FROM messages m "
                "WHERE m.session_id = s.id AND m.timestamp >= %s))",
                [*chunk, since, since, since],
            )
        )
    return active


class ConversationsKept(StoreError):
    """A delete of a previewed set found, under the store's lock, conversations it must keep
    whole (``kept_whole``): nothing of the batch was deleted."""

    def __init__(self, kept: dict[str, str]):
        self.kept = dict(kept)
        named = "; ".join(f"{sid}, {why}" for sid, why in sorted(self.kept.items())[:5])
        super().__init__(f"Kept whole: {named}. Nothing of the batch was deleted.")


def count_messages(ids: Sequence[str]) -> int:
    return sum(
        int(
            db.fetchone(
                f"SELECT COUNT(*) FROM messages WHERE session_id IN ({db.placeholders(c)})", list(c)
            )[0]
        )
        for c in _chunks(ids)
    )


def conversation_names_of(
    ids: Sequence[str], *, response_ids: Sequence[str] | None = None
) -> list[str]:
    """Slugs that go with these sessions: recorded at one, or pointing at a response of one.

    Hermes leaves the session_id column NULL after each turn, and its own
    ``ResponseStore.delete`` never keeps a slug whose latest response is gone.
    """
    names = {name for name, _sid in slugs_of_sessions(list(ids))}
    if response_ids is None:
        response_ids = response_ids_of(ids)
    for chunk in _chunks(list(response_ids)):
        names.update(
            r[0]
            for r in db.fetchall(
                f"SELECT name FROM conversations WHERE response_id IN ({db.placeholders(chunk)})",
                list(chunk),
                alias=responses_alias(),
            )
        )
    return sorted(names)


def response_ids_of(ids: Sequence[str]) -> list[str]:
    field = db.json_field("data", "session_id", alias=responses_alias())
    found: list[str] = []
    for chunk in _chunks(ids):
        found += [
            r[0]
            for r in db.fetchall(
                f"SELECT response_id FROM responses WHERE {field} IN ({db.placeholders(chunk)})",
                list(chunk),
                alias=responses_alias(),
            )
        ]
    return sorted(found)


def _fingerprint(payload: object) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[
        :32
    ]


def plan_cascade_delete(
    *, session_ids: Sequence[str], include_branches: bool = False
) -> DeletePlan:
    """What deleting these sessions' conversations would remove.

    Each picked session is taken from the start of its compression chain; its
    compression continuations and delegates (recursively) always go with it;
    branches go only with ``include_branches``, else they stay as sessions of
    their own (their parent link cleared), as do untyped children.
    """
    picks = list(dict.fromkeys(s for s in session_ids if s))
    if not picks:
        raise InvalidInput("Pick at least one session to delete.")
    roots: list[str] = []
    for pick in picks:
        if lineage.session_row(pick) is None:
            raise SessionNotFound(pick)
        root = lineage.compression_chain(session_id=pick)[0]
        if root not in roots:
            roots.append(root)
    closure = lineage_closure(roots, include_branches)
    ids = list(closure)
    id_set = set(ids)
    kind = lineage.link_kind_sql("c", "p")
    kept: list[tuple[str, str]] = []
    for chunk in _chunks(ids):
        kept += [
            (r[0], r[1])
            for r in db.fetchall(
                f"SELECT c.id, {kind} FROM sessions c JOIN sessions p ON p.id = c.parent_session_id "
                f"WHERE c.parent_session_id IN ({db.placeholders(chunk)}) ORDER BY c.id",
                list(chunk),
            )
            if r[0] not in id_set
        ]
    live: list[str] = []
    for chunk in _chunks(ids):
        live += [
            r[0]
            for r in db.fetchall(
                f"SELECT id FROM sessions WHERE ended_at IS NULL AND id IN ({db.placeholders(chunk)})",
                list(chunk),
            )
        ]
    # A session whose parent goes (or stays, as a kept child) is linked by the edge rule;
    # any other is where the conversation starts.
    linked = id_set | {child for child, _ in kept}
    session_relation: dict[str, str] = {}
    for chunk in _chunks(ids):
        for row in db.fetchdicts(
            "SELECT c.id, c.model_config, c.parent_session_id, p.end_reason AS parent_end_reason "
            "FROM sessions c LEFT JOIN sessions p ON p.id = c.parent_session_id "
            f"WHERE c.id IN ({db.placeholders(chunk)})",
            list(chunk),
        ):
            session_relation[row["id"]] = (
                lineage.edge_kind(row, row["parent_end_reason"])
                if row["parent_session_id"] in linked
                else "picked"
            )
    relations: dict[str, int] = {}
    for relation in closure.values():
        relations[relation] = relations.get(relation, 0) + 1
    ordered = ordered_children_first(ids)
    messages = count_messages(ordered)
    responses = response_ids_of(ordered)
    names = conversation_names_of(ordered, response_ids=responses)
    held = holds.holds_on(ordered)
    merges = undoable_merges_of(ordered)
    fingerprint = _fingerprint(
        [
            sorted(ordered),
            sorted(kept),
            sorted(live),
            messages,
            names,
            responses,
            sorted(held),
            sorted((sid, m.merge_id) for sid, m in merges.items()),
        ]
    )
    return DeletePlan(
        picked_ids=tuple(picks),
        session_ids=tuple(ordered),
        relations=tuple(sorted(relations.items())),
        session_relations=tuple((sid, session_relation.get(sid, "picked")) for sid in ordered),
        kept_children=tuple(kept),
        live_session_ids=tuple(sorted(live)),
        message_count=messages,
        conversation_names=tuple(names),
        response_count=len(responses),
        include_branches=include_branches,
        fingerprint=fingerprint,
        held=tuple((sid, held[sid].describe()) for sid in ordered if sid in held),
        merges=tuple(
            (sid, merges[sid].merge_id, merges[sid].role) for sid in ordered if sid in merges
        ),
    )


def lost_undo_words(plan: DeletePlan) -> str:
    """What a cascade plan's delete does to the merges it touches, in one sentence."""
    roles = {
        merge_id: sorted(
            f"{'its target' if role == 'target' else 'a session it absorbed'} {sid}"
            for sid, m, role in plan.merges
            if m == merge_id
        )
        for merge_id in plan.lost_undos
    }
    return (
        "This delete loses the undo of "
        + "; ".join(f"merge #{merge_id} ({', '.join(words)})" for merge_id, words in roles.items())
        + ": once deleted, the merge can no longer be undone unless the trash entry is restored."
    )


# --- bulk delete: what a preset selects, and the dry run of deleting it --------------------

# Sessions a dry run shows as a sample of what goes.
SAMPLE_SIZE = 10


@dataclass(frozen=True)
class BulkDeletePreview:
    session_ids: tuple[str, ...]  # what would go (live ones excluded unless asked)
    live_excluded: int
    message_count: int
    sample: tuple[dict, ...]
    # Sessions left out because a legal hold covers them, and the holds in words.
    held_excluded: int = 0
    holds: tuple[str, ...] = ()
    # Sessions left out because a merge that can still be undone needs them, each with why
    # ("kept: target of merge #5, which can still be undone"), and how many more sessions of
    # their conversations stay with them (a conversation is never split).
    merge_kept: tuple[tuple[str, str], ...] = ()
    merge_kept_with: int = 0
    # Sessions left out because their conversation goes on in a session this delete does not
    # take (a live continuation, one not picked), each with why (``kept_whole``).
    conversation_kept: tuple[tuple[str, str], ...] = ()

    @property
    def merge_excluded(self) -> int:
        return len(self.merge_kept) + self.merge_kept_with


def preset_session_ids(
    *, preset: str, days: float | None = None, source: str | None = None
) -> list[str]:
    """Sessions matching one of the bulk-delete presets, oldest first.

    "empty" never selects a live session (an empty live session is a chat's
    current one, often what a reset started a moment ago): a live session is
    deleted only by picking it. The dry run (``preview_bulk_delete``) then
    leaves out what a merge that can still be undone needs, saying why.
    """
    if preset == "ended_older_than":
        if days is None or days < 0 or days > 36500:
            raise InvalidInput("Give a number of days between 0 and 36500.")
        cutoff = time.time() - float(days) * 86400
        sql, params = "ended_at IS NOT NULL AND ended_at < %s", [cutoff]
    elif preset == "empty":
        sql, params = (
            "ended_at IS NOT NULL "
            "AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = sessions.id)",
            [],
        )
    elif preset == "by_source":
        if not source:
            raise InvalidInput("Pick a source.")
        sql, params = "source = %s", [source]
    else:
        raise InvalidInput(f"Unknown preset {preset!r}.")
    return [
        r[0]
        for r in db.fetchall(f"SELECT id FROM sessions WHERE {sql} ORDER BY started_at, id", params)
    ]


def _with_downstream(ids: list[str]) -> list[str]:
    """The ids plus what always goes with them in a delete: compression continuations and
    delegates, recursively (a conversation's later segments never outlive its start)."""
    found = list(dict.fromkeys(ids))
    picked = set(found)
    closure = lineage_closure(found, include_branches=False)
    return found + [sid for sid in closure if sid not in picked]


def live_session_ids(ids: Sequence[str]) -> set[str]:
    """Those of the sessions that are live (not ended)."""
    live: set[str] = set()
    for chunk in _chunks(list(ids)):
        live |= {
            r[0]
            for r in db.fetchall(
                f"SELECT id FROM sessions WHERE ended_at IS NULL AND id IN ({db.placeholders(chunk)})",
                list(chunk),
            )
        }
    return live


def _conversations_around(ids: Sequence[str], members: Iterable[str]) -> set[str]:
    """``members`` and every session of ``ids`` linked to one of them by a compression or
    delegate link (either way, within ``ids``): what stays so that none of those
    conversations loses its start, middle or end."""
    linked: dict[str, set[str]] = {}
    kind = lineage.link_kind_sql("c", "p")
    for chunk in _chunks(list(ids)):
        for child, parent, link in db.fetchall(
            f"SELECT c.id, p.id, {kind} FROM sessions c JOIN sessions p "
            f"ON p.id = c.parent_session_id WHERE c.id IN ({db.placeholders(chunk)})",
            list(chunk),
        ):
            if link in ("compression", "delegate"):
                linked.setdefault(child, set()).add(parent)
                linked.setdefault(parent, set()).add(child)
    wanted = set(ids)
    found = set(members)
    pending = list(found)
    while pending:
        for other in linked.get(pending.pop(), ()):
            if other in wanted and other not in found:
                found.add(other)
                pending.append(other)
    return found


def preview_bulk_delete(
    *, session_ids: Sequence[str], include_live: bool = False
) -> BulkDeletePreview:
    """The dry run: the exact set, its size, how many live sessions were left out, a sample.

    Left out, each with why: live sessions (unless ``include_live``), held ones, and the
    sessions a merge that can still be undone needs (``merge.undoable_merges_of``) with the
    rest of their conversations: deleting them would lose the undo silently (a cascade
    delete of the conversation says so and asks). So is a conversation that goes on in a
    session the delete does not take (``kept_whole``: a live continuation, say): the job
    checks the same again under the lock, batch by batch.
    """
    ids = _with_downstream([s for s in session_ids if s])
    live = live_session_ids(ids)
    held = holds.holds_on(ids)
    merges = undoable_merges_of(ids)
    for_merges = _conversations_around(ids, merges) if merges else set()
    kept = [
        sid
        for sid in ids
        if (include_live or sid not in live) and sid not in held and sid not in for_merges
    ]
    found = lineage.existing_session_ids(kept)
    existing = [sid for sid in kept if sid in found]
    whole = kept_whole(existing, WholeConversations(remaining=set(existing))) if existing else {}
    existing = [sid for sid in existing if sid not in whole]
    sample = (
        tuple(
            db.fetchdicts(
                "SELECT id, source, title, started_at, ended_at, end_reason, message_count "
                f"FROM sessions WHERE id IN ({db.placeholders(existing[:SAMPLE_SIZE])})",
                existing[:SAMPLE_SIZE],
            )
        )
        if existing
        else ()
    )
    return BulkDeletePreview(
        session_ids=tuple(existing),
        live_excluded=0 if include_live else len([s for s in ids if s in live]),
        message_count=count_messages(existing) if existing else 0,
        sample=sample,
        held_excluded=len(held),
        holds=tuple(sorted({hold.describe() for hold in held.values()})),
        merge_kept=tuple((sid, merges[sid].describe()) for sid in ids if sid in merges),
        merge_kept_with=len(for_merges - set(merges)),
        conversation_kept=tuple((sid, whole[sid]) for sid in ids if sid in whole),
    )


# --- deleting: trash first, then one short store transaction per batch ----------------------


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


def _same_rows(first: object, second_key: bytes, second: object) -> bool:
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
    }


@dataclass(frozen=True)
class _Deleting:
    """What every step of one delete passes on: who and why, the trash and operation its
    entries go to, and whether a session found live under the lock is kept."""

    actor: str
    reason: str
    job_id: int | None
    trash: Trash
    operation: str
    keep_live: bool
    # A delete of a previewed set: the conversations it must keep whole (``kept_whole``).
    whole: WholeConversations | None = None
    # Where each store commit is recorded as it happens, (trash entry, sessions, messages):
    # what a delete that fails later knows it committed (``DeletePartlyApplied``).
    committed: list | None = None

    def open_entry(self, session_ids: Sequence[str], rows: dict) -> int:
        try:
            return self.trash.open_entry(
                session_ids=session_ids,
                rows=rows,
                actor=self.actor,
                reason=self.reason,
                job_id=self.job_id,
                operation=self.operation,
            )
        except Exception as error:
            error.database = TRASH_DATABASE  # not the store: said so (``DeletePartlyApplied``)
            raise


@store_operation
def _locked_delete(
    batch: list[str],
    *,
    copied: tuple[int, bytes, dict] | None,
    committed: list,
    how: _Deleting,
    in_parts: bool = False,
) -> tuple[int, int, int] | _Kept | None:
    """Under the store's write lock: delete the batch's rows, their trash copy committed first.

    With ``copied`` (a pending trash entry and the rows it holds, copied before
    the lock) the rows go only if they are still exactly those and the entry is
    still pending; otherwise nothing changes and None says to copy again.
    Without it the rows are copied here, under the lock.

    A held session (or, with ``keep_live``, a live one, or with ``how.whole`` one of a
    conversation to keep whole) stops the batch: nothing of it is deleted, and such a
    session a delete had started in parts gets its parts back (``_give_back_parts``), in
    this transaction; ``_Kept`` says which. ``in_parts``: the last step of a delete in parts,
    which goes only while its session is still marked (a cancel, or another delete keeping
    it, gave it back meanwhile: ``DeleteGivenBack``, nothing deleted).
    """
    batch, payload = snapshot_rows(batch, lock=True)
    # Under the lock: a hold placed after the preview, or while a job runs, still stops it.
    marked = being_deleted.marks_on(batch)
    if in_parts and batch and not marked:
        return _Kept(given_back=batch[0])
    held = holds.holds_on(batch)
    if held:
        _give_back([sid for sid in batch if sid in marked and sid in held], how)
        return _Kept(held=held)
    if how.whole is not None and batch:
        # A conversation continued, or merged, after the preview stays whole.
        kept = kept_whole(batch, how.whole, lock=True)
        if kept:
            _give_back([sid for sid in batch if sid in marked and sid in kept], how)
            return _Kept(whole=kept)
    if how.keep_live:
        live = [s["id"] for s in payload["sessions"] if s.get("ended_at") is None]
        if live:
            _give_back([sid for sid in live if sid in marked], how)
            return _Kept(live=tuple(live))
    if copied is not None:
        entry_id, copied_key, copied_payload = copied
        if (
            not batch
            or not _same_rows(payload, copied_key, copied_payload)
            or not how.trash.is_pending(entry_id)
        ):
            return None
        how.trash.discard_unfinished(batch, keep=entry_id)
    elif not batch:
        return 0, 0, 0
    else:
        how.trash.discard_unfinished(batch)
        entry_id = how.open_entry(batch, payload)
    faults.checkpoint("delete.after_trash_copy")
    marks = db.placeholders(batch)
    names = [row["name"] for row in payload["conversations"]]
    response_ids = [row["response_id"] for row in payload["responses"]]
    try:
        if payload["kept_children"]:
            db.execute(
                f"UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id IN ({marks}) "
                f"AND id NOT IN ({marks})",
                [*batch, *batch],
            )
        with transaction.atomic(using=responses_alias()):
            if names:
                db.execute(
                    f"DELETE FROM conversations WHERE name IN ({db.placeholders(names)})",
                    names,
                    alias=responses_alias(),
                )
            if response_ids:
                db.execute(
                    f"DELETE FROM responses WHERE response_id IN ({db.placeholders(response_ids)})",
                    response_ids,
                    alias=responses_alias(),
                )
        db.execute(f"DELETE FROM messages WHERE session_id IN ({marks})", batch)
        # Children before parents inside the batch too (the foreign key is checked per statement).
        db.execute(f"DELETE FROM sessions WHERE id IN ({marks})", batch)
        if marked:  # the last step of a delete in parts: the session is gone, so is its state
            db.execute(f"DELETE FROM sessions_admin_deletions WHERE session_id IN ({marks})", batch)
            being_deleted.drop_parts(batch)  # a purge's copies of its parts: no longer needed
    except Exception:
        how.trash.discard(entry_id)
        raise
    faults.checkpoint("delete.before_commit")
    _complete_on_commit(
        entry_id,
        committed,
        how,
        sessions=len(payload["sessions"]),
        messages=len(payload["messages"]),
    )
    return len(payload["sessions"]), len(payload["messages"]), entry_id


def _complete_on_commit(
    entry_id: int, committed: list, how: _Deleting, *, sessions: int, messages: int
) -> None:
    """Once the store commits the delete, its trash entry is complete (its rows only there)."""

    def mark_complete() -> None:
        committed.append(entry_id)
        if how.committed is not None:
            how.committed.append((entry_id, sessions, messages))
        faults.checkpoint("delete.after_commit")
        try:
            how.trash.mark_complete(entry_id)
        except Exception as error:
            error.database = TRASH_DATABASE
            raise

    transaction.on_commit(mark_complete, using="store")


@dataclass(frozen=True)
class _Kept:
    """What stopped a batch under the lock: held sessions, or live ones a delete keeps."""

    held: dict | None = None
    live: tuple[str, ...] = ()
    given_back: str | None = None
    whole: dict | None = None  # session -> why its conversation stays whole

    def error(self) -> StoreError:
        if self.given_back:
            return DeleteGivenBack(self.given_back)
        if self.whole:
            return ConversationsKept(self.whole)
        return holds.SessionsHeld(self.held) if self.held else SessionsWentLive(self.live)


def delete_batch(
    batch: list[str],
    *,
    actor: str,
    reason: str,
    job_id: int | None,
    trash: Trash | None = None,
    operation: str | None = None,
    keep_live: bool = False,
    part_messages: int | None = None,
    between_parts: Callable[[], bool | None] | None = None,
    whole: WholeConversations | None = None,
    committed: list | None = None,
) -> tuple[int, int, int]:
    """Trash then delete one batch (children first). Returns (sessions, messages, trash id).

    ``operation``: the operator action the batch belongs to (its trash entry is
    restored with the action's other batches); a batch of its own without it.

    The rows are read and their trash copy committed before the store's write
    lock is taken, so the runtime's writers wait only for the delete itself;
    under the lock the rows are read again and deleted only if unchanged (a
    runtime that wrote to them meanwhile gets them copied again). After
    ``COPY_ATTEMPTS`` changed copies the copy is taken under the lock.

    A batch of one session with more than ``part_messages`` messages (default
    ``BATCH_MESSAGES``) is deleted in parts (``_delete_in_parts``), calling
    ``between_parts`` after each (False from it stops the delete and gives the session back:
    ``DeleteGivenBack``). ``keep_live``: a session found live under the
    lock is kept (``SessionsWentLive``); a held one raises ``SessionsHeld``;
    with ``whole`` (a delete of a previewed set), a session whose conversation must stay
    whole (``kept_whole``) raises ``ConversationsKept``. Either way nothing of the batch
    is deleted. ``committed``: a list each store commit is appended to as it happens
    (trash entry, sessions, messages), kept whatever the batch raises afterwards.
    """
    how = _Deleting(
        actor=actor,
        reason=reason,
        job_id=job_id,
        trash=_trash_or_default(trash),
        operation=operation or new_operation_id(),
        keep_live=keep_live,
        whole=whole,
        committed=committed,
    )
    part_messages = part_messages or BATCH_MESSAGES
    if len(batch) == 1:
        row = db.fetchone("SELECT message_count FROM sessions WHERE id = %s", [batch[0]])
        if row is not None and (int(row[0] or 0) > part_messages or being_deleted.marks_on(batch)):
            return _delete_in_parts(batch[0], how, part_messages, between_parts)
    return _delete_whole(batch, how)


def _delete_whole(
    batch: list[str], how: _Deleting, *, in_parts: bool = False
) -> tuple[int, int, int]:
    """``delete_batch`` for whole sessions: each of them, with all its rows, in one transaction.
    ``in_parts``: the last step of ``_delete_in_parts`` (see ``_locked_delete``)."""
    for _ in range(COPY_ATTEMPTS):
        present, payload = snapshot_rows(batch, lock=False)
        if not present:
            return 0, 0, 0
        done = _copy_then_delete(
            present,
            payload,
            lambda copied, committed, present=present: _locked_delete(
                present, copied=copied, committed=committed, how=how, in_parts=in_parts
            ),
            how,
        )
        if done is not None:
            return done
    done = _locked_delete(batch, copied=None, committed=[], how=how, in_parts=in_parts)
    if isinstance(done, _Kept):
        raise done.error()
    return done


def _copy_then_delete(
    session_ids: list[str],
    payload: dict,
    locked: Callable[[tuple[int, bytes, dict], list], object],
    how: _Deleting,
):
    """Commit ``payload``'s trash copy (a pending entry), then run ``locked(copied, committed)``
    (the delete under the store's lock, given the entry and the rows' key).

    Returns what ``locked`` returned; None (the rows changed: copy again) with the entry
    dropped. A ``_Kept`` answer drops the entry and raises its error; so does a failure
    before the store committed.
    """
    entry_id = how.open_entry(session_ids, payload)
    committed: list = []
    try:
        # Keyed here, before the lock: the runtime waits only for the re-read's key.
        done = locked((entry_id, rows_key(payload), payload), committed)
    except Exception:
        if not committed:  # the store delete never committed: the copy is not needed
            how.trash.discard(entry_id)
        raise
    if done is None or isinstance(done, _Kept):
        how.trash.discard(entry_id)
    if isinstance(done, _Kept):
        raise done.error()
    return done


def _delete_in_parts(
    session_id: str,
    how: _Deleting,
    part_messages: int,
    between_parts: Callable[[], bool | None] | None,
) -> tuple[int, int, int]:
    """Delete one large session in several short store transactions (``core.being_deleted``).

    The session is marked being deleted first (the core then refuses writes to
    it); then its oldest ``part_messages`` messages at a time go, each part
    copied to the trash and deleted under the lock like a batch; last the
    session row with what is left, its mark cleared in that transaction. Every
    part is an entry of the delete's operation: restoring any of them restores the lot.

    A purge (``NO_TRASH``) keeps its parts in the store instead (``being_deleted.keep_part``),
    dropped with the session row: a purge stopped before its last step gives the session back
    whole exactly as a delete into the trash does (``_give_back_parts``), so a hold placed, or
    the session going live, midway keeps it whole in either mode.

    ``between_parts`` returning False (its job was cancelled) stops the delete: the session is
    given back and ``DeleteGivenBack`` raised.
    """
    if not being_deleted.table_present():
        _create_deletions_table()
    if isinstance(how.trash, NoTrash):
        _create_parts_table()
    kept = _mark_being_deleted(session_id, how)
    if kept is not None:
        raise kept.error()
    removed = 0
    while True:
        ids = [
            r[0]
            for r in db.fetchall(
                "SELECT id FROM messages WHERE session_id = %s ORDER BY id LIMIT %s",
                [session_id, part_messages + 1],
            )
        ]
        if len(ids) <= part_messages:
            break
        removed += _delete_part(session_id, ids[:part_messages], how)
        faults.checkpoint("delete.between_parts")
        if between_parts is not None and between_parts() is False:
            stop_deleting(session_ids=[session_id], trash=how.trash)
            raise DeleteGivenBack(session_id)
    sessions, messages, entry_id = _delete_whole([session_id], how, in_parts=True)
    return sessions, removed + messages, entry_id


@store_operation
def _create_deletions_table() -> None:
    """On a store an older version attached: committed on its own, before anything is marked."""
    being_deleted.ensure_table()


@store_operation
def _create_parts_table() -> None:
    """Before a purge in parts marks its session: where its parts are kept (committed apart)."""
    being_deleted.ensure_parts_table()


def _kept_whole(session_id: str, ended_at: float | None, how: _Deleting) -> _Kept | None:
    """Under the session's row lock: a hold on it, (``keep_live``) its being live, or (``whole``)
    its conversation to keep whole keeps it whole: what a delete in parts took of it comes
    back (``_give_back_parts``)."""
    held = holds.holds_on([session_id])
    if held or (how.keep_live and ended_at is None):
        _give_back([session_id], how)
        return _Kept(held=held) if held else _Kept(live=(session_id,))
    if how.whole is not None:
        kept = kept_whole([session_id], how.whole, lock=True)
        if kept:
            _give_back([session_id], how)
            return _Kept(whole=kept)
    return None


@store_operation
def _mark_being_deleted(session_id: str, how: _Deleting) -> _Kept | None:
    """Put the session in the being-deleted state, under its row lock (refused: what stops it)."""
    row = db.fetchone(
        "SELECT id, ended_at FROM sessions WHERE id = %s" + db.for_update(), [session_id]
    )
    if row is None:
        return None  # gone meanwhile: the whole-session step finds nothing to do
    kept = _kept_whole(session_id, row[1], how)
    if kept is not None:
        return kept
    if being_deleted.marks_on([session_id]):
        # A delete killed between parts (or another one running): this one carries on with it.
        db.execute(
            "UPDATE sessions_admin_deletions SET operation = %s, actor = %s, keep_live = %s "
            "WHERE session_id = %s",
            [how.operation, how.actor, int(how.keep_live), session_id],
        )
    else:
        db.execute(
            "INSERT INTO sessions_admin_deletions (session_id, operation, actor, started_at, "
            "keep_live) VALUES (%s, %s, %s, %s, %s)",
            [session_id, how.operation, how.actor, time.time(), int(how.keep_live)],
        )
    return None


def _part_payload(session_id: str, message_ids: Sequence[int], *, lock: bool = False) -> dict:
    """A part's trash payload: some messages of a session whose row is not (yet) in it.

    ``lock``: the messages read stay locked (PostgreSQL) until the part's delete commits.
    """
    return {
        "sessions": [],
        "messages": _all_columns(
            "messages",
            f"id IN ({db.placeholders(message_ids)}) AND session_id = %s ORDER BY id"
            + (db.for_update() if lock else ""),
            [*message_ids, session_id],
        ),
        "conversations": [],
        "responses": [],
        "kept_children": [],
        "dependents": {},
        "part_of": session_id,
    }


def _delete_part(session_id: str, message_ids: list[int], how: _Deleting) -> int:
    """One part of ``_delete_in_parts``: trash then delete these messages; how many went."""
    for _ in range(COPY_ATTEMPTS + 1):
        payload = _part_payload(session_id, message_ids)
        if not payload["messages"]:
            return 0
        done = _copy_then_delete(
            [session_id],
            payload,
            lambda copied, committed: _locked_delete_part(
                session_id, copied=copied, committed=committed, how=how
            ),
            how,
        )
        if done is not None:
            return done
        # Changed under us (a runtime rewrote one of these messages): read the part again. One
        # that keeps changing makes the delete give up as busy, nothing of the part deleted.
    raise StoreBusy("deleting a session in parts", COPY_ATTEMPTS + 1)


@store_operation
def _locked_delete_part(
    session_id: str,
    *,
    copied: tuple[int, bytes, dict],
    committed: list,
    how: _Deleting,
) -> int | _Kept | None:
    """Under the store's write lock: delete one part's messages if they are still as copied."""
    row = db.fetchone(
        "SELECT id, ended_at FROM sessions WHERE id = %s" + db.for_update(), [session_id]
    )
    entry_id, copied_key, copied_payload = copied
    if row is None:
        return 0  # another delete finished it meanwhile
    if not being_deleted.marks_on([session_id]):
        return _Kept(given_back=session_id)  # a restore or another delete gave it back
    kept = _kept_whole(session_id, row[1], how)
    if kept is not None:
        return kept
    message_ids = [m["id"] for m in copied_payload["messages"]]
    now = _part_payload(session_id, message_ids, lock=True)
    if not _same_rows(now, copied_key, copied_payload) or not how.trash.is_pending(entry_id):
        return None
    # Under the lock, as for a whole batch: a pending part of a process that died before its
    # commit is dropped (its rows are all here), one that died after it is settled.
    how.trash.discard_unfinished([session_id], keep=entry_id)
    if isinstance(how.trash, NoTrash):
        # A purge keeps no trash copy: the part is kept in the store, in this transaction,
        # until the session row goes, so a stop before then can still give it back.
        being_deleted.keep_part(session_id, message_ids)
    faults.checkpoint("delete.after_trash_copy")
    db.execute(f"DELETE FROM messages WHERE id IN ({db.placeholders(message_ids)})", message_ids)
    faults.checkpoint("delete.before_commit")
    _complete_on_commit(entry_id, committed, how, sessions=0, messages=len(message_ids))
    return len(message_ids)


@store_operation
def stop_deleting(*, session_ids: Sequence[str], trash: Trash | None = None) -> tuple[str, ...]:
    """Give back the sessions among these that a delete left in parts (killed, cancelled or
    skipping them): their deleted parts return from the trash and they are writable again.
    Returns the sessions given back."""
    ids = list(dict.fromkeys(session_ids))
    if not ids:
        return ()
    present = [
        r[0]
        for r in db.fetchall(
            f"SELECT id FROM sessions WHERE id IN ({db.placeholders(ids)}) ORDER BY id"
            + db.for_update(),
            ids,
        )
    ]
    marked = [sid for sid in present if sid in being_deleted.marks_on(present)]
    _give_back_parts(marked, trash=trash)
    return tuple(marked)


def _give_back(session_ids: Sequence[str], how: _Deleting) -> None:
    """``_give_back_parts`` inside a delete: the parts it gives back are no longer what the
    delete committed (``DeletePartlyApplied`` counts only what stays in the trash)."""
    given = set(_give_back_parts(session_ids, trash=how.trash))
    if given and how.committed is not None:
        how.committed[:] = [done for done in how.committed if done[0] not in given]


def _give_back_parts(session_ids: Sequence[str], *, trash: Trash | None) -> list[int]:
    """Put back the parts already deleted of these sessions and clear their being-deleted state.

    In the caller's store transaction (under the sessions' locks): a delete that
    must keep a session it had started in parts (a hold landed, it went live
    under a delete that keeps live sessions, or its job was cancelled) leaves it
    exactly as it was. The parts' trash entries go once the store commits
    (``Trash.give_back``): the trash then shows only what the store lost. A purge's parts
    come back from the store's own copy (``being_deleted.put_back_parts``), whatever trash is
    passed: a purge is given back like any other delete.
    """
    marks = being_deleted.marks_on(session_ids)
    if not marks:
        return []
    trash = _trash_or_default(trash)
    restored: list[int] = []
    for session_id in marks:
        for entry in trash.part_entries([session_id]):
            contents = trash.contents(entry)
            if contents is None or contents.restored or contents.rows.get("part_of") != session_id:
                continue
            _insert_rows("messages", contents.rows["messages"])
            restored.append(entry)
        being_deleted.put_back_parts(session_id)  # a purge's parts, kept in the store
        db.execute("DELETE FROM sessions_admin_deletions WHERE session_id = %s", [session_id])
    _advance_message_sequence()

    def given_back() -> None:
        for entry in restored:
            trash.give_back(entry)

    transaction.on_commit(given_back, using="store")
    return restored


def _advance_message_sequence() -> None:
    if db.vendor() == "postgresql":
        # Only ever forward: a concurrent append may hold a higher id not yet committed
        # (so MAX(id) cannot see it); moving back would hand that id out again.
        db.execute(
            "SELECT setval(pg_get_serial_sequence('messages', 'id'), "
            "GREATEST((SELECT MAX(id) FROM messages), "
            "nextval(pg_get_serial_sequence('messages', 'id'))))"
        )


def delete_in_batches(
    session_ids: Sequence[str],
    *,
    actor: str,
    reason: str,
    job_id: int | None = None,
    batch_sessions: int | None = None,
    batch_messages: int | None = None,
    trash: Trash | None = None,
    operation: str | None = None,
    whole: WholeConversations | None = None,
    committed: list | None = None,
) -> Iterable[tuple[list[str], int, int, int]]:
    """Delete sessions (given children first) in short batches; yield (batch, sessions, messages, trash id).

    Every batch's trash entry belongs to ``operation`` (a new one if not given):
    one call is one restorable unit, however many batches it takes. ``whole``: each
    batch keeps the conversations it must (``kept_whole``), raising ``ConversationsKept``.
    """
    operation = operation or new_operation_id()
    # Read when called (not bound as defaults), so a test can lower them for a whole cascade.
    batch_sessions = batch_sessions or BATCH_SESSIONS
    batch_messages = batch_messages or BATCH_MESSAGES
    pending = list(session_ids)
    while pending:
        batch: list[str] = []
        weight = 0
        while pending and len(batch) < batch_sessions:
            candidate = pending[0]
            row = db.fetchone("SELECT message_count FROM sessions WHERE id = %s", [candidate])
            size = int(row[0] or 0) if row else 0
            if batch and weight + size > batch_messages:
                break
            batch.append(pending.pop(0))
            weight += size
        deleted, messages, trash_id = delete_batch(
            batch,
            actor=actor,
            reason=reason,
            job_id=job_id,
            trash=trash,
            operation=operation,
            part_messages=batch_messages,
            whole=whole,
            committed=committed,
        )
        yield batch, deleted, messages, trash_id


def execute_cascade_delete(
    *,
    session_ids: Sequence[str],
    include_branches: bool = False,
    expected_fingerprint: str,
    actor: str,
    reason: str,
    trash: Trash | None = None,
    lose_undo: bool = False,
    operation: str | None = None,
) -> DeleteResult:
    """Delete exactly the previewed plan (refused if the store changed since).

    However many batches it takes, the delete is one trash operation: restoring
    any of its entries restores them all.

    A plan holding a session a merge that can still be undone needs (``plan.merges``)
    runs only with ``lose_undo``: the operator confirmed that the merge can no longer be
    undone (until the trash entry is restored; the trash page names the merge).
    """
    if not reason or not reason.strip():
        raise InvalidInput("A reason is required for a delete.")
    plan = plan_cascade_delete(session_ids=session_ids, include_branches=include_branches)
    if plan.fingerprint != expected_fingerprint:
        raise PlanChanged("delete")
    holds.refuse_held(plan.session_ids)
    if plan.merges and not lose_undo:
        raise InvalidInput(lost_undo_words(plan) + " Confirm that, or undo the merge first.")
    # The caller's id, when it records it before the delete runs (its audit entry): what
    # committed can then be read from the trash even if the caller never learns the result.
    operation = operation or new_operation_id()
    # Between its batches, a session the runtime links to one still to go (a delegate, a
    # continuation) or a merge made meanwhile stops the cascade before that batch.
    whole = WholeConversations(
        remaining=set(plan.session_ids),
        cut=frozenset(child for child, _ in plan.kept_children),
        lose_undo_of=frozenset(plan.lost_undos),
    )
    committed: list[tuple[int, int, int]] = []
    try:
        for _batch in delete_in_batches(
            plan.session_ids,
            actor=actor,
            reason=reason,
            trash=trash,
            operation=operation,
            whole=whole,
            committed=committed,
        ):
            faults.checkpoint("cascade.between_batches")
    except Exception as error:
        if not committed:
            if where := db.storage_failure(error):
                raise DatabaseNotWritten(_failed_database(error), where) from error
            raise
        raise DeletePartlyApplied(
            result=_committed_result(committed, operation, plan),
            planned_sessions=len(plan.session_ids),
            planned_messages=plan.message_count,
            error=error,
        ) from error
    return _committed_result(committed, operation, plan)


def _committed_result(
    committed: Sequence[tuple[int, int, int]], operation: str, plan: DeletePlan
) -> DeleteResult:
    """What the store committed, commit by commit (a session's parts count its messages)."""
    return DeleteResult(
        deleted_sessions=sum(sessions for _entry, sessions, _messages in committed),
        deleted_messages=sum(messages for _entry, _sessions, messages in committed),
        trash_entry_ids=tuple(entry for entry, _sessions, _messages in committed),
        operation=operation,
        lost_undos=plan.lost_undos,
    )


TRASH_DATABASE = "trash"  # ``error.database`` of a failure writing the trash (not the store)


def _failed_database(error: BaseException) -> str:
    """Which database refused the write: the trash's (tagged where it is written) or the store."""
    return getattr(error, "database", None) or "store"


class DeletePartlyApplied(Exception):
    """A delete failed after some of its batches committed: those stay deleted, in the trash.

    Not a ``StoreError`` (those mean nothing changed). ``result`` is exactly what
    committed, batch by batch, with the trash operation restoring it (undo) and
    the rest of the plan still in the store (planning the delete again finishes it).
    ``error`` is what stopped it; ``database``/``storage`` say whether a database
    could not be written (``db.storage_failure``), and which.
    """

    def __init__(
        self,
        *,
        result: DeleteResult,
        planned_sessions: int,
        planned_messages: int,
        error: BaseException,
    ):
        self.result = result
        self.planned_sessions = planned_sessions
        self.planned_messages = planned_messages
        self.error = error
        self.storage = db.storage_failure(error)
        self.database = _failed_database(error) if self.storage else None
        batches = len(result.trash_entry_ids)
        if self.storage:
            why = f"{database_words(self.database, self.storage)}: "
        else:
            why = f"the delete stopped ({error}): "
        super().__init__(
            _sentence(why)
            + f"{batches} {'batch was' if batches == 1 else 'batches were'} deleted before it "
            f"({result.deleted_sessions} of {planned_sessions} sessions, "
            f"{result.deleted_messages} of {planned_messages} messages), restorable from the "
            f"trash as one operation (entry #{result.trash_entry_ids[0]}). The rest is still in "
            "the store: delete it again to finish, or restore the trash entry to undo."
        )


def database_words(database: str, storage: str) -> str:
    """ "the store's disk is full" / "the dashboard database could not be written (...)"."""
    why = (
        "its disk is full"
        if storage == "full"
        else "a disk I/O error: a full disk or a read-only file"
    )
    if database == TRASH_DATABASE:
        return f"the dashboard database could not be written ({why})"
    if storage == "full":
        return "the store's disk is full"
    return f"the store could not be written ({why})"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


class DatabaseNotWritten(StoreError):
    """A delete stopped because a database could not be written, before anything committed."""

    def __init__(self, database: str, storage: str):
        self.database = database
        self.storage = storage
        super().__init__(_sentence(f"{database_words(database, storage)}: nothing was changed."))


def _insert_rows(table: str, rows: list[dict], *, alias: str | None = None) -> None:
    if not rows:
        return
    columns = [c for c in rows[0] if c in existing_columns(alias or "store", table)]
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({db.placeholders(columns)})"
    with db.cursor(alias) as c:
        c.executemany(sql, [[row.get(col) for col in columns] for row in rows])


def _merged_rows(entries: Sequence[TrashContents]) -> dict:
    """One payload holding every entry's rows (the batches of one operation)."""
    merged: dict = {
        "sessions": [],
        "messages": [],
        "conversations": [],
        "responses": [],
        "kept_children": [],
        "dependents": {},
    }
    for entry in entries:
        for key in ("sessions", "messages", "conversations", "responses", "kept_children"):
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
    # A session comes back whole: parts of it another operation took (a delete killed between
    # its parts, then run again) come back with its row, never left behind in the trash.
    taken = {e.entry_id for e in entries}
    row_ids = [s["id"] for e in entries for s in e.rows.get("sessions", [])]
    for part_id in trash.part_entries(row_ids) if row_ids else ():
        if part_id not in taken:
            part = trash.contents(part_id)
            if part is not None and not part.restored:
                entries.append(part)
                taken.add(part_id)
    entries.sort(key=lambda e: e.entry_id)
    payload = _merged_rows(entries)
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
    # Parts of a session deleted in parts whose last step is not in this operation (it was
    # killed, or stopped, between parts): the session is still in the store, marked being
    # deleted, and its parts go back into it.
    part_sessions = sorted({m["session_id"] for m in payload["messages"]} - set(ids))
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
    # The key may have moved on while these sessions were in the trash: its live
    # session now stays live, and a restored one that was live ends (one live per key).
    keys = {s["session_key"] for s in sessions if s.get("session_key")}
    db.lock_names(*(db.key_lock_name(k) for k in keys))
    live_now = [lineage.live_session_for_key(k) for k in sorted(keys)]
    restored_ids = tuple(e.entry_id for e in entries)
    try:
        trash.begin_restore(restored_ids, actor=actor)
    except Exception as error:
        if storage := db.storage_failure(error):
            raise DatabaseNotWritten(TRASH_DATABASE, storage) from error
        raise
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
    _insert_rows("messages", payload["messages"])
    if part_sessions:
        db.execute(
            "DELETE FROM sessions_admin_deletions WHERE session_id IN "
            f"({db.placeholders(part_sessions)})",
            part_sessions,
        )
    for table, rows in payload.get("dependents", {}).items():
        _insert_rows(table, rows)
    if message_ids:
        _advance_message_sequence()
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
    # Children the delete left in the store, and children an earlier restore brought back
    # before this operation (``keep_waiting_link``): their parent is back.
    for child, parent in payload["kept_children"]:
        db.execute(
            "UPDATE sessions SET parent_session_id = %s WHERE id = %s AND parent_session_id IS NULL",
            [parent, child],
        )
    faults.checkpoint("restore.before_commit")

    def mark_restored() -> None:
        faults.checkpoint("restore.after_commit")
        trash.mark_restored(restored_ids, actor=actor)

    # Only once the rows are back: marked earlier (the dashboard's database commits on its
    # own), a store transaction that then failed or died would leave the entry "restored",
    # purgeable and not restorable again, while its rows are nowhere. A mark the dashboard
    # refuses (its disk is full) does not undo the restore: the intent recorded above stays,
    # and ``settle`` marks the entries from the store later.
    transaction.on_commit(mark_restored, using="store", robust=True)
    return RestoreResult(
        asked.entry_id,
        tuple(ids),
        len(message_ids),
        tuple(skipped),
        restored_ids,
        waiting_links=tuple(waiting),
        lost_links=tuple(lost),
    )
