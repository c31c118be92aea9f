"""Bulk delete as a background job: small batches, a lease, resumable, never twice.

A job snapshots the confirmed set of ids (``expected_ids``: ``deletion.preview_bulk_delete``'s,
live sessions only if asked) as items and deletes exactly that set. The worker holding the lease
deletes pending items in short batches (``deletion.delete_batch``: trash first, then one short
store transaction); a dead worker's lease expires and the next resumes at the first pending item,
skipping items already gone. All batches share the job's trash operation (``trash.job_operation``):
the job restores as one unit. Items go conversation by conversation, and each batch, before and
again under the store's lock (``deletion.kept_whole``), keeps every session of a conversation that
gained a session the job does not take or that a merge made meanwhile needs; held sessions are
skipped. A batch that kept or skipped any writes an audit entry naming them and why
(``KEPT_WHOLE_ACTION``, ``HELD_SKIP_ACTION``), which the job's progress reads.
A job's done items are exactly the sessions whose rows its trash entries hold: one that
another delete committed first (a second job of the same set, a cascade) is skipped, and
the job's progress names who took it (``taken_skips``).

A confirmed cascade delete or trash restore whose plan is too large to run within about a
second in the request (``cascade_runs_as_job``, ``restore_runs_as_job``) is a job too
(``DeleteJob.kind``): the request checks and claims it exactly as it would run it, records
its audit entry (pending) and the job; the worker runs it with a runner its actions module
registers (``register_runner``: ``ledger.actions`` imports this module, not the reverse)
and completes that audit entry. Such a job cannot be cancelled: stopped halfway it would
leave half a cascade, or, for a restore (one store transaction), nothing to stop.

Over 800 lines on purpose: creating a job, its lease, its run, the skips it records and the
progress read from them are one protocol over the same item states and lease columns; split,
each part would have to restate the others' rules about them.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connections, router, transaction
from django.db.models import Case, Count, F, Q, Sum, When
from django.utils import timezone

from sessions_admin.core import being_deleted, db, deletion, faults, holds, lineage
from sessions_admin.core.errors import InvalidInput, StoreBusy, StoreError
from sessions_admin.core.text import says_something
from sessions_admin.ledger.models import (
    AuditAction,
    AuditEntry,
    AuditSession,
    DeleteJob,
    DeleteJobItem,
    TrashEntry,
    TrashSession,
)
from sessions_admin.ledger.trash import (
    LEDGER_TRASH,
    job_operation,
    settle_trash,
    stale_pending_trash,
)
from sessions_admin.ledger.wake import announce_job
from sessions_admin.store import cached

logger = logging.getLogger(__name__)
LEASE_SECONDS = 30

# From what size a confirmed cascade or restore runs as a job instead of in the request.
# Measured on the shared 2-core machine (one session of 2,000 and of 6,000 short messages,
# ``actions.cascade_delete`` then ``actions.restore``, SQLite and PostgreSQL): a cascade
# deletes about 0.09-0.10 ms a message (6,000 in 0.53-0.61 s), a restore puts back about
# 0.18-0.47 ms a message (6,000 in 1.1-2.0 s); the demo store's longer messages cost more
# (20,000 took 6.8 s to delete and 11.8 s to restore, issue 29). So from 5,000 messages a cascade, and from 2,500 a
# restore, can take a second or more; and a plan of more than one batch of sessions
# (``deletion.BATCH_SESSIONS``) too. Settings, so tests use small sessions.
CASCADE_JOB_MESSAGES = 5_000
RESTORE_JOB_MESSAGES = 2_500
LONG_JOB_SESSIONS = deletion.BATCH_SESSIONS


def cascade_runs_as_job(*, sessions: int, messages: int) -> bool:
    """Whether a confirmed cascade this large runs as a job (over about a second)."""
    return messages >= int(
        getattr(settings, "SESSIONS_ADMIN_CASCADE_JOB_MESSAGES", CASCADE_JOB_MESSAGES)
    ) or sessions > int(getattr(settings, "SESSIONS_ADMIN_LONG_JOB_SESSIONS", LONG_JOB_SESSIONS))


def restore_runs_as_job(*, sessions: int, messages: int) -> bool:
    """Whether a restore of a trash operation this large runs as a job."""
    return messages >= int(
        getattr(settings, "SESSIONS_ADMIN_RESTORE_JOB_MESSAGES", RESTORE_JOB_MESSAGES)
    ) or sessions > int(getattr(settings, "SESSIONS_ADMIN_LONG_JOB_SESSIONS", LONG_JOB_SESSIONS))


# kind -> the function that works on such a job (its lease held), registered by its actions.
_RUNNERS: dict[str, Callable[[DeleteJob, str], None]] = {}


def register_runner(kind: str, runner: Callable[[DeleteJob, str], None]) -> None:
    _RUNNERS[kind] = runner


def _insert_items(job_id: int, pending: Sequence[str], *, skipped: Sequence[str] = ()) -> None:
    """A job's items, in order: ``pending`` to delete, then ``skipped`` (left out, named).
    One executemany: a 100,000-session job snapshots in a second, not a minute of building
    model instances."""
    rows = [(job_id, n, sid, DeleteJobItem.PENDING) for n, sid in enumerate(pending)]
    rows += [
        (job_id, len(pending) + n, sid, DeleteJobItem.SKIPPED) for n, sid in enumerate(skipped)
    ]
    with connections["default"].cursor() as c:
        c.executemany(
            f"INSERT INTO {DeleteJobItem._meta.db_table} (job_id, position, session_id, state) "
            "VALUES (%s, %s, %s, %s)",
            rows,
        )


def create_action_job(
    *,
    kind: str,
    actor: str,
    reason: str,
    description: str,
    operation: str,
    audit_entry: int,
    params: dict,
    total: int,
    total_messages: int,
    session_ids: Sequence[str] = (),
) -> int:
    """The job of a checked cascade (``session_ids``: its plan, children first, as items)
    or restore: the worker runs it and completes ``audit_entry``. Returns its id."""
    with transaction.atomic(using="default"):
        job = DeleteJob.objects.create(
            kind=kind,
            created_by=actor,
            reason=reason,
            description=description[:2000],
            total=total,
            total_messages=total_messages,
            operation=operation,
            audit_entry=audit_entry,
            params=params,
        )
        _insert_items(job.pk, session_ids)
        announce_job()
    return job.pk


def action_job_of(audit_entry: int) -> DeleteJob | None:
    """The unfinished job completing this audit entry (its outcome is the job's to record)."""
    return (
        DeleteJob.objects.filter(
            audit_entry=audit_entry, state__in=[DeleteJob.PENDING, DeleteJob.RUNNING]
        )
        .only("pk", "state")
        .first()
    )


def finish_action_job(job_id: int, *, error: str = "") -> None:
    """The job's work is over (its audit entry completed): done, or failed with ``error``."""
    DeleteJob.objects.filter(pk=job_id).update(
        state=DeleteJob.FAILED if error else DeleteJob.DONE,
        error=error[:2000],
        finished_at=timezone.now(),
        lease_owner="",
        lease_expires_at=None,
    )


def renew_lease(job_id: int) -> None:
    DeleteJob.objects.filter(pk=job_id, state=DeleteJob.RUNNING).update(
        lease_expires_at=timezone.now() + timedelta(seconds=LEASE_SECONDS)
    )


# The audit entry a job writes for each batch in which it left sessions out under a legal hold:
# the job's page and result name every such session with its hold from these.
HELD_SKIP_ACTION = AuditAction.BULK_DELETE_HELD
HELD_SKIPS_NAMED = 20  # held sessions a job's progress names (the audit entries keep them all)
# The audit entry of a batch that kept conversations whole, each session with why.
KEPT_WHOLE_ACTION = AuditAction.BULK_DELETE_KEPT_WHOLE


@dataclass(frozen=True)
class KeptSkip:
    """A session a job left out to keep its conversation whole."""

    session_id: str
    why: str  # "its conversation continued in s-9", "target of merge #5, which can ..."

    def describe(self) -> str:
        return f"kept: {self.session_id}, {self.why}"


@dataclass(frozen=True)
class HeldSkip:
    """A session a job left out because a legal hold covers it."""

    session_id: str
    hold_id: int
    hold: str  # the hold in words, as it stood when the job skipped the session

    def describe(self) -> str:
        return f"{self.session_id}, hold #{self.hold_id}"


@dataclass(frozen=True)
class ErasedSkip:
    """Pending sessions of a job that an erasure request took before the job reached them
    (their items go with the person: ``ledger.erasure.note_erased_job_items``)."""

    request_id: int
    count: int

    def describe(self) -> str:
        return f"{self.count:,} erased by erasure request #{self.request_id}"


def erased_skips(job: DeleteJob, key: str = DeleteJob.ERASED_ITEMS) -> tuple[ErasedSkip, ...]:
    """By erasure request: the pending sessions it took (``ERASED_ITEMS``), or those the job
    had deleted that it took out of the trash (``ERASED_FROM_TRASH``)."""
    erased = (job.params or {}).get(key) or {}
    return tuple(
        ErasedSkip(int(request_id), int(count))
        for request_id, count in sorted(erased.items(), key=lambda pair: int(pair[0]))
    )


@dataclass(frozen=True)
class TakenSkip:
    """Sessions of a job that another delete committed first (its trash holds them): another
    job of the same set, or (``job_id`` None) a cascade."""

    job_id: int | None
    count: int

    def describe(self) -> str:
        by = f"job #{self.job_id}" if self.job_id else "another delete"
        return f"{self.count:,} already deleted by {by}"


@dataclass(frozen=True)
class JobProgress:
    job_id: int
    state: str
    total: int
    processed: int
    deleted: int
    skipped: int
    deleted_messages: int
    sessions_per_second: float | None
    error: str
    # Skipped under a legal hold: how many, and the first HELD_SKIPS_NAMED of them.
    held_skipped: int = 0
    held: tuple[HeldSkip, ...] = ()
    # Kept to keep a conversation whole: how many, and the first HELD_SKIPS_NAMED of them.
    kept_skipped: int = 0
    kept: tuple[KeptSkip, ...] = ()
    # Already deleted by another delete when the job's batch reached them, by deleter.
    taken: tuple[TakenSkip, ...] = ()
    # Taken by an erasure before the job reached them (counted in ``skipped``), by request.
    erased: tuple[ErasedSkip, ...] = ()
    # Sessions it deleted that an erasure took out of its trash entry since.
    erased_from_trash: tuple[ErasedSkip, ...] = ()
    # Kept in the store with their link to a deleted parent cleared, its preview not naming
    # them (a child a runtime started meanwhile): how many, and (child, parent) of the first.
    unlinked_count: int = 0
    unlinked: tuple[tuple[str, str], ...] = ()
    kind: str = DeleteJob.BULK
    total_messages: int = 0  # a cascade's or a restore's planned messages
    # Cancelled, its worker still inside the batch it had begun: the counts may still grow.
    stopping: bool = False

    @property
    def cancellable(self) -> bool:
        """Only a bulk delete stops between batches safely (``cancel_job``)."""
        return self.kind == DeleteJob.BULK

    @property
    def taken_skipped(self) -> int:
        return sum(taken.count for taken in self.taken)

    @property
    def percent(self) -> int:
        if self.kind == DeleteJob.CASCADE and self.total_messages:
            # A large session goes in parts: its messages move while its row waits.
            return min(100, int(100 * self.deleted_messages / self.total_messages))
        return 100 if self.total == 0 else int(100 * self.processed / self.total)

    @property
    def skipped_text(self) -> str:
        """ "4 skipped: s-1, hold #3; kept: s-2, its conversation continued in s-9; 1 already
        deleted by job #7; 1 gone or live again" (empty when none was skipped)."""
        if not self.skipped:
            return ""
        parts = [held.describe() for held in self.held]
        if self.held_skipped > len(self.held):
            parts.append(f"{self.held_skipped - len(self.held):,} more under legal hold")
        parts += [kept.describe() for kept in self.kept]
        if self.kept_skipped > len(self.kept):
            parts.append(f"{self.kept_skipped - len(self.kept):,} more kept whole")
        parts += [taken.describe() for taken in self.taken]
        parts += [erased.describe() for erased in self.erased]
        erased = sum(e.count for e in self.erased)
        other = self.skipped - self.held_skipped - self.kept_skipped - self.taken_skipped - erased
        if other > 0:
            parts.append(f"{other:,} gone or live again")
        return f"{self.skipped:,} skipped: " + "; ".join(parts)


def create_bulk_delete_job(
    *,
    session_ids: Sequence[str],
    include_live: bool,
    actor: str,
    reason: str,
    description: str = "",
    purge: bool = False,
    policy_id: int | None = None,
    expected_ids: Sequence[str] | None = None,
) -> int:
    """Snapshot the set into a job; returns its id. The worker does the deleting.

    ``purge``: the job keeps no trash copy (nothing it deletes can be restored);
    ``policy_id``: the retention policy whose run this is; ``expected_ids``: the set the
    operator (or the policy) confirmed, its preview's: the job takes no other session.
    A continuation or delegate the runtime linked to one of them since the preview is left
    out, and its conversation stays whole: the job's batches keep it and name it.
    """
    if not says_something(reason or ""):
        raise InvalidInput("A reason is required for a bulk delete.")
    preview = deletion.preview_bulk_delete(session_ids=session_ids, include_live=include_live)
    chosen = list(preview.session_ids)
    left_out: list[str] = []
    if expected_ids is not None:
        expected = list(dict.fromkeys(expected_ids))
        wanted = set(expected)
        # Not previewed, never taken: its conversation is what a batch then keeps whole.
        chosen = [sid for sid in chosen if sid in wanted]
        # Previewed, but no longer to go (held, live, or its conversation kept whole since):
        # skipped items of the job, each named.
        taken = set(chosen)
        left_out = [sid for sid in expected if sid not in taken]
    if not chosen:
        raise InvalidInput("Nothing to delete: no session matches (live sessions are kept).")
    ordered = deletion.ordered_by_conversation(chosen)
    with transaction.atomic(using="default"):
        job = DeleteJob.objects.create(
            created_by=actor,
            reason=reason.strip(),
            description=description[:2000],
            include_live=include_live,
            total=len(ordered) + len(left_out),
            skipped=len(left_out),
            purge=purge,
            policy_id=policy_id,
            # The children its dry run showed as kept with their link cleared: its page names
            # only the others (started below a session of the job meanwhile).
            params={"cut": [child for child, _ in deletion.children_kept(ordered)]},
        )
        _insert_items(job.pk, ordered, skipped=left_out)
        if left_out:
            _record_left_out(job, left_out, preview)
        # Waiting workers (this process's, other processes', other hosts' on PostgreSQL)
        # look for jobs as soon as this commits, not at their next poll.
        announce_job()
    return job.pk


def _record_left_out(
    job: DeleteJob, left_out: list[str], preview: deletion.BulkDeletePreview
) -> None:
    """Name the previewed sessions a job was created without: under a hold (with the hold),
    or kept with their conversation (why); gone or live again ones are counted only."""
    held = holds.holds_on(left_out)
    if held:
        _record_held_skips(job, held)
    why = dict(preview.merge_kept) | dict(preview.conversation_kept)
    present = lineage.existing_session_ids(left_out)
    live = deletion.live_session_ids(left_out)
    kept = {
        sid: why.get(sid, "no longer in the dry run's set: kept with its conversation")
        for sid in left_out
        if sid in present and sid not in held and sid not in live
    }
    if kept:
        _record_kept_whole(job, kept)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def _claim(job_id: int, worker: str) -> bool:
    now = timezone.now()
    claimed = DeleteJob.objects.filter(
        Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now) | Q(lease_owner=worker),
        pk=job_id,
        state__in=[DeleteJob.PENDING, DeleteJob.RUNNING],
    ).update(
        lease_owner=worker,
        lease_expires_at=now + timedelta(seconds=LEASE_SECONDS),
        state=DeleteJob.RUNNING,
    )
    if claimed:
        DeleteJob.objects.filter(pk=job_id, started_at__isnull=True).update(started_at=now)
    return bool(claimed)


def _renew_lease(job_id: int) -> bool:
    """Between the parts of a large session: the job is still being worked on. False once it
    was cancelled: the delete then stops and gives the session back (``deletion.delete_batch``),
    even if the cancel's own give-back ran before this session was started."""
    return bool(
        DeleteJob.objects.filter(pk=job_id, state=DeleteJob.RUNNING).update(
            lease_expires_at=timezone.now() + timedelta(seconds=LEASE_SECONDS)
        )
    )


def _settle_committed_batches(job_id: int) -> None:
    """Record batches a dead worker committed in the store but never marked on the job.

    The store delete and the job's progress live in two databases: a worker
    killed between the two leaves the batch's items pending although their
    sessions are gone (and their trash entry holds them). Counting them as
    deleted here keeps the job's totals exact instead of calling them skipped.
    """
    settle_trash()  # a batch (or a restore) whose process died is marked from the store
    stale_pending_trash()  # a batch killed right after its commit is complete
    # Not the parts of a large session (session_count 0): its session is still in the store
    # until its last step, whose entry holds the session row.
    for entry in TrashEntry.objects.filter(
        job_id=job_id, state=TrashEntry.COMPLETE, session_count__gt=0
    ).only("pk", "session_ids", "message_count"):
        with transaction.atomic(using="default"):
            settled = DeleteJobItem.objects.filter(
                job_id=job_id, state=DeleteJobItem.PENDING, session_id__in=entry.session_ids
            ).update(state=DeleteJobItem.DONE)
            if settled:
                DeleteJob.objects.filter(pk=job_id).update(
                    done=F("done") + settled,
                    deleted_messages=F("deleted_messages") + entry.message_count,
                )
    # The parts of a large session a stopped run committed are messages the job deleted, though
    # that run never counted them (its batch failed or died before the session's last step):
    # the job counts at least what its trash holds.
    in_trash = TrashEntry.objects.filter(job_id=job_id, state=TrashEntry.COMPLETE).aggregate(
        messages=Sum("message_count")
    )["messages"]
    if in_trash:
        DeleteJob.objects.filter(pk=job_id, deleted_messages__lt=in_trash).update(
            deleted_messages=in_trash
        )


def _quiet_before(job: DeleteJob) -> float | None:
    """A retention run's cutoff now: a session of it active since then is no longer quiet."""
    policy = job.policy if job.policy_id is not None else None
    if policy is None:
        return None
    try:
        return time.time() - float(policy.older_than_days) * 86400
    except (TypeError, ValueError, OverflowError):
        return time.time()  # a policy whose days became unreadable: nothing is quiet


def run_job(
    *,
    job_id: int,
    worker: str | None = None,
    batch_sessions: int = deletion.BATCH_SESSIONS,
    batch_messages: int = deletion.BATCH_MESSAGES,
    max_batches: int | None = None,
) -> JobProgress:
    """Work on a job until it is done (or ``max_batches`` ran, or another worker holds it)."""
    worker = worker or worker_name()
    if not _claim(job_id, worker):
        return job_progress(job_id=job_id)
    _working_here.add(job_id)
    try:
        # Whatever of the job's own records fails (its lease, its items, its trash) names the
        # dashboard's database on its page, wherever in a batch it came.
        with connections["default"].execute_wrapper(_tag_dashboard_failures):
            return _run_claimed(job_id, worker, batch_sessions, batch_messages, max_batches)
    finally:
        _working_here.discard(job_id)


def _tag_dashboard_failures(execute, sql, params, many, context):
    try:
        return execute(sql, params, many, context)
    except Exception as error:
        if getattr(error, "database", None) is None:
            error.database = deletion.TRASH_DATABASE
        raise


def _run_claimed(
    job_id: int, worker: str, batch_sessions: int, batch_messages: int, max_batches: int | None
) -> JobProgress:
    logger.info("delete job %s: worked on by %s", job_id, worker)
    _settle_committed_batches(job_id)
    job = DeleteJob.objects.get(pk=job_id)
    if job.kind != DeleteJob.BULK:
        try:
            _RUNNERS[job.kind](job, worker)
        finally:
            cached.forget_all()
        return job_progress(job_id=job_id)
    # What the job still deletes: a batch keeps a conversation with a session outside it whole.
    remaining = set(
        DeleteJobItem.objects.filter(job_id=job_id, state=DeleteJobItem.PENDING).values_list(
            "session_id", flat=True
        )
    )
    every_link = job.policy_id is not None  # a retention run's conversations hold every link
    left_out: set[str] = set()  # sessions of the job it kept live or held: they continue
    batches = 0
    # SQLite: the full-text indexes merge in short steps after each batch, not in its commit.
    merges = deletion.defer_fts_merges()
    try:
        while max_batches is None or batches < max_batches:
            state = DeleteJob.objects.filter(pk=job_id).values_list("state", flat=True).first()
            if state != DeleteJob.RUNNING:
                # Cancelled meanwhile: the cancel waiting for the batch before this point to be
                # counted hears that it was (``cancel_job``).
                DeleteJob.objects.filter(pk=job_id, lease_owner=worker).exclude(
                    state=DeleteJob.RUNNING
                ).update(lease_owner="", lease_expires_at=None, finished_at=timezone.now())
                break
            # (pk, session id) pairs, not model instances: a batch uses a few of them.
            items = list(
                DeleteJobItem.objects.filter(job_id=job_id, state=DeleteJobItem.PENDING)
                .order_by("position")
                .values_list("pk", "session_id")[:batch_sessions]
            )
            if not items:
                faults.checkpoint("job.before_done")
                DeleteJob.objects.filter(pk=job_id, state=DeleteJob.RUNNING).update(
                    state=DeleteJob.DONE,
                    finished_at=timezone.now(),
                    lease_owner="",
                    lease_expires_at=None,
                )
                break
            ids = [session_id for _, session_id in items]
            item_pks = {session_id: pk for pk, session_id in items}
            remaining.update(ids)
            batch, sizes = _next_batch(
                job_id,
                ids,
                item_pks,
                remaining,
                every_link=every_link,
                batch_sessions=batch_sessions,
                batch_messages=batch_messages,
            )
            live = set() if job.include_live else deletion.live_session_ids(batch)
            # A hold placed after the job was confirmed keeps its sessions (skipped, not failed),
            # each named with its hold in an audit entry of its own.
            held = holds.holds_on([sid for sid in batch if sid in sizes])
            gone_or_live = [sid for sid in batch if sid not in sizes or sid in live or sid in held]
            remaining.difference_update(gone_or_live)
            left_out.update(sid for sid in gone_or_live if sid in sizes)
            # A conversation that gained a session the job does not take since its preview (or
            # one kept live or held above), or that a merge made meanwhile needs, stays whole:
            # every session of it the job still holds, in this batch or a later one.
            whole = deletion.WholeConversations(
                remaining=remaining,
                every_link=every_link,
                left_out=left_out,
                quiet_before=_quiet_before(job),
            )
            candidates = [sid for sid in batch if sid not in gone_or_live]
            kept = deletion.kept_whole(candidates, whole) if candidates else {}
            # The dry run's rule again: an API conversation the runtime continued (or a
            # delegate whose parent went live) since, by a link ``kept_whole`` does not follow.
            if rest := [sid for sid in candidates if sid not in kept]:
                kept.update(deletion.going_on_outside(rest, taken=remaining))
            to_delete = [sid for sid in candidates if sid not in kept]
            gone_or_live += [sid for sid in batch if sid in kept]
            later_kept = sorted(set(kept) - set(batch))
            if later_kept:
                item_pks.update(
                    DeleteJobItem.objects.filter(
                        job_id=job_id, state=DeleteJobItem.PENDING, session_id__in=later_kept
                    ).values_list("session_id", "pk")
                )
                gone_or_live += [sid for sid in later_kept if sid in item_pks]
            remaining.difference_update(kept)
            if gone_or_live and being_deleted.marks_on(gone_or_live):
                # Started in parts by this job's last run, then held or reopened: kept whole.
                deletion.stop_deleting(session_ids=gone_or_live, trash=LEDGER_TRASH)
            messages = 0
            done_ids: list[str] = []
            taken: list[str] = []
            if to_delete:
                deleted: list[str] = []
                try:
                    _, messages, _ = deletion.delete_batch(
                        to_delete,
                        actor=job.created_by,
                        reason=job.reason,
                        job_id=job_id,
                        trash=deletion.NO_TRASH if job.purge else LEDGER_TRASH,
                        operation=job_operation(job_id),
                        keep_live=not job.include_live,
                        # A session larger than a batch goes in parts of a batch each.
                        part_messages=batch_messages,
                        between_parts=lambda: _renew_lease(job_id),
                        whole=whole,
                        deleted=deleted,
                    )
                except StoreBusy:
                    time.sleep(0.5)  # the runtime is busy: try this batch again shortly
                    _claim(job_id, worker)
                    continue
                except (
                    holds.SessionsHeld,
                    deletion.SessionsWentLive,
                    deletion.DeleteGivenBack,
                    deletion.ConversationsKept,
                ):
                    # A hold landed, a session went live, or a conversation continued between
                    # the check and the lock: skipped next round. (A session given back by a
                    # restore is taken again.)
                    remaining.update(candidates)
                    remaining.update(kept)
                    continue
                with _dashboard_write():
                    faults.checkpoint("job.after_batch_commit")
                # Done: the sessions whose rows this batch's trash entry holds. One another
                # delete committed first (a second job of the same set, a cascade) was gone
                # under the lock: skipped, its deleter named on the job's page (``taken_skips``).
                went = set(deleted)
                done_ids = [sid for sid in to_delete if sid in went]
                taken = [sid for sid in to_delete if sid not in went]
            skipped_ids = gone_or_live + taken
            with _dashboard_write(), transaction.atomic(using="default"):
                # By primary key: the items table has no index on session_id, and a
                # 100,000-item job would be scanned whole for every batch.
                DeleteJobItem.objects.filter(pk__in=[item_pks[s] for s in done_ids]).update(
                    state=DeleteJobItem.DONE
                )
                DeleteJobItem.objects.filter(pk__in=[item_pks[s] for s in skipped_ids]).update(
                    state=DeleteJobItem.SKIPPED
                )
                job.done += len(done_ids)
                job.skipped += len(skipped_ids)
                job.deleted_messages += messages
                DeleteJob.objects.filter(pk=job_id).update(
                    done=job.done,
                    skipped=job.skipped,
                    deleted_messages=job.deleted_messages,
                    lease_expires_at=timezone.now() + timedelta(seconds=LEASE_SECONDS),
                )
            remaining.difference_update(to_delete)
            if held:
                _record_held_skips(job, held)
            if kept:
                _record_kept_whole(job, kept)
            batches += 1
    except Exception as error:
        # A connection a restarted server cut is reopened: the failure is recorded at once
        # instead of the job staying running until its lease ends.
        db.close_broken_connections()
        try:
            # A batch the store committed before the failure (its trash entry or its items not
            # yet marked: the dashboard's database failed) counts as deleted, as the trash says.
            _settle_once_free(job_id, lost=db.connection_lost(error))
        except Exception:
            logger.exception("delete job %s: its committed batches could not be settled", job_id)
        words = _failure_words(error)[:2000]
        db.when_server_back(
            lambda: DeleteJob.objects.filter(pk=job_id).update(
                state=DeleteJob.FAILED,
                error=words,
                lease_owner="",
                lease_expires_at=None,
            ),
            lost=db.connection_lost(error),
        )
        raise
    finally:
        merges.stop()
        if batches:
            # Its deletions show on the overview at once, as ledger.actions does for every
            # other action (once per run: each batch would make every read recompute).
            cached.forget_all()
    return job_progress(job_id=job_id)


# How long a failing job waits for a database another process holds locked before it gives up
# settling its counts (attack round 43: with the dashboard's database locked past its busy
# timeout, the job failed counting 319 sessions where its trash held 356).
SETTLE_WAIT_SECONDS = 120.0


def _settle_once_free(job_id: int, *, lost: bool) -> None:
    deadline = time.monotonic() + SETTLE_WAIT_SECONDS
    while True:
        try:
            db.when_server_back(lambda: _settle_committed_batches(job_id), lost=lost)
            return
        except Exception as error:
            if not db.is_busy_error(error) or time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


@contextmanager
def _dashboard_write():
    """A failure here is the dashboard's database (the job's records), not the store's."""
    try:
        yield
    except Exception as error:
        error.database = deletion.TRASH_DATABASE
        raise


def _failure_words(error: BaseException) -> str:
    """What the job's page says stopped it: a database that could not be written, in words."""
    storage = db.storage_failure(error)
    where = _failed_database(error)
    if storage is None and db.connection_lost(error):
        server = "The dashboard database's" if where == deletion.TRASH_DATABASE else "The store's"
        return (
            f"{server} server closed the connection: it restarted or stopped ({error}). "
            "What the job deleted before stays in the trash; finish the job once the "
            "server is back, or restore its trash entry to undo it."
        )
    if storage is None and db.is_busy_error(error):
        held = "The dashboard's database" if where == deletion.TRASH_DATABASE else "The store"
        return (
            f"{held} stayed locked by another process for longer than the busy timeout "
            f"({error}). What the job deleted before stays in the trash; finish the job once "
            "it is free, or restore its trash entry to undo it."
        )
    if storage is None:
        return str(error)
    words = deletion.database_words(where, storage)
    return (
        f"{words[:1].upper()}{words[1:]} ({error}). What the job deleted before "
        "stays in the trash; finish the job once the database can be written again, or "
        "restore its trash entry to undo it."
    )


def _failed_database(error: BaseException) -> str:
    """Which database a job's failure came from: where the first database error of its chain
    happened. A dashboard query's is tagged (``_tag_dashboard_failures``) and may come wrapped
    (a store operation's StoreBusy raised from it, attack round 43); one raised while handling a
    store error that came first (the store's server gone, then the trash's clean-up on the
    dashboard's, as one PostgreSQL restart does) is the store's."""
    seen: set[int] = set()
    first: BaseException | None = None
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DatabaseError) or getattr(current, "database", None):
            first = current  # the deepest so far: the chain runs from the last to the first
        current = current.__cause__ or current.__context__
    return getattr(first, "database", None) or "store"


def resume_failed_job(*, job_id: int) -> None:
    """A failed job is taken up again from its first pending item (finish what it started)."""
    resumed = DeleteJob.objects.filter(
        pk=job_id, state=DeleteJob.FAILED, kind=DeleteJob.BULK
    ).update(
        state=DeleteJob.PENDING, error="", lease_owner="", lease_expires_at=None, finished_at=None
    )
    if not resumed:
        state, kind = DeleteJob.objects.filter(pk=job_id).values_list("state", "kind").first() or (
            None,
            None,
        )
        if kind not in (None, DeleteJob.BULK):
            raise InvalidInput(
                f"Job #{job_id} is a {kind}: it is not taken up again once stopped (its audit "
                "entry says what it did). Plan it again to finish it."
            )
        raise InvalidInput(f"Job #{job_id} is {state or 'missing'}, not failed: nothing to resume.")
    announce_job()


def _next_batch(
    job_id: int,
    ids: list[str],
    item_pks: dict[str, int],
    remaining: set[str],
    *,
    every_link: bool,
    batch_sessions: int,
    batch_messages: int,
) -> tuple[list[str], dict[str, int]]:
    """The next batch from the first pending items ``ids``: whole conversations (as
    ``deletion.conversation_groups`` finds them among ``remaining``), so each is deleted, and
    checked under the lock, in one store transaction. The first conversation is taken whole
    even past ``batch_sessions`` (its other pending items are looked up), unless its messages
    are more than a batch's: then its sessions go a batch at a time, children first, each
    batch checking the whole conversation. Returns the batch and the sessions' message counts
    (a session missing from them is gone)."""
    groups = deletion.conversation_groups(ids, remaining, every_link=every_link)
    beyond = [sid for sid in groups[0] if sid not in item_pks]
    if beyond:
        item_pks.update(
            DeleteJobItem.objects.filter(
                job_id=job_id, state=DeleteJobItem.PENDING, session_id__in=beyond
            ).values_list("session_id", "pk")
        )
    wanted = [sid for group in groups for sid in group if sid in item_pks]
    sizes: dict[str, int] = {}
    for start in range(0, len(wanted), deletion.CHUNK):
        chunk = wanted[start : start + deletion.CHUNK]
        sizes.update(
            (sid, int(count or 0))
            for sid, count in db.fetchall(
                f"SELECT id, message_count FROM sessions WHERE id IN ({db.placeholders(chunk)})",
                chunk,
            )
        )
    batch: list[str] = []
    weight = 0
    for group in groups:
        members = sorted((sid for sid in group if sid in item_pks), key=item_pks.__getitem__)
        size = sum(sizes.get(sid, 0) for sid in members)
        whole = all(sid in item_pks for sid in group)
        if batch and (
            not whole
            or len(batch) + len(members) > batch_sessions
            or weight + size > batch_messages
        ):
            break
        if not batch and size > batch_messages and len(members) > 1:
            # A conversation larger than a batch: children first, a batch's worth at a time.
            for sid in members:
                if batch and weight + sizes.get(sid, 0) > batch_messages:
                    break
                batch.append(sid)
                weight += sizes.get(sid, 0)
            break
        batch += members
        weight += size
    return batch, sizes


def _record_skips(job: DeleteJob, *, action: str, key: str, rows: list[dict], detail: str) -> None:
    """The audit entry of a batch's sessions the job left out (``rows``, one per session,
    under ``after[key]``). Written here, as the job writes its items (``ledger.actions``
    imports this module): finished (``ok``), by the job's creator, with the job's reason."""
    session_ids = [row["session"] for row in rows]
    with transaction.atomic(using=router.db_for_write(AuditEntry)):
        entry = AuditEntry.objects.create(
            actor_name=(job.created_by or "system")[:150],
            action=action,
            session_ids=session_ids,
            before={
                "job": job.pk,
                **({"retention_policy": job.policy_id} if job.policy_id else {}),
            },
            after={"skipped": len(rows), key: rows},
            reason=job.reason,
            detail=detail,
            completed_at=timezone.now(),
        )
        AuditSession.objects.bulk_create(
            AuditSession(entry=entry, session_id=sid) for sid in session_ids
        )


def _recorded_skips(job_id: int, *, action: str, key: str, named: int) -> tuple[int, list[dict]]:
    """How many sessions the job's ``action`` entries left out, and the first ``named`` rows."""
    count = 0
    found: list[dict] = []
    for after in (
        AuditEntry.objects.filter(action=action, before__job=job_id)
        .order_by("pk")
        .values_list("after", flat=True)
        .iterator()
    ):
        rows = after.get(key, []) if isinstance(after, dict) else []
        count += len(rows)
        found += [row for row in rows if isinstance(row, dict)][: named - len(found)]
    return count, found


def _record_kept_whole(job: DeleteJob, kept: dict[str, str]) -> None:
    """The audit entry of a batch's sessions kept to keep their conversations whole, with why."""
    ordered = sorted(kept.items())
    _record_skips(
        job,
        action=KEPT_WHOLE_ACTION,
        key="kept",
        rows=[{"session": sid, "why": why} for sid, why in ordered],
        detail="Kept whole: " + "; ".join(f"{sid}, {why}" for sid, why in ordered[:50]),
    )


def kept_skips(*, job_id: int, named: int = HELD_SKIPS_NAMED) -> tuple[int, tuple[KeptSkip, ...]]:
    """How many sessions the job kept to keep conversations whole, and the first ``named``."""
    count, rows = _recorded_skips(job_id, action=KEPT_WHOLE_ACTION, key="kept", named=named)
    return count, tuple(KeptSkip(str(row.get("session")), str(row.get("why", ""))) for row in rows)


def _record_held_skips(job: DeleteJob, held: dict[str, holds.Hold]) -> None:
    """The audit entry of a batch's sessions left out under a legal hold, each with its hold."""
    ordered = sorted(held.items())
    _record_skips(
        job,
        action=HELD_SKIP_ACTION,
        key="held",
        rows=[{"session": sid, "hold": hold.id, "words": hold.describe()} for sid, hold in ordered],
        detail="Left out under legal hold: "
        + "; ".join(f"{sid}, hold #{hold.id}" for sid, hold in ordered[:50]),
    )


def held_skips(*, job_id: int, named: int = HELD_SKIPS_NAMED) -> tuple[int, tuple[HeldSkip, ...]]:
    """How many sessions the job left out under a legal hold, and the first ``named`` of them."""
    count, rows = _recorded_skips(job_id, action=HELD_SKIP_ACTION, key="held", named=named)
    return count, tuple(
        HeldSkip(str(row.get("session")), int(row.get("hold") or 0), row.get("words", ""))
        for row in rows
    )


def taken_skips(*, job_id: int) -> tuple[TakenSkip, ...]:
    """The job's skipped sessions whose rows another delete's trash holds, by that delete: what
    a second job of the same set (or a cascade) deleted before this job's batch reached it."""
    skipped = DeleteJobItem.objects.filter(job_id=job_id, state=DeleteJobItem.SKIPPED)
    rows = (
        TrashSession.objects.filter(
            session_id__in=skipped.values("session_id"),
            entry__state=TrashEntry.COMPLETE,
            entry__session_count__gt=0,
        )
        .exclude(entry__job_id=job_id)
        .values("entry__job_id")
        .annotate(count=Count("session_id", distinct=True))
        .order_by("entry__job_id")
    )
    return tuple(TakenSkip(row["entry__job_id"], row["count"]) for row in rows)


# Sessions named on a finished job's page as kept with their parent link cleared, at most.
UNLINKED_NAMED = 20


def unlinked_children(job: DeleteJob) -> tuple[int, tuple[tuple[str, str], ...]]:
    """(child, parent) for each session a finished bulk or cascade job kept in the store with
    its link to a session it deleted cleared, that its preview did not name (a cascade's
    preview lists the children it cuts: ``params["cut"]``), such as a child a runtime
    started during the job; how many, and the first ``UNLINKED_NAMED``. A restore of the
    job's trash links them again. Read from its trash entries once it has finished."""
    if job.state in (DeleteJob.PENDING, DeleteJob.RUNNING) or job.kind == DeleteJob.RESTORE:
        return 0, ()
    entries = (
        TrashEntry.objects.filter(operation=job.operation)
        if job.kind == DeleteJob.CASCADE and job.operation
        else TrashEntry.objects.filter(job_id=job.pk)
    )
    named = set((job.params or {}).get("cut") or [])
    found: dict[str, str] = {}
    for pairs in entries.exclude(state=TrashEntry.PENDING).values_list(
        "payload__kept_children", flat=True
    ):
        for child, parent in pairs or []:
            if str(child) not in named:
                found.setdefault(str(child), str(parent))
    ordered = sorted(found.items())
    return len(ordered), tuple(ordered[:UNLINKED_NAMED])


def job_progress(*, job_id: int) -> JobProgress:
    job = DeleteJob.objects.filter(pk=job_id).first()
    if job is None:
        raise InvalidInput(f"No job {job_id}.")
    if job.kind != DeleteJob.BULK:
        return _action_progress(job)
    if job.state == DeleteJob.FAILED:
        job = _settled_failed(job)
    erased = erased_skips(job)
    skipped = job.skipped + sum(e.count for e in erased)
    held_count, held = held_skips(job_id=job_id) if job.skipped else (0, ())
    kept_count, kept = kept_skips(job_id=job_id) if job.skipped else (0, ())
    rate = None
    if job.started_at and job.done:
        elapsed = ((job.finished_at or timezone.now()) - job.started_at).total_seconds()
        rate = job.done / elapsed if elapsed > 0 else None
    return JobProgress(
        job_id=job.pk,
        state=job.state,
        total=job.total,
        processed=job.done + skipped,
        deleted=job.done,
        skipped=skipped,
        deleted_messages=job.deleted_messages,
        sessions_per_second=rate,
        error=job.error,
        held_skipped=held_count,
        held=held,
        kept_skipped=kept_count,
        kept=kept,
        taken=taken_skips(job_id=job_id) if job.skipped else (),
        erased=erased,
        erased_from_trash=erased_skips(job, DeleteJob.ERASED_FROM_TRASH),
        **_unlinked_fields(job),
        stopping=_stopping(job),
    )


def job_stopping(job_id: int) -> bool:
    """Whether the job was cancelled while its worker is still inside a batch (``_stopping``)."""
    job = DeleteJob.objects.filter(pk=job_id).only("state", "lease_owner", "lease_expires_at")
    found = job.first()
    return found is not None and _stopping(found)


def _stopping(job: DeleteJob) -> bool:
    """Cancelled while its worker is inside a batch: the worker still holds its lease."""
    return (
        job.state == DeleteJob.CANCELLED
        and bool(job.lease_owner)
        and job.lease_expires_at is not None
        and job.lease_expires_at > timezone.now()
    )


def _settled_failed(job: DeleteJob) -> DeleteJob:
    """A failed job as its trash says, read: the batch in flight when it failed may have
    committed in the store after its failure was recorded, or its settling may have failed too
    (attack round 43: after a PostgreSQL restart a job counted 420 sessions where its trash
    held 453, and its page offered to restore 420). A store or trash that cannot be read or
    settled now leaves the counts as recorded: the next look settles them."""
    try:
        # A savepoint: a failure here must not end a transaction the caller is in.
        with transaction.atomic(using="default"):
            _settle_committed_batches(job.pk)
    except Exception:
        logger.warning("delete job %s: its trash could not be settled now", job.pk, exc_info=True)
        return job
    return DeleteJob.objects.filter(pk=job.pk).first() or job


def _unlinked_fields(job: DeleteJob) -> dict:
    count, named = unlinked_children(job)
    return {"unlinked_count": count, "unlinked": named}


def _action_progress(job: DeleteJob) -> JobProgress:
    """A cascade's or a restore's progress: what its trash operation holds (committed batch by
    batch, a large session part by part) or, for a restore, whether it committed."""
    done, messages = job.done, job.deleted_messages
    if job.kind == DeleteJob.CASCADE and job.operation:
        held = TrashEntry.objects.filter(
            operation=job.operation, state=TrashEntry.COMPLETE
        ).aggregate(sessions=Sum("session_count"), messages=Sum("message_count"))
        done = max(done, int(held["sessions"] or 0))
        messages = max(messages, int(held["messages"] or 0))
    rate = None
    if job.started_at and done:
        elapsed = ((job.finished_at or timezone.now()) - job.started_at).total_seconds()
        rate = done / elapsed if elapsed > 0 else None
    return JobProgress(
        job_id=job.pk,
        state=job.state,
        total=job.total,
        processed=min(done, job.total),
        deleted=done,
        skipped=0,
        deleted_messages=messages,
        sessions_per_second=rate,
        error=job.error,
        kind=job.kind,
        total_messages=job.total_messages,
        **_unlinked_fields(job),
    )


def runnable_job_ids() -> list[int]:
    now = timezone.now()
    return list(
        DeleteJob.objects.filter(state__in=[DeleteJob.PENDING, DeleteJob.RUNNING])
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
        # A cascade's or a restore's operator is watching its page, and its claim runs out
        # after two minutes without progress: before bulk jobs waiting.
        .order_by(Case(When(kind=DeleteJob.BULK, then=1), default=0), "created_at")
        .values_list("pk", flat=True)
    )


def leased_elsewhere() -> list[tuple[int, datetime]]:
    """(job, until when) of each unfinished job another worker holds the lease of: it runs
    there, or its worker died and another takes it up once the lease runs out."""
    return list(
        DeleteJob.objects.filter(
            state__in=[DeleteJob.PENDING, DeleteJob.RUNNING], lease_expires_at__gte=timezone.now()
        )
        .order_by("pk")
        .values_list("pk", "lease_expires_at")
    )


def cancel_job(*, job_id: int) -> None:
    """Stop the job; a session it had started deleting in parts gets its parts back."""
    if DeleteJob.objects.filter(pk=job_id).exclude(kind=DeleteJob.BULK).exists():
        raise InvalidInput(
            f"Job #{job_id} is a cascade delete or a restore: it cannot be cancelled (stopped "
            "halfway it would leave half of it done). Let it finish, then restore its trash "
            "entry to undo it."
        )
    now = timezone.now()
    was = DeleteJob.objects.filter(pk=job_id).values_list(
        "state", "lease_owner", "lease_expires_at"
    )
    state, owner, lease_until = was.first() or (None, "", None)
    cancelled = DeleteJob.objects.filter(
        pk=job_id, state__in=[DeleteJob.PENDING, DeleteJob.RUNNING]
    ).update(state=DeleteJob.CANCELLED)
    if not cancelled:
        # Another cancel (or the job's end) came first, maybe while this one looked: refused,
        # never "cancelled" with the counts of before the batch that cancel waits for
        # (attack round 43: two cancels at once, one answered 0 deleted, the other 36).
        now_state = DeleteJob.objects.filter(pk=job_id).values_list("state", flat=True).first()
        raise JobNotRunning(f"Job #{job_id} is already {now_state}; nothing to cancel.")
    # A worker inside a batch counts it once the batch is done: the cancel answers after that,
    # so its counts are what the store lost (attack round 43: it answered 416 sessions deleted
    # where the store had lost 448, and read 448 a second later).
    acknowledged = True
    if state == DeleteJob.RUNNING and owner and lease_until and lease_until > now:
        if _worker_active(owner, job_id):
            acknowledged = _wait_for_acknowledgement(job_id, owner)
    stopped = {"finished_at": timezone.now()}  # when it stopped: the page's and API's end time
    if acknowledged:
        stopped.update(lease_owner="", lease_expires_at=None)
    # Otherwise the worker is still inside its batch past the wait (the store held locked by
    # another process): the job keeps its lease, so its page and the API say it is stopping and
    # that the counts may still grow, until the worker counts that batch and lets go (attack
    # round 43: the cancel answered 320 deleted where the store lost 356, saying nothing).
    DeleteJob.objects.filter(pk=job_id).update(**stopped)
    _give_back_started(job_id)


class JobNotRunning(StoreError):
    """A cancel of a job that is no longer pending or running (a 409 on the API)."""


# Jobs a thread of this process is working on (``run_job``).
_working_here: set[int] = set()
# How long a cancel waits for a worker's batch in flight to be counted, at most.
CANCEL_WAIT_SECONDS = 10.0


def _worker_active(owner: str, job_id: int) -> bool:
    """Whether the worker ``owner`` (``worker_name``: host, process, thread) may be inside a
    batch of the job now: a thread of this process working on it, a live process of this
    host, or any worker of another host (it answers, or the wait runs out)."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if not (pid_text.isascii() and pid_text.isdigit()):
        return False  # not a worker's name: nobody to wait for
    if host != socket.gethostname():
        return True
    pid = int(pid_text)
    if pid == os.getpid():
        return job_id in _working_here
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False  # it died: its batch committed or not, the trash says (settled on read)
    except PermissionError:
        return True
    return True


def _wait_for_acknowledgement(job_id: int, owner: str) -> bool:
    """Whether the worker let go of the job (or stopped) within ``CANCEL_WAIT_SECONDS``."""
    deadline = time.monotonic() + CANCEL_WAIT_SECONDS
    while time.monotonic() < deadline:
        if not DeleteJob.objects.filter(pk=job_id, lease_owner=owner).exists():
            return True  # it saw the cancel at the top of its next batch
        if not _worker_active(owner, job_id):
            return True  # it stopped (done, failed or died) without passing that point
        time.sleep(0.05)
    return False


def _give_back_started(job_id: int) -> None:
    operation = job_operation(job_id)
    started = [m.session_id for m in being_deleted.all_marks() if m.operation == operation]
    if started:
        deletion.stop_deleting(session_ids=started, trash=LEDGER_TRASH)
