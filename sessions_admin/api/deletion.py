"""Deletion over HTTP: cascade plans and deletes, bulk delete dry runs and jobs, the trash.

As the console's deletion pages (``console/views/delete.py``, ``jobs.py``, ``trash.py``), every
route needs ``DELETE`` (admin). Destructive work has two steps: a plan (a cascade's, with its
fingerprint; a bulk dry run's, with its digest as ``fingerprint``) and a confirmation that
carries it back, with a reason, the number of sessions typed when the delete is large
(``core.deletion.needs_typed_confirmation``, the one rule of both pages), the ``lose_undo``
confirmation when a cascade loses a merge's undo, and ``confirm_live`` when a bulk delete takes
live sessions. The plan is computed again at the confirmation: if it changed, the answer is a
409 ``plan-changed`` and nothing is deleted (a cascade's fingerprint is checked once more under
the store's lock by the core; a job takes exactly the sessions of the dry run). Every change
goes through ``ledger.actions`` (audited, actor ``request.auth.actor``); a confirmation refused
before the action is recorded as the console records it (``cascade_delete``, ``bulk_delete``,
``cancel_bulk_delete``, ``restore`` refused).
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Annotated, Literal

from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from ninja import Field, Path, Query, Router, Schema
from ninja.responses import Status

from sessions_admin import core
from sessions_admin.api.auth import api_auth
from sessions_admin.api.merges import refused
from sessions_admin.api.problems import Problem, invalid_input, not_found
from sessions_admin.api.runtime import Strict
from sessions_admin.api.schemas import Identifier, SessionSummary, Text
from sessions_admin.core import fingerprints
from sessions_admin.core.deletion import (
    PRESET_MAX_DAYS,
    SELECTION_MAX,
    SOURCE_MAX_LENGTH,
    confirmed_cutoff,
    days_before,
    needs_typed_confirmation,
    preset_description,
    typed_count_problem,
)
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.text import operator_text
from sessions_admin.ledger import actions, worker
from sessions_admin.ledger.jobs import cascade_runs_as_job, job_progress, restore_runs_as_job
from sessions_admin.ledger.models import AuditAction, DeleteJob, TrashEntry, TrashSession
from sessions_admin.ledger.trash_page import decode_trash_cursor, trash_operations_page
from sessions_admin.ledger.trash_retention import configured_days
from sessions_admin.signin.roles import DELETE
from sessions_admin.store.models import Session

router = Router(tags=["deletion"], auth=api_auth(DELETE))
RowId = Annotated[int, Path(ge=1, lt=2**63)]  # a row's id either database can compare

ACTIVE_JOB_STATES = (DeleteJob.PENDING, DeleteJob.RUNNING)
JOBS_LISTED = 50
TRASH_PAGE_SIZE = 25
TRASH_SESSIONS_SHOWN = 12
CHUNK = 500


def _plan_changed(detail: str) -> Problem:
    return Problem(409, "plan-changed", "Plan changed", detail)


def _checked_reason(request: HttpRequest, action: str, reason: str, **audit) -> str:
    """The reason by ``core.text``'s rule (required: these are destructive), or a 422."""
    try:
        return operator_text(reason, field="reason", required=True)
    except InvalidInput as problem:
        raise refused(
            request,
            action,
            invalid_input(str(problem), [{"field": "reason", "message": str(problem)}]),
            **audit,
        ) from None


def _typed_count_problem(*, sessions: int, messages: int, typed: int | None) -> str | None:
    return typed_count_problem(
        sessions=sessions, messages=messages, typed=typed, given=typed is not None
    )


def _typed_count_required(*, sessions: int, messages: int) -> int | None:
    return sessions if needs_typed_confirmation(sessions=sessions, messages=messages) else None


# --- cascade -----------------------------------------------------------------------------------


class CascadeQuery(Schema):
    include_branches: bool = False


class RelationOut(Schema):
    session_id: str
    relation: str


class HeldOut(Schema):
    session_id: str
    hold: str


class MergeNeededOut(Schema):
    session_id: str
    merge_id: int
    role: str


class CascadePlanOut(Schema):
    fingerprint: str = Field(description="Send it back with the delete: it deletes this plan only.")
    session_id: str
    include_branches: bool
    session_ids: list[str] = Field(description="What the delete removes, children first.")
    sessions: list[RelationOut]
    kept_children: list[RelationOut] = Field(description="Kept, their parent link cleared.")
    live_session_ids: list[str]
    message_count: int
    conversation_names: list[str]
    response_count: int
    held: list[HeldOut] = Field(description="Held sessions: the plan cannot run.")
    merges: list[MergeNeededOut]
    lost_undos: list[int] = Field(
        description="Merges whose undo the delete loses: confirm with lose_undo."
    )
    lost_undo_words: str
    typed_count_required: int | None = Field(
        description="A large delete: type this number (typed_count) to confirm; null: a "
        "reason is enough."
    )
    trash_days: float


class CascadeIn(Strict):
    fingerprint: Identifier
    reason: Text
    include_branches: bool = False
    typed_count: int | None = None
    lose_undo: bool = False


class UnlinkedOut(Schema):
    session_id: str
    parent_session_id: str


class JobOut(Schema):
    job_id: int
    state: str
    description: str
    reason: str
    created_by: str
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    include_live: bool
    purge: bool
    total: int
    processed: int
    deleted: int
    skipped: int
    deleted_messages: int
    percent: int
    sessions_per_second: float | None
    error: str
    skipped_text: str
    kind: str = Field(
        "bulk",
        description="bulk | cascade | restore (a confirmed delete or restore too "
        "large for one request)",
    )
    total_messages: int = Field(
        0,
        description="A cascade's or a restore's planned messages; 0 for a bulk delete, whose "
        "messages are counted as its batches go (deleted_messages).",
    )
    unlinked_count: int = Field(
        0,
        description="Once finished: sessions kept in the store with their link to a session "
        "it deleted cleared, that its preview did not name (started below it meanwhile).",
    )
    unlinked: list[UnlinkedOut] = Field(
        default_factory=list, description="The first of those, with the deleted parent."
    )
    stopping: bool = Field(
        False,
        description="Cancelled while its worker was inside a batch that the store has not let "
        "finish yet (another process holds it locked): the counts grow by that batch once it "
        "is written. GET the job until this is false.",
    )
    url: str = Field("", description="This job's status: GET it until its state is done.")


class DeleteOut(Schema):
    deleted_sessions: int
    deleted_messages: int
    trash_entry_ids: list[int]
    operation: str
    lost_undos: list[int]


def _cascade_plan_out(session_id: str, plan: core.DeletePlan) -> CascadePlanOut:
    return CascadePlanOut(
        fingerprint=plan.fingerprint,
        session_id=session_id,
        include_branches=plan.include_branches,
        session_ids=list(plan.session_ids),
        sessions=[RelationOut(session_id=s, relation=r) for s, r in plan.session_relations],
        kept_children=[RelationOut(session_id=s, relation=r) for s, r in plan.kept_children],
        live_session_ids=list(plan.live_session_ids),
        message_count=plan.message_count,
        conversation_names=list(plan.conversation_names),
        response_count=plan.response_count,
        held=[HeldOut(session_id=s, hold=words) for s, words in plan.held],
        merges=[MergeNeededOut(session_id=s, merge_id=m, role=r) for s, m, r in plan.merges],
        lost_undos=list(plan.lost_undos),
        lost_undo_words=core.lost_undo_words(plan) if plan.merges else "",
        typed_count_required=_typed_count_required(
            sessions=len(plan.session_ids), messages=plan.message_count
        ),
        trash_days=configured_days(),
    )


@router.get("/cascades/{session_id}", response=CascadePlanOut)
def cascade_plan(request: HttpRequest, session_id: Identifier, query: Query[CascadeQuery]):
    """What deleting this session's conversation removes and keeps, with its fingerprint."""
    plan = core.plan_cascade_delete(
        session_ids=[session_id], include_branches=query.include_branches
    )
    return _cascade_plan_out(session_id, plan)


@router.post("/cascades/{session_id}", response={200: DeleteOut, 202: JobOut})
def cascade_delete(
    request: HttpRequest, session_id: Identifier, body: CascadeIn, response: HttpResponse
):
    """Delete exactly the plan that was shown (its ``fingerprint``) into the trash; 409
    ``plan-changed`` if the store changed since, nothing deleted. A plan too large to delete
    within about a second is checked and claimed now, then deleted in the background: 202
    with its job (``url``, also the ``Location``: ``GET /jobs/{job_id}`` until ``done``)."""
    audit = {"session_ids": [session_id], "before": {"fingerprint": body.fingerprint}}
    reason = _checked_reason(request, AuditAction.CASCADE_DELETE, body.reason, **audit)
    plan = core.plan_cascade_delete(
        session_ids=[session_id], include_branches=body.include_branches
    )
    if not fingerprints.matches(body.fingerprint, plan.fingerprint):
        problem = _plan_changed(
            "The store changed since the plan was shown (the runtime may still be writing), "
            "or the plan was not shown at all. Nothing was deleted: plan again and confirm."
        )
        raise refused(request, AuditAction.CASCADE_DELETE, problem, **audit)
    errors = []
    typed = _typed_count_problem(
        sessions=len(plan.session_ids), messages=plan.message_count, typed=body.typed_count
    )
    if typed:
        errors.append({"field": "typed_count", "message": typed})
    if plan.merges and not body.lose_undo:
        errors.append(
            {
                "field": "lose_undo",
                "message": "Confirm (lose_undo: true) that "
                + ", ".join(f"merge #{merge_id}" for merge_id in plan.lost_undos)
                + " can no longer be undone, or undo the merge first. Nothing was deleted.",
            }
        )
    if errors:
        problem = invalid_input(" ".join(e["message"] for e in errors), errors)
        problem.extensions["typed_count_required"] = _typed_count_required(
            sessions=len(plan.session_ids), messages=plan.message_count
        )
        raise refused(request, AuditAction.CASCADE_DELETE, problem, **audit)
    confirmed = {
        "actor": request.auth.actor,
        "session_ids": [session_id],
        "include_branches": body.include_branches,
        "expected_fingerprint": body.fingerprint,
        "reason": reason,
        "lose_undo": body.lose_undo,
    }
    if cascade_runs_as_job(sessions=len(plan.session_ids), messages=plan.message_count):
        return _accepted(response, actions.start_cascade_delete(**confirmed))
    result = actions.cascade_delete(**confirmed)
    return DeleteOut(
        deleted_sessions=result.deleted_sessions,
        deleted_messages=result.deleted_messages,
        trash_entry_ids=list(result.trash_entry_ids),
        operation=result.operation,
        lost_undos=list(result.lost_undos),
    )


# --- bulk delete -------------------------------------------------------------------------------


class BulkSelectionIn(Strict):
    """What a bulk delete is about: a preset with its parameters, or picked session ids."""

    preset: Literal["ended_older_than", "empty", "by_source"] | None = None
    days: float | None = Field(None, ge=0, le=PRESET_MAX_DAYS, allow_inf_nan=False)
    source: Text | None = Field(None, max_length=SOURCE_MAX_LENGTH)
    # At most SELECTION_MAX, checked by the route (a 422 saying so), not declared: a body of
    # one more than that many ids is over the body size limit (413) before anything reads it.
    session_ids: list[Identifier] | None = Field(
        None, min_length=1, description=f"The sessions picked: at most {SELECTION_MAX:,}."
    )
    include_live: bool = False


class BulkStartIn(BulkSelectionIn):
    fingerprint: Identifier = Field(description="The dry run's fingerprint (its digest).")
    cutoff: float | None = Field(
        None,
        allow_inf_nan=False,
        description="The dry run's cutoff (ended_older_than): the job selects against it.",
    )
    confirm_live: bool = False
    typed_count: int | None = None
    reason: Text


class KeptOut(Schema):
    session_id: str
    why: str


class DryRunOut(Schema):
    fingerprint: str = Field(description="Send it back to start the job: it takes this set only.")
    cutoff: float | None = Field(description="Send it back too (ended_older_than).")
    selected: int
    count: int = Field(description="Sessions the job deletes.")
    message_count: int
    live_excluded: int
    live_included: int
    held_excluded: int
    holds: list[str]
    merge_kept: list[KeptOut]
    merge_kept_with: int
    conversation_kept: list[KeptOut]
    unlinks: list[KeptOut] = Field(
        description="Sessions below those it deletes that the job keeps, their parent link "
        "cleared (branches, untyped children): `why` names the link; a restore links them again."
    )
    sample: list[SessionSummary]
    typed_count_required: int | None


def _selection(request: HttpRequest, body: BulkSelectionIn, action: str | None, *, cutoff=None):
    """(the selected ids, the cutoff used, a description) of a selection, or a 422."""

    def problem(field: str, message: str) -> Problem:
        answer = invalid_input(message, [{"field": field, "message": message}])
        return refused(request, action, answer) if action else answer

    if (body.preset is None) == (body.session_ids is None):
        raise problem("preset", "Give either a preset or session_ids (the sessions picked).")
    if body.session_ids is not None:
        ids = list(dict.fromkeys(body.session_ids))
        if len(ids) > SELECTION_MAX:
            raise problem(
                "session_ids",
                f"{len(ids):,} sessions are picked; one bulk delete takes at most "
                f"{SELECTION_MAX:,}. Pick fewer or use a preset.",
            )
        return ids, None, f"{len(ids):,} sessions picked through the API"
    if body.preset == "ended_older_than":
        if body.days is None:
            raise problem(
                "days", f"Give the age in days as a number from 0 to {PRESET_MAX_DAYS:,}."
            )
        now = time.time()
        fresh = now - body.days * 86400
        if action is not None:  # confirming: the dry run's own instant, if it is recent
            fresh = confirmed_cutoff(days=body.days, shown_cutoff=cutoff, now=now)
            if fresh is None:
                raise problem(
                    "cutoff",
                    "This dry run is too old or incomplete (give its cutoff): run it again "
                    "and confirm.",
                )
        ids = core.preset_session_ids(preset=body.preset, days=days_before(fresh, now=now))
        return ids, fresh, preset_description(body.preset, days=body.days)
    if body.preset == "by_source":
        if not (body.source or "").strip():
            raise problem("source", "Pick a source.")
        ids = core.preset_session_ids(preset=body.preset, source=body.source)
        return ids, None, preset_description(body.preset, source=body.source)
    return core.preset_session_ids(preset="empty"), None, preset_description("empty")


def _count_live(ids) -> int:
    ids = list(ids)
    return sum(
        Session.objects.filter(id__in=ids[start : start + CHUNK], ended_at__isnull=True).count()
        for start in range(0, len(ids), CHUNK)
    )


def _dry_run_out(selected: list[str], cutoff, preview, include_live: bool) -> DryRunOut:
    sample = sorted(preview.sample, key=lambda row: (row.get("started_at") or 0, row["id"]))
    return DryRunOut(
        fingerprint=preview.digest,
        cutoff=cutoff,
        selected=len(selected),
        count=len(preview.session_ids),
        message_count=preview.message_count,
        live_excluded=preview.live_excluded,
        live_included=_count_live(preview.session_ids) if include_live else 0,
        held_excluded=preview.held_excluded,
        holds=list(preview.holds),
        merge_kept=[KeptOut(session_id=s, why=w) for s, w in preview.merge_kept],
        merge_kept_with=preview.merge_kept_with,
        conversation_kept=[KeptOut(session_id=s, why=w) for s, w in preview.conversation_kept],
        unlinks=[
            KeptOut(session_id=child, why=f"{relation}: kept, its parent link cleared")
            for child, relation in preview.kept_children
        ],
        sample=[SessionSummary(**row) for row in sample],
        typed_count_required=_typed_count_required(
            sessions=len(preview.session_ids), messages=preview.message_count
        ),
    )


@router.post("/bulk-deletes/dry-run", response=DryRunOut)
def bulk_delete_dry_run(request: HttpRequest, body: BulkSelectionIn):
    """The exact set a bulk delete of this selection takes (live, held sessions and what a
    merge's undo needs left out, each counted), with the fingerprint that starts its job.
    Changes nothing."""
    ids, cutoff, _description = _selection(request, body, None)
    include_live = core.takes_live(preset=body.preset, include_live=body.include_live)
    preview = core.preview_bulk_delete(
        session_ids=ids, include_live=include_live, preset=body.preset
    )
    return _dry_run_out(ids, cutoff, preview, include_live)


def _job_out(job: DeleteJob) -> JobOut:
    progress = job_progress(job_id=job.pk)
    return JobOut(
        job_id=job.pk,
        state=progress.state,
        description=job.description,
        reason=job.reason,
        created_by=job.created_by,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        include_live=job.include_live,
        purge=job.purge,
        total=progress.total,
        processed=progress.processed,
        deleted=progress.deleted,
        skipped=progress.skipped,
        deleted_messages=progress.deleted_messages,
        percent=progress.percent,
        sessions_per_second=progress.sessions_per_second,
        error=progress.error,
        skipped_text=progress.skipped_text,
        kind=job.kind,
        total_messages=progress.total_messages,
        unlinked_count=progress.unlinked_count,
        unlinked=[
            UnlinkedOut(session_id=child, parent_session_id=parent)
            for child, parent in progress.unlinked
        ],
        stopping=progress.stopping,
        url=reverse("api:job_status", kwargs={"job_id": job.pk}),
    )


def _accepted(response: HttpResponse, job_id: int) -> Status:
    """202: the work goes on in the job; its status is at ``url`` (and ``Location``)."""
    out = _job_out(DeleteJob.objects.get(pk=job_id))
    response["Location"] = out.url
    return Status(202, out)


@router.post("/bulk-deletes", response={201: JobOut})
def bulk_delete_start(request: HttpRequest, body: BulkStartIn):
    """Start the job for exactly the set the dry run showed (its ``fingerprint``); 409
    ``plan-changed`` if the selection now finds another set, nothing deleted. Answers the
    job; it deletes in batches in the background (``GET /jobs/{job_id}``)."""
    action = AuditAction.BULK_DELETE
    audit = {"before": {"digest": body.fingerprint}}
    reason = _checked_reason(request, action, body.reason, **audit)
    ids, _cutoff, description = _selection(request, body, action, cutoff=body.cutoff)
    include_live = core.takes_live(preset=body.preset, include_live=body.include_live)
    preview = core.preview_bulk_delete(
        session_ids=ids, include_live=include_live, preset=body.preset
    )
    audit["session_ids"] = ids
    if not fingerprints.matches(body.fingerprint, preview.digest):
        # No fingerprint in the refusal: one handed out here would confirm a set no dry run
        # showed (attack round 43: a made-up fingerprint's 409 gave the one to send back).
        problem = _plan_changed(
            "What the job would delete changed since the dry run (or no dry run was made): "
            f"it now finds {len(preview.session_ids):,} sessions and "
            f"{preview.message_count:,} messages. Nothing was deleted: run the dry run again "
            "and confirm with its fingerprint."
        )
        raise refused(request, action, problem, **audit)
    errors = []
    if not preview.session_ids:
        errors.append({"field": "", "message": "Nothing to delete: no session matches."})
    live = _count_live(preview.session_ids) if include_live else 0
    if live and not body.confirm_live:
        errors.append(
            {
                "field": "confirm_live",
                "message": f"Confirm (confirm_live: true) that {live:,} live sessions will be "
                "deleted too. Nothing was deleted.",
            }
        )
    typed = _typed_count_problem(
        sessions=len(preview.session_ids), messages=preview.message_count, typed=body.typed_count
    )
    if typed and preview.session_ids:
        errors.append({"field": "typed_count", "message": typed})
    if errors:
        problem = invalid_input(" ".join(e["message"] for e in errors), errors)
        raise refused(request, action, problem, **audit)
    job_id = actions.start_bulk_delete(
        actor=request.auth.actor,
        session_ids=ids,
        include_live=include_live,
        reason=reason,
        description=description + (" (live sessions included)" if include_live else ""),
        expected_ids=preview.session_ids,
    )
    return Status(201, _job_out(DeleteJob.objects.get(pk=job_id)))


def _job_or_404(job_id: int) -> DeleteJob:
    job = DeleteJob.objects.filter(pk=job_id).first()
    if job is None:
        raise not_found(f"No bulk delete job #{job_id}.")
    return job


@router.get("/jobs", response=list[JobOut])
def job_list(request: HttpRequest):
    """The most recent bulk delete jobs (50), newest first."""
    jobs = list(DeleteJob.objects.all()[:JOBS_LISTED])
    if any(job.state in ACTIVE_JOB_STATES for job in jobs):
        worker.ensure_worker_running()
    return [_job_out(job) for job in jobs]


@router.get("/jobs/{job_id}", response=JobOut)
def job_status(request: HttpRequest, job_id: RowId):
    """A job's progress. As the console's job page, looking at it resumes an interrupted job."""
    job = _job_or_404(job_id)
    if job.state in ACTIVE_JOB_STATES:
        worker.ensure_worker_running()
    return _job_out(job)


class ReasonIn(Strict):
    reason: Text = ""


@router.post("/jobs/{job_id}/cancel", response=JobOut)
def job_cancel(request: HttpRequest, job_id: RowId, body: ReasonIn):
    """Stop a job after its current batch; what it deleted stays in the trash. A job that
    already stopped is a 409, nothing changed."""
    job = _job_or_404(job_id)
    if job.state not in ACTIVE_JOB_STATES:
        problem = Problem(
            409, "refused", "Refused", f"Job #{job.pk} is already {job.state}; nothing to cancel."
        )
        raise refused(request, AuditAction.CANCEL_BULK_DELETE, problem, before={"job": job.pk})
    actions.cancel_bulk_delete(actor=request.auth.actor, job_id=job.pk, reason=body.reason)
    job.refresh_from_db()
    return _job_out(job)


# --- trash -------------------------------------------------------------------------------------


class TrashQuery(Schema):
    q: Text = Field("", max_length=200, description="Operations holding a session id starting so.")
    after: Text = Field(
        "", max_length=200, description="The previous page's next_cursor (empty: the newest)."
    )


class TrashOperationOut(Schema):
    operation: str
    entry_id: int = Field(description="Its first batch's entry: what a restore names.")
    entry_ids: list[int]
    state: str = Field(description="complete | pending | restored | partly-restored")
    created_at: dt.datetime
    expires_at: dt.datetime
    actor: str
    reason: str
    job_id: int | None
    session_count: int
    message_count: int
    session_ids: list[str] = Field(description=f"Its first {TRASH_SESSIONS_SHOWN} sessions.")


class TrashPage(Schema):
    operations: list[TrashOperationOut]
    next_cursor: str | None = Field(description="The next (older) page's `after`; null: the last.")
    total: int
    trash_days: float


def _state(entries: list[TrashEntry]) -> str:
    states = {e.state for e in entries}
    if states == {TrashEntry.RESTORED}:
        return TrashEntry.RESTORED
    if TrashEntry.PENDING in states:
        return TrashEntry.PENDING
    return "partly-restored" if TrashEntry.RESTORED in states else TrashEntry.COMPLETE


@router.get("/trash", response=TrashPage)
def trash_list(request: HttpRequest, query: Query[TrashQuery]):
    """What deletes put in the trash, one row per operation (restored whole), newest first, a
    keyset page at a time (``ledger.trash_page``, as the console's trash page)."""
    actions.settle_deletes_and_restores()  # as the console's page: a dead delete's rows marked
    after = None
    if query.after:
        after = decode_trash_cursor(query.after)
        if after is None:
            raise invalid_input(
                "after must be a trash page's next_cursor, as an earlier answer gave it.",
                [{"field": "after", "message": "not a trash page cursor"}],
            )
    days = configured_days()
    page = trash_operations_page(q=query.q, after=after, limit=TRASH_PAGE_SIZE)
    rows = []
    for operation, batches in page.operations:
        first = batches[0]
        left = [e for e in batches if e.state != TrashEntry.RESTORED] or batches
        shown = TrashSession.objects.filter(
            entry__operation=operation, entry__session_count__gt=0
        ).order_by("id")[:TRASH_SESSIONS_SHOWN]
        rows.append(
            TrashOperationOut(
                operation=operation,
                entry_id=first.pk,
                entry_ids=[e.pk for e in batches],
                state=_state(list(batches)),
                created_at=first.created_at,
                expires_at=max(e.created_at for e in batches) + dt.timedelta(days=days),
                actor=first.actor_name,
                reason=first.reason,
                job_id=first.job_id,
                session_count=sum(e.session_count for e in left),
                message_count=sum(e.message_count for e in left),
                session_ids=[s.session_id for s in shown],
            )
        )
    return TrashPage(
        operations=rows, next_cursor=page.next_cursor, total=page.total, trash_days=days
    )


class LinkOut(Schema):
    session_id: str
    parent_id: str
    words: str


class RestoreOut(Schema):
    trash_entry_id: int
    trash_entry_ids: list[int]
    restored_sessions: list[str]
    restored_messages: int
    skipped_conversations: list[str]
    waiting_links: list[LinkOut] = Field(
        description="Back without their parent, which another trash operation holds."
    )
    lost_links: list[LinkOut]


@router.post("/trash/{entry_id}/restore", response={200: RestoreOut, 202: JobOut})
def trash_restore(request: HttpRequest, entry_id: RowId, body: ReasonIn, response: HttpResponse):
    """Restore a trash entry with the rest of its operation. A row taken again meanwhile (a
    session id, a title, a message id) is a 409 ``restore-conflict``: nothing restored. An
    operation too large to restore within about a second is restored in the background: 202
    with its job (``url``, also the ``Location``), its outcome on the job and the audit log."""
    if not TrashEntry.objects.filter(pk=entry_id).exists():
        actions.record_refusal(
            request=request,
            actor=request.auth.actor,
            action=AuditAction.RESTORE,
            why=f"no trash entry #{entry_id}",
            before={"trash_entry": entry_id},
        )
        raise not_found(f"No trash entry #{entry_id}.")
    sessions, messages = actions.restore_size(entry_id=entry_id)
    if restore_runs_as_job(sessions=sessions, messages=messages):
        job_id = actions.start_restore(
            actor=request.auth.actor, entry_id=entry_id, reason=body.reason
        )
        return _accepted(response, job_id)
    result = actions.restore(actor=request.auth.actor, entry_id=entry_id, reason=body.reason)
    return RestoreOut(
        trash_entry_id=result.trash_entry_id,
        trash_entry_ids=list(result.trash_entry_ids),
        restored_sessions=list(result.restored_sessions),
        restored_messages=result.restored_messages,
        skipped_conversations=list(result.skipped_conversations),
        waiting_links=[
            LinkOut(session_id=link.session_id, parent_id=link.parent_id, words=link.describe())
            for link in result.waiting_links
        ],
        lost_links=[
            LinkOut(session_id=link.session_id, parent_id=link.parent_id, words=link.describe())
            for link in result.lost_links
        ],
    )
