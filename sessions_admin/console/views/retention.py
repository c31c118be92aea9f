"""Retention policies (admins): define, dry-run, enable, run now, disable, delete.

A policy is created disabled and listed with what a run would delete now (the same
selection a run makes: ``ledger/retention.py``), when it runs next and its last runs
(bulk delete jobs, linked). Every change goes through ``ledger.actions`` (audited).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from sessions_admin import core
from sessions_admin.console.forms import (
    OptionalReasonForm,
    RetentionPolicyForm,
    RetentionSwitchForm,
    form_problems,
)
from sessions_admin.console.http import HtmxHttpRequest, plural, require_perm
from sessions_admin.core.retention import STATUSES, TITLES
from sessions_admin.ledger import actions, retention
from sessions_admin.ledger.models import DeleteJob, RetentionPolicy
from sessions_admin.signin.roles import DELETE

TEMPLATE = "console/retention.html"
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


def _rows() -> list[PolicyRow]:
    rows = []
    for policy in RetentionPolicy.objects.order_by("name", "pk"):
        preview = retention.dry_run(policy)
        rows.append(
            PolicyRow(
                policy=policy,
                description=retention.describe(policy),
                would_delete=len(preview.session_ids),
                would_delete_messages=preview.message_count,
                held_left_out=preview.held_excluded,
                runs=list(policy.runs.order_by("-pk")[:RUNS_SHOWN]),
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
    if not form.is_valid():
        problems = form_problems(form)
        actions.record_refusal(
            request=request, action="retention_policy_create", why=" ".join(problems)
        )
        return _render(request, values=values, problems=problems, status=400)
    data = dict(form.cleaned_data)
    reason = data.pop("reason")
    try:
        policy = actions.create_retention_policy(actor=request.user, reason=reason, **data)
    except core.StoreError as error:
        actions.record_refusal(request=request, action="retention_policy_create", why=error)
        return _render(request, values=values, problems=[str(error)], status=400)
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
    if not form.is_valid():
        messages.error(request, f"Policy #{policy_id} is unchanged: {form.problem()}")
        return redirect("retention")
    enable = form.cleaned_data["enable"]
    try:
        policy = actions.set_retention_policy_enabled(
            actor=request.user,
            policy_id=policy_id,
            enabled=enable,
            reason=form.cleaned_data["reason"],
        )
    except core.StoreError as error:
        actions.record_refusal(request=request, action="retention_policy_enable", why=error)
        messages.error(request, f"Policy #{policy_id} is unchanged: {error}")
        return redirect("retention")
    if enable:
        messages.success(
            request,
            f"Enabled policy #{policy.pk}; its first run is at "
            f"{policy.next_run_at:%Y-%m-%d %H:%M} UTC.",
        )
    else:
        messages.success(request, f"Disabled policy #{policy.pk}; it no longer runs.")
    return redirect("retention")


@require_POST
@require_perm(DELETE)
def retention_run(request: HtmxHttpRequest, policy_id: int) -> HttpResponse:
    form = OptionalReasonForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Policy #{policy_id} did not run: {form.problem()}")
        return redirect("retention")
    try:
        job_id = actions.run_retention_policy(
            actor=request.user, policy_id=policy_id, reason=form.cleaned_data["reason"]
        )
    except core.StoreError as error:
        actions.record_refusal(request=request, action="retention_run", why=error)
        messages.error(request, f"Policy #{policy_id} did not run: {error}")
        return redirect("retention")
    if job_id is None:
        messages.info(request, f"Policy #{policy_id}: nothing matches now; nothing was deleted.")
        return redirect("retention")
    job = DeleteJob.objects.get(pk=job_id)
    messages.success(
        request, f"Policy #{policy_id} runs as job #{job_id}: {plural(job.total, 'session')}."
    )
    return redirect("job_detail", job_id)


@require_POST
@require_perm(DELETE)
def retention_delete(request: HtmxHttpRequest, policy_id: int) -> HttpResponse:
    form = OptionalReasonForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Policy #{policy_id} stays: {form.problem()}")
        return redirect("retention")
    try:
        actions.delete_retention_policy(
            actor=request.user, policy_id=policy_id, reason=form.cleaned_data["reason"]
        )
    except core.StoreError as error:
        actions.record_refusal(request=request, action="retention_policy_delete", why=error)
        messages.error(request, f"Policy #{policy_id} stays: {error}")
        return redirect("retention")
    messages.success(request, f"Deleted retention policy #{policy_id} (its past runs stay).")
    return redirect("retention")
