"""Retention policies (admins): define, dry-run, enable, run now, disable, delete.

A policy is created disabled and listed with what a run would delete now (the same
selection a run makes: ``ledger/retention.py``), when it runs next and its last runs
(bulk delete jobs, linked). Every change goes through ``ledger.actions`` (audited).

"Run now" is a delete and asks what a bulk delete asks: its preview
(``retention_preview``) lists the sessions it deletes and those a legal hold keeps
(with the hold), and the confirm step needs a reason, the number of sessions typed
from 20 sessions or 1,000 messages (``core.deletion.needs_typed_confirmation``, the
bulk delete's prompt and refusal), a tick for a policy that purges, and the preview's
fingerprint: the run deletes exactly the sessions shown or refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from sessions_admin.console.forms import (
    OptionalReasonForm,
    RetentionPolicyForm,
    RetentionRunForm,
    RetentionSwitchForm,
)
from sessions_admin.console.http import HtmxHttpRequest, plural, require_perm
from sessions_admin.console.refusals import Refused, attempt, attempt_form, attempt_valid, refuse
from sessions_admin.console.views.delete import typed_confirmation, typed_count_problem
from sessions_admin.core.retention import STATUSES, TITLES
from sessions_admin.ledger import actions, retention
from sessions_admin.ledger.models import AuditAction, DeleteJob, RetentionPolicy
from sessions_admin.signin.roles import DELETE

TEMPLATE = "console/retention.html"
RUN_TEMPLATE = "console/retention_run.html"
RUNS_SHOWN = 5
FORM_DEFAULTS = {
    "status": "ended",
    "title": "any",
    "mode": "trash",
    "every_hours": "24",
    "older_than_days": "90",
}


@dataclass(frozen=True)
class PolicyRow:
    policy: RetentionPolicy
    description: str
    would_delete: int
    would_delete_messages: int
    held_left_out: int
    runs: list[DeleteJob]
    problem: str = ""  # a stored policy the rules refuse: it cannot run


def _rows() -> list[PolicyRow]:
    rows = []
    for policy in RetentionPolicy.objects.order_by("name", "pk"):
        runs = list(policy.runs.order_by("-pk")[:RUNS_SHOWN])
        problem = retention.problem_of(policy)
        if problem:
            rows.append(PolicyRow(policy, retention.describe(policy), 0, 0, 0, runs, problem))
            continue
        preview = retention.dry_run(policy, rows=0)
        rows.append(
            PolicyRow(
                policy=policy,
                description=retention.describe(policy),
                would_delete=preview.count,
                would_delete_messages=preview.message_count,
                held_left_out=preview.held_excluded,
                runs=runs,
            )
        )
    return rows


def _render(request, *, values=None, problems=(), status: int = 200) -> HttpResponse:
    context = {
        "rows": _rows(),
        "values": values or FORM_DEFAULTS,
        "problems": list(problems),
        "statuses": STATUSES,
        "titles": TITLES,
    }
    return render(request, TEMPLATE, context, status=status)


@require_GET
@require_perm(DELETE)
def retention_list(request: HtmxHttpRequest) -> HttpResponse:
    return _render(request)


@require_POST
@require_perm(DELETE)
def retention_create(request: HtmxHttpRequest) -> HttpResponse:
    form = RetentionPolicyForm(request.POST)
    values = {name: form.shown_back(name) for name in form.fields}
    policy = attempt_valid(
        request,
        AuditAction.RETENTION_POLICY_CREATE,
        form,
        lambda data: actions.create_retention_policy(actor=request.user, **data),
    )
    if isinstance(policy, Refused):
        return _render(request, values=values, problems=policy.said(""), status=400)
    messages.success(
        request,
        f"Created retention policy #{policy.pk} {policy.name!r}, disabled: check what it would "
        "delete below, then enable it.",
    )
    return redirect("retention")


@require_POST
@require_perm(DELETE)
def retention_switch(request: HtmxHttpRequest, policy_id: int) -> HttpResponse:
    form = RetentionSwitchForm(request.POST)
    unchanged = f"Policy #{policy_id} is unchanged: "
    policy = RetentionPolicy.objects.filter(pk=policy_id).first()
    if (
        form.is_valid()
        and form.cleaned_data["enable"]
        and not form.cleaned_data["confirm_purge"]
        and policy is not None
        and (problem := retention.unconfirmed_purge(policy))
    ):
        refuse(request, AuditAction.RETENTION_POLICY_ENABLE, problem, message=unchanged)
        return redirect("retention")
    policy = attempt_form(
        request,
        AuditAction.RETENTION_POLICY_ENABLE,
        form,
        lambda data: actions.set_retention_policy_enabled(
            actor=request.user, policy_id=policy_id, enabled=data["enable"], reason=data["reason"]
        ),
        message=unchanged,
    )
    if isinstance(policy, Refused):
        return redirect("retention")
    if form.cleaned_data["enable"]:
        messages.success(
            request,
            f"Enabled policy #{policy.pk}; its first run is at "
            f"{policy.next_run_at:%Y-%m-%d %H:%M} UTC.",
        )
    else:
        messages.success(request, f"Disabled policy #{policy.pk}; it no longer runs.")
    return redirect("retention")


def _policy_or_404(policy_id: int) -> RetentionPolicy:
    policy = RetentionPolicy.objects.filter(pk=policy_id).first()
    if policy is None:
        raise Http404("No such retention policy")
    return policy


def _render_run(
    request: HtmxHttpRequest,
    policy: RetentionPolicy,
    *,
    problems=(),
    reason: str = "",
    status: int = 200,
) -> HttpResponse:
    problem = retention.problem_of(policy)
    preview = None if problem else retention.dry_run(policy)
    context = {
        "policy": policy,
        "description": retention.describe(policy),
        "purge": policy.mode == RetentionPolicy.PURGE,
        "policy_problem": problem,
        "preview": preview,
        "typed_confirmation": preview
        and typed_confirmation(sessions=preview.count, messages=preview.message_count),
        "problems": list(problems),
        "reason": reason,
    }
    return render(request, RUN_TEMPLATE, context, status=status)


@require_GET
@require_perm(DELETE)
def retention_preview(request: HtmxHttpRequest, policy_id: int) -> HttpResponse:
    """What "Run now" would delete: every session (listed up to a cap, counted), the held."""
    return _render_run(request, _policy_or_404(policy_id))


def _run_problems(
    form: RetentionRunForm, policy: RetentionPolicy, preview: retention.RetentionPreview
) -> list[str]:
    """Why running ``preview`` with this form deletes nothing (none: go ahead)."""
    problems = [str(error) for error in form.errors.get("reason", [])]
    if problem := retention.stale_or_empty(preview, form.cleaned_data.get("digest")):
        problems.append(problem)
    else:
        asked = typed_confirmation(sessions=preview.count, messages=preview.message_count)
        if problem := typed_count_problem(form, asked):
            problems.append(problem)
        if not form.cleaned_data["confirm_purge"] and (
            problem := retention.unconfirmed_purge(policy, count=preview.count)
        ):
            problems.append(problem)
    return problems


@require_POST
@require_perm(DELETE)
def retention_run(request: HtmxHttpRequest, policy_id: int) -> HttpResponse:
    """Run the policy now: exactly the preview that was shown, confirmed like a bulk delete."""
    policy = _policy_or_404(policy_id)
    form = RetentionRunForm(request.POST)
    form.is_valid()
    reason = form.cleaned_data.get("reason", form.shown_back("reason"))
    if problem := retention.problem_of(policy):
        refuse(request, AuditAction.RETENTION_RUN, problem)
        return _render_run(request, policy, reason=reason, status=400)
    preview = retention.dry_run(policy, rows=0)
    problems = _run_problems(form, policy, preview)
    if problems:
        refuse(
            request,
            AuditAction.RETENTION_RUN,
            " ".join(problems),
            session_ids=preview.session_ids,
            before={"policy": policy.pk, "digest": form.shown_back("digest")[:200]},
        )
        return _render_run(request, policy, problems=problems, reason=reason, status=400)
    job_id = attempt(
        request,
        AuditAction.RETENTION_RUN,
        lambda: actions.run_retention_policy(
            actor=request.user,
            policy_id=policy.pk,
            reason=reason,
            expected_fingerprint=preview.fingerprint,
        ),
    )
    if isinstance(job_id, Refused):
        problems = job_id.said("Nothing was deleted: ")
        return _render_run(request, policy, problems=problems, reason=reason, status=400)
    if job_id is None:
        messages.info(request, f"Policy #{policy_id}: nothing matches now; nothing was deleted.")
        return redirect("retention")
    job = DeleteJob.objects.get(pk=job_id)
    how = "purges" if job.purge else "moves to the trash"
    messages.success(
        request,
        f"Policy #{policy_id} runs as job #{job_id}: it {how} {plural(job.total, 'session')}.",
    )
    return redirect("job_detail", job_id)


@require_POST
@require_perm(DELETE)
def retention_delete(request: HtmxHttpRequest, policy_id: int) -> HttpResponse:
    deleted = attempt_form(
        request,
        AuditAction.RETENTION_POLICY_DELETE,
        OptionalReasonForm(request.POST),
        lambda data: actions.delete_retention_policy(
            actor=request.user, policy_id=policy_id, reason=data["reason"]
        ),
        message=f"Policy #{policy_id} stays: ",
    )
    if isinstance(deleted, Refused):
        return redirect("retention")
    messages.success(request, f"Deleted retention policy #{policy_id} (its past runs stay).")
    return redirect("retention")
