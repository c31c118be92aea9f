"""Merges over HTTP: the preview (a plan with its fingerprint), the merge of exactly that plan,
and the undo of a merge, as the console's merge pages (``console/views/merge.py``).

The preview is a read (viewer); merging and undoing need ``OPERATE`` (support, admin), the
console's permission. A merge carries the preview's fingerprint: the core checks it again
under its locks, so a plan that changed since the preview is a 409 ``plan-changed`` and
nothing moves. Sessions whose users, sources or keys differ merge only with the number of
sessions merged into the target typed and a reason (``core.merge.confirmation_problem``),
checked against the plan as it is now, as the console checks it, before the fingerprint: a
difference that appeared since the preview is asked for too. Every change goes through
``ledger.actions`` (audited, actor ``request.auth.actor``); a refusal before the action is
recorded as the console's refused ``merge`` / ``unmerge``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from django.http import HttpRequest
from ninja import Field, Path, Query, Router, Schema
from ninja.responses import Status

from sessions_admin import core
from sessions_admin.api.auth import api_auth
from sessions_admin.api.problems import Problem, invalid_input
from sessions_admin.api.runtime import Strict
from sessions_admin.api.schemas import Identifier, Text
from sessions_admin.core.merge import (
    MAX_MERGE_SESSIONS,
    MergeDifference,
    MergePlan,
    MergeSource,
    confirmation_problem,
)
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditAction
from sessions_admin.signin.roles import OPERATE, VIEW

router = Router(tags=["merges"], auth=api_auth(VIEW))
MAX_PICKS = MAX_MERGE_SESSIONS + 1  # one more than allowed, so the core says why
RowId = Annotated[int, Path(ge=1, lt=2**63)]  # a row's id either database can compare


def refused(request: HttpRequest, action: str, problem: Problem, **audit) -> Problem:
    """``problem``, recorded as the console records the refused ``action`` (not again as an
    ``api_...`` refusal: ``problems.install`` skips an error already audited)."""
    problem.audited_entry = actions.record_refusal(
        request=request, actor=request.auth.actor, action=action, why=problem.detail, **audit
    )
    return problem


# --- schemas -----------------------------------------------------------------------------------


class PreviewQuery(Schema):
    ids: list[Identifier] = Field(..., min_length=1, max_length=MAX_PICKS)
    target: Identifier | None = None


class MergePlanOut(Schema):
    fingerprint: str = Field(description="Send it back with the merge: it merges this plan only.")
    target_id: str
    chosen_id: str
    target_rule: str
    absorbed_ids: list[str]
    sources: list[MergeSource]
    moved_messages: int
    conversations_moved: list[str]
    session_key_for_target: str | None
    reparented_children: list[str]
    reopen_target: bool
    is_api_conversation: bool = Field(
        description="The default of continue_history: the next API turn reads the merged "
        "transcript."
    )
    differences: list[MergeDifference]
    typed_count_required: int | None = Field(
        description="The sessions' users, sources or keys differ: the merge needs this number "
        "typed (typed_count) and a reason; null when they do not."
    )
    held: list[str]


class MergeIn(Strict):
    session_ids: list[Identifier] = Field(..., min_length=2, max_length=MAX_PICKS)
    target_id: Identifier | None = None
    fingerprint: Identifier
    typed_count: int | None = None
    reason: Text = ""
    continue_history: bool | None = Field(
        None, description="Null: the plan's is_api_conversation, as the console's preview ticks."
    )


class MergeOut(Schema):
    merge_id: int
    target_id: str
    absorbed_ids: list[str]
    moved_messages: int
    rewritten_responses: list[str]


class UnmergeIn(Strict):
    reason: Text = ""


class UnmergeOut(Schema):
    merge_id: int
    target_id: str
    restored_ids: list[str]
    returned_messages: int


# --- helpers -----------------------------------------------------------------------------------


def _differences(plan: MergePlan) -> dict[str, list]:
    return {d.label: list(d.values) for d in plan.differences}


def plan_out(plan: MergePlan) -> MergePlanOut:
    return MergePlanOut(
        fingerprint=plan.fingerprint,
        target_id=plan.target_id,
        chosen_id=plan.chosen_id,
        target_rule=plan.target_rule,
        absorbed_ids=list(plan.absorbed_ids),
        sources=list(plan.sources),
        moved_messages=plan.moved_messages,
        conversations_moved=list(plan.conversations_moved),
        session_key_for_target=plan.session_key_for_target,
        reparented_children=list(plan.reparented_children),
        reopen_target=plan.reopen_target,
        is_api_conversation=plan.is_api_conversation,
        differences=list(plan.differences),
        typed_count_required=len(plan.absorbed_ids) if plan.differs else None,
        held=list(plan.held),
    )


def _picks(ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ids))


# --- routes ------------------------------------------------------------------------------------


@router.get("/preview", response=MergePlanOut)
def merge_plan(request: HttpRequest, query: Query[PreviewQuery]):
    """What merging the sessions ``ids`` (into ``target``, else the core's default) would
    change, with the fingerprint the merge must carry. A refused plan (one session, an unknown
    id, a held session...) answers the core's problem."""
    picks = _picks(query.ids)
    if query.target is not None and query.target not in picks:
        raise invalid_input(
            f"The target {query.target!r} is not one of the picked sessions.",
            [{"field": "target", "message": "not one of ids"}],
        )
    return plan_out(core.plan_merge(session_ids=picks, target_id=query.target))


@router.post("", response={201: MergeOut}, auth=api_auth(OPERATE))
def merge_sessions(request: HttpRequest, body: MergeIn):
    """Merge exactly the previewed plan (its ``fingerprint``); 409 ``plan-changed`` if the
    sessions changed since, nothing merged."""
    picks = _picks(body.session_ids)
    audit = {
        "session_ids": picks,
        "before": {"target": body.target_id, "fingerprint": body.fingerprint},
    }
    if body.target_id is not None and body.target_id not in picks:
        problem = invalid_input(
            f"The target {body.target_id!r} is not one of the picked sessions.",
            [{"field": "target_id", "message": "not one of session_ids"}],
        )
        raise refused(request, AuditAction.MERGE, problem, **audit)
    try:
        plan = core.plan_merge(session_ids=picks, target_id=body.target_id)
    except core.StoreError:
        plan = None  # the merge below refuses it and the ledger audits why
    if plan is not None:
        # The plan as it is now (its fingerprint is checked again under lock): sessions that
        # differ are merged only with the typed count and a reason (the console's order).
        unconfirmed = confirmation_problem(plan, typed_count=body.typed_count, reason=body.reason)
        if unconfirmed:
            field = "typed_count" if body.typed_count != len(plan.absorbed_ids) else "reason"
            problem = invalid_input(
                f"{unconfirmed} Nothing was merged.", [{"field": field, "message": unconfirmed}]
            )
            problem.extensions["differences"] = _differences(plan)
            problem.extensions["typed_count_required"] = len(plan.absorbed_ids)
            audit["before"] |= {
                "differences": _differences(plan),
                "typed_count": body.typed_count,
            }
            raise refused(request, AuditAction.MERGE, problem, **audit)
    continue_history = body.continue_history
    if continue_history is None:
        continue_history = plan.is_api_conversation if plan is not None else False
    result = actions.merge(
        actor=request.auth.actor,
        session_ids=picks,
        target_id=body.target_id,
        expected_fingerprint=body.fingerprint,
        reason=body.reason,
        continue_history=continue_history,
        typed_count=body.typed_count,
        differences=_differences(plan) if plan is not None else None,
    )
    return Status(
        201,
        MergeOut(
            merge_id=result.merge_id,
            target_id=result.target_id,
            absorbed_ids=list(result.absorbed_ids),
            moved_messages=result.moved_messages,
            rewritten_responses=list(result.rewritten_responses),
        ),
    )


@router.post("/{merge_id}/undo", response=UnmergeOut, auth=api_auth(OPERATE))
def unmerge(request: HttpRequest, merge_id: RowId, body: UnmergeIn):
    """Undo a merge exactly: its messages go back to the sessions they came from. 404 for an
    unknown merge; an undone one, or one that can no longer be undone, is a 422 saying why."""
    result = actions.unmerge(actor=request.auth.actor, merge_id=merge_id, reason=body.reason)
    return UnmergeOut(
        merge_id=result.merge_id,
        target_id=result.target_id,
        restored_ids=list(result.restored_ids),
        returned_messages=result.returned_messages,
    )
