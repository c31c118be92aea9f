"""Cascades and restores too large for one request (over about a second: ``jobs.cascade_runs_as_job``,
``jobs.restore_runs_as_job``), as jobs: the request checks and claims exactly what the
in-request action would run and records its audit entry pending; the worker runs the job with
the runner registered here and completes that entry. The in-request actions and the rules both
share live in ``ledger.actions.deletion``."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sessions_admin import core
from sessions_admin.core import deletion, holds, lineage
from sessions_admin.core.deletion import WholeConversations, claims
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.processes import this_process
from sessions_admin.core.text import operator_text
from sessions_admin.ledger import jobs, worker
from sessions_admin.ledger.actions.audit import (
    ENTRY_SESSION_IDS,
    _audit_alias,
    _audited,
    _counts,
    _failure_detail,
    _name,
    complete_later,
)
from sessions_admin.ledger.actions.deletion import (
    _confirmed_cascade,
    _restorable,
    _restore_after,
    settle_deletes_and_restores,
)
from sessions_admin.ledger.context import current_audit_entry, running_audit_entry
from sessions_admin.ledger.erasure import RESTORING_TRASH
from sessions_admin.ledger.models import (
    AuditAction,
    AuditEntry,
    DeleteJob,
    DeleteJobItem,
    TrashEntry,
)
from sessions_admin.ledger.trash import LEDGER_TRASH, settle_trash, stale_pending_trash

logger = logging.getLogger(__name__)


def start_cascade_delete(
    *,
    actor,
    session_ids: Sequence[str],
    include_branches: bool,
    expected_fingerprint: str,
    reason: str,
    lose_undo: bool = False,
) -> int:
    """A confirmed cascade too long to run in the request (``jobs.cascade_runs_as_job``).

    Checked and claimed now exactly as ``cascade_delete`` checks it before its first batch
    (``deletion.claim_cascade``: fingerprint, claim, holds, merges; a second confirmation of
    the same plan is refused by the claim), with its audit entry pending and naming its trash
    operation; then the worker deletes it (``_run_cascade_job``) and completes that entry.
    Returns the job's id."""
    ids, reason, operation = _confirmed_cascade(session_ids, expected_fingerprint, reason)

    def claim_and_record() -> int:
        plan = deletion.claim_cascade(
            session_ids=ids,
            include_branches=include_branches,
            expected_fingerprint=expected_fingerprint,
            actor=_name(actor),
            reason=reason,
            lose_undo=lose_undo,
            operation=operation,
        )
        try:
            return jobs.create_action_job(
                kind=DeleteJob.CASCADE,
                actor=_name(actor),
                reason=reason,
                description=f"Cascade delete of {ids[0]}'s conversation"
                + (" with its branches" if include_branches else ""),
                operation=operation,
                audit_entry=current_audit_entry(),
                params={
                    "session_ids": ids,
                    "include_branches": include_branches,
                    "cut": [child for child, _ in plan.kept_children],
                    "lost_undos": list(plan.lost_undos),
                },
                total=len(plan.session_ids),
                total_messages=plan.message_count,
                session_ids=plan.session_ids,
            )
        except BaseException:
            claims.release(operation=operation)
            raise

    return _audited_job(
        actor=actor,
        action=AuditAction.CASCADE_DELETE,
        session_ids=ids,
        reason=reason,
        before={**_counts(ids), "trash_operation": operation},
        create=claim_and_record,
    )


def _audited_job(
    *, actor, action: str, session_ids: Sequence[str], reason: str, before: dict, create
) -> int:
    """``create()`` the job under a pending audit entry the job completes, then wake the
    worker; the job's id."""
    job_id = _audited(
        actor=actor,
        action=action,
        session_ids=session_ids,
        reason=reason,
        before={**before, "process": this_process(), "as_job": True},
        run=create,
        after=lambda job: {"job": job},
        leave_pending=True,
    )
    worker.ensure_worker_running()
    return job_id


def _run_cascade_job(job: DeleteJob, worker_name: str) -> None:
    """The worker's part of ``start_cascade_delete``: delete what is left of the plan (a
    killed worker's successor takes its claim over and goes on in the same trash operation),
    then complete the audit entry from what that operation's trash holds."""
    planned = list(
        DeleteJobItem.objects.filter(job_id=job.pk)
        .order_by("position")
        .values_list("session_id", flat=True)
    )
    present = lineage.existing_session_ids(planned)
    left = [sid for sid in planned if sid in present]
    params = job.params or {}
    error: Exception | None = None

    def batch_done(batch: list[str], sessions: int, messages: int) -> None:
        DeleteJobItem.objects.filter(
            job_id=job.pk, session_id__in=batch, state=DeleteJobItem.PENDING
        ).update(state=DeleteJobItem.DONE)
        jobs.renew_lease(job.pk)

    def still_working() -> None:
        # A large session's parts can outlast a lease: still worked on, still claimed.
        jobs.renew_lease(job.pk)
        claims.renew(operation=job.operation)

    try:
        if left:
            claims.claim(left, operation=job.operation, actor=job.created_by)
            try:
                holds.refuse_held(left)
                deletion.delete_claimed_cascade(
                    left,
                    actor=job.created_by,
                    reason=job.reason,
                    trash=LEDGER_TRASH,
                    operation=job.operation,
                    whole=WholeConversations(
                        remaining=set(left),
                        cut=frozenset(params.get("cut") or ()),
                        lose_undo_of=frozenset(params.get("lost_undos") or ()),
                    ),
                    job_id=job.pk,
                    after_batch=batch_done,
                    between_parts=still_working,
                )
            finally:
                claims.release(operation=job.operation)
    except Exception as failure:  # recorded on the audit entry and the job
        logger.warning("cascade delete job %s stopped", job.pk, exc_info=True)
        error = failure
    stale_pending_trash(operation=job.operation)
    entries = list(
        TrashEntry.objects.filter(operation=job.operation, state=TrashEntry.COMPLETE).order_by("pk")
    )
    after = {
        "deleted_sessions": sum(e.session_count for e in entries),
        "deleted_messages": sum(e.message_count for e in entries),
        "trash_entries": [e.pk for e in entries],
        "trash_operation": job.operation,
        "job": job.pk,
        **({"lost_undo_of_merges": params["lost_undos"]} if params.get("lost_undos") else {}),
    }
    if error is None and not entries:
        # Gone before the job reached them (its claim expired while it waited, and another
        # delete of the same sessions ran): this action deleted nothing.
        error = InvalidInput(
            "The plan's sessions were deleted by another delete before this job reached them "
            "(it waited too long for the worker): nothing was deleted by it."
        )
    if error is None:
        outcome, detail = AuditEntry.OK, f"Deleted by job #{job.pk}."
    elif entries:
        outcome = AuditEntry.PARTIAL
        detail = (
            f"Job #{job.pk} stopped after deleting {after['deleted_sessions']} sessions and "
            f"{after['deleted_messages']} messages, restorable from trash entry "
            f"#{entries[0].pk}; the rest is still in the store (delete it again to finish, or "
            f"restore the entry to undo): {_failure_detail(error)}"
        )
    else:
        outcome, after = AuditEntry.FAILED, {"job": job.pk}
        detail = _failure_detail(error)
    DeleteJob.objects.filter(pk=job.pk).update(
        done=after.get("deleted_sessions", 0), deleted_messages=after.get("deleted_messages", 0)
    )
    entry = AuditEntry.objects.using(_audit_alias()).filter(pk=job.audit_entry).first()
    if entry is not None and entry.outcome == AuditEntry.PENDING:
        complete_later(entry, outcome=outcome, after=after, detail=detail)
    jobs.finish_action_job(job.pk, error="" if error is None else detail)


def restore_size(*, entry_id: int) -> tuple[int, int]:
    """The sessions and messages a restore of this entry (its whole operation) puts back."""
    operation = (
        TrashEntry.objects.filter(pk=entry_id).values_list("operation", flat=True).first() or ""
    )
    sizes = (
        TrashEntry.objects.filter(operation=operation)
        .exclude(state=TrashEntry.RESTORED)
        .values_list("session_count", "message_count")
    )
    return sum(s for s, _ in sizes), sum(m for _, m in sizes)


def start_restore(*, actor, entry_id: int, reason: str = "") -> int:
    """A restore too long to run in the request (``jobs.restore_runs_as_job``): refused now
    for what ``restore`` refuses, its audit entry pending; the worker restores it (one store
    transaction, as ``restore``) and completes that entry. Returns the job's id."""
    reason = operator_text(reason, field="reason")
    settle_deletes_and_restores()
    entry, ids, operation = _restorable(entry_id)
    if entry is None:
        raise InvalidInput(f"No trash entry #{entry_id}.")
    if not ids:
        # Refused here, as ``restore`` refuses it, not by a job that could only fail.
        raise InvalidInput(f"Trash entry {entry_id} was already restored.")
    sessions, messages = restore_size(entry_id=entry_id)
    return _audited_job(
        actor=actor,
        action=AuditAction.RESTORE,
        session_ids=ids or list(entry.session_ids),
        reason=reason,
        before={"trash_entry": entry_id, "trash_operation": operation},
        create=lambda: jobs.create_action_job(
            kind=DeleteJob.RESTORE,
            actor=_name(actor),
            reason=reason or "restore",
            description=f"Restore of trash entry #{entry_id}",
            operation=operation,
            audit_entry=current_audit_entry(),
            params={"entry_id": entry_id},
            total=sessions,
            total_messages=messages,
        ),
    )


def _run_restore_job(job: DeleteJob, worker_name: str) -> None:
    """The worker's part of ``start_restore``: one store transaction, all or nothing. A
    killed worker's successor finds it committed (its entries marked restored for this audit
    entry) or not (it restores then)."""
    entry_id = int((job.params or {}).get("entry_id") or 0)
    audit = AuditEntry.objects.using(_audit_alias()).filter(pk=job.audit_entry).first()
    settle_trash()
    done_before = list(
        TrashEntry.objects.defer("payload").filter(
            restore_audit=job.audit_entry, state=TrashEntry.RESTORED
        )
    )
    error: Exception | None = None
    after: dict = {}
    if done_before:
        after = {
            "restored_sessions": sum(e.session_count for e in done_before),
            "restored_messages": sum(e.message_count for e in done_before),
            "trash_entries": [e.pk for e in done_before],
        }
        restored_ids: list[str] = [
            sid for e in done_before for sid in e.session_ids if e.session_count
        ]
    else:
        try:
            with running_audit_entry(job.audit_entry):
                result = core.restore_trash_entry(
                    entry_id=entry_id, actor=job.created_by, trash=RESTORING_TRASH
                )
            after = _restore_after(result)
            restored_ids = list(result.restored_sessions)
        except Exception as failure:  # recorded on the audit entry and the job
            logger.warning("restore job %s failed", job.pk, exc_info=True)
            error = failure
            restored_ids = []
    after["job"] = job.pk
    DeleteJob.objects.filter(pk=job.pk).update(
        done=after.get("restored_sessions", 0),
        deleted_messages=after.get("restored_messages", 0),
        params={**(job.params or {}), "restored": restored_ids[:ENTRY_SESSION_IDS]},
    )
    detail = f"Restored by job #{job.pk}." if error is None else _failure_detail(error)
    if audit is not None and audit.outcome == AuditEntry.PENDING:
        complete_later(
            audit,
            outcome=AuditEntry.OK if error is None else AuditEntry.FAILED,
            after=after,
            detail=detail,
        )
    jobs.finish_action_job(job.pk, error="" if error is None else detail)


jobs.register_runner(DeleteJob.CASCADE, _run_cascade_job)
jobs.register_runner(DeleteJob.RESTORE, _run_restore_job)
