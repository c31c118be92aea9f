"""Bulk delete as a background job: small batches, a lease, resumable, never twice.

Creating a job snapshots the exact set of session ids (live sessions only
when asked for explicitly) into job items in the dashboard's database. A
worker holding the job's lease deletes pending items in short batches
through ``deletion._delete_batch`` (trash first, then one short store
transaction), marking items as it goes. A process that dies mid-job leaves
its lease to expire; the next worker resumes from the first pending item,
and an item whose session is already gone is skipped, so nothing is deleted
twice.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.db import connections, transaction
from django.db.models import F, Q
from django.utils import timezone

from sessions_admin.core import db, deletion, faults, lineage
from sessions_admin.core.errors import InvalidInput, StoreBusy

LEASE_SECONDS = 30
SAMPLE_SIZE = 10


@dataclass(frozen=True)
class BulkDeletePreview:
    session_ids: tuple[str, ...]  # what would go (live ones excluded unless asked)
    live_excluded: int
    message_count: int
    sample: tuple[dict, ...]


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

    @property
    def percent(self) -> int:
        return 100 if self.total == 0 else int(100 * self.processed / self.total)


def undoable_merge_husks() -> set[str]:
    """Sessions a merge absorbed that the merge still holds (its record not undone).

    Deleting one makes the merge impossible to undo (unmerge needs every
    session back): no preset selects them; they go with their target, or by id.
    """
    husks: set[str] = set()
    for (absorbed,) in db.fetchall(
        "SELECT absorbed_session_ids FROM sessions_admin_merges WHERE undone_at IS NULL"
    ):
        husks.update(json.loads(absorbed))
    return husks


def preset_session_ids(
    *, preset: str, days: float | None = None, source: str | None = None
) -> list[str]:
    """Sessions matching one of the bulk-delete presets, oldest first.

    No preset selects the husk of a merge that can still be undone
    (``undoable_merge_husks``); "empty" never selects a live session (an empty
    live session is a chat's current one, often what a reset started a moment
    ago): a live session is deleted only by picking it.
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
    husks = undoable_merge_husks()
    return [
        r[0]
        for r in db.fetchall(f"SELECT id FROM sessions WHERE {sql} ORDER BY started_at, id", params)
        if r[0] not in husks
    ]


def _downstream(ids: list[str]) -> list[str]:
    """The ids plus what always goes with them in a delete: compression continuations and
    delegates, recursively (a conversation's later segments never outlive its start)."""
    found = list(dict.fromkeys(ids))
    picked = set(found)
    closure = deletion._closure(found, include_branches=False)
    return found + [sid for sid in closure if sid not in picked]


def _live(ids: Sequence[str]) -> set[str]:
    live: set[str] = set()
    for chunk in deletion._chunks(list(ids)):
        live |= {
            r[0]
            for r in db.fetchall(
                f"SELECT id FROM sessions WHERE ended_at IS NULL AND id IN ({db.placeholders(chunk)})",
                list(chunk),
            )
        }
    return live


def preview_bulk_delete(
    *, session_ids: Sequence[str], include_live: bool = False
) -> BulkDeletePreview:
    """The dry run: the exact set, its size, how many live sessions were left out, a sample."""
    ids = _downstream([s for s in session_ids if s])
    live = _live(ids)
    kept = [sid for sid in ids if include_live or sid not in live]
    found = lineage.existing_session_ids(kept)
    existing = [sid for sid in kept if sid in found]
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
        message_count=deletion._count_messages(existing) if existing else 0,
        sample=sample,
    )


def create_bulk_delete_job(
    *,
    session_ids: Sequence[str],
    include_live: bool,
    actor: str,
    reason: str,
    description: str = "",
) -> int:
    """Snapshot the set into a job; returns its id. The worker does the deleting."""
    from sessions_admin.ledger.models import DeleteJob, DeleteJobItem

    if not reason or not reason.strip():
        raise InvalidInput("A reason is required for a bulk delete.")
    preview = preview_bulk_delete(session_ids=session_ids, include_live=include_live)
    if not preview.session_ids:
        raise InvalidInput("Nothing to delete: no session matches (live sessions are kept).")
    ordered = deletion._ordered_children_first(list(preview.session_ids))
    with transaction.atomic(using="default"):
        job = DeleteJob.objects.create(
            created_by=actor,
            reason=reason.strip(),
            description=description[:2000],
            include_live=include_live,
            total=len(ordered),
        )
        # One executemany: a 100,000-session job snapshots in a second, not a minute of
        # building model instances.
        with connections["default"].cursor() as c:
            c.executemany(
                f"INSERT INTO {DeleteJobItem._meta.db_table} (job_id, position, session_id, state) "
                "VALUES (%s, %s, %s, %s)",
                [(job.pk, n, sid, DeleteJobItem.PENDING) for n, sid in enumerate(ordered)],
            )
    return job.pk


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def _claim(job_id: int, worker: str) -> bool:
    from sessions_admin.ledger.models import DeleteJob

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


def _settle_committed_batches(job_id: int) -> None:
    """Record batches a dead worker committed in the store but never marked on the job.

    The store delete and the job's progress live in two databases: a worker
    killed between the two leaves the batch's items pending although their
    sessions are gone (and their trash entry holds them). Counting them as
    deleted here keeps the job's totals exact instead of calling them skipped.
    """
    from sessions_admin.ledger.models import DeleteJob, DeleteJobItem, TrashEntry

    deletion.stale_pending_trash()  # a batch killed right after its commit is complete
    for entry in TrashEntry.objects.filter(job_id=job_id, state=TrashEntry.COMPLETE).only(
        "pk", "session_ids", "message_count"
    ):
        with transaction.atomic(using="default"):
            settled = DeleteJobItem.objects.filter(
                job_id=job_id, state=DeleteJobItem.PENDING, session_id__in=entry.session_ids
            ).update(state=DeleteJobItem.DONE)
            if settled:
                DeleteJob.objects.filter(pk=job_id).update(
                    done=F("done") + settled,
                    deleted_messages=F("deleted_messages") + entry.message_count,
                )


def run_job(
    *,
    job_id: int,
    worker: str | None = None,
    batch_sessions: int = deletion.BATCH_SESSIONS,
    batch_messages: int = deletion.BATCH_MESSAGES,
    max_batches: int | None = None,
) -> JobProgress:
    """Work on a job until it is done (or ``max_batches`` ran, or another worker holds it)."""
    from sessions_admin.ledger.models import DeleteJob, DeleteJobItem

    worker = worker or worker_name()
    if not _claim(job_id, worker):
        return job_progress(job_id=job_id)
    _settle_committed_batches(job_id)
    job = DeleteJob.objects.get(pk=job_id)
    batches = 0
    try:
        while max_batches is None or batches < max_batches:
            state = DeleteJob.objects.filter(pk=job_id).values_list("state", flat=True).first()
            if state != DeleteJob.RUNNING:
                break  # cancelled meanwhile
            items = list(
                DeleteJobItem.objects.filter(job_id=job_id, state=DeleteJobItem.PENDING).order_by(
                    "position"
                )[:batch_sessions]
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
            ids = [item.session_id for item in items]
            item_pks = {item.session_id: item.pk for item in items}
            sizes = dict(
                db.fetchall(
                    f"SELECT id, message_count FROM sessions WHERE id IN ({db.placeholders(ids)})",
                    ids,
                )
            )
            live = set() if job.include_live else _live(ids)
            batch: list[str] = []
            weight = 0
            for sid in ids:
                size = int(sizes.get(sid) or 0)
                if batch and weight + size > batch_messages:
                    break
                batch.append(sid)
                weight += size
            gone_or_live = [sid for sid in batch if sid not in sizes or sid in live]
            to_delete = [sid for sid in batch if sid not in gone_or_live]
            deleted = messages = 0
            if to_delete:
                try:
                    deleted, messages, _ = deletion._delete_batch(
                        to_delete, actor=job.created_by, reason=job.reason, job_id=job_id
                    )
                except StoreBusy:
                    time.sleep(0.5)  # the runtime is busy: try this batch again shortly
                    _claim(job_id, worker)
                    continue
                faults.checkpoint("job.after_batch_commit")
            with transaction.atomic(using="default"):
                # By primary key: the items table has no index on session_id, and a
                # 100,000-item job would be scanned whole for every batch.
                DeleteJobItem.objects.filter(pk__in=[item_pks[s] for s in to_delete]).update(
                    state=DeleteJobItem.DONE
                )
                DeleteJobItem.objects.filter(pk__in=[item_pks[s] for s in gone_or_live]).update(
                    state=DeleteJobItem.SKIPPED
                )
                job.done += len(to_delete)
                job.skipped += len(gone_or_live)
                job.deleted_messages += messages
                DeleteJob.objects.filter(pk=job_id).update(
                    done=job.done,
                    skipped=job.skipped,
                    deleted_messages=job.deleted_messages,
                    lease_expires_at=timezone.now() + timedelta(seconds=LEASE_SECONDS),
                )
            batches += 1
    except Exception as error:
        DeleteJob.objects.filter(pk=job_id).update(
            state=DeleteJob.FAILED, error=str(error)[:2000], lease_owner="", lease_expires_at=None
        )
        raise
    return job_progress(job_id=job_id)


def job_progress(*, job_id: int) -> JobProgress:
    from sessions_admin.ledger.models import DeleteJob

    job = DeleteJob.objects.filter(pk=job_id).first()
    if job is None:
        raise InvalidInput(f"No job {job_id}.")
    rate = None
    if job.started_at and job.done:
        elapsed = ((job.finished_at or timezone.now()) - job.started_at).total_seconds()
        rate = job.done / elapsed if elapsed > 0 else None
    return JobProgress(
        job_id=job.pk,
        state=job.state,
        total=job.total,
        processed=job.done + job.skipped,
        deleted=job.done,
        skipped=job.skipped,
        deleted_messages=job.deleted_messages,
        sessions_per_second=rate,
        error=job.error,
    )


def runnable_job_ids() -> list[int]:
    from sessions_admin.ledger.models import DeleteJob

    now = timezone.now()
    return list(
        DeleteJob.objects.filter(state__in=[DeleteJob.PENDING, DeleteJob.RUNNING])
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
        .order_by("created_at")
        .values_list("pk", flat=True)
    )


def cancel_job(*, job_id: int) -> None:
    from sessions_admin.ledger.models import DeleteJob

    DeleteJob.objects.filter(pk=job_id, state__in=[DeleteJob.PENDING, DeleteJob.RUNNING]).update(
        state=DeleteJob.CANCELLED, lease_owner="", lease_expires_at=None
    )
