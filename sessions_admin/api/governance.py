"""Governance over HTTP: legal holds, retention policies and their runs, erasure requests.

The console's /holds/, /retention/ and /erasure/ pages through another door: the same
permissions (holds need ``OPERATE``, as support has; retention and erasure ``DELETE``,
admins only), the same ``ledger.actions`` (each change audited with the caller as actor),
the same reads and the same rules. A delete is previewed, then confirmed with the
preview's fingerprint and, where the console asks it, the typed number of sessions
(``core.deletion``'s typed-count rule and refusal), a reason and the purge's own confirmation
(``ledger.retention``): a run deletes exactly what the preview listed or nothing, and
sessions a legal hold covers are never in it. An erasure's subject travels in request
bodies only (never in a URL), and a refused erasure call is audited without its words,
which may name the person, as the console's is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from django.http import HttpRequest, HttpResponse
from ninja import Field, Query, Router, Schema
from ninja.responses import Status
from pydantic import field_validator

from sessions_admin.api.auth import DELETE, OPERATE, api_auth
from sessions_admin.api.problems import Problem, invalid_input, not_found
from sessions_admin.api.runtime import Strict
from sessions_admin.api.schemas import Identifier, SessionSummary, Text
from sessions_admin.core import fingerprints, holds
from sessions_admin.core.deletion import needs_typed_confirmation, typed_count_problem
from sessions_admin.core.erasure import Subject
from sessions_admin.core.errors import InvalidInput, StoreError
from sessions_admin.core.retention import check_days
from sessions_admin.ledger import actions, erasure, retention
from sessions_admin.ledger.models import AuditAction, DeleteJob, ErasureRequest, RetentionPolicy

router = Router(tags=["governance"])
RUNS_SHOWN = 5  # a policy's latest runs listed with it (the console's page shows as many)
RUNS_MAX = 200
LISTED = 200  # sessions an erasure preview names (the counts say how many in all)
# A refused erasure call is audited without its words: they may be the person's identifiers.
ERASURE_REFUSED = "erasure request refused (the subject is not recorded)"
T = TypeVar("T")
# A row number either database can compare (a larger one is a 422, not a database error).
RowId = Annotated[int, Field(ge=1, le=2**63 - 1)]


def _typed_count_problem(*, sessions: int, messages: int, typed: int | None) -> str | None:
    """The core's typed-count refusal (every door's), for ``typed_count`` as given."""
    return typed_count_problem(
        sessions=sessions, messages=messages, typed=typed, given=typed is not None
    )


def _refused(
    request: HttpRequest,
    action: str,
    error: BaseException,
    *,
    why: str | None = None,
    session_ids: Sequence[str] = (),
) -> None:
    """Audit a refused call under the console action's name (``why``: other words than the
    error's), once: the API's own refusal record then skips it, and an error the action
    audited itself is not recorded again."""
    if getattr(error, "audited_entry", None) is not None:
        return
    entry = actions.record_refusal(
        request=request,
        actor=request.auth.actor,
        action=action,
        why=why if why is not None else error,
        session_ids=session_ids,
    )
    if entry is not None:
        error.audited_entry = entry.pk


def _attempt(
    request: HttpRequest,
    action: str,
    run: Callable[[], T],
    *,
    why: str | None = None,
    session_ids: Sequence[str] = (),
) -> T:
    """``run()``, its refusal (a core error, or a problem of this module) audited as the
    console's ``attempt`` audits it, then answered as it is."""
    try:
        return run()
    except (StoreError, Problem) as error:
        _refused(request, action, error, why=why, session_ids=session_ids)
        raise


# --- holds -------------------------------------------------------------------------------------


class HoldOut(Schema):
    id: int
    kind: str
    subject: str
    reason: str
    placed_by: str
    placed_at: float
    active: bool
    released_at: float | None
    released_by: str | None
    release_reason: str | None
    description: str


class HoldIn(Strict):
    kind: Literal["session", "user"] = Field(
        description="session: the session and its whole lineage; user: every session of the "
        "user, with their lineage."
    )
    subject: Identifier = Field(description="The session id or the user id, exactly.")
    reason: Text


class HoldReleaseIn(Strict):
    reason: Text


def _hold_out(hold: holds.Hold) -> HoldOut:
    return HoldOut.model_validate(hold)  # the core's Hold, its state and words included


@router.get("/holds", response=list[HoldOut], auth=api_auth(OPERATE))
def hold_list(request: HttpRequest, active: bool | None = None):
    """The standing holds and the recently released ones (the console's list), newest first;
    ``active=true`` or ``false`` keeps one kind."""
    return [
        _hold_out(hold) for hold in holds.recent_holds() if active is None or hold.active == active
    ]


@router.post("/holds", response={201: HoldOut}, auth=api_auth(OPERATE))
def hold_place(request: HttpRequest, body: HoldIn):
    """Place a legal hold: no delete (cascade, bulk, retention, trash purge, erasure) can
    remove what it covers until it is released."""
    hold = _attempt(
        request,
        AuditAction.PLACE_HOLD,
        lambda: actions.place_hold(
            actor=request.auth.actor, kind=body.kind, subject=body.subject, reason=body.reason
        ),
    )
    return Status(201, _hold_out(hold))


@router.post("/holds/{hold_id}/release", response=HoldOut, auth=api_auth(OPERATE))
def hold_release(request: HttpRequest, hold_id: RowId, body: HoldReleaseIn):
    """Release a legal hold (the reason is kept on the hold and in the audit log)."""
    if holds.get_hold(hold_id=hold_id) is None:
        raise not_found(f"There is no legal hold #{hold_id}.")
    return _hold_out(
        _attempt(
            request,
            AuditAction.RELEASE_HOLD,
            lambda: actions.release_hold(
                actor=request.auth.actor, hold_id=hold_id, reason=body.reason
            ),
        )
    )


# --- retention ---------------------------------------------------------------------------------


class RetentionJobOut(Schema):
    id: int
    state: str
    total: int
    done: int
    skipped: int
    deleted_messages: int
    purge: bool
    created_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str


class PolicyOut(Schema):
    id: int
    name: str
    source: str
    older_than_days: float | None = Field(description="null: a stored value that is no number")
    status: str
    end_reason: str
    title: str
    mode: str
    every_hours: float | None
    enabled: bool
    next_run_at: datetime | None
    last_run_at: datetime | None
    created_at: datetime
    created_by: str
    description: str
    problem: str | None = Field(description="Why this stored policy cannot run (null: it can).")
    would_delete: int = Field(description="Sessions a run would delete now.")
    would_delete_messages: int
    held_left_out: int = Field(description="Sessions it matches that a legal hold keeps.")
    runs: list[RetentionJobOut] = Field(description=f"Its latest {RUNS_SHOWN} runs, newest first.")


class PolicyIn(Strict):
    name: Text
    source: Text = ""
    older_than_days: float = Field(description="Sessions ended more than this many days ago.")
    status: Literal["ended", "empty"] = "ended"
    end_reason: Text = ""
    title: Literal["any", "with", "without"] = "any"
    mode: Literal["trash", "purge"] = "trash"
    every_hours: float = 24.0
    reason: Text = ""

    @field_validator("older_than_days")
    @classmethod
    def _days(cls, value: float) -> float:
        try:
            check_days(value)  # the core's rule: the command and a stored policy's too
        except InvalidInput as problem:
            raise ValueError(str(problem)) from problem
        return value


class OptionalReasonIn(Strict):
    reason: Text = ""


class EnableIn(Strict):
    reason: Text = ""
    confirm_purge: bool = Field(
        False, description="Needed to enable a policy that purges: its runs cannot be undone."
    )


class RetentionHeldOut(Schema):
    session_id: str
    hold_id: int
    hold: str
    held_session_id: str


class TypedConfirmationOut(Schema):
    sessions: int = Field(description="Give this number as typed_count to confirm.")
    messages: int


class PreviewOut(Schema):
    policy: PolicyOut
    count: int = Field(description="Sessions the run deletes (whole conversations).")
    message_count: int
    sessions: list[SessionSummary] = Field(
        description=f"The first {retention.ROWS_SHOWN}, oldest first."
    )
    more: int
    held: list[RetentionHeldOut] = Field(
        description="Matched, kept by a legal hold (never deleted)."
    )
    purge: bool
    fingerprint: str = Field(description="Pass it to the run: it deletes exactly this or nothing.")
    typed_confirmation: TypedConfirmationOut | None = Field(
        description="Set when the run is large: the run needs typed_count."
    )


class RunIn(Strict):
    fingerprint: Identifier = Field(description="The preview's fingerprint.")
    reason: Text
    typed_count: int | None = Field(
        None, description="The number of sessions, when the preview asks it (typed_confirmation)."
    )
    confirm_purge: bool = Field(False, description="Needed to run a policy that purges.")


class RunOut(Schema):
    job: RetentionJobOut | None = Field(
        description="The run's bulk delete job (null: nothing ran)."
    )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _job_out(job: DeleteJob) -> RetentionJobOut:
    return RetentionJobOut.model_validate(job)  # the job's own fields


def _policy_out(policy: RetentionPolicy) -> PolicyOut:
    problem = retention.problem_of(policy)
    preview = None if problem else retention.dry_run(policy, rows=0)
    return PolicyOut(
        id=policy.pk,
        name=policy.name,
        source=policy.source,
        older_than_days=_number(policy.older_than_days),
        status=policy.status,
        end_reason=policy.end_reason,
        title=policy.title,
        mode=policy.mode,
        every_hours=_number(policy.every_hours),
        enabled=policy.enabled,
        next_run_at=policy.next_run_at,
        last_run_at=policy.last_run_at,
        created_at=policy.created_at,
        created_by=policy.created_by,
        description=retention.describe(policy),
        problem=problem,
        would_delete=preview.count if preview else 0,
        would_delete_messages=preview.message_count if preview else 0,
        held_left_out=preview.held_excluded if preview else 0,
        runs=[_job_out(job) for job in policy.runs.order_by("-pk")[:RUNS_SHOWN]],
    )


def _policy(policy_id: int) -> RetentionPolicy:
    policy = RetentionPolicy.objects.filter(pk=policy_id).first()
    if policy is None:
        raise not_found(f"There is no retention policy #{policy_id}.")
    return policy


@router.get("/retention/policies", response=list[PolicyOut], auth=api_auth(DELETE))
def retention_policy_list(request: HttpRequest):
    """Every policy, with what a run would delete now and its latest runs."""
    return [_policy_out(policy) for policy in RetentionPolicy.objects.order_by("name", "pk")]


@router.post("/retention/policies", response={201: PolicyOut}, auth=api_auth(DELETE))
def retention_policy_create(request: HttpRequest, body: PolicyIn):
    """Create a policy, disabled: read its preview, then enable it."""
    fields = body.model_dump()
    reason = fields.pop("reason")
    policy = _attempt(
        request,
        AuditAction.RETENTION_POLICY_CREATE,
        lambda: actions.create_retention_policy(actor=request.auth.actor, reason=reason, **fields),
    )
    return Status(201, _policy_out(policy))


@router.get("/retention/policies/{policy_id}", response=PolicyOut, auth=api_auth(DELETE))
def retention_policy(request: HttpRequest, policy_id: RowId):
    return _policy_out(_policy(policy_id))


@router.get("/retention/policies/{policy_id}/preview", response=PreviewOut, auth=api_auth(DELETE))
def retention_preview(request: HttpRequest, policy_id: RowId):
    """What a run now would delete (every session counted, the first listed), the sessions a
    legal hold keeps, and the fingerprint a run must carry."""
    policy = _policy(policy_id)
    retention.check_stored(policy)  # a policy that cannot run has no preview (422, why)
    preview = retention.dry_run(policy)
    asked = needs_typed_confirmation(sessions=preview.count, messages=preview.message_count)
    return PreviewOut(
        policy=_policy_out(policy),
        count=preview.count,
        message_count=preview.message_count,
        sessions=[SessionSummary(**row) for row in preview.rows],
        more=preview.more,
        held=[
            RetentionHeldOut(
                session_id=skip.session_id,
                hold_id=skip.hold_id,
                hold=skip.hold,
                held_session_id=skip.held_session_id,
            )
            for skip in preview.held
        ],
        purge=policy.mode == RetentionPolicy.PURGE,
        fingerprint=preview.fingerprint,
        typed_confirmation=TypedConfirmationOut(
            sessions=preview.count, messages=preview.message_count
        )
        if asked
        else None,
    )


@router.post("/retention/policies/{policy_id}/enable", response=PolicyOut, auth=api_auth(DELETE))
def retention_policy_enable(request: HttpRequest, policy_id: RowId, body: EnableIn):
    """Enable a policy: its first run is one period from now. One that purges needs
    ``confirm_purge``."""
    policy = _policy(policy_id)

    def enable() -> RetentionPolicy:
        if not body.confirm_purge and (problem := retention.unconfirmed_purge(policy)):
            raise invalid_input(problem, [{"field": "confirm_purge", "message": problem}])
        return actions.set_retention_policy_enabled(
            actor=request.auth.actor, policy_id=policy.pk, enabled=True, reason=body.reason
        )

    return _policy_out(_attempt(request, AuditAction.RETENTION_POLICY_ENABLE, enable))


@router.post("/retention/policies/{policy_id}/disable", response=PolicyOut, auth=api_auth(DELETE))
def retention_policy_disable(request: HttpRequest, policy_id: RowId, body: OptionalReasonIn):
    """Disable a policy: it no longer runs (a run already started goes on as its job)."""
    policy = _policy(policy_id)
    return _policy_out(
        _attempt(
            request,
            AuditAction.RETENTION_POLICY_DISABLE,
            lambda: actions.set_retention_policy_enabled(
                actor=request.auth.actor, policy_id=policy.pk, enabled=False, reason=body.reason
            ),
        )
    )


@router.delete("/retention/policies/{policy_id}", response={204: None}, auth=api_auth(DELETE))
def retention_policy_delete(request: HttpRequest, policy_id: RowId, reason: Text = Query("")):
    """Delete a policy (its past runs, the jobs, stay)."""
    policy = _policy(policy_id)
    _attempt(
        request,
        AuditAction.RETENTION_POLICY_DELETE,
        lambda: actions.delete_retention_policy(
            actor=request.auth.actor, policy_id=policy.pk, reason=reason
        ),
    )
    return Status(204, None)


@router.get(
    "/retention/policies/{policy_id}/runs", response=list[RetentionJobOut], auth=api_auth(DELETE)
)
def retention_run_list(
    request: HttpRequest, policy_id: RowId, limit: int = Query(50, ge=1, le=RUNS_MAX)
):
    """The policy's runs (bulk delete jobs), newest first, with their state and progress."""
    policy = _policy(policy_id)
    return [_job_out(job) for job in policy.runs.order_by("-pk")[:limit]]


@router.post(
    "/retention/policies/{policy_id}/runs",
    response={201: RunOut, 200: RunOut},
    auth=api_auth(DELETE),
)
def retention_run(request: HttpRequest, policy_id: RowId, body: RunIn):
    """Run the policy now, exactly as its preview showed: the preview's fingerprint, a reason,
    ``typed_count`` when the preview asks it, ``confirm_purge`` for a policy that purges. The
    run is a bulk delete job (201; follow it with the runs list); held sessions are never in
    it. 200 with ``job`` null: what it selected went meanwhile, nothing was deleted."""
    policy = _policy(policy_id)

    def run() -> int | None:
        if retention.problem_of(policy) is None:
            preview = retention.dry_run(policy, rows=0)
            if fingerprints.matches(body.fingerprint, preview.fingerprint):
                _check_run_confirmation(policy, preview, body)
            # A stale fingerprint goes on: the action refuses it (409 plan-changed), audited.
        return actions.run_retention_policy(
            actor=request.auth.actor,
            policy_id=policy.pk,
            reason=body.reason,
            expected_fingerprint=body.fingerprint,
        )

    job_id = _attempt(request, AuditAction.RETENTION_RUN, run)
    if job_id is None:
        return Status(200, RunOut(job=None))
    return Status(201, RunOut(job=_job_out(DeleteJob.objects.get(pk=job_id))))


def _check_run_confirmation(
    policy: RetentionPolicy, preview: retention.RetentionPreview, body: RunIn
) -> None:
    """Refuse a run the console's "Run now" refuses (nothing deleted): nothing to delete
    (409), the typed number or the purge's confirmation missing (422 naming the fields)."""
    if problem := retention.stale_or_empty(preview, body.fingerprint):
        raise Problem(409, "refused", "Refused", problem)
    errors = []
    if problem := _typed_count_problem(
        sessions=preview.count, messages=preview.message_count, typed=body.typed_count
    ):
        errors.append({"field": "typed_count", "message": problem})
    if not body.confirm_purge and (
        problem := retention.unconfirmed_purge(policy, count=preview.count)
    ):
        errors.append({"field": "confirm_purge", "message": problem})
    if errors:
        raise invalid_input(" ".join(e["message"] for e in errors), errors)


# --- erasure -----------------------------------------------------------------------------------


class SubjectIn(Strict):
    user_id: Identifier = Field(description="The person's user id, exactly as stored.")
    chat_ids: list[Identifier] = Field(default_factory=list, max_length=200)
    session_keys: list[Identifier] = Field(
        default_factory=list, max_length=200, description="Whole session keys that are theirs."
    )

    def subject(self) -> Subject:
        return Subject(
            user_id=self.user_id,
            chat_ids=tuple(dict.fromkeys(self.chat_ids)),
            session_keys=tuple(dict.fromkeys(self.session_keys)),
        )


class ErasureIn(SubjectIn):
    reference: Text = Field(description="The request's reference (a ticket, not a name).")
    fingerprint: Identifier = Field(description="The preview's fingerprint.")
    typed_count: int | None = Field(
        None, description="The number of sessions, when the preview asks it."
    )


class ErasurePlanOut(Schema):
    fingerprint: str
    empty: bool
    session_count: int
    session_ids: list[str] = Field(description=f"The first {LISTED}, children first.")
    live_sessions: int
    message_count: int
    other_messages: int = Field(description="The person's messages a merge moved elsewhere.")
    other_sessions: list[str]
    conversation_slugs: int
    stored_responses: int
    mentions: list[str] = Field(
        description="Other people's sessions naming the person: kept, to review."
    )
    trash_operations: int
    trash_purged: int
    trash_pruned: int
    trash_kept: list[str]
    held: list[str] = Field(description="Holds that stop this erasure (it is refused while any).")
    typed_confirmation: TypedConfirmationOut | None


class ErasureRequestOut(Schema):
    id: int
    reference: str
    state: str
    subject_sha256: str
    created_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str
    receipt: dict[str, Any] | None = Field(
        None, description="Once done: the signed receipt, as the console's download."
    )


def _plan_out(full: erasure.FullPlan) -> ErasurePlanOut:
    plan = full.store
    asked = needs_typed_confirmation(sessions=len(plan.session_ids), messages=plan.message_count)
    return ErasurePlanOut(
        fingerprint=full.fingerprint,
        empty=full.empty,
        session_count=len(plan.session_ids),
        session_ids=list(plan.session_ids[:LISTED]),
        live_sessions=len(plan.live_session_ids),
        message_count=plan.message_count,
        other_messages=len(plan.other_messages),
        other_sessions=sorted({sid for _, sid in plan.other_messages}),
        conversation_slugs=len(plan.conversation_names),
        stored_responses=len(plan.response_ids),
        mentions=list(plan.mentions),
        trash_operations=len(full.trash.operations),
        trash_purged=len(full.trash.purge),
        trash_pruned=len(full.trash.prune),
        trash_kept=sorted({words for _, words in full.trash.kept}),
        held=sorted({words for _, words in full.held}),
        typed_confirmation=TypedConfirmationOut(
            sessions=len(plan.session_ids), messages=plan.message_count
        )
        if asked
        else None,
    )


def _request_out(queued: ErasureRequest, *, receipt: bool = False) -> ErasureRequestOut:
    return ErasureRequestOut(
        id=queued.pk,
        reference=queued.reference,
        state=queued.state,
        subject_sha256=queued.subject_hash,
        created_by=queued.created_by,
        created_at=queued.created_at,
        started_at=queued.started_at,
        finished_at=queued.finished_at,
        error=queued.error,
        receipt=queued.receipt if receipt and queued.state == ErasureRequest.DONE else None,
    )


def _plan(subject: Subject) -> erasure.FullPlan:
    subject.check()
    return erasure.plan(subject)


@router.post("/erasure/preview", response=ErasurePlanOut, auth=api_auth(DELETE))
def erasure_preview(request: HttpRequest, body: SubjectIn):
    """What erasing this person removes (sessions, moved messages, slugs, stored responses,
    trash entries), what it keeps, the holds that stop it, and the fingerprint to confirm
    with. Nothing changes; the subject is in the body, never in a URL."""
    subject = body.subject()
    full = _attempt(
        request, AuditAction.ERASURE_REQUEST, lambda: _plan(subject), why=ERASURE_REFUSED
    )
    return _plan_out(full)


@router.post("/erasure/requests", response={201: ErasureRequestOut}, auth=api_auth(DELETE))
def erasure_request(request: HttpRequest, body: ErasureIn):
    """Queue the erasure a preview showed (its fingerprint, the reference, ``typed_count``
    when the preview asks it); a background worker runs it and the request's page (GET) then
    holds its receipt. Refused (nothing erased) if the store changed since the preview or a
    hold covers any of it."""
    subject = body.subject()

    def queue() -> ErasureRequest:
        full = _plan(subject)
        plan = full.store
        errors = []
        if not body.reference.strip():
            errors.append(
                {
                    "field": "reference",
                    "message": "Give the request's reference (a ticket number, not the "
                    "person's name).",
                }
            )
        if fingerprints.matches(body.fingerprint, full.fingerprint) and (
            problem := _typed_count_problem(
                sessions=len(plan.session_ids), messages=plan.message_count, typed=body.typed_count
            )
        ):
            # The console's words for an erasure (erasure_confirm).
            problem = problem.replace("Nothing was deleted.", "Nothing was erased.")
            errors.append({"field": "typed_count", "message": problem})
        if errors:
            raise invalid_input(" ".join(e["message"] for e in errors), errors)
        # An empty plan is still confirmed, as in the console: freed space may hold the
        # person's bytes until the files are rewritten, which the receipt then says.
        return actions.request_erasure(
            actor=request.auth.actor,
            subject=subject,
            reference=body.reference,
            expected_fingerprint=body.fingerprint,
        )

    queued = _attempt(request, AuditAction.ERASURE_REQUEST, queue, why=ERASURE_REFUSED)
    return Status(201, _request_out(queued))


@router.get("/erasure/requests", response=list[ErasureRequestOut], auth=api_auth(DELETE))
def erasure_request_list(request: HttpRequest, limit: int = Query(50, ge=1, le=500)):
    """The erasure requests, newest first (their receipts: each request's own route)."""
    return [_request_out(queued) for queued in ErasureRequest.objects.order_by("-pk")[:limit]]


def _erasure_request(request_id: int) -> ErasureRequest:
    queued = ErasureRequest.objects.filter(pk=request_id).first()
    if queued is None:
        raise not_found(f"There is no erasure request #{request_id}.")
    return queued


@router.get("/erasure/requests/{request_id}", response=ErasureRequestOut, auth=api_auth(DELETE))
def erasure_request_detail(request: HttpRequest, request_id: RowId):
    """An erasure request's state and, once done, its signed receipt. Reading a request that
    a restart interrupted (or no worker picked up yet) starts it, as its console page does."""
    queued = _erasure_request(request_id)
    if queued.pk in erasure.resumable_request_ids():
        actions.start_erasures()
        queued.refresh_from_db()
    return _request_out(queued, receipt=True)


@router.get(
    "/erasure/requests/{request_id}/receipt",
    response={200: dict[str, Any]},
    auth=api_auth(DELETE),
)
def erasure_receipt(request: HttpRequest, request_id: RowId):
    """The receipt file, byte for byte as the console's download (verifiable as issued)."""
    queued = _erasure_request(request_id)
    if queued.state != ErasureRequest.DONE:
        raise not_found(f"Erasure request #{request_id} has not finished ({queued.state}).")
    response = HttpResponse(erasure.receipt_text(queued.receipt), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="erasure-receipt-{queued.pk}.json"'
    return response
