"""Bulk delete jobs: their list, one job's progress, cancelling one and finishing a failed one.

A job deletes in batches in the worker (``ledger.worker``); these pages poll its
progress and wake the worker when a job is waiting. Cancelling goes through
``ledger.actions``, validated by ``JobCancelForm`` first.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseStopPolling, trigger_client_event

from sessions_admin.console.forms import JobCancelForm, JobResumeForm
from sessions_admin.console.http import HtmxHttpRequest, fragment, require_perm
from sessions_admin.console.refusals import Refused, attempt_form
from sessions_admin.ledger import actions, worker
from sessions_admin.ledger.jobs import job_progress
from sessions_admin.ledger.models import AuditAction, DeleteJob, TrashEntry
from sessions_admin.signin.roles import DELETE

JOB_TEMPLATE = "console/job.html"

ACTIVE_JOB_STATES = (DeleteJob.PENDING, DeleteJob.RUNNING)
JOBS_LISTED = 50
JOB_FINISHED_EVENT = "jobFinished"
RESTORED_LISTED = 20


def _job_or_404(job_id: int) -> DeleteJob:
    job = DeleteJob.objects.filter(pk=job_id).first()
    if job is None:
        raise Http404("No such job")
    return job


def _job_context(job: DeleteJob) -> dict:
    progress = job_progress(job_id=job.pk)
    active = progress.state in ACTIVE_JOB_STATES
    remaining = None
    if active and progress.sessions_per_second:
        remaining = (progress.total - progress.processed) / progress.sessions_per_second
        remaining = remaining if remaining >= 1 else None
    trash_entry = None
    if job.kind == DeleteJob.CASCADE and job.operation:
        trash_entry = (
            TrashEntry.objects.filter(operation=job.operation)
            .exclude(state=TrashEntry.PENDING)
            .order_by("pk")
            .values("pk", "session_ids")
            .first()
        )
    return {
        "job": job,
        "progress": progress,
        "active": active,
        "remaining_seconds": remaining,
        # A cascade's trash entry (what undoes it), a restore's sessions back in the store.
        "trash_entry": trash_entry,
        "trash_search": (trash_entry["session_ids"] or [""])[0] if trash_entry else "",
        "restored": list((job.params or {}).get("restored") or [])[:RESTORED_LISTED],
        "restored_more": max(0, len((job.params or {}).get("restored") or []) - RESTORED_LISTED),
        "plan_start": ((job.params or {}).get("session_ids") or [""])[0],
    }


@require_GET
@require_perm(DELETE)
def job_detail(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    """A job's progress; polls itself while it runs. Looking at it resumes an interrupted job."""
    job = _job_or_404(job_id)
    if job.state in ACTIVE_JOB_STATES:
        worker.ensure_worker_running()
    context = _job_context(job)
    template = fragment(request, JOB_TEMPLATE, "progress")
    if request.GET.get("part") == "actions" and request.htmx:
        template = f"{JOB_TEMPLATE}#actions"
    if template == f"{JOB_TEMPLATE}#progress" and not (
        context["active"] or context["progress"].stopping
    ):
        # Finished: the last swap, then htmx stops polling; the actions refresh themselves.
        response = HttpResponseStopPolling(render_to_string(template, context, request=request))
        trigger_client_event(response, JOB_FINISHED_EVENT, after="settle")
        return response
    return render(request, template, context)


@require_GET
@require_perm(DELETE)
def job_list(request: HtmxHttpRequest) -> HttpResponse:
    """Recent bulk-delete jobs; the table refreshes itself while one of them runs."""
    jobs = list(DeleteJob.objects.all()[:JOBS_LISTED])
    active = any(job.state in ACTIVE_JOB_STATES for job in jobs)
    if active:
        worker.ensure_worker_running()
    context = {"jobs": jobs, "listing": True, "any_active": active}
    return render(request, fragment(request, JOB_TEMPLATE, "jobs"), context)


@require_POST
@require_perm(DELETE)
def job_cancel(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    """Stop a job after its current batch; what it deleted so far stays in the trash."""
    job = _job_or_404(job_id)
    if job.state not in ACTIVE_JOB_STATES:
        messages.info(request, f"Job #{job.pk} is already {job.state}; nothing to cancel.")
        return redirect("job_detail", job_id=job.pk)
    # A cascade or a restore is not cancellable (the core refuses it too): said, audited.
    done = attempt_form(
        request,
        AuditAction.CANCEL_BULK_DELETE,
        JobCancelForm(request.POST),
        lambda data: actions.cancel_bulk_delete(
            actor=request.user, job_id=job.pk, reason=data["reason"]
        ),
        message=f"Job #{job.pk} was not cancelled: ",
    )
    if isinstance(done, Refused):
        return redirect("job_detail", job_id=job.pk)
    progress = job_progress(job_id=job.pk)
    if progress.stopping:
        messages.success(
            request,
            f"Job #{job.pk} cancelled; it is stopping: the batch it was deleting is not written "
            f"yet (the store is held locked by another process). {progress.processed:,} of "
            f"{progress.total:,} sessions so far; its page counts that batch once it is.",
        )
    elif progress.state == DeleteJob.CANCELLED:
        messages.success(
            request,
            f"Job #{job.pk} cancelled after {progress.processed:,} of {progress.total:,} "
            "sessions; "
            + (
                "what it purged is gone for good."
                if job.purge
                else "what it deleted is restorable from the trash."
            ),
        )
    else:
        messages.info(request, f"Job #{job.pk} finished ({progress.state}) before it could stop.")
    return redirect("job_detail", job_id=job.pk)


@require_POST
@require_perm(DELETE)
def job_resume(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    """Finish a failed job from its first pending item (what it deleted stays in the trash)."""
    job = _job_or_404(job_id)
    done = attempt_form(
        request,
        AuditAction.RESUME_BULK_DELETE,
        JobResumeForm(request.POST),
        lambda data: actions.resume_bulk_delete(
            actor=request.user, job_id=job.pk, reason=data["reason"]
        ),
        message=f"Job #{job.pk} was not resumed: ",
    )
    if isinstance(done, Refused):
        return redirect("job_detail", job_id=job.pk)
    messages.success(request, f"Job #{job.pk} takes up where it stopped.")
    return redirect("job_detail", job_id=job.pk)
