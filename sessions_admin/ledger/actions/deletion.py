"""Deleting and restoring, audited: a cascade delete, bulk delete jobs (start, cancel,
resume), restoring a trash operation and purging the trash; and settling what dead processes
and refused dashboard writes left pending (the trash, then the entries of cascades, restores,
merges and purges) from what the trash and the store hold."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from sessions_admin import core
from sessions_admin.core import db as core_db
from sessions_admin.core.deletion import claims, new_operation_id
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.processes import process_dead, this_process
from sessions_admin.core.text import DESCRIPTION_MAX, operator_identifiers, operator_text
from sessions_admin.ledger import erasure as erasure_ledger
from sessions_admin.ledger import jobs, worker
from sessions_admin.ledger.actions.audit import (
    ENTRY_SESSION_IDS,
    STALE_PENDING_SECONDS,
    _audit_alias,
    _audited,
    _check_fingerprint,
    _counts,
    _name,
    complete_later,
    may_complete_later,
)
from sessions_admin.ledger.actions.merges import complete_stale_merges, complete_stale_unmerges
from sessions_admin.ledger.models import (
    AuditAction,
    AuditEntry,
    DeleteJob,
    TrashEntry,
)
from sessions_admin.ledger.trash import (
    LEDGER_TRASH,
    PURGED_TRASH,
    PURGING,
    PurgeReport,
    purge_trash_report,
    settle_trash,
    stale_pending_trash,
    still_deleting,
)

logger = logging.getLogger(__name__)


def _confirmed_cascade(
    session_ids: Sequence[str], expected_fingerprint: str, reason: str
) -> tuple[list[str], str, str]:
    """A cascade confirmation's input checked (ids, fingerprint, reason), what earlier deletes
    left unsettled settled, and the trash operation it will write: recorded with the intent,
    so an entry whose outcome could not be written is completed later from what this
    operation's trash holds (``complete_stale_deletes``)."""
    ids = operator_identifiers(session_ids)
    _check_fingerprint(expected_fingerprint)
    reason = operator_text(reason, field="reason", required=True)
    erasure_ledger.refuse_under_erasure(ids)
    settle_deletes_and_restores()
    release_finished_claims()
    return ids, reason, new_operation_id()


def cascade_delete(
    *,
    actor,
    session_ids: Sequence[str],
    include_branches: bool,
    expected_fingerprint: str,
    reason: str,
    lose_undo: bool = False,
) -> core.DeleteResult:
    ids, reason, operation = _confirmed_cascade(session_ids, expected_fingerprint, reason)
    return _audited(
        actor=actor,
        action=AuditAction.CASCADE_DELETE,
        session_ids=ids,
        reason=reason,
        before={**_counts(ids), "trash_operation": operation, "process": this_process()},
        run=lambda: core.execute_cascade_delete(
            session_ids=ids,
            include_branches=include_branches,
            expected_fingerprint=expected_fingerprint,
            actor=_name(actor),
            reason=reason,
            trash=LEDGER_TRASH,
            lose_undo=lose_undo,
            operation=operation,
        ),
        after=lambda r: {
            "deleted_sessions": r.deleted_sessions,
            "deleted_messages": r.deleted_messages,
            "trash_entries": list(r.trash_entry_ids),
            "trash_operation": r.operation,
            **({"lost_undo_of_merges": list(r.lost_undos)} if r.lost_undos else {}),
        },
        # Batches committed before a later one failed stay deleted: said so, with their trash.
        partly=lambda error: error.result if isinstance(error, core.DeletePartlyApplied) else None,
    )


def release_finished_claims() -> list[str]:
    """Give up the claims of cascades whose audit entry says they ended (a full store disk
    refused the cascade's own release): the store cannot tell a live worker's finished
    cascade from a running one, the audit log can. Returns the operations released."""
    held = claims.claimed_operations()
    if not held:
        return []
    ended = list(
        AuditEntry.objects.using(_audit_alias())
        .filter(action=AuditAction.CASCADE_DELETE, before__trash_operation__in=held)
        .exclude(outcome=AuditEntry.PENDING)
        .values_list("before__trash_operation", flat=True)
    )
    for operation in dict.fromkeys(ended):
        claims.release(operation=operation)
    return list(dict.fromkeys(ended))


def complete_stale_deletes(*, older_than_seconds: float = STALE_PENDING_SECONDS) -> list[int]:
    """Complete cascade deletes' entries left ``pending`` (the dashboard database could not
    record their outcome, or the process died) from what their trash operation holds.

    A delete copies each batch into the trash before the store deletes it, so the trash says
    what committed: nothing (``failed``), every batch down to the sessions asked for
    (``ok``), or the first batches only (``partial``); when an erasure took that trash
    meanwhile, what it held then (``ledger.erasure.note_pending_deletes``). Only entries
    older than ``older_than_seconds``, or whose process is known dead: a younger one may be a
    delete still running. Returns their ids.
    """
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    completed = []
    stale = AuditEntry.objects.using(_audit_alias()).filter(
        action=AuditAction.CASCADE_DELETE, outcome=AuditEntry.PENDING
    )
    for entry in stale:
        if not may_complete_later(entry, cutoff):
            continue
        operation = (entry.before or {}).get("trash_operation")
        if not operation:
            continue  # recorded before entries named their operation: nothing to read
        if jobs.action_job_of(entry.pk) is not None:
            continue  # its job is deleting it (or resumes it): the job completes the entry
        stale_pending_trash(operation=operation)  # batches that did commit
        entries = list(
            TrashEntry.objects.filter(operation=operation)
            .exclude(state=TrashEntry.PENDING)
            .order_by("pk")
        )
        left = (
            core_db.fetchall(
                f"SELECT id FROM sessions WHERE id IN ({core_db.placeholders(entry.session_ids)})",
                list(entry.session_ids),
            )
            if entry.session_ids
            else []
        )
        after = {
            "deleted_sessions": sum(e.session_count for e in entries),
            "deleted_messages": sum(e.message_count for e in entries),
            "trash_entries": [e.pk for e in entries],
            "trash_operation": operation,
        }
        erased_by = (entry.after or {}).get(erasure_ledger.ERASED_TRASH)
        purged = (entry.after or {}).get(PURGED_TRASH)
        if isinstance(erased_by, dict):
            outcome, after, detail = _completed_from_erased_trash(entry.after, erased_by, entries)
        elif isinstance(purged, dict):
            outcome, after, detail = _completed_from_purged_trash(entry.after, purged)
        elif not entries:
            outcome, after = AuditEntry.FAILED, {}
            detail = "Completed later: its trash holds nothing, so no batch was deleted."
        elif left:
            outcome = AuditEntry.PARTIAL
            detail = (
                f"Completed later from its trash: {after['deleted_sessions']} sessions and "
                f"{after['deleted_messages']} messages were deleted, restorable from trash "
                f"entry #{entries[0].pk}; the rest is still in the store (delete it again to "
                "finish, or restore the entry to undo)."
            )
        else:
            outcome = AuditEntry.OK
            detail = "Completed later from its trash (its outcome could not be recorded then)."
        if complete_later(entry, outcome=outcome, after=after, detail=detail):
            completed.append(entry.pk)
    return completed


def _completed_from_purged_trash(noted: dict, purged: dict) -> tuple[str, dict, str]:
    """A pending cascade whose trash a purge dropped: its outcome from what the trash held when
    the purge noted it (``ledger.trash.note_pending_cascades``)."""
    sessions, messages = noted.get("deleted_sessions", 0), noted.get("deleted_messages", 0)
    if not (sessions or messages):
        return AuditEntry.FAILED, noted, "Completed later: no batch was deleted."
    whole = bool(purged.get("every_session_deleted"))
    detail = (
        f"Completed later from what its trash held when the trash was purged: {sessions} "
        f"sessions and {messages} messages were deleted"
        + ("" if whole else " (its first batches only; the rest was not deleted by it)")
        + "; the purge dropped them for good."
    )
    return (AuditEntry.OK if whole else AuditEntry.PARTIAL), noted, detail


def _completed_from_erased_trash(
    noted: dict, erased_by: dict, left_in_trash: Sequence[TrashEntry]
) -> tuple[str, dict, str]:
    """A pending cascade whose trash an erasure took: its outcome from what that trash held
    when the erasure noted it (``ledger.erasure.note_pending_deletes``), not from what is
    left of it (nothing, or other people's rows)."""
    request = erased_by.get("erasure_request")
    sessions, messages = noted.get("deleted_sessions", 0), noted.get("deleted_messages", 0)
    if not (sessions or messages):
        return (
            AuditEntry.FAILED,
            noted,
            f"Completed later: its trash held nothing when erasure request #{request} took it, "
            "so no batch was deleted.",
        )
    whole = bool(erased_by.get("every_session_deleted"))
    detail = (
        f"Completed later from what its trash held when erasure request #{request} erased "
        f"the person's rows from it: {sessions} sessions and {messages} messages were deleted"
        + ("" if whole else " (its first batches only; the rest was not deleted by it)")
        + "; those rows were erased with the rest of the person's data and cannot be restored."
    )
    if left_in_trash:
        detail += (
            f" Other people's rows it deleted are still in the trash (entry "
            f"#{left_in_trash[0].pk})."
        )
    return (AuditEntry.OK if whole else AuditEntry.PARTIAL), noted, detail


def complete_stale_restores(*, older_than_seconds: float = STALE_PENDING_SECONDS) -> list[int]:
    """Complete restores' entries left ``pending`` (their process died after the store
    commit, or the dashboard database refused the outcome) from the trash entries they
    restored: ``ok`` if the store has them back, ``failed`` if nothing was restored.

    Taken at once when the restoring process is known dead (``owner`` of its trash entries),
    otherwise only once older than ``older_than_seconds``. Returns their ids.
    """
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    completed = []
    for entry in AuditEntry.objects.using(_audit_alias()).filter(
        action=AuditAction.RESTORE, outcome=AuditEntry.PENDING
    ):
        if jobs.action_job_of(entry.pk) is not None:
            continue  # its job restores it (or resumes it): the job completes the entry
        touched = list(TrashEntry.objects.defer("payload").filter(restore_audit=entry.pk))
        if any(e.restoring_since is not None for e in touched):
            continue  # not settled yet (``settle_trash`` first)
        owner_dead = (
            all(process_dead(e.owner) for e in touched)
            if touched
            else process_dead((entry.before or {}).get("process"))
        )
        if not owner_dead and entry.created_at >= cutoff:
            continue
        restored = [e for e in touched if e.state == TrashEntry.RESTORED]
        if restored:
            outcome = AuditEntry.OK
            after = {
                "restored_sessions": sum(e.session_count for e in restored),
                "restored_messages": sum(e.message_count for e in restored),
                "trash_entries": [e.pk for e in restored],
            }
            detail = (
                "Completed later: the restore committed in the store, but its outcome could "
                "not be recorded then (its process died, or the dashboard database refused it)."
            )
        else:
            outcome, after = AuditEntry.FAILED, {}
            detail = "Completed later: nothing was restored (the restore did not commit)."
        if complete_later(entry, outcome=outcome, after=after, detail=detail):
            completed.append(entry.pk)
    return completed


def settle_deletes_and_restores() -> None:
    """What dead processes and refused dashboard writes left unmarked, marked from the store:
    the trash (``settle_trash``), then the audit entries of cascades, restores, merges and
    purges. Cheap when there is nothing to settle; run before the trash is shown, restored,
    purged or added to."""
    try:
        settle_trash()
        complete_stale_deletes()
        complete_stale_restores()
        complete_stale_merges()
        complete_stale_unmerges()
        complete_stale_purges()
    except Exception:  # a database that cannot be written now: settled by a later call
        logger.warning("Could not settle the trash and its audit entries", exc_info=True)


def start_bulk_delete(
    *,
    actor,
    session_ids: Sequence[str],
    include_live: bool,
    reason: str,
    description: str = "",
    expected_ids: Sequence[str] | None = None,
) -> int:
    """The job for the dry run of ``session_ids``; with ``expected_ids`` (the set the dry run
    showed) it takes none other (``jobs.create_bulk_delete_job``)."""
    ids = operator_identifiers(session_ids)
    expected = None if expected_ids is None else operator_identifiers(expected_ids)
    reason = operator_text(reason, field="reason", required=True)
    description = operator_text(description, field="description", max_length=DESCRIPTION_MAX)
    erasure_ledger.refuse_under_erasure(ids)
    job_id = _audited(
        actor=actor,
        action=AuditAction.BULK_DELETE,
        session_ids=ids,
        reason=reason,
        before={"selected": len(ids), "include_live": include_live, "description": description},
        run=lambda: jobs.create_bulk_delete_job(
            session_ids=ids,
            include_live=include_live,
            actor=_name(actor),
            reason=reason,
            description=description,
            expected_ids=expected,
        ),
        after=lambda job: {"job": job},
    )
    worker.ensure_worker_running()
    return job_id


def cancel_bulk_delete(*, actor, job_id: int, reason: str = "") -> None:
    reason = operator_text(reason, field="reason")
    before = jobs.job_progress(job_id=job_id)
    _audited(
        actor=actor,
        action=AuditAction.CANCEL_BULK_DELETE,
        session_ids=[],
        reason=reason,
        before={"job": job_id, "state": before.state, "processed": before.processed},
        run=lambda: jobs.cancel_job(job_id=job_id),
        after=lambda _: {"job": job_id, "state": jobs.job_progress(job_id=job_id).state},
    )


def resume_bulk_delete(*, actor, job_id: int, reason: str = "") -> None:
    """Finish a failed job (a database that could not be written stopped it): it takes up its
    pending items again; what it deleted before stays in its trash operation."""
    reason = operator_text(reason, field="reason")
    _audited(
        actor=actor,
        action=AuditAction.RESUME_BULK_DELETE,
        session_ids=[],
        reason=reason,
        before={"job": job_id},
        run=lambda: jobs.resume_failed_job(job_id=job_id),
        after=lambda _: {"job": job_id},
    )
    worker.ensure_worker_running()


def _restorable(entry_id: int) -> tuple[TrashEntry | None, list[str], str]:
    """The entry asked for, its operation's sessions not restored yet, and its operation;
    refused while its delete is still being written (nothing would come back whole)."""
    entry = TrashEntry.objects.defer("payload").filter(pk=entry_id).first()
    ids: list[str] = []
    operation = ""
    if entry is not None:
        operation = entry.operation
        running = DeleteJob.objects.filter(
            pk=entry.job_id, state__in=[DeleteJob.PENDING, DeleteJob.RUNNING]
        )
        if entry.job_id and running.exists():
            # Its later batches are still to come: restoring now would bring back part of it.
            raise InvalidInput(
                f"Delete job #{entry.job_id} is still running: cancel it or let it "
                "finish, then restore the whole operation."
            )
        if entry.job_id and jobs.job_stopping(entry.job_id):
            # Cancelled, its batch in flight still to be written to this operation.
            raise InvalidInput(
                f"Delete job #{entry.job_id} is stopping: the batch it was deleting when it "
                "was cancelled is not written yet. Restore the whole operation once its page "
                "says cancelled."
            )
        if operation in still_deleting():
            raise InvalidInput(
                "The cascade delete that made this trash entry has not finished (its audit "
                "entry is still pending): restore it once it has, to get the whole operation."
            )
        restoring = DeleteJob.objects.filter(
            kind=DeleteJob.RESTORE,
            operation=operation,
            state__in=[DeleteJob.PENDING, DeleteJob.RUNNING],
        ).first()
        if restoring is not None:
            raise InvalidInput(
                f"Restore job #{restoring.pk} is already restoring this trash entry: nothing "
                "was changed."
            )
        for session_ids in (
            TrashEntry.objects.filter(operation=operation)
            .exclude(state=TrashEntry.RESTORED)
            .order_by("pk")
            .values_list("session_ids", flat=True)
        ):
            ids += session_ids
        erasure_ledger.refuse_under_erasure(ids)
    return entry, ids, operation


def _restore_after(r: core.RestoreResult) -> dict:
    return {
        "restored_sessions": len(r.restored_sessions),
        "restored_messages": r.restored_messages,
        "skipped_conversations": list(r.skipped_conversations),
        "trash_entries": list(r.trash_entry_ids),
        # Links not put back with it: waiting for another trash entry's restore, or lost.
        **(
            {"waiting_links": [[w.session_id, w.parent_id, w.entry_id] for w in r.waiting_links]}
            if r.waiting_links
            else {}
        ),
        **(
            {"lost_links": [[x.session_id, x.parent_id] for x in r.lost_links]}
            if r.lost_links
            else {}
        ),
    }


def restore(*, actor, entry_id: int, reason: str = "") -> core.RestoreResult:
    """Restore a trash entry with the rest of its operation: one audited action."""
    reason = operator_text(reason, field="reason")
    settle_deletes_and_restores()
    entry, ids, operation = _restorable(entry_id)
    return _audited(
        actor=actor,
        action=AuditAction.RESTORE,
        session_ids=ids or (list(entry.session_ids) if entry else []),
        reason=reason,
        # Its process: a restore killed before it touched any entry (waiting for the store's
        # lock) is completed at once once that process is known dead (complete_stale_restores).
        before={"trash_entry": entry_id, "trash_operation": operation, "process": this_process()},
        run=lambda: core.restore_trash_entry(
            entry_id=entry_id, actor=_name(actor), trash=erasure_ledger.RESTORING_TRASH
        ),
        after=_restore_after,
    )


def purge(*, actor, older_than_days: float | None, reason: str) -> PurgeReport:
    """Drop trash operations for good: audited, naming each one a legal hold kept (its
    first entry, one held session and the hold)."""
    reason = operator_text(reason, field="reason", required=True)
    settle_deletes_and_restores()  # an operation a dead restore put back is not purged
    return _audited(
        actor=actor,
        action=AuditAction.PURGE_TRASH,
        session_ids=[],
        reason=reason,
        # Its process: a purge killed before its commit is completed at once once that process
        # is known dead (complete_stale_purges); the purge adds what it drops (PURGING).
        before={"older_than_days": older_than_days, "process": this_process()},
        run=lambda: purge_trash_report(older_than_days=older_than_days),
        after=lambda report: {
            "purged_entries": report.purged,
            "purged_sessions": report.sessions,
            "purged_messages": report.messages,
            **(
                {
                    "kept_under_hold": [
                        {
                            "trash_entry": kept.entry_id,
                            "session": kept.session_id,
                            "hold": kept.hold.id,
                        }
                        for kept in report.kept[:ENTRY_SESSION_IDS]
                    ]
                }
                if report.kept
                else {}
            ),
        },
        # The sessions it dropped, then one of each operation a hold kept.
        result_ids=lambda report: [
            *report.session_ids,
            *(kept.session_id for kept in report.kept),
        ],
    )


def complete_stale_purges(*, older_than_seconds: float = STALE_PENDING_SECONDS) -> list[int]:
    """Complete purges' entries left ``pending`` (their process died, or the dashboard database
    refused the outcome) from what each recorded it was dropping (``ledger.trash.PURGING``,
    written in the transaction that drops it) and what of that the trash still holds: all of
    it gone (``ok``, with its counts), none (``failed``), some (``partial``); nothing recorded
    means the purge never committed (``failed``).

    Taken at once when the purging process is known dead, otherwise only once older than
    ``older_than_seconds``. Entries recorded before purges named their process are left as
    they are (nothing says what they dropped). Returns their ids.
    """
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    completed = []
    alias = _audit_alias()
    stale = AuditEntry.objects.using(alias).filter(
        action=AuditAction.PURGE_TRASH, outcome=AuditEntry.PENDING
    )
    for entry in stale.order_by("pk"):
        process = (entry.before or {}).get("process")
        if process is None or (not process_dead(process) and entry.created_at >= cutoff):
            continue
        with transaction.atomic(using=alias):
            # On PostgreSQL a dead client's COMMIT may still be finishing: its purge holds
            # this row (it wrote the plan on it) until then, so the plan is read after it.
            locked = (
                AuditEntry.objects.using(alias)
                .select_for_update()
                .filter(pk=entry.pk, outcome=AuditEntry.PENDING)
                .first()
            )
            if locked is None:
                continue
            outcome, after, detail = _purge_outcome((locked.before or {}).get(PURGING))
            if complete_later(locked, outcome=outcome, after=after, detail=detail):
                completed.append(entry.pk)
    return completed


def _purge_outcome(plan: object) -> tuple[str, dict, str]:
    """A dead purge's outcome from its recorded ``plan``, against what the trash holds now."""
    if not isinstance(plan, dict):
        return (
            AuditEntry.FAILED,
            {},
            "Completed later: the purge did not commit (its process died before), so "
            "nothing was purged.",
        )
    operations = {
        operation: [pk for pk in ids if isinstance(pk, int)]
        for operation, ids in (plan.get("operations") or {}).items()
        if isinstance(ids, list)
    }
    recorded = [pk for ids in operations.values() for pk in ids]
    left = {}
    for start in range(0, len(recorded), 500):
        left.update(
            (pk, (state, sessions, messages))
            for pk, state, sessions, messages in TrashEntry.objects.filter(
                pk__in=recorded[start : start + 500]
            ).values_list("pk", "state", "session_count", "message_count")
        )
    still = [operation for operation, ids in operations.items() if any(pk in left for pk in ids)]
    kept_sessions = sum(s for state, s, _m in left.values() if state != TrashEntry.RESTORED)
    kept_messages = sum(m for state, _s, m in left.values() if state != TrashEntry.RESTORED)
    after = {
        "purged_entries": len(operations) - len(still),
        "purged_sessions": max(int(plan.get("purged_sessions") or 0) - kept_sessions, 0),
        "purged_messages": max(int(plan.get("purged_messages") or 0) - kept_messages, 0),
    }
    said = (
        f"{after['purged_entries']} trash entries ({after['purged_sessions']} sessions, "
        f"{after['purged_messages']} messages)"
    )
    if not left:
        return (
            AuditEntry.OK,
            after,
            f"Completed later from what it recorded with its commit: {said} were purged; "
            "its outcome could not be recorded then (its process died, or the dashboard "
            "database refused it).",
        )
    if len(left) == len(recorded):
        return (
            AuditEntry.FAILED,
            {},
            "Completed later: every trash entry it was to drop is still in the trash, so "
            "nothing was purged.",
        )
    return (
        AuditEntry.PARTIAL,
        after,
        f"Completed later from what it recorded: {said} were purged; trash entries "
        f"{', '.join(f'#{pk}' for pk in sorted(left)[:20])} it was to drop are still in the "
        "trash.",
    )
