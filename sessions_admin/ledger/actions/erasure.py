"""Erasure requests, audited: queuing one, running it (here or in a background thread,
resuming the interrupted ones), then merging the search indexes and rewriting the files
so nothing of the subject is left in free space. The records are ``ledger.erasure``; the
store's side is ``core.erasure``."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.db import connections

from sessions_admin import core
from sessions_admin.core import db as core_db
from sessions_admin.core import erasure as erasure_core
from sessions_admin.core import faults, fingerprints, threads
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.text import operator_text
from sessions_admin.ledger import erasure as erasure_ledger
from sessions_admin.ledger.actions.audit import (
    ENTRY_SESSION_IDS,
    DashboardNotWritten,
    _audit_alias,
    _audited,
    _check_fingerprint,
    _complete,
    _name,
    record,
)
from sessions_admin.ledger.models import AuditAction, AuditEntry, ErasureRequest
from sessions_admin.routers import store_alias

logger = logging.getLogger(__name__)


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
    _refuse_open_request(subject)
    full = erasure_ledger.plan(subject)
    plan = full.store
    if not fingerprints.matches(expected_fingerprint, full.fingerprint):
        raise core.PlanChanged("erasure")
    erasure_ledger.refuse_held(full)
    try:
        # The request and its audit entry together, or neither (a full dashboard database);
        # checked again with the requests queued one at a time: of two confirmations of one
        # preview at once, the second is refused here.
        with erasure_ledger.requests_serialized(subject):
            _refuse_open_request(subject)
            request = erasure_ledger.create_request(
                subject=subject,
                reference=reference,
                actor=_name(actor),
                fingerprint=full.fingerprint,
            )
            record(
                actor=actor,
                action=AuditAction.ERASURE_REQUEST,
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


def _refuse_open_request(subject: erasure_core.Subject) -> None:
    if (earlier := erasure_ledger.open_request_for(subject)) is not None:
        raise InvalidInput(
            f"Erasure request #{earlier.pk} for this person has not finished ({earlier.state}): "
            "its page follows it, and opening it (or erase_subject --yes) finishes it. "
            "Nothing new was queued."
        )


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
        request = erasure_ledger.claim(request_id)
        if request is None:
            return None
        subject = erasure_ledger.subject_from_json(request.subject)
        erasure_ledger.redact_reference(request, subject)
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
        recorded = erasure_ledger.recorded_run(request)
        if recorded is None:
            full = erasure_ledger.plan(subject)
            if (
                not failed_before
                and request.fingerprint
                and not fingerprints.matches(request.fingerprint, full.fingerprint)
            ):
                raise core.PlanChanged("erasure")
            erasure_ledger.refuse_held(full)
            before, late = erasure_core.counted_before(plan=full.store)
            try:
                # While the store still shows what they committed (nothing is erased yet).
                erasure_ledger.settle_pending_deletes(full.trash)
                erasure_ledger.record_run(request, full, before, late)
            except Exception as error:
                if storage := core_db.storage_failure(error):
                    raise DashboardNotWritten("erasure", storage, error) from error
                raise
            faults.checkpoint("erasure.after_plan_recorded")
        else:
            full, before = recorded
            late = erasure_ledger.recorded_late(request)
            erasure_ledger.refuse_held(full, recorded=(before, late))
        result = erasure_core.erase(
            subject=subject,
            plan=full.store,
            before=before,
            late=late,
            progress=lambda plan, late: erasure_ledger.record_progress(request, plan, late),
            between_batches=lambda: erasure_ledger.renew(request),
            switch_events=full.trash.switch_events,
            trashed_ids=full.trash.session_ids,
        )
        faults.checkpoint("erasure.after_store")
        # The plan as carried out: with the sessions a runtime started meanwhile.
        return erasure_ledger.complete(request, result.plan, result, trash=full.trash)

    try:
        receipt = _audited(
            actor=request.created_by,
            action=AuditAction.ERASURE,
            session_ids=[],
            reason=request.reference,
            before={"erasure_request": request.pk, "subject_sha256": request.subject_hash},
            run=run,
            after=lambda outcome: _erasure_after(request, outcome),
            # Erased before a database refused a write: stays erased, said so (``partial``).
            partly=lambda error: (
                error
                if (isinstance(error, erasure_core.ErasureStopped) and error.erased_any)
                or getattr(error, "erased_so_far", None) is not None
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
        action=AuditAction.ERASURE, outcome=AuditEntry.PENDING, before__erasure_request=request.pk
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


def _erasure_after(request: ErasureRequest, outcome) -> dict:
    """An erasure's ``after``: its receipt's counts and hashes, or, stopped by a database that
    could not be written or refused midway (a hold placed, a merge made, a runtime that kept
    writing), what was erased so far (counts only)."""
    if getattr(outcome, "erased_so_far", None) is not None:
        return {
            "erasure_request": request.pk,
            "erased_so_far": outcome.erased_so_far.as_record(),
            "planned": outcome.planned.as_record(),
            "stopped_by": type(outcome).__name__,
            **(
                {"stopped_by_holds": sorted({hold.id for hold in outcome.held.values()})}
                if isinstance(outcome, erasure_core.HeldMidway)
                else {}
            ),
        }
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
    lost = core_db.connection_lost(getattr(error, "error", None) or error)
    if isinstance(
        error, DashboardNotWritten | erasure_core.ErasureStopped | erasure_core.HeldMidway
    ):
        words = str(error)
    elif lost:
        words = (
            "The database server closed the connection (it restarted or stopped) during the "
            "erasure: run it again once the server is back; it finishes from where it stopped."
        )
    else:
        words = f"{type(error).__name__}: {error}"
        erased = getattr(error, "erased_so_far", None)
        if erased is not None:
            planned = error.planned
            words += (
                f" {erased.sessions} of {planned.sessions} sessions ({erased.messages} "
                "messages) were erased before it stopped; running the request again "
                "finishes it."
            )
    try:
        core_db.when_server_back(lambda: erasure_ledger.fail(request, words), lost=lost)
    except Exception:
        logger.exception("erasure request %s: its failure could not be recorded", request.pk)


def finish_erasure_index_merges() -> list[int]:
    """Merge the search indexes again for erasures whose merge a busy runtime cut short.

    Until then the older index segments may still hold the erased words; the scheduler
    (``ledger/schedule.py``) calls this every few minutes. Returns the requests whose
    receipts now say the index was merged (each audited).
    """
    pending = erasure_ledger.requests_awaiting_index_merge()
    if not pending:
        return []
    merge = erasure_core.merge_search_indexes()
    if not merge.finished:
        return []
    erasure_ledger.index_merged(pending, merge.notes)
    _record_each(
        pending,
        actor=None,
        action=AuditAction.ERASURE_INDEX_MERGED,
        after={"search_index": "merged", "notes": list(merge.notes)},
        reason="the erasure's search index merge finished",
    )
    return pending


def _record_each(
    request_ids: list[int], *, actor, action: AuditAction, after: dict, reason: str
) -> None:
    """Audit a step the erasure requests ``request_ids`` finished together, one entry each."""
    for request_id in request_ids:
        record(
            actor=actor,
            action=action,
            session_ids=[],
            before={"erasure_request": request_id},
            after=after,
            reason=reason,
        )


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


@dataclass(frozen=True)
class ErasureRewrite:
    done: list[int]  # the requests whose rewrite is now done (each audited)
    # What each database's try said: why one was not rewritten (the runtime's lock, an
    # older transaction still open, too large for an automatic run), for the operator.
    notes: tuple[str, ...] = ()


def finish_erasure_rewrites(
    *, actor=None, busy_ms: int | None = None, automatic: bool = False
) -> list[int]:
    """Rewrite the store's, the response store's and the dashboard's files for finished
    erasures whose receipts say ``file_rewrite: pending`` (their index merge done first).

    Nothing of the subject is left in free space afterwards; a busy runtime makes it wait
    (nothing done, the receipts stay pending). ``automatic`` (the erasure's own try, the
    scheduler): databases over ``rewrite_auto_max_bytes`` are left to the operator.
    Returns the requests now done (each audited); ``rewrite_erasure_files`` says why not.
    """
    return rewrite_erasure_files(actor=actor, busy_ms=busy_ms, automatic=automatic).done


def rewrite_erasure_files(
    *, actor=None, busy_ms: int | None = None, automatic: bool = False
) -> ErasureRewrite:
    """``finish_erasure_rewrites``, with each database's note (why one was not rewritten)."""
    pending = erasure_ledger.requests_awaiting_rewrite()
    if not pending:
        return ErasureRewrite([])
    waits: dict = {} if busy_ms is None else {"busy_ms": busy_ms}
    if automatic:
        waits["max_bytes"] = rewrite_auto_max_bytes()
    store = erasure_core.rewrite_store_files(**waits)
    dashboard_done, dashboard_note, dashboard_lock = erasure_ledger.rewrite_dashboard_file(**waits)
    notes = [*store.notes, dashboard_note]
    if not (store.done and dashboard_done):
        logger.info("erasure file rewrite not finished: %s", "; ".join(notes))
        return ErasureRewrite([], tuple(notes))
    erasure_ledger.files_rewritten(pending, notes)
    _record_each(
        pending,
        actor=actor,
        action=AuditAction.ERASURE_FILES_REWRITTEN,
        after={
            "file_rewrite": "done",
            "longest_lock_seconds": round(max(store.longest_lock_seconds, dashboard_lock), 3),
            "notes": notes,
        },
        reason="the erasure's file rewrite ran",
    )
    return ErasureRewrite(pending, tuple(notes))


def resume_interrupted_erasures() -> list[int]:
    """Run, here and now, the erasure requests whose worker died (killed mid-erasure, a
    restart) and the queued ones nobody started; the scheduler calls it. Returns the
    requests it finished."""
    finished = []
    for request_id in erasure_ledger.interrupted_request_ids():
        try:
            if run_erasure(request_id=request_id) is not None:
                finished.append(request_id)
        except Exception as error:
            _log_run_failure(request_id, error)
    return finished


def _log_run_failure(request_id: int, error: Exception) -> None:
    """A refusal (the plan changed, a hold, a merge) is the request's error and its audit
    entry, logged in one line like every refused action; anything else with its traceback."""
    if isinstance(error, core.StoreError) and not isinstance(
        error, DashboardNotWritten | erasure_core.ErasureStopped
    ):
        logger.warning("erasure request %s refused: %s", request_id, error)
    else:
        logger.exception("erasure request %s failed", request_id)


def start_erasures() -> None:
    """Run queued and interrupted erasure requests in a background thread of this process."""

    def work() -> None:
        try:
            for request_id in erasure_ledger.resumable_request_ids():
                try:
                    run_erasure(request_id=request_id)
                except Exception as error:
                    _log_run_failure(request_id, error)
        finally:
            connections.close_all()

    # One per call, not once: a request queued while a long one runs starts at once beside it.
    threads.start("erasure", work)
