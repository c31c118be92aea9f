"""Cascade delete, bulk delete with progress, and the trash: admin only.

The pages only read (a plan, a dry run, a job's progress, the trash). Every
change goes through ``sessions_admin.ledger.actions``, which calls the core
and writes the audit entry; nothing here writes to the store.

How a bulk selection travels from the dry run to the confirm step:

- a preset travels as its parameters. The "ended more than N days ago" preset
  also carries the cutoff instant of its dry run, so confirming a minute later
  selects against the same instant instead of a moving one;
- explicit ids (posted by the session list) are kept server-side in the
  operator's own session under a random token (the newest few selections, for
  an hour), so the confirm form carries a token, not thousands of hidden inputs;
- either way the confirm form carries a digest of the exact set the dry run
  showed. Starting the job recomputes the set and refuses, showing the new dry
  run, when it differs: the job deletes the sessions that were shown.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import secrets
import time
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.http import Http404, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import (
    HttpResponseClientRedirect,
    HttpResponseStopPolling,
    trigger_client_event,
)

from sessions_admin import core
from sessions_admin.console.http import HtmxHttpRequest, fragment, require_perm
from sessions_admin.core.lineage import edge_kind
from sessions_admin.core.text import operator_text, shown_back
from sessions_admin.ledger import actions, worker
from sessions_admin.ledger.jobs import job_progress
from sessions_admin.ledger.models import DeleteJob, TrashEntry, TrashSession
from sessions_admin.signin.roles import DELETE
from sessions_admin.store import listing
from sessions_admin.store.models import Session

CASCADE_TEMPLATE = "console/cascade_delete.html"
BULK_TEMPLATE = "console/bulk_delete.html"
JOB_TEMPLATE = "console/job.html"
TRASH_TEMPLATE = "console/trash.html"

CHUNK = 500

# Cascade plan: the order and words of the relation groups, and how many rows each lists.
RELATIONS = {
    "picked": "The conversation's first segment",
    "compression": "Compression segments (the same conversation, continued)",
    "delegate": "Delegates (sub-agent sessions)",
    "branch": "Branches",
    "child": "Other children",
}
KEPT_RELATIONS = {
    "branch": "branch",
    "child": "untyped child",
    "delegate": "delegate",
    "compression": "compression continuation",
}
GROUP_ROWS = 50
LIVE_LISTED = 20
LIST_NAMES = 100

# Bulk delete.
PRESETS = {
    "ended_older_than": "Ended more than N days ago",
    "empty": "Empty sessions (no messages)",
    "by_source": "By source",
}
MAX_DAYS = 36500
MAX_DRY_RUN_AGE_DAYS = 1
SELECTION_MAX = 10_000
SELECTION_SESSION_KEY = "sessions_admin.bulk_delete.selections"
SELECTION_TTL_SECONDS = 3600
SELECTIONS_KEPT = 3
SOURCE_CHOICES_MAX = 200
SOURCE_MAX_LENGTH = 500

# Jobs and trash.
ACTIVE_JOB_STATES = (DeleteJob.PENDING, DeleteJob.RUNNING)
JOBS_LISTED = 50
TRASH_PAGE_SIZE = 25
TRASH_SESSIONS_SHOWN = 12
JOB_FINISHED_EVENT = "jobFinished"


# ---------------------------------------------------------------------------
# Shared helpers


def _template(request: HtmxHttpRequest, template: str, name: str) -> str:
    """``fragment()``, except that htmx restoring history after a cache miss needs the page."""
    if request.htmx and request.htmx.history_restore_request:
        return template
    return fragment(request, template, name)


def _vary(response: HttpResponse) -> HttpResponse:
    patch_vary_headers(response, ["HX-Request", "HX-History-Restore-Request"])
    return response


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "on", "true", "yes"}


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (plural or word + 's')}"


def _reason(data: QueryDict) -> tuple[str, str | None]:
    """The required reason, or what to show back and why it was refused (``core.text``'s rule)."""
    raw = data.get("reason")
    try:
        return operator_text(raw, field="reason", required=True), None
    except core.InvalidInput as problem:
        return shown_back(raw), str(problem)


def _session_rows(ids) -> dict[str, Session]:
    """Store rows for display, by id (read in chunks; missing ids are simply absent)."""
    ids = list(dict.fromkeys(ids))
    found: dict[str, Session] = {}
    for start in range(0, len(ids), CHUNK):
        for row in Session.objects.filter(id__in=ids[start : start + CHUNK]).only(
            "id",
            "title",
            "source",
            "parent",
            "model_config",
            "started_at",
            "ended_at",
            "end_reason",
            "message_count",
        ):
            found[row.id] = row
    return found


def _trash_days() -> float:
    try:
        days = float(getattr(settings, "SESSIONS_ADMIN_TRASH_DAYS", 30))
    except (TypeError, ValueError):
        return 30.0
    return days if math.isfinite(days) and days >= 0 else 30.0


# ---------------------------------------------------------------------------
# Cascade delete


@dataclass(frozen=True)
class RelationGroup:
    relation: str
    label: str
    count: int
    rows: list[Session]
    more: int


def _plan_or_404(session_id: str, include_branches: bool) -> core.DeletePlan:
    try:
        return core.plan_cascade_delete(session_ids=[session_id], include_branches=include_branches)
    except core.SessionNotFound as missing:
        raise Http404("No such session") from missing


def _relation_groups(plan: core.DeletePlan, rows: dict[str, Session]) -> list[RelationGroup]:
    """The planned sessions grouped by how they hang off the conversation."""
    members: dict[str, list[Session]] = {}
    for sid in plan.session_ids:
        row = rows.get(sid)
        if row is None:
            continue
        parent = rows.get(row.parent_id) if row.parent_id else None
        if parent is None:
            relation = "picked"
        else:
            relation = edge_kind(
                {"model_config": row.model_config, "parent_session_id": row.parent_id},
                parent.end_reason,
            )
        members.setdefault(relation, []).append(row)
    names = list(RELATIONS) + sorted(set(members) - set(RELATIONS))
    groups = []
    for name in names:
        listed = sorted(members.get(name, []), key=lambda r: (r.started_at or 0, r.id))
        if not listed:
            continue
        groups.append(
            RelationGroup(
                relation=name,
                label=RELATIONS.get(name, name),
                count=len(listed),
                rows=listed[:GROUP_ROWS],
                more=max(0, len(listed) - GROUP_ROWS),
            )
        )
    return groups


def _cascade_context(
    session_id: str, plan: core.DeletePlan, *, reason: str = "", problems=()
) -> dict:
    kept_ids = [child for child, _ in plan.kept_children]
    rows = _session_rows([*plan.session_ids, *kept_ids])
    kept = [
        {
            "id": child,
            "relation": KEPT_RELATIONS.get(relation, relation),
            "row": rows.get(child),
        }
        for child, relation in plan.kept_children
    ]
    live = [{"id": sid, "row": rows.get(sid)} for sid in plan.live_session_ids[:LIVE_LISTED]]
    return {
        "session_id": session_id,
        "plan": plan,
        "groups": _relation_groups(plan, rows),
        "kept": kept,
        "live": live,
        "live_count": len(plan.live_session_ids),
        "more_live": max(0, len(plan.live_session_ids) - LIVE_LISTED),
        "session_count": len(plan.session_ids),
        "conversation_names": plan.conversation_names[:LIST_NAMES],
        "more_conversation_names": max(0, len(plan.conversation_names) - LIST_NAMES),
        "reason": reason,
        "problems": list(problems),
        "trash_days": _trash_days(),
    }


def _render_cascade(
    request: HtmxHttpRequest,
    session_id: str,
    plan: core.DeletePlan,
    *,
    reason: str = "",
    problems=(),
) -> HttpResponse:
    context = _cascade_context(session_id, plan, reason=reason, problems=problems)
    return _vary(render(request, _template(request, CASCADE_TEMPLATE, "plan"), context))


@require_GET
@require_perm(DELETE)
def cascade_delete(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """The plan: what deleting this session's conversation removes, and what it keeps."""
    plan = _plan_or_404(session_id, _flag(request.GET.get("include_branches")))
    return _render_cascade(request, session_id, plan)


@require_POST
@require_perm(DELETE)
def cascade_delete_confirm(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """Delete exactly the plan that was shown, or show why not (nothing deleted)."""
    include_branches = _flag(request.POST.get("include_branches"))
    fingerprint = request.POST.get("fingerprint", "")
    typed = "".join((request.POST.get("typed_count") or "").split()).replace(",", "")
    reason, reason_problem = _reason(request.POST)
    plan = _plan_or_404(session_id, include_branches)
    count = len(plan.session_ids)
    problems = [reason_problem] if reason_problem else []
    if fingerprint != plan.fingerprint:
        problems.append(
            "The store changed since the plan was shown (the runtime may still be writing), "
            "or the plan was not shown at all. Nothing was deleted: review the plan below "
            "and confirm again."
        )
    elif plan.needs_typed_confirmation and typed != str(count):
        problems.append(
            f"To confirm, type the number of sessions this deletes ({count:,})"
            + ("; the number typed does not match." if typed else ".")
            + " Nothing was deleted."
        )
    if problems:
        actions.record_refusal(
            request=request,
            action="cascade_delete",
            why=" ".join(problems),
            session_ids=[session_id],
            before={"fingerprint": fingerprint[:200]},
        )
        return _render_cascade(request, session_id, plan, reason=reason, problems=problems)
    try:
        result = actions.cascade_delete(
            actor=request.user,
            session_ids=[session_id],
            include_branches=include_branches,
            expected_fingerprint=fingerprint,
            reason=reason,
        )
    except core.PlanChanged as changed:
        actions.record_refusal(
            request=request, action="cascade_delete", why=changed, session_ids=[session_id]
        )
        plan = _plan_or_404(session_id, include_branches)
        return _render_cascade(request, session_id, plan, reason=reason, problems=[str(changed)])
    except core.StoreError as error:
        actions.record_refusal(
            request=request, action="cascade_delete", why=error, session_ids=[session_id]
        )
        plan = _plan_or_404(session_id, include_branches)
        return _render_cascade(
            request, session_id, plan, reason=reason, problems=[f"Nothing was deleted: {error}"]
        )
    messages.success(
        request,
        f"Deleted {_plural(result.deleted_sessions, 'session')} and "
        f"{_plural(result.deleted_messages, 'message')}; restorable from the trash.",
    )
    return redirect("trash")


# ---------------------------------------------------------------------------
# Bulk delete


@dataclass(frozen=True)
class Selection:
    """What a bulk delete is about: a preset with its parameters, or explicit ids."""

    kind: str  # "preset" or "ids"
    preset: str = ""
    days: float | None = None
    cutoff: float | None = None  # unix seconds: "ended before this instant"
    source: str = ""
    token: str = ""
    ids: tuple[str, ...] = field(default=(), repr=False)

    @property
    def days_text(self) -> str:
        return "" if self.days is None else _days_text(self.days)

    @property
    def params(self) -> dict[str, str]:
        """The fields that name this selection in a dry-run URL or form."""
        if self.kind == "ids":
            return {"selection": self.token}
        params = {"preset": self.preset}
        if self.preset == "ended_older_than":
            params["days"] = self.days_text
        if self.preset == "by_source":
            params["source"] = self.source
        return params

    @property
    def hidden_fields(self) -> dict[str, str]:
        """The confirm form's fields: the parameters plus the dry run's cutoff."""
        fields = dict(self.params)
        if self.cutoff is not None:
            fields["cutoff"] = repr(self.cutoff)
        return fields

    def describe(self) -> str:
        if self.kind == "ids":
            return f"{_plural(len(self.ids), 'session')} selected in the session list"
        if self.preset == "ended_older_than":
            return f"Sessions that ended more than {_plural_days(self.days)} ago"
        if self.preset == "empty":
            return "Empty sessions (no messages)"
        return f"Sessions from source “{self.source}”"


def _days_text(days: float) -> str:
    """Exact (it round-trips through the confirm form), without a needless ".0"."""
    return str(int(days)) if days.is_integer() else repr(days)


def _plural_days(days: float | None) -> str:
    value = float(days or 0)
    return f"{_days_text(value)} day" if value == 1 else f"{_days_text(value)} days"


def _parse_days(raw: str | None) -> tuple[float | None, str | None]:
    problem = f"Give the age in days as a number from 0 to {MAX_DAYS:,}."
    text = (raw or "").strip()
    if not text or len(text) > 32:
        return None, problem
    try:
        days = float(text)
    except ValueError:
        return None, problem
    if not math.isfinite(days) or days < 0 or days > MAX_DAYS:
        return None, problem
    return days, None


def _stored_selection(request: HtmxHttpRequest, token: str) -> list[str] | None:
    stored = request.session.get(SELECTION_SESSION_KEY) or {}
    entry = stored.get(token)
    if not isinstance(entry, dict) or time.time() - entry.get("at", 0) > SELECTION_TTL_SECONDS:
        return None
    return list(entry.get("ids") or [])


def _store_selection(request: HtmxHttpRequest, ids: list[str]) -> str:
    now = time.time()
    stored = {
        token: entry
        for token, entry in (request.session.get(SELECTION_SESSION_KEY) or {}).items()
        if isinstance(entry, dict) and now - entry.get("at", 0) <= SELECTION_TTL_SECONDS
    }
    token = secrets.token_urlsafe(12)
    stored[token] = {"at": now, "ids": ids}
    newest = sorted(stored.items(), key=lambda item: item[1]["at"], reverse=True)
    request.session[SELECTION_SESSION_KEY] = dict(newest[:SELECTIONS_KEPT])
    return token


def _drop_selection(request: HtmxHttpRequest, token: str) -> None:
    stored = dict(request.session.get(SELECTION_SESSION_KEY) or {})
    if stored.pop(token, None) is not None:
        request.session[SELECTION_SESSION_KEY] = stored


def _parse_selection(
    request: HtmxHttpRequest, data: QueryDict, *, confirming: bool
) -> tuple[Selection | None, list[str]]:
    """The selection named by a dry-run URL (or a confirm form), and what is wrong with it."""
    token = (data.get("selection") or "").strip()
    if token:
        ids = _stored_selection(request, token)
        if ids is None:
            return None, [
                "This selection has expired (selections are kept for an hour): "
                "select the sessions again in the session list."
            ]
        return Selection(kind="ids", token=token, ids=tuple(ids)), []
    preset = (data.get("preset") or "").strip()
    if not preset:
        return None, []
    if preset not in PRESETS:
        return None, ["Unknown preset: choose one of the presets below."]
    if preset == "ended_older_than":
        days, problem = _parse_days(data.get("days"))
        if problem:
            return None, [problem]
        now = time.time()
        cutoff = now - days * 86400
        if confirming:
            try:
                cutoff = float(data.get("cutoff") or "")
            except ValueError:
                cutoff = math.nan
            age = now - days * 86400 - cutoff  # how long ago the dry run ran, in seconds
            if not math.isfinite(cutoff) or not -60 <= age <= MAX_DRY_RUN_AGE_DAYS * 86400:
                return Selection(
                    kind="preset", preset=preset, days=days, cutoff=now - days * 86400
                ), [
                    "This dry run is too old or incomplete: review the fresh one below and confirm again."
                ]
        return Selection(kind="preset", preset=preset, days=days, cutoff=cutoff), []
    if preset == "by_source":
        source = data.get("source") or ""
        if not source.strip():
            return None, ["Pick a source."]
        if len(source) > SOURCE_MAX_LENGTH:
            return None, [f"A source name is at most {SOURCE_MAX_LENGTH} characters."]
        return Selection(kind="preset", preset=preset, source=source), []
    return Selection(kind="preset", preset=preset), []


def _selected_ids(selection: Selection) -> list[str]:
    if selection.kind == "ids":
        return list(selection.ids)
    days = None
    if selection.cutoff is not None:
        days = min(float(MAX_DAYS), max(0.0, (time.time() - selection.cutoff) / 86400))
    return core.preset_session_ids(
        preset=selection.preset, days=days, source=selection.source or None
    )


def _digest(ids) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class DryRun:
    selected_ids: list[str]
    count: int
    live_excluded: int
    live_included: int
    message_count: int
    sample: list[dict]
    digest: str


def _count_live(ids) -> int:
    ids = list(ids)
    return sum(
        Session.objects.filter(id__in=ids[start : start + CHUNK], ended_at__isnull=True).count()
        for start in range(0, len(ids), CHUNK)
    )


def _dry_run(selection: Selection, include_live: bool) -> tuple[DryRun | None, list[str]]:
    try:
        ids = _selected_ids(selection)
        preview = core.preview_bulk_delete(session_ids=ids, include_live=include_live)
    except core.StoreError as error:
        return None, [str(error)]
    sample = sorted(preview.sample, key=lambda row: (row.get("started_at") or 0, row["id"]))
    return DryRun(
        selected_ids=ids,
        count=len(preview.session_ids),
        live_excluded=preview.live_excluded,
        live_included=_count_live(preview.session_ids) if include_live else 0,
        message_count=preview.message_count,
        sample=sample,
        digest=_digest(preview.session_ids),
    ), []


def _source_choices() -> list[str]:
    return list(
        Session.objects.order_by("source")
        .values_list("source", flat=True)
        .distinct()[:SOURCE_CHOICES_MAX]
    )


def _render_bulk(
    request: HtmxHttpRequest,
    *,
    selection: Selection | None,
    include_live: bool,
    dry_run: DryRun | None,
    problems=(),
    reason: str = "",
    form_days: str | None = None,
    form_source: str | None = None,
) -> HttpResponse:
    preset = selection.preset if selection and selection.kind == "preset" else ""
    context = {
        "selection": selection,
        "include_live": include_live,
        "dry_run": dry_run,
        "problems": list(problems),
        "reason": reason,
        "presets": PRESETS,
        "preset": preset,
        "form_days": form_days if form_days is not None else "30",
        "form_source": form_source if form_source is not None else "",
        "max_days": MAX_DAYS,
        "trash_days": _trash_days(),
    }
    template = _template(request, BULK_TEMPLATE, "dry-run")
    if template == BULK_TEMPLATE:
        context["sources"] = _source_choices()
    return _vary(render(request, template, context))


@require_GET
@require_perm(DELETE)
def bulk_delete(request: HtmxHttpRequest) -> HttpResponse:
    """The presets, and the dry run of the one asked for (or of a selection from the list)."""
    selection, problems = _parse_selection(request, request.GET, confirming=False)
    include_live = _flag(request.GET.get("include_live"))
    dry_run = None
    if selection is not None and not problems:
        dry_run, problems = _dry_run(selection, include_live)
    return _render_bulk(
        request,
        selection=selection,
        include_live=include_live,
        dry_run=dry_run,
        problems=problems,
        form_days=request.GET.get("days"),
        form_source=request.GET.get("source"),
    )


@require_POST
@require_perm(DELETE)
def bulk_delete_preview(request: HtmxHttpRequest) -> HttpResponse:
    """Explicit ids (the session list's selection) -> the dry run for them."""
    ids = list(dict.fromkeys(i.strip() for i in request.POST.getlist("ids") if i.strip()))
    if _flag(request.POST.get("all_matching")):
        # "All N matching this filter": the session list's filters, resolved to exact ids now.
        parsed = listing.parse(QueryDict(request.POST.get("filter", "")))
        ids = listing.matching_session_ids(parsed.filters, limit=SELECTION_MAX)
    if not ids:
        messages.error(request, "Select at least one session to delete.")
        url = reverse("bulk_delete")
    elif len(ids) > SELECTION_MAX:
        messages.error(
            request,
            f"{len(ids):,} sessions are selected; one bulk delete takes at most "
            f"{SELECTION_MAX:,} picked sessions. Narrow the filter or use a preset.",
        )
        url = reverse("bulk_delete")
    else:
        url = (
            reverse("bulk_delete") + "?" + urlencode({"selection": _store_selection(request, ids)})
        )
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


@require_POST
@require_perm(DELETE)
def bulk_delete_start(request: HtmxHttpRequest) -> HttpResponse:
    """Create the job for exactly the set the dry run showed, then show its progress."""
    selection, problems = _parse_selection(request, request.POST, confirming=True)
    include_live = _flag(request.POST.get("include_live"))
    reason, reason_problem = _reason(request.POST)
    dry_run = None
    if selection is None and not problems:
        problems = ["Choose what to delete first: run a dry run from a preset or the session list."]
    if selection is not None:
        dry_run, more = _dry_run(selection, include_live)
        problems += more
    if dry_run is not None and not problems:
        if reason_problem:
            problems.append(reason_problem)
        if dry_run.digest != request.POST.get("digest", ""):
            problems.append(
                "The matching sessions changed since the dry run: it now finds "
                f"{_plural(dry_run.count, 'session')}. Nothing was deleted: review the dry run "
                "below and confirm again."
            )
        elif dry_run.count == 0:
            problems.append("Nothing to delete: no session matches (live sessions are kept).")
        elif include_live and dry_run.live_included and not _flag(request.POST.get("confirm_live")):
            problems.append(
                f"Tick the box to confirm that {_plural(dry_run.live_included, 'live session')} "
                "will be deleted too. Nothing was deleted."
            )
    if problems:
        actions.record_refusal(
            request=request,
            action="bulk_delete",
            why=" ".join(problems),
            session_ids=dry_run.selected_ids if dry_run else (),
            before={"digest": request.POST.get("digest", "")[:200]},
        )
        return _render_bulk(
            request,
            selection=selection,
            include_live=include_live,
            dry_run=dry_run,
            problems=problems,
            reason=reason,
        )
    description = selection.describe() + (" (live sessions included)" if include_live else "")
    try:
        job_id = actions.start_bulk_delete(
            actor=request.user,
            session_ids=dry_run.selected_ids,
            include_live=include_live,
            reason=reason,
            description=description,
        )
    except core.StoreError as error:
        actions.record_refusal(
            request=request, action="bulk_delete", why=error, session_ids=dry_run.selected_ids
        )
        return _render_bulk(
            request,
            selection=selection,
            include_live=include_live,
            dry_run=dry_run,
            problems=[f"Nothing was deleted: {error}"],
            reason=reason,
        )
    if selection.kind == "ids":
        _drop_selection(request, selection.token)
    messages.success(
        request,
        f"Bulk delete job #{job_id} started for {_plural(dry_run.count, 'session')}; "
        "everything it deletes is restorable from the trash.",
    )
    return redirect("job_detail", job_id=job_id)


# ---------------------------------------------------------------------------
# Jobs


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
    return {
        "job": job,
        "progress": progress,
        "active": active,
        "remaining_seconds": remaining,
    }


@require_GET
@require_perm(DELETE)
def job_detail(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    """A job's progress; polls itself while it runs. Looking at it resumes an interrupted job."""
    job = _job_or_404(job_id)
    if job.state in ACTIVE_JOB_STATES:
        worker.ensure_worker_running()
    context = _job_context(job)
    template = _template(request, JOB_TEMPLATE, "progress")
    if request.GET.get("part") == "actions" and request.htmx:
        template = f"{JOB_TEMPLATE}#actions"
    if template == f"{JOB_TEMPLATE}#progress" and not context["active"]:
        # Finished: the last swap, then htmx stops polling; the actions refresh themselves.
        response = HttpResponseStopPolling(render_to_string(template, context, request=request))
        trigger_client_event(response, JOB_FINISHED_EVENT, after="settle")
        return _vary(response)
    return _vary(render(request, template, context))


@require_GET
@require_perm(DELETE)
def job_list(request: HtmxHttpRequest) -> HttpResponse:
    """Recent bulk-delete jobs; the table refreshes itself while one of them runs."""
    jobs = list(DeleteJob.objects.all()[:JOBS_LISTED])
    active = any(job.state in ACTIVE_JOB_STATES for job in jobs)
    if active:
        worker.ensure_worker_running()
    context = {"jobs": jobs, "listing": True, "any_active": active}
    return _vary(render(request, _template(request, JOB_TEMPLATE, "jobs"), context))


@require_POST
@require_perm(DELETE)
def job_cancel(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    """Stop a job after its current batch; what it deleted so far stays in the trash."""
    job = _job_or_404(job_id)
    if job.state not in ACTIVE_JOB_STATES:
        messages.info(request, f"Job #{job.pk} is already {job.state}; nothing to cancel.")
        return redirect("job_detail", job_id=job.pk)
    try:
        actions.cancel_bulk_delete(
            actor=request.user, job_id=job.pk, reason=request.POST.get("reason") or ""
        )
    except core.StoreError as error:
        actions.record_refusal(request=request, action="cancel_bulk_delete", why=error)
        messages.error(request, f"Job #{job.pk} was not cancelled: {error}")
        return redirect("job_detail", job_id=job.pk)
    progress = job_progress(job_id=job.pk)
    if progress.state == DeleteJob.CANCELLED:
        messages.success(
            request,
            f"Job #{job.pk} cancelled after {progress.processed:,} of {progress.total:,} "
            "sessions; what it deleted is restorable from the trash.",
        )
    else:
        messages.info(request, f"Job #{job.pk} finished ({progress.state}) before it could stop.")
    return redirect("job_detail", job_id=job.pk)


# ---------------------------------------------------------------------------
# Trash


@dataclass(frozen=True)
class TrashRow:
    entry: TrashEntry
    sessions: list[tuple[TrashSession, bool]]  # (session, matches the search)
    more: int
    expires_at: dt.datetime
    expired: bool


def _trash_url(q: str = "", page: str = "") -> str:
    params = {k: v for k, v in {"q": q, "page": page}.items() if v}
    return reverse("trash") + ("?" + urlencode(params) if params else "")


def _render_trash(
    request: HtmxHttpRequest,
    *,
    q: str,
    page_number: str | None = None,
    problems=(),
    purge_reason: str = "",
    purge_scope: str = "expired",
) -> HttpResponse:
    days = _trash_days()
    now = timezone.now()
    retention = timedelta(days=days)
    prefetches = [
        Prefetch(
            "sessions",
            queryset=TrashSession.objects.order_by("id")[:TRASH_SESSIONS_SHOWN],
            to_attr="first_sessions",
        )
    ]
    if q:
        prefetches.append(
            Prefetch(
                "sessions",
                queryset=TrashSession.objects.filter(session_id__startswith=q).order_by("id")[
                    :TRASH_SESSIONS_SHOWN
                ],
                to_attr="matching_sessions",
            )
        )
    entries = TrashEntry.objects.defer("payload").prefetch_related(*prefetches)
    if q:
        entries = entries.filter(
            pk__in=TrashSession.objects.filter(session_id__startswith=q).values("entry_id")
        )
    page = Paginator(entries, TRASH_PAGE_SIZE).get_page(page_number)
    rows = []
    for entry in page.object_list:
        matching = list(getattr(entry, "matching_sessions", []))
        seen = {s.pk for s in matching}
        shown = [(s, True) for s in matching] + [
            (s, False) for s in entry.first_sessions if s.pk not in seen
        ]
        shown = shown[: max(TRASH_SESSIONS_SHOWN, len(matching))]
        expires_at = entry.created_at + retention
        rows.append(
            TrashRow(
                entry=entry,
                sessions=shown,
                more=max(0, entry.session_count - len(shown)),
                expires_at=expires_at,
                expired=entry.state != TrashEntry.RESTORED and expires_at <= now,
            )
        )
    purgeable = TrashEntry.objects.exclude(state=TrashEntry.RESTORED)
    context = {
        "q": q,
        "page": page,
        "rows": rows,
        "problems": list(problems),
        "trash_days": days,
        "purge_reason": purge_reason,
        "purge_scope": purge_scope,
        "purgeable_count": purgeable.count(),
        "expired_count": purgeable.filter(created_at__lt=now - retention).count(),
        "prev_url": _trash_url(q, str(page.previous_page_number()))
        if page.has_previous()
        else None,
        "next_url": _trash_url(q, str(page.next_page_number())) if page.has_next() else None,
    }
    return _vary(render(request, _template(request, TRASH_TEMPLATE, "entries"), context))


NUL_SEARCH = "A session id cannot contain a NUL character: showing every entry."


def _search_term(data: QueryDict) -> str:
    """The session id prefix searched for; "" for one holding a NUL (no id does)."""
    q = (data.get("q") or "").strip()[:200]
    return "" if "\x00" in q else q


@require_GET
@require_perm(DELETE)
def trash(request: HtmxHttpRequest) -> HttpResponse:
    """Deleted rows, restorable until purged; searchable by session id."""
    problems = [NUL_SEARCH] if "\x00" in (request.GET.get("q") or "") else []
    return _render_trash(
        request,
        q=_search_term(request.GET),
        page_number=request.GET.get("page"),
        problems=problems,
    )


@require_POST
@require_perm(DELETE)
def trash_restore(request: HtmxHttpRequest, entry_id: int) -> HttpResponse:
    entry = TrashEntry.objects.defer("payload").filter(pk=entry_id).first()
    if entry is None:
        actions.record_refusal(
            request=request,
            action="restore",
            why=f"no trash entry #{entry_id}",
            before={"trash_entry": entry_id},
        )
        raise Http404("No such trash entry")
    back = _trash_url(_search_term(request.POST))
    if entry.state == TrashEntry.RESTORED:
        messages.info(request, f"Trash entry #{entry.pk} was already restored.")
        return redirect(back)
    try:
        result = actions.restore(actor=request.user, entry_id=entry.pk)
    except core.StoreError as error:
        actions.record_refusal(request=request, action="restore", why=error)
        messages.error(request, f"Nothing was restored: {error}")
        return redirect(back)
    messages.success(
        request,
        f"Restored {_plural(len(result.restored_sessions), 'session')} and "
        f"{_plural(result.restored_messages, 'message')} from trash entry #{entry.pk}.",
    )
    if result.skipped_conversations:
        messages.warning(
            request,
            "These conversation slugs were taken again meanwhile and stay with their new "
            "session: " + ", ".join(result.skipped_conversations[:20]),
        )
    return redirect(back)


@require_POST
@require_perm(DELETE)
def trash_purge(request: HtmxHttpRequest) -> HttpResponse:
    """Drop trash entries for good: the expired ones, or everything."""
    scope = request.POST.get("scope") or ""
    reason, reason_problem = _reason(request.POST)
    problems = []
    if scope not in {"expired", "all"}:
        problems.append("Choose what to purge: expired entries only, or everything.")
    if reason_problem:
        problems.append(reason_problem)
    q = _search_term(request.POST)
    if problems:
        actions.record_refusal(request=request, action="purge_trash", why=" ".join(problems))
        return _render_trash(
            request, q=q, problems=problems, purge_reason=reason, purge_scope=scope or "expired"
        )
    days = _trash_days() if scope == "expired" else None
    try:
        expected = actions.purge(actor=request.user, older_than_days=days, reason=reason)
    except core.StoreError as error:
        actions.record_refusal(request=request, action="purge_trash", why=error)
        return _render_trash(
            request,
            q=q,
            problems=[f"Nothing was purged: {error}"],
            purge_reason=reason,
            purge_scope=scope,
        )
    messages.success(
        request,
        f"Purged {_plural(expected, 'trash entry', 'trash entries')}"
        + (f" older than {_plural_days(days)}" if days is not None else "")
        + "; they can no longer be restored.",
    )
    return redirect("trash")
