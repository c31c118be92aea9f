"""Operator actions: the core operation plus its audit entry, for every edge that acts.

Views and commands call these, never the core's mutating functions directly,
so no action escapes the audit trail. A refused or failed action is audited
too (outcome ``failed``) and its error re-raised for the edge to show.

No store change may lack its audit entry, so an action runs in four steps:

1. every operator-supplied argument is checked by ``core.text`` (the one rule
   for operator text): invalid text is ``InvalidInput`` before anything is
   written, in the store or in the audit log;
2. the intent is recorded and committed: an entry with outcome ``pending``
   holding the actor, the action, the sessions, ``before`` and the reason;
3. the core operation runs (its own store transaction);
4. the entry is completed: ``ok`` with ``after``, or ``failed`` with the error, or
   ``partial`` when the operation failed after committing part of itself (a delete's
   first batches): ``after`` is exactly what committed, with its trash operation.

If the dashboard database cannot record step 2 (a full disk, a read-only file), the
action does not run and the edge says so (``DashboardNotWritten``: nothing was changed).

Every entry names the request's client (address, user agent) when written
during a request (``sessions_admin.ledger.context``). Attempts refused before
an action runs (a permission, a stale preview, a missing reason, a CSRF
failure, a failed sign-in) are recorded by ``record_refusal``; an error
``_audited`` already recorded is marked (``audited_entry``) so the view's
``record_refusal`` does not record it twice.

A process that dies between 3 and 4 (kill -9, power cut) leaves the
``pending`` entry, which the audit page shows as "outcome unknown". A
completion that fails (the dashboard's database refuses the write) is logged
at ERROR and raised as ``AuditIncomplete`` after a store change, never
swallowed; the pending entry stays.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import IO, Any, TypeVar

from django.conf import settings
from django.db import connections, router, transaction
from django.utils import timezone

from sessions_admin import core
from sessions_admin.core import db as core_db
from sessions_admin.core import erasure as erasure_core
from sessions_admin.core import faults, holds, portability, stray
from sessions_admin.core.deletion import new_operation_id
from sessions_admin.core.errors import InvalidInput, StoreError
from sessions_admin.core.lifecycle import recoverable_siblings
from sessions_admin.core.text import (
    DESCRIPTION_MAX,
    REFERENCE_MAX,
    SUMMARY_MAX,
    operator_identifier,
    operator_identifiers,
    operator_text,
)
from sessions_admin.ledger import erasure, jobs, retention, worker
from sessions_admin.ledger.context import current_client, running_audit_entry
from sessions_admin.ledger.models import (
    AuditEntry,
    AuditSession,
    DeleteJob,
    ErasureRequest,
    RetentionPolicy,
    TrashEntry,
)
from sessions_admin.ledger.processes import process_dead
from sessions_admin.ledger.trash import (
    LEDGER_TRASH,
    PURGED_TRASH,
    PurgeReport,
    purge_trash_report,
    settle_trash,
    stale_pending_trash,
)
from sessions_admin.routers import store_alias
from sessions_admin.store import cached
from sessions_admin.store.models import Session

T = TypeVar("T")
MAX_AUDIT_SESSIONS = 10_000
ENTRY_SESSION_IDS = 1000  # ids kept on the entry itself; AuditSession rows hold up to the max
DETAIL_MAX = 4000
# A cascade's entry still pending after this long is not running any more (a job's lease, too).
STALE_PENDING_SECONDS = 600
MAX_HELD_NAMED = 1000  # held sessions a retention run's entry names one by one

logger = logging.getLogger(__name__)


class AuditIncomplete(RuntimeError):
    """The store change happened, but its audit entry could not be completed.

    Not a ``StoreError``: the edges must not say "nothing changed". The entry
    stays ``pending`` (outcome unknown) in the audit log.
    """

    def __init__(self, action: str, entry_id: int, error: BaseException):
        self.action = action
        self.entry_id = entry_id
        super().__init__(
            f"The {action} was applied to the store, but its audit entry #{entry_id} could not "
            f"be completed ({error}); the entry stays 'pending' in the audit log."
        )


def _name(actor: Any) -> str:
    return getattr(actor, "get_username", lambda: str(actor))() if actor is not None else "system"


def _audit_alias() -> str:
    return router.db_for_write(AuditEntry)


def _storable(value: Any) -> Any:
    """``value`` with every string made storable in the audit log (text, JSON, jsonb).

    The last line of defence for what the operator did not type (error messages,
    rows read back from a SQLite store): a NUL or a lone surrogate is written as
    its escape (``\\x00``, ``\\ud800``) instead of making the audit write fail.
    Operator text never gets here invalid: ``core.text`` refused it before.
    """
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "\\x00")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value


def _link_sessions(entry: AuditEntry, session_ids, *, already=()) -> None:
    """One AuditSession row per session id not linked yet (up to the maximum)."""
    skip = set(already)
    wanted = [sid for sid in dict.fromkeys(session_ids) if sid not in skip]
    room = MAX_AUDIT_SESSIONS - len(skip)
    # A bulk delete can name 100k sessions: its job items hold the full list.
    AuditSession.objects.using(_audit_alias()).bulk_create(
        (AuditSession(entry=entry, session_id=sid) for sid in wanted[: max(room, 0)]),
        batch_size=1000,
    )


def record(
    *,
    actor: Any,
    action: str,
    session_ids: Sequence[str],
    before: dict | None = None,
    after: dict | None = None,
    reason: str = "",
    outcome: str = AuditEntry.OK,
    detail: str = "",
) -> AuditEntry:
    """Write one finished audit entry (for callers that record after the fact, like imports).

    Its text is made storable rather than refused: the operation it records already happened.
    """
    ids = [_storable(str(sid)) for sid in session_ids]
    client = current_client()
    with transaction.atomic(using=_audit_alias()):
        entry = AuditEntry.objects.using(_audit_alias()).create(
            client_address=client.address,
            user_agent=_storable(client.user_agent),
            actor=actor if getattr(actor, "pk", None) else None,
            actor_name=_storable(_name(actor))[:150],
            action=action,
            session_ids=ids[:ENTRY_SESSION_IDS],
            before=_storable(before or {}),
            after=_storable(after or {}),
            reason=_storable(reason or ""),
            outcome=outcome,
            detail=_storable(detail)[:DETAIL_MAX],
            completed_at=None if outcome == AuditEntry.PENDING else timezone.now(),
        )
        _link_sessions(entry, ids)
    return entry


def _complete(
    entry: AuditEntry,
    *,
    outcome: str,
    linked: Sequence[str],
    more_ids: Sequence[str] = (),
    after: dict | None = None,
    detail: str = "",
) -> None:
    """Turn the pending ``entry`` into its outcome, linking ``more_ids`` (sessions it created)."""
    more = [_storable(str(sid)) for sid in more_ids if sid]
    ids = list(dict.fromkeys([*linked, *more]))
    with transaction.atomic(using=_audit_alias()):
        updated = (
            AuditEntry.objects.using(_audit_alias())
            .filter(pk=entry.pk, outcome=AuditEntry.PENDING)
            .update(
                outcome=outcome,
                session_ids=ids[:ENTRY_SESSION_IDS],
                after=_storable(after or {}),
                detail=_storable(detail)[:DETAIL_MAX],
                completed_at=timezone.now(),
            )
        )
        if updated != 1:
            raise RuntimeError(f"audit entry #{entry.pk} is no longer pending (or was deleted)")
        _link_sessions(entry, more, already=linked)


class DashboardNotWritten(StoreError):
    """The action's intent could not be recorded (the dashboard database refused the write),
    so it did not run: nothing was changed, in the store or in the audit log."""

    def __init__(self, action: str, storage: str, error: BaseException):
        self.action = action
        why = "its disk is full" if storage == "full" else f"{type(error).__name__}: {error}"
        super().__init__(
            f"The dashboard database could not be written ({why}): nothing was changed. "
            f"The {action} did not run; free space on its disk, or make it writable, then retry."
        )


def _failure_detail(error: Exception) -> str:
    """What a failed action's entry says: the refusal, a database that could not be written,
    or that a bug escaped the core."""
    # A StoreError is the core's "refused, nothing changed"; anything else
    # escaped the core's transaction, which rolled back.
    if isinstance(error, StoreError | erasure_core.ErasureStopped):
        return str(error)
    if storage := core_db.storage_failure(error):
        why = "its disk is full" if storage == "full" else "a disk I/O error or a read-only file"
        return (
            f"A database could not be written ({why}): the operation rolled back. "
            f"({type(error).__name__}: {error})"
        )
    return f"Unexpected error ({type(error).__name__}): {error}"


def _audited(
    *,
    actor: Any,
    action: str,
    session_ids: Sequence[str],
    reason: str,
    before: dict | None,
    run: Callable[[], T],
    after: Callable[[T], dict],
    result_ids: Callable[[T], Sequence[str | None]] = lambda _: (),
    failed_ids: Callable[[Exception], Sequence[str]] = lambda _: (),
    partly: Callable[[Exception], T | None] = lambda _: None,
) -> T:
    """Record the intent (committed), run the store operation, then record its outcome.

    ``reason`` and every other operator text must already be through ``core.text``.
    ``failed_ids``: the sessions a failed operation still wrote (an interrupted import
    keeps the batches it committed), linked to the failed entry. ``partly``: what a
    failed operation committed all the same (a delete's first batches), or None; the
    entry is then ``partial``, its ``after`` that result (the trash operation with it)
    and its detail what stopped the rest.
    """
    audit = _caller_transaction()
    if audit:
        # The pending entry would only commit with the caller's transaction: a crash
        # after the store commit would leave no trace. Refuse rather than pretend.
        raise RuntimeError(
            f"Operator actions must not run inside a transaction on {audit!r}: "
            "the audit entry has to be committed before the store changes."
        )
    linked = [_storable(str(sid)) for sid in dict.fromkeys(session_ids)]
    try:
        entry = record(
            actor=actor,
            action=action,
            session_ids=linked,
            before=before,
            reason=reason,
            outcome=AuditEntry.PENDING,
        )
    except Exception as error:
        if storage := core_db.storage_failure(error):
            raise DashboardNotWritten(action.replace("_", " "), storage, error) from error
        raise
    try:
        with running_audit_entry(entry.pk):
            result = run()
    except Exception as error:
        # Recorded here: the edge's record_refusal must not record it again.
        error.audited_entry = entry.pk
        detail = _failure_detail(error)
        committed = partly(error)
        if committed is not None:
            cached.forget_all()  # what did commit shows at once, as after an ok action
        if core_db.connection_lost(getattr(error, "error", None) or error):
            core_db.close_broken_connections()  # a restarted server: record it on a new one
        try:
            if committed is not None:
                _complete(
                    entry,
                    outcome=AuditEntry.PARTIAL,
                    linked=linked,
                    more_ids=failed_ids(error),
                    after=after(committed),
                    detail=str(error),
                )
            else:
                _complete(
                    entry,
                    outcome=AuditEntry.FAILED,
                    linked=linked,
                    more_ids=failed_ids(error),
                    detail=detail,
                )
        except Exception:
            # The store did not change; the operator still needs the refusal itself.
            logger.exception(
                "Audit entry #%s (%s, failed: %s) could not be completed; it stays pending.",
                entry.pk,
                action,
                detail,
            )
        raise
    # The store change is committed; until the next line completes, the entry says "pending".
    faults.checkpoint("audit.after_store_commit")
    # The operator who merged or deleted expects the fork groups and counts to show it.
    cached.forget_all()
    try:
        state_after = after(result)
    except Exception as error:  # reading the new state is a courtesy; the outcome is known
        logger.warning("Could not read the state after %s: %s", action, error)
        state_after = {"unreadable": f"{type(error).__name__}: {error}"}
    try:
        _complete(
            entry,
            outcome=AuditEntry.OK,
            linked=linked,
            more_ids=[sid for sid in result_ids(result) if sid],
            after=state_after,
        )
    except Exception as error:
        logger.error(
            "The %s by %s was applied to the store, but audit entry #%s could not be "
            "completed; it stays pending. After: %r",
            action,
            _name(actor),
            entry.pk,
            state_after,
            exc_info=True,
        )
        raise AuditIncomplete(action, entry.pk, error) from error
    return result


def record_refusal(
    *,
    request: Any = None,
    actor: Any = None,
    action: str,
    why: str | BaseException,
    session_ids: Sequence[str] = (),
    before: dict | None = None,
) -> AuditEntry | None:
    """Record an attempt refused before (or instead of) its action: outcome ``refused``.

    Who: ``actor``, or the request's user ("anonymous" when signed out); what:
    ``action``, the sessions and ``before`` (plus the request's method and path);
    from where: the request's client (every entry has it); why: ``why``. An error
    ``_audited`` already recorded is skipped (None). Recording never raises: a
    refusal is shown to the operator even when the audit database fails (logged).
    """
    if getattr(why, "audited_entry", None) is not None:
        return None
    if actor is None and request is not None:
        user = getattr(request, "user", None)
        actor = user if getattr(user, "is_authenticated", False) else "anonymous"
    what = dict(before or {})
    if request is not None:
        what.setdefault("method", request.method)
        what.setdefault("path", request.path)
    try:
        return record(
            actor=actor,
            action=action[:40],
            session_ids=[str(sid) for sid in session_ids][:MAX_AUDIT_SESSIONS],
            before=what,
            outcome=AuditEntry.REFUSED,
            detail=str(why),
        )
    except Exception:
        logger.exception("Could not audit the refused %s by %s: %s", action, _name(actor), why)
        return None


def _caller_transaction() -> str | None:
    """The audit database's alias when the caller holds a transaction open on it."""
    alias = _audit_alias()
    return alias if connections[alias].in_atomic_block else None


def _check_fingerprint(fingerprint: Any) -> None:
    """A preview's fingerprint is compared, not stored; still, PostgreSQL cannot compare a NUL."""
    if fingerprint:
        operator_identifier(fingerprint, field="fingerprint", max_length=200)


def _counts(session_ids: Sequence[str]) -> dict:

    return {
        s.id: {"messages": s.message_count, "ended": s.end_reason if s.ended_at else None}
        for s in Session.objects.filter(id__in=list(session_ids)[:200])
    }


def merge(
    *,
    actor,
    session_ids: Sequence[str],
    target_id: str | None,
    expected_fingerprint: str,
    reason: str = "",
    continue_history: bool = False,
    differences: dict[str, list] | None = None,
) -> core.MergeResult:
    """``core.merge_sessions``, audited; ``differences`` (what differs between the sessions'
    users, sources and keys, as the operator confirmed it) is kept in the entry."""
    ids = operator_identifiers(session_ids)
    target_id = operator_identifier(target_id, field="target session id", required=False)
    _check_fingerprint(expected_fingerprint)
    reason = operator_text(reason, field="reason")
    before = _counts(ids)
    if differences:
        before["confirmed_differences"] = differences
    return _audited(
        actor=actor,
        action="merge",
        session_ids=ids,
        reason=reason,
        before=before,
        run=lambda: core.merge_sessions(
            session_ids=ids,
            target_id=target_id,
            expected_fingerprint=expected_fingerprint,
            continue_history=continue_history,
        ),
        after=lambda r: {
            "merge_id": r.merge_id,
            "target": r.target_id,
            "moved_messages": r.moved_messages,
            **(
                {"rewritten_responses": list(r.rewritten_responses)}
                if r.rewritten_responses
                else {}
            ),
            **_counts([r.target_id]),
        },
    )


def unmerge(*, actor, merge_id: int, reason: str = "") -> core.UnmergeResult:
    reason = operator_text(reason, field="reason")
    try:
        merged = core.merge_record(merge_id=merge_id)
        ids = [merged.target_id, *merged.absorbed_ids]
    except core.MergeNotFound:
        ids = []
    return _audited(
        actor=actor,
        action="unmerge",
        session_ids=ids,
        reason=reason,
        before={"merge_id": merge_id, **_counts(ids)},
        run=lambda: core.unmerge(merge_id=merge_id),
        after=lambda r: {
            "merge_id": merge_id,
            "returned_messages": r.returned_messages,
            **_counts(ids),
        },
    )


def resume(
    *, actor, ref: str, reason: str = "", expected_fingerprint: str | None = None
) -> core.ResumeResult:
    """``core.resume_session``, audited; with a ``plan_resume`` fingerprint, only as planned."""
    ref = operator_identifier(ref, field="session reference", max_length=REFERENCE_MAX)
    _check_fingerprint(expected_fingerprint)
    reason = operator_text(reason, field="reason")
    try:
        asked = [core.resolve_session_ref(ref)]
    except StoreError:
        asked = []  # the refusal is audited below, with the reference as given
    recoverable = []
    if asked:
        target = core.current_session(session_id=asked[0])
        key = _key_of(target)
        recoverable = recoverable_siblings(key, over=target)
    return _audited(
        actor=actor,
        action="resume",
        session_ids=asked,
        reason=reason,
        # What a gateway could have reopened instead, as it was: the resume re-ends it.
        before={
            "ref": ref,
            **_counts(asked),
            **({"recoverable_siblings": dict(recoverable)} if recoverable else {}),
        },
        run=lambda: core.resume_session(ref=ref, expected_fingerprint=expected_fingerprint),
        after=lambda r: {
            "resumed": r.session_id,
            "switched_from": r.switched_from_session_id,
            **_closed(r.closed_recoverable, "session_switch"),
        },
        result_ids=lambda r: [
            r.session_id,
            r.switched_from_session_id,
            *(sid for sid, _ in r.closed_recoverable),
        ],
    )


def _key_of(session_id: str) -> str | None:

    return Session.objects.filter(id=session_id).values_list("session_key", flat=True).first()


def _closed(closed: Sequence[tuple[str, str]], now: str) -> dict:
    """Sessions re-ended so that a gateway cannot reopen them: their reason before and now.

    Absent when there were none, so a plain resume or reset reads as before.
    """
    if not closed:
        return {}
    return {
        "closed_recoverable": {
            sid: {"end_reason_before": before, "end_reason": now} for sid, before in closed
        }
    }


def reset(
    *, actor, session_key: str, summary: str | None = None, reason: str = ""
) -> core.ResetResult:
    session_key = operator_identifier(session_key, field="session key")
    summary = operator_text(summary, field="summary", max_length=SUMMARY_MAX) or None
    reason = operator_text(reason, field="reason")
    live = core.live_session_for_key(session_key)
    recoverable = recoverable_siblings(session_key)
    return _audited(
        actor=actor,
        action="reset",
        session_ids=[s for s in [live] if s],
        reason=reason,
        before={
            "session_key": session_key,
            "live": live,
            **({"recoverable_siblings": dict(recoverable)} if recoverable else {}),
        },
        run=lambda: core.reset_session_key(session_key=session_key, summary=summary),
        after=lambda r: {
            "ended": r.ended_session_id,
            "new": r.new_session_id,
            **({"left_to_gateway": True} if r.left_to_gateway else {}),
            **_closed(r.closed_recoverable, "session_reset"),
        },
        result_ids=lambda r: [
            r.ended_session_id,
            r.new_session_id,
            *(sid for sid, _ in r.closed_recoverable),
        ],
    )


def rewrite(
    *,
    actor,
    session_id: str,
    action: str,
    reason: str = "",
    expected_fingerprint: str | None = None,
) -> core.RewriteResult:
    """Undo, redo or retry, audited; with a ``plan_rewrite`` fingerprint, only as planned."""
    operations = {
        "undo": core.undo_last_turn,
        "redo": core.redo_turn,
        "retry": core.retry_last_turn,
    }
    if action not in operations:
        raise InvalidInput(f"Unknown transcript action {action!r}.")
    session_id = operator_identifier(session_id, field="session id")
    _check_fingerprint(expected_fingerprint)
    reason = operator_text(reason, field="reason")
    return _audited(
        actor=actor,
        action=action,
        session_ids=[session_id],
        reason=reason,
        before=_counts([session_id]),
        run=lambda: operations[action](
            session_id=session_id, expected_fingerprint=expected_fingerprint or None
        ),
        after=lambda r: {"message_ids": list(r.message_ids), "message_count": r.message_count},
    )


def cascade_delete(
    *,
    actor,
    session_ids: Sequence[str],
    include_branches: bool,
    expected_fingerprint: str,
    reason: str,
    lose_undo: bool = False,
) -> core.DeleteResult:
    ids = operator_identifiers(session_ids)
    _check_fingerprint(expected_fingerprint)
    reason = operator_text(reason, field="reason", required=True)
    settle_deletes_and_restores()
    # Recorded with the intent: an entry whose outcome could not be written is completed
    # later from what this operation's trash holds (complete_stale_deletes).
    operation = new_operation_id()
    return _audited(
        actor=actor,
        action="cascade_delete",
        session_ids=ids,
        reason=reason,
        before={**_counts(ids), "trash_operation": operation},
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


def complete_stale_deletes(*, older_than_seconds: float = STALE_PENDING_SECONDS) -> list[int]:
    """Complete cascade deletes' entries left ``pending`` (the dashboard database could not
    record their outcome, or the process died) from what their trash operation holds.

    A delete copies each batch into the trash before the store deletes it, so the trash says
    what committed: nothing (``failed``), every batch down to the sessions asked for
    (``ok``), or the first batches only (``partial``); when an erasure took that trash
    meanwhile, what it held then (``ledger.erasure.note_pending_deletes``). Only entries
    older than ``older_than_seconds``: a younger one may be a delete still running. Returns
    their ids.
    """
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    completed = []
    stale = AuditEntry.objects.using(_audit_alias()).filter(
        action="cascade_delete", outcome=AuditEntry.PENDING, created_at__lt=cutoff
    )
    for entry in stale:
        operation = (entry.before or {}).get("trash_operation")
        if not operation:
            continue  # recorded before entries named their operation: nothing to read
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
        erased_by = (entry.after or {}).get(erasure.ERASED_TRASH)
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
        try:
            _complete(
                entry, outcome=outcome, linked=list(entry.session_ids), after=after, detail=detail
            )
        except RuntimeError:
            continue  # completed meanwhile by its own process
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
        action="restore", outcome=AuditEntry.PENDING
    ):
        touched = list(TrashEntry.objects.defer("payload").filter(restore_audit=entry.pk))
        if any(e.restoring_since is not None for e in touched):
            continue  # not settled yet (``settle_trash`` first)
        owner_dead = bool(touched) and all(process_dead(e.owner) for e in touched)
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
        try:
            _complete(
                entry,
                outcome=outcome,
                linked=list(entry.session_ids),
                after=after,
                detail=detail,
            )
        except RuntimeError:
            continue  # completed meanwhile by its own process
        completed.append(entry.pk)
    return completed


def complete_stale_merges(*, older_than_seconds: float = STALE_PENDING_SECONDS) -> list[int]:
    """Complete merges' entries left ``pending`` (the process died after the store commit, or
    the dashboard database refused the outcome) from the store's merge records: ``ok`` naming
    the merge if one of exactly these sessions was recorded after the entry, else ``failed``.

    Only entries older than ``older_than_seconds`` (a younger one may be a merge still
    running). Returns their ids.
    """
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    completed = []
    for entry in AuditEntry.objects.using(_audit_alias()).filter(
        action="merge", outcome=AuditEntry.PENDING, created_at__lt=cutoff
    ):
        asked = set(entry.session_ids)
        made = None
        for merge_id, target, absorbed in core_db.fetchall(
            "SELECT id, target_session_id, absorbed_session_ids FROM sessions_admin_merges "
            "WHERE created_at >= %s ORDER BY id",
            [entry.created_at.timestamp() - 1],
        ):
            # The target is one of them, or (none named) a session the merge made.
            if set(json.loads(absorbed or "[]")) | ({target} & asked) == asked:
                made = (merge_id, target)
                break
        if made is not None:
            outcome, after = AuditEntry.OK, {"merge_id": made[0], "target": made[1]}
            detail = (
                "Completed later: the merge committed in the store (merge "
                f"#{made[0]}), but its outcome could not be recorded then."
            )
        else:
            outcome, after = AuditEntry.FAILED, {}
            detail = "Completed later: the store records no such merge, so nothing was merged."
        try:
            _complete(
                entry, outcome=outcome, linked=list(entry.session_ids), after=after, detail=detail
            )
        except RuntimeError:
            continue
        completed.append(entry.pk)
    return completed


def settle_deletes_and_restores() -> None:
    """What dead processes and refused dashboard writes left unmarked, marked from the store:
    the trash (``settle_trash``), then the audit entries of cascades and restores. Cheap when
    there is nothing to settle; run before the trash is shown, restored, purged or added to."""
    try:
        settle_trash()
        complete_stale_deletes()
        complete_stale_restores()
        complete_stale_merges()
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
    job_id = _audited(
        actor=actor,
        action="bulk_delete",
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


def restore(*, actor, entry_id: int, reason: str = "") -> core.RestoreResult:
    """Restore a trash entry with the rest of its operation: one audited action."""
    reason = operator_text(reason, field="reason")
    settle_deletes_and_restores()
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
                f"Bulk delete job #{entry.job_id} is still running: cancel it or let it "
                "finish, then restore the whole operation."
            )
        for session_ids in (
            TrashEntry.objects.filter(operation=operation)
            .exclude(state=TrashEntry.RESTORED)
            .order_by("pk")
            .values_list("session_ids", flat=True)
        ):
            ids += session_ids
    return _audited(
        actor=actor,
        action="restore",
        session_ids=ids or (list(entry.session_ids) if entry else []),
        reason=reason,
        before={"trash_entry": entry_id, "trash_operation": operation},
        run=lambda: core.restore_trash_entry(
            entry_id=entry_id, actor=_name(actor), trash=LEDGER_TRASH
        ),
        after=lambda r: {
            "restored_sessions": len(r.restored_sessions),
            "restored_messages": r.restored_messages,
            "skipped_conversations": list(r.skipped_conversations),
            "trash_entries": list(r.trash_entry_ids),
            # Links not put back with it: waiting for another trash entry's restore, or lost.
            **(
                {
                    "waiting_links": [
                        [w.session_id, w.parent_id, w.entry_id] for w in r.waiting_links
                    ]
                }
                if r.waiting_links
                else {}
            ),
            **(
                {"lost_links": [[x.session_id, x.parent_id] for x in r.lost_links]}
                if r.lost_links
                else {}
            ),
        },
    )


def purge(*, actor, older_than_days: float | None, reason: str) -> PurgeReport:
    """Drop trash operations for good: audited, naming each one a legal hold kept (its
    first entry, one held session and the hold)."""
    reason = operator_text(reason, field="reason", required=True)
    settle_deletes_and_restores()  # an operation a dead restore put back is not purged
    return _audited(
        actor=actor,
        action="purge_trash",
        session_ids=[],
        reason=reason,
        before={"older_than_days": older_than_days},
        run=lambda: purge_trash_report(older_than_days=older_than_days),
        after=lambda report: {
            "purged_entries": report.purged,
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
        result_ids=lambda report: [kept.session_id for kept in report.kept],
    )


def place_hold(*, actor, kind: str, subject: str, reason: str) -> holds.Hold:
    """Put a session (its whole lineage) or a user under a legal hold: audited."""
    subject = operator_identifier(subject, field="session or user id")
    reason = operator_text(reason, field="reason", required=True)
    return _audited(
        actor=actor,
        action="place_hold",
        session_ids=[subject] if kind == holds.SESSION else [],
        reason=reason,
        before={"kind": kind, "subject": subject},
        run=lambda: holds.place_hold(kind=kind, subject=subject, reason=reason, actor=_name(actor)),
        after=lambda hold: {"hold": hold.id, "kind": hold.kind, "subject": hold.subject},
    )


def release_hold(*, actor, hold_id: int, reason: str) -> holds.Hold:
    """End a legal hold: audited, with the reason kept on the hold too."""
    reason = operator_text(reason, field="reason", required=True)
    hold = holds.get_hold(hold_id=hold_id)
    return _audited(
        actor=actor,
        action="release_hold",
        session_ids=[hold.subject] if hold and hold.kind == holds.SESSION else [],
        reason=reason,
        before={"hold": hold_id, "kind": hold.kind if hold else None},
        run=lambda: holds.release_hold(hold_id=hold_id, reason=reason, actor=_name(actor)),
        after=lambda released: {"hold": released.id, "released": True},
    )


def _policy_state(policy: RetentionPolicy) -> dict:
    every = policy.every_hours
    return {
        "policy": policy.pk,
        "name": policy.name,
        "rule": retention.describe(policy),
        # A stored value the rules refuse (NaN, text) is kept as its text: jsonb has no NaN.
        "every_hours": every if retention.problem_of(policy) is None else repr(every),
        "enabled": policy.enabled,
    }


def create_retention_policy(*, actor, reason: str = "", **fields) -> RetentionPolicy:
    """A new policy, disabled: its page shows what a run would delete before anyone enables it."""
    reason = operator_text(reason, field="reason")
    fields["name"] = operator_text(fields.get("name", ""), field="name", required=True)
    policy = RetentionPolicy(**fields, enabled=False, created_by=_name(actor))
    retention.check(policy)

    def save() -> RetentionPolicy:
        policy.save()
        return policy

    return _audited(
        actor=actor,
        action="retention_policy_create",
        session_ids=[],
        reason=reason,
        before=None,
        run=save,
        after=_policy_state,
    )


def set_retention_policy_enabled(
    *, actor, policy_id: int, enabled: bool, reason: str = ""
) -> RetentionPolicy:
    """Enable (first run one period from now) or disable a policy."""
    reason = operator_text(reason, field="reason")
    policy = RetentionPolicy.objects.filter(pk=policy_id).first()
    if policy is None:
        raise InvalidInput(f"There is no retention policy #{policy_id}.")
    if enabled:
        retention.check_stored(policy)

    def switch() -> RetentionPolicy:
        policy.enabled = enabled
        policy.next_run_at = (
            timezone.now() + timezone.timedelta(hours=policy.every_hours) if enabled else None
        )
        policy.save(update_fields=["enabled", "next_run_at"])
        return policy

    return _audited(
        actor=actor,
        action="retention_policy_enable" if enabled else "retention_policy_disable",
        session_ids=[],
        reason=reason,
        before=_policy_state(policy),
        run=switch,
        after=lambda p: {**_policy_state(p), "next_run_at": str(p.next_run_at)},
    )


def delete_retention_policy(*, actor, policy_id: int, reason: str = "") -> None:
    reason = operator_text(reason, field="reason")
    policy = RetentionPolicy.objects.filter(pk=policy_id).first()
    if policy is None:
        raise InvalidInput(f"There is no retention policy #{policy_id}.")
    _audited(
        actor=actor,
        action="retention_policy_delete",
        session_ids=[],
        reason=reason,
        before=_policy_state(policy),
        run=lambda: policy.delete(),
        after=lambda _: {"policy": policy_id, "deleted": True},
    )


def run_retention_policy(
    *, actor, policy_id: int, reason: str, expected_fingerprint: str | None = None
) -> int | None:
    """One run of a policy now: a bulk delete job of what it selects (None: nothing matched).

    The scheduler calls this for a due run it claimed (``start_due_policies``) and
    ``manage.py apply_retention`` for its pass, both with no actor: the policy itself is
    the actor then (``retention.actor_of``). The page's "Run now" passes the operator and
    the fingerprint of the preview it showed: a run whose selection changed since is
    refused (``PlanChanged``), so it deletes exactly the sessions shown. A stored policy
    the rules refuse never runs; its refusal is audited. Sessions a legal hold keeps are
    named with the hold in the entry (``kept_for_holds``).
    """
    reason = operator_text(reason, field="reason", required=True)
    policy = RetentionPolicy.objects.filter(pk=policy_id).first()
    if policy is None:
        raise InvalidInput(f"There is no retention policy #{policy_id}.")
    if actor is None:
        actor = retention.actor_of(policy)
    if problem := retention.problem_of(policy):
        entry = record(
            actor=actor,
            action="retention_run",
            session_ids=[],
            before=_policy_state(policy),
            reason=reason,
            outcome=AuditEntry.FAILED,
            detail=problem,
        )
        refused = InvalidInput(problem)
        refused.audited_entry = entry.pk
        raise refused
    preview = retention.dry_run(policy, rows=0)
    ids = list(preview.session_ids)

    def run() -> int | None:
        if expected_fingerprint is not None and expected_fingerprint != preview.fingerprint:
            raise core.PlanChanged("retention run")
        return retention.start_run(policy, ids=ids, actor=_name(actor), reason=reason)

    job_id = _audited(
        actor=actor,
        action="retention_run",
        session_ids=ids,
        reason=reason,
        before={
            **_policy_state(policy),
            "selected": len(ids),
            "messages": preview.message_count,
            "mode": policy.mode,
            "fingerprint": preview.fingerprint,
            "kept_for_holds": [skip.describe() for skip in preview.held[:MAX_HELD_NAMED]],
            "kept_for_holds_count": len(preview.held),
        },
        run=run,
        after=lambda job: {"job": job},
    )
    if job_id is not None:
        worker.ensure_worker_running()
    return job_id


def start_due_policies() -> list[int]:
    """Start every enabled policy whose run is due (claimed once across processes); the jobs.

    Each run is audited with the policy as its actor.
    """
    started = []
    for policy_id in retention.due_policy_ids():
        if not retention.claim_due(policy_id):
            continue
        try:
            job_id = run_retention_policy(
                actor=None, policy_id=policy_id, reason="scheduled retention run"
            )
        except Exception:
            logger.exception("retention policy %s: the scheduled run failed", policy_id)
            continue
        if job_id is not None:
            started.append(job_id)
    return started


def request_erasure(
    *,
    actor,
    subject: erasure_core.Subject,
    reference: str,
    expected_fingerprint: str,
    start: bool = True,
) -> ErasureRequest:
    """Queue the erasure the operator confirmed (refused if the plan changed since the preview,
    or a hold covers any of it). The audit entry names the subject by its keyed hash only."""
    reference = operator_text(reference, field="request reference", required=True, max_length=200)
    _check_fingerprint(expected_fingerprint)
    if (earlier := erasure.open_request_for(subject)) is not None:
        raise InvalidInput(
            f"Erasure request #{earlier.pk} for this subject has not finished ({earlier.state}): "
            "its page follows it, and opening it (or erase_subject --yes) finishes it. "
            "Nothing new was queued."
        )
    full = erasure.plan(subject)
    plan = full.store
    if full.fingerprint != expected_fingerprint:
        raise core.PlanChanged("erasure")
    erasure.refuse_held(full)
    try:
        # The request and its audit entry together, or neither (a full dashboard database).
        with transaction.atomic(using=_audit_alias()):
            request = erasure.create_request(
                subject=subject,
                reference=reference,
                actor=_name(actor),
                fingerprint=full.fingerprint,
            )
            record(
                actor=actor,
                action="erasure_request",
                session_ids=[],
                before={"erasure_request": request.pk, "subject_sha256": request.subject_hash},
                after={
                    "sessions": len(plan.session_ids),
                    "messages": plan.message_count + len(plan.other_messages),
                    "conversation_slugs": len(plan.conversation_names),
                    "stored_responses": len(plan.response_ids),
                },
                reason=reference,
            )
    except Exception as error:
        if storage := core_db.storage_failure(error):
            raise DashboardNotWritten("erasure request", storage, error) from error
        raise
    if start:
        start_erasures()
    return request


def run_erasure(*, request_id: int) -> dict | None:
    """Carry out a queued (or interrupted) erasure request: audited; returns its receipt.

    None when another worker holds it. The audit entry keeps the subject's keyed hash,
    the counts and the hashed ids, never the subject itself. A database that cannot be
    written stops it with those words, naming which one and what was erased before
    (``DashboardNotWritten`` before anything was erased, ``core.erasure.ErasureStopped``
    after): the request keeps them as its error, and running it again finishes it.
    """
    # The first run executes exactly the plan that was confirmed and records it on the
    # request; a resumed one (after a failure, or taking over from a dead worker) carries
    # out that record, whatever its earlier run already deleted. A request that failed
    # before recording one (a hold stopped it) erases what the plan is now.
    failed_before = ErasureRequest.objects.filter(
        pk=request_id, state=ErasureRequest.FAILED
    ).exists()
    request = None
    try:
        request = erasure.claim(request_id)
        if request is None:
            return None
        subject = erasure.subject_from_json(request.subject)
        erasure.redact_reference(request, subject)
        _complete_stopped_erasure_runs(request)
    except Exception as error:
        storage = core_db.storage_failure(error)
        failure = DashboardNotWritten("erasure", storage, error) if storage else error
        if request is not None:
            _fail_erasure(request, failure)
        if storage:
            raise failure from error
        raise

    def run() -> dict:
        recorded = erasure.recorded_run(request)
        if recorded is None:
            full = erasure.plan(subject)
            if (
                not failed_before
                and request.fingerprint
                and full.fingerprint != request.fingerprint
            ):
                raise core.PlanChanged("erasure")
            erasure.refuse_held(full)
            before = erasure_core.rows_present(plan=full.store)
            try:
                # While the store still shows what they committed (nothing is erased yet).
                erasure.settle_pending_deletes(full.trash)
                erasure.record_run(request, full, before)
            except Exception as error:
                if storage := core_db.storage_failure(error):
                    raise DashboardNotWritten("erasure", storage, error) from error
                raise
            faults.checkpoint("erasure.after_plan_recorded")
        else:
            full, before = recorded
            erasure.refuse_held(full)
        result = erasure_core.erase(
            subject=subject,
            plan=full.store,
            before=before,
            between_batches=lambda: erasure.renew(request),
            switch_events=full.trash.switch_events,
        )
        faults.checkpoint("erasure.after_store")
        return erasure.complete(request, full.store, result, trash=full.trash)

    try:
        receipt = _audited(
            actor=request.created_by,
            action="erasure",
            session_ids=[],
            reason=request.reference,
            before={"erasure_request": request.pk, "subject_sha256": request.subject_hash},
            run=run,
            after=lambda outcome: _erasure_after(request, outcome),
            # Erased before a database refused a write: stays erased, said so (``partial``).
            partly=lambda error: (
                error
                if isinstance(error, erasure_core.ErasureStopped) and error.erased_any
                else None
            ),
        )
    except Exception as error:
        # Kept (the subject too) so it can be run again; the audit entry says it failed.
        _fail_erasure(request, error)
        raise
    if rewrites_automatically():
        # A small or idle store is rewritten at once; a busy one at a later quiet moment.
        try:
            finish_erasure_rewrites(automatic=True)
        except Exception:
            logger.exception("erasure request %s: the file rewrite failed", request.pk)
        receipt = ErasureRequest.objects.get(pk=request.pk).receipt
    return receipt


def _complete_stopped_erasure_runs(request: ErasureRequest) -> None:
    """Earlier runs of this request whose audit entry is still pending died (this run could
    claim the request only because they did): each is completed, pointing at the receipt,
    which counts what every run erased."""
    stopped = AuditEntry.objects.using(_audit_alias()).filter(
        action="erasure", outcome=AuditEntry.PENDING, before__erasure_request=request.pk
    )
    for entry in stopped:
        try:
            _complete(
                entry,
                outcome=AuditEntry.PARTIAL,
                linked=[],
                after={"erasure_request": request.pk, "taken_over": True},
                detail=(
                    f"This run of erasure request #{request.pk} stopped (its process died); a "
                    "later run took the request over and finished it. The request's receipt "
                    "counts what every run erased."
                ),
            )
        except RuntimeError:
            continue


def _erasure_after(request: ErasureRequest, outcome: dict | erasure_core.ErasureStopped) -> dict:
    """An erasure's ``after``: its receipt's counts and hashes, or, stopped by a database that
    could not be written, what was erased so far (counts only)."""
    if isinstance(outcome, erasure_core.ErasureStopped):
        return {
            "erasure_request": request.pk,
            "erased_so_far": outcome.erased.as_record() if outcome.erased else None,
            "planned": outcome.planned.as_record() if outcome.planned else None,
            "store_side_done": outcome.store_done,
        }
    return {
        "erasure_request": request.pk,
        "erased": outcome["erased"],
        "session_ids_sha256": outcome["session_ids_sha256"][:ENTRY_SESSION_IDS],
    }


def _fail_erasure(request: ErasureRequest, error: Exception) -> None:
    """The request failed, with the error's words (a database that could not be written says
    which and what was erased; others keep their type, ``PlanChanged`` is looked for). A
    dashboard database that refuses this write too leaves the request running: its process
    gone, a retry takes it over at once."""
    if isinstance(error, DashboardNotWritten | erasure_core.ErasureStopped):
        words = str(error)
    else:
        words = f"{type(error).__name__}: {error}"
    try:
        erasure.fail(request, words)
    except Exception:
        logger.exception("erasure request %s: its failure could not be recorded", request.pk)


def finish_erasure_index_merges() -> list[int]:
    """Merge the search indexes again for erasures whose merge a busy runtime cut short.

    Until then the older index segments may still hold the erased words; the scheduler
    (``ledger/schedule.py``) calls this every few minutes. Returns the requests whose
    receipts now say the index was merged (each audited).
    """
    pending = erasure.requests_awaiting_index_merge()
    if not pending:
        return []
    merge = erasure_core.merge_search_indexes()
    if not merge.finished:
        return []
    erasure.index_merged(pending, merge.notes)
    for request_id in pending:
        record(
            actor=None,
            action="erasure_index_merged",
            session_ids=[],
            before={"erasure_request": request_id},
            after={"search_index": "merged", "notes": list(merge.notes)},
            reason="the erasure's search index merge finished",
        )
    return pending


def rewrites_automatically() -> bool:
    """SQLite: the dashboard rewrites the files itself (a VACUUM in a quiet moment).
    PostgreSQL: VACUUM FULL locks the runtime out of the tables for its length, so it is
    the operator's step (``manage.py erasure_rewrite``, the request's page) unless
    ``SESSIONS_ADMIN_ERASURE_REWRITE_AUTO`` says otherwise."""
    default = connections[store_alias()].vendor == "sqlite"
    return bool(getattr(settings, "SESSIONS_ADMIN_ERASURE_REWRITE_AUTO", default))


def rewrite_auto_max_bytes() -> int:
    """The largest database an automatic rewrite takes on (default 200 MB): a VACUUM holds
    the runtime's writers for its whole length, which grows with the file (docs/benchmarks.md,
    "Erasure on the 100k store"); larger ones wait for ``manage.py erasure_rewrite``."""
    megabytes = getattr(settings, "SESSIONS_ADMIN_ERASURE_REWRITE_AUTO_MAX_MB", 200)
    return int(float(megabytes) * 1_000_000)


def finish_erasure_rewrites(
    *, actor=None, busy_ms: int | None = None, automatic: bool = False
) -> list[int]:
    """Rewrite the store's, the response store's and the dashboard's files for finished
    erasures whose receipts say ``file_rewrite: pending`` (their index merge done first).

    Nothing of the subject is left in free space afterwards; a busy runtime makes it wait
    (nothing done, the receipts stay pending). ``automatic`` (the erasure's own try, the
    scheduler): databases over ``rewrite_auto_max_bytes`` are left to the operator.
    Returns the requests now done (each audited).
    """
    pending = erasure.requests_awaiting_rewrite()
    if not pending:
        return []
    waits: dict = {} if busy_ms is None else {"busy_ms": busy_ms}
    if automatic:
        waits["max_bytes"] = rewrite_auto_max_bytes()
    store = erasure_core.rewrite_store_files(**waits)
    dashboard_done, dashboard_note, dashboard_lock = erasure.rewrite_dashboard_file(**waits)
    notes = [*store.notes, dashboard_note]
    if not (store.done and dashboard_done):
        logger.info("erasure file rewrite not finished: %s", "; ".join(notes))
        return []
    erasure.files_rewritten(pending, notes)
    for request_id in pending:
        record(
            actor=actor,
            action="erasure_files_rewritten",
            session_ids=[],
            before={"erasure_request": request_id},
            after={
                "file_rewrite": "done",
                "longest_lock_seconds": round(max(store.longest_lock_seconds, dashboard_lock), 3),
                "notes": notes,
            },
            reason="the erasure's file rewrite ran",
        )
    return pending


_erasure_lock = threading.Lock()


def resume_interrupted_erasures() -> list[int]:
    """Run, here and now, the erasure requests whose worker died (killed mid-erasure, a
    restart) and the queued ones nobody started; the scheduler calls it. Returns the
    requests it finished."""
    finished = []
    for request_id in erasure.interrupted_request_ids():
        try:
            if run_erasure(request_id=request_id) is not None:
                finished.append(request_id)
        except Exception:
            logger.exception("erasure request %s failed", request_id)
    return finished


def start_erasures() -> None:
    """Run queued and interrupted erasure requests in a background thread of this process."""

    def work() -> None:
        try:
            for request_id in erasure.resumable_request_ids():
                try:
                    run_erasure(request_id=request_id)
                except Exception:
                    logger.exception("erasure request %s failed", request_id)
        finally:
            connections.close_all()

    with _erasure_lock:
        threading.Thread(target=work, name="erasure", daemon=True).start()


def cancel_bulk_delete(*, actor, job_id: int, reason: str = "") -> None:
    reason = operator_text(reason, field="reason")
    before = jobs.job_progress(job_id=job_id)
    _audited(
        actor=actor,
        action="cancel_bulk_delete",
        session_ids=[],
        reason=reason,
        before={"job": job_id, "state": before.state, "processed": before.processed},
        run=lambda: jobs.cancel_job(job_id=job_id),
        after=lambda _: {"job": job_id, "state": jobs.job_progress(job_id=job_id).state},
    )


STRAY_MOVE = "move_stray_messages"
STRAY_RETURN = "return_stray_messages"


def resume_bulk_delete(*, actor, job_id: int, reason: str = "") -> None:
    """Finish a failed job (a database that could not be written stopped it): it takes up its
    pending items again; what it deleted before stays in its trash operation."""
    reason = operator_text(reason, field="reason")
    _audited(
        actor=actor,
        action="resume_bulk_delete",
        session_ids=[],
        reason=reason,
        before={"job": job_id},
        run=lambda: jobs.resume_failed_job(job_id=job_id),
        after=lambda _: {"job": job_id},
    )
    worker.ensure_worker_running()


def move_stray_messages(
    *, actor, session_id: str, expected_fingerprint: str, reason: str = ""
) -> stray.StrayMoveResult:
    """Move what was written into an ended session to where it continues (previewed plan)."""
    session_id = operator_identifier(session_id, field="session id")
    _check_fingerprint(expected_fingerprint)
    reason = operator_text(reason, field="reason")
    return _audited(
        actor=actor,
        action=STRAY_MOVE,
        session_ids=[session_id],
        reason=reason,
        before={"fingerprint": expected_fingerprint, **_counts([session_id])},
        run=lambda: stray.move_stray_messages(
            session_id=session_id, expected_fingerprint=expected_fingerprint
        ),
        # The undo reads its plan from here: which ids went where.
        after=lambda r: {
            "from": r.session_id,
            "to": r.destination_id,
            "message_ids": list(r.message_ids),
            **_counts([r.session_id, r.destination_id]),
        },
        result_ids=lambda r: [r.destination_id],
    )


def undo_stray_move(*, actor, entry_id: int, reason: str = "") -> stray.StrayReturnResult:
    """Give the messages a ``move_stray_messages`` entry moved back to the session they left."""
    reason = operator_text(reason, field="reason")
    entry = (
        AuditEntry.objects.using(_audit_alias())
        .filter(pk=entry_id, action=STRAY_MOVE, outcome=AuditEntry.OK)
        .first()
    )
    if entry is None or not isinstance(entry.after, dict) or "message_ids" not in entry.after:
        raise InvalidInput(f"No completed move of stray messages #{entry_id}.")
    moved = entry.after
    return _audited(
        actor=actor,
        action=STRAY_RETURN,
        session_ids=[moved["from"], moved["to"]],
        reason=reason,
        before={"move_entry": entry.pk, **_counts([moved["from"], moved["to"]])},
        run=lambda: stray.return_stray_messages(
            session_id=moved["from"], destination_id=moved["to"], message_ids=moved["message_ids"]
        ),
        after=lambda r: {
            "move_entry": entry.pk,
            "returned_ids": list(r.returned_ids),
            **_counts([r.session_id, r.destination_id]),
        },
    )


IMPORT = "import_sessions"


def _read_export(file: str, stream: IO[bytes] | None) -> list[dict]:
    """The session objects of an export: ``stream`` when given (standard input), else ``file``."""
    if stream is not None:
        return portability.read_export(stream)
    try:
        with open(file, "rb") as handle:
            return portability.read_export(handle)
    except OSError as error:
        raise InvalidInput(f"Cannot read {file}: {error}") from error


def preview_import(
    *,
    actor,
    file: str,
    stream: IO[bytes] | None = None,
    skip_existing: bool = False,
    graft: bool = False,
    reason: str = "",
) -> portability.ImportPlan:
    """What importing ``file`` would do (a dry run): nothing is written, so only a refusal
    is audited (outcome ``failed``, ``before`` saying it was a dry run)."""
    reason = operator_text(reason, field="reason")
    try:
        return portability.plan_import(_read_export(file, stream))
    except Exception as error:
        entry = record(
            actor=actor,
            action=IMPORT,
            session_ids=[],
            before={"file": file, "skip_existing": skip_existing, "graft": graft, "dry_run": True},
            reason=reason,
            outcome=AuditEntry.FAILED,
            detail=_failure_detail(error),
        )
        error.audited_entry = entry.pk
        raise


def import_sessions(
    *,
    actor,
    file: str,
    stream: IO[bytes] | None = None,
    skip_existing: bool = False,
    graft: bool = False,
    reason: str = "",
) -> portability.ImportResult:
    """``core.portability.import_sessions`` of an export file (``stream``: its bytes, when it
    is not a file to open), audited; reading the file is part of the action, so an unreadable
    or invalid file is a failed entry too, and an interrupted import names what it kept."""
    reason = operator_text(reason, field="reason")
    return _audited(
        actor=actor,
        action=IMPORT,
        session_ids=[],
        reason=reason,
        before={"file": file, "skip_existing": skip_existing, "graft": graft},
        run=lambda: portability.import_sessions(
            sessions=_read_export(file, stream), skip_existing=skip_existing, graft=graft
        ),
        after=lambda r: {
            "imported": len(r.imported),
            "skipped": list(r.skipped)[:100],
            "detached": list(r.detached)[:100],
            "not_grafted": list(r.ungrafted)[:100],
            "grafted": list(r.grafted)[:100],
            "ended_on_import": len(r.ended_on_import),
            "messages": r.messages,
        },
        result_ids=lambda r: r.imported,
        # An interrupted import keeps the batches written before the failure.
        failed_ids=lambda error: getattr(error, "imported", ()),
    )
