"""Cascade delete and bulk delete (dry run, then a job): admin only.

The pages only read (a plan, a dry run); every POST is validated by its form and every change
goes through ``ledger.actions``. A bulk selection travels from the dry run to the confirm step
as a preset's parameters (the "ended more than N days ago" preset with its dry run's cutoff
instant, so confirming later selects against the same instant) or, for explicit ids, as a
token for ids kept in the operator's own session (the newest few, for an hour), never as
thousands of hidden inputs. Either way the form carries a digest of the set the dry run
showed; starting the job recomputes it and refuses, showing the new dry run, when it differs:
the job deletes the sessions that were shown."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from sessions_admin import core
from sessions_admin.console.forms import (
    BulkPreviewForm,
    BulkSelectionForm,
    BulkStartForm,
    CascadeConfirmForm,
    CascadePlanForm,
)
from sessions_admin.console.http import (
    HtmxHttpRequest,
    fragment,
    plural,
    redirect_to,
    require_perm,
)
from sessions_admin.console.refusals import Refused, attempt, refuse
from sessions_admin.core import deletion, fingerprints
from sessions_admin.core.deletion import (
    PRESET_MAX_DAYS,
    PRESETS,
    SELECTION_MAX,
    SOURCE_MAX_LENGTH,
    confirmed_cutoff,
    days_before,
    days_text,
    needs_typed_confirmation,
    preset_description,
)
from sessions_admin.core.errors import InvalidInput
from sessions_admin.ledger import actions
from sessions_admin.ledger.jobs import cascade_runs_as_job
from sessions_admin.ledger.models import AuditAction
from sessions_admin.ledger.trash_retention import configured_days
from sessions_admin.signin.roles import DELETE
from sessions_admin.store import listing
from sessions_admin.store.models import Session

CASCADE_TEMPLATE = "console/cascade_delete.html"
BULK_TEMPLATE = "console/bulk_delete.html"

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

# Bulk delete (its presets and bounds are the core's: core/deletion/selection.py).
SELECTION_SESSION_KEY = "sessions_admin.bulk_delete.selections"
SELECTION_TTL_SECONDS = 3600
SELECTIONS_KEPT = 3
SOURCE_CHOICES_MAX = 200


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


# ---------------------------------------------------------------------------
# Typed confirmation: one rule (the core's ``needs_typed_confirmation``), one prompt
# (cascade_delete.html's ``typed-confirmation`` partial, included by the bulk page) and
# one refusal, for a cascade and a bulk delete alike.


@dataclass(frozen=True)
class TypedConfirmation:
    """A delete large enough that the operator types its number of sessions to confirm."""

    sessions: int
    messages: int


def typed_confirmation(*, sessions: int, messages: int) -> TypedConfirmation | None:
    """What the confirm form asks to type for a delete this large (None: a reason is enough)."""
    if needs_typed_confirmation(sessions=sessions, messages=messages):
        return TypedConfirmation(sessions, messages)
    return None


def typed_count_problem(form, asked: TypedConfirmation | None) -> str | None:
    """Why the number typed in ``form`` does not confirm the delete (None: it does, or none
    is asked): the core's refusal (``deletion.typed_count_problem``)."""
    if asked is None:
        return None
    return deletion.typed_count_problem(
        sessions=asked.sessions,
        messages=asked.messages,
        typed=form.cleaned_data.get("typed_count"),
        given=form.shown_back("typed_count"),
    )


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
    """The planned sessions grouped by the relation the plan gives each (display only)."""
    members: dict[str, list[Session]] = {}
    for sid, relation in plan.session_relations:
        row = rows.get(sid)
        if row is not None:
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
    session_id: str, plan: core.DeletePlan, *, reason: str = "", problems=(), partly=None
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
        "held_holds": sorted({words for _, words in plan.held}),
        "lost_undo": core.lost_undo_words(plan) if plan.merges else "",
        "live_count": len(plan.live_session_ids),
        "more_live": max(0, len(plan.live_session_ids) - LIVE_LISTED),
        "session_count": len(plan.session_ids),
        "typed_confirmation": typed_confirmation(
            sessions=len(plan.session_ids), messages=plan.message_count
        ),
        "conversation_names": plan.conversation_names[:LIST_NAMES],
        "more_conversation_names": max(0, len(plan.conversation_names) - LIST_NAMES),
        "reason": reason,
        "problems": list(problems),
        "trash_days": configured_days(),
        # A delete that failed after some batches committed: undo it (restore) or finish it
        # (this plan is what is left).
        "partly": partly,
        "partly_entry": partly.result.trash_entry_ids[0] if partly else None,
    }


def _render_cascade(
    request: HtmxHttpRequest,
    session_id: str,
    plan: core.DeletePlan,
    *,
    reason: str = "",
    problems=(),
    partly: core.DeletePartlyApplied | None = None,
) -> HttpResponse:
    context = _cascade_context(session_id, plan, reason=reason, problems=problems, partly=partly)
    return render(request, fragment(request, CASCADE_TEMPLATE, "plan"), context)


def _confirmation_problems(form: CascadeConfirmForm, plan: core.DeletePlan) -> list[str]:
    """Why confirming ``plan`` with this form deletes nothing (none: go ahead)."""
    problems = [str(error) for error in form.errors.get("reason", [])]
    asked = typed_confirmation(sessions=len(plan.session_ids), messages=plan.message_count)
    if not fingerprints.matches(form.cleaned_data.get("fingerprint"), plan.fingerprint):
        problems.append(
            "The store changed since the plan was shown (the runtime may still be writing), "
            "or the plan was not shown at all. Nothing was deleted: review the plan below "
            "and confirm again."
        )
    else:
        if problem := typed_count_problem(form, asked):
            problems.append(problem)
        if plan.merges and not form.cleaned_data.get("lose_undo"):
            problems.append(
                "Tick the box to confirm that "
                + ", ".join(f"merge #{merge_id}" for merge_id in plan.lost_undos)
                + " can no longer be undone, or undo the merge first. Nothing was deleted."
            )
    return problems


@require_GET
@require_perm(DELETE)
def cascade_delete(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """The plan: what deleting this session's conversation removes, and what it keeps."""
    form = CascadePlanForm(request.GET)
    form.is_valid()  # a flag: any value reads as set or not
    plan = _plan_or_404(session_id, form.cleaned_data["include_branches"])
    return _render_cascade(request, session_id, plan)


@require_POST
@require_perm(DELETE)
def cascade_delete_confirm(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """Delete exactly the plan that was shown, or show why not (nothing deleted)."""
    form = CascadeConfirmForm(request.POST)
    form.is_valid()
    include_branches = form.cleaned_data["include_branches"]
    reason = form.cleaned_data.get("reason", form.shown_back("reason"))
    plan = _plan_or_404(session_id, include_branches)
    problems = _confirmation_problems(form, plan)
    if problems:
        refuse(
            request,
            AuditAction.CASCADE_DELETE,
            " ".join(problems),
            session_ids=[session_id],
            before={"fingerprint": form.shown_back("fingerprint")[:200]},
        )
        return _render_cascade(request, session_id, plan, reason=reason, problems=problems)
    confirmed = {
        "actor": request.user,
        "session_ids": [session_id],
        "include_branches": include_branches,
        "expected_fingerprint": form.cleaned_data["fingerprint"],
        "reason": reason,
        "lose_undo": form.cleaned_data["lose_undo"],
    }
    if cascade_runs_as_job(sessions=len(plan.session_ids), messages=plan.message_count):
        return _start_cascade_job(request, session_id, plan, confirmed)
    try:
        result = attempt(
            request,
            AuditAction.CASCADE_DELETE,
            lambda: actions.cascade_delete(**confirmed),
            session_ids=[session_id],
        )
    except core.DeletePartlyApplied as partly:
        # Its first batches stay deleted (audited as partial): the page says exactly what went,
        # where it is in the trash, and shows the plan of what is left to finish it.
        if not Session.objects.filter(id=session_id).exists():
            messages.error(request, str(partly))
            return redirect("trash")
        plan = _plan_or_404(session_id, include_branches)
        return _render_cascade(
            request, session_id, plan, reason=reason, problems=[str(partly)], partly=partly
        )
    if isinstance(result, Refused):
        return _cascade_refused(request, session_id, confirmed, result)
    messages.success(
        request,
        f"Deleted {plural(result.deleted_sessions, 'session')} and "
        f"{plural(result.deleted_messages, 'message')}; restorable from the trash."
        + (
            " "
            + ", ".join(f"Merge #{merge_id}" for merge_id in result.lost_undos)
            + " can be undone again only once the trash entry is restored."
            if result.lost_undos
            else ""
        ),
    )
    return redirect("trash")


def _cascade_refused(
    request: HtmxHttpRequest, session_id: str, confirmed: dict, refused: Refused
) -> HttpResponse:
    """The preview again: a changed plan as it is now; any other refusal changed nothing."""
    plan = _plan_or_404(session_id, confirmed["include_branches"])
    said = "" if isinstance(refused.error, core.PlanChanged) else "Nothing was deleted: "
    return _render_cascade(
        request, session_id, plan, reason=confirmed["reason"], problems=refused.said(said)
    )


def _start_cascade_job(
    request: HtmxHttpRequest, session_id: str, plan: core.DeletePlan, confirmed: dict
) -> HttpResponse:
    """A cascade too long for the request: checked and claimed now, deleted by the worker;
    the operator follows it on its job page."""
    job_id = attempt(
        request,
        AuditAction.CASCADE_DELETE,
        lambda: actions.start_cascade_delete(**confirmed),
        session_ids=[session_id],
    )
    if isinstance(job_id, Refused):
        return _cascade_refused(request, session_id, confirmed, job_id)
    messages.success(
        request,
        f"Deleting {plural(len(plan.session_ids), 'session')} and "
        f"{plural(plan.message_count, 'message')} in the background (job #{job_id}); "
        "restorable from the trash once done.",
    )
    return redirect_to(request, reverse("job_detail", kwargs={"job_id": job_id}))


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
        return "" if self.days is None else days_text(self.days)

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
            return f"{plural(len(self.ids), 'session')} selected in the session list"
        return preset_description(self.preset, days=self.days, source=self.source)


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


def _selection(
    request: HtmxHttpRequest, form: BulkSelectionForm, *, confirming: bool
) -> tuple[Selection | None, list[str]]:
    """The selection a dry-run URL (or a confirm form) names, and what is wrong with it."""
    data = form.cleaned_data
    for name in ("selection", "preset"):
        if name in form.errors:
            return None, [str(form.errors[name][0])]
    token = data.get("selection")
    if token:
        ids = _stored_selection(request, token)
        if ids is None:
            return None, [
                "This selection has expired (selections are kept for an hour): "
                "select the sessions again in the session list."
            ]
        return Selection(kind="ids", token=token, ids=tuple(ids)), []
    preset = data.get("preset")
    if not preset:
        return None, []
    if preset not in PRESETS:
        return None, ["Unknown preset: choose one of the presets below."]
    if preset == "ended_older_than":
        days = data.get("days")
        if days is None or not 0 <= days <= PRESET_MAX_DAYS:
            return None, [f"Give the age in days as a number from 0 to {PRESET_MAX_DAYS:,}."]
        now = time.time()
        cutoff = now - days * 86400
        if confirming:
            confirmed = confirmed_cutoff(days=days, shown_cutoff=data.get("cutoff"), now=now)
            if confirmed is None:
                return Selection(kind="preset", preset=preset, days=days, cutoff=cutoff), [
                    "This dry run is too old or incomplete: review the fresh one below and confirm again."
                ]
            cutoff = confirmed
        return Selection(kind="preset", preset=preset, days=days, cutoff=cutoff), []
    if preset == "by_source":
        if "source" in form.errors:
            return None, [str(form.errors["source"][0])]
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
        days = days_before(selection.cutoff, now=time.time())
    return core.preset_session_ids(
        preset=selection.preset, days=days, source=selection.source or None
    )


@dataclass(frozen=True)
class DryRun:
    selected_ids: list[str]
    session_ids: tuple[str, ...]  # what it deletes: the job takes exactly these
    count: int
    live_excluded: int
    live_included: int
    held_excluded: int
    holds: tuple[str, ...]
    message_count: int
    sample: list[dict]
    digest: str
    # (session, why) left out for a merge that can still be undone, and how many more with them.
    merge_kept: tuple[tuple[str, str], ...] = ()
    merge_kept_with: int = 0
    # (session, why) left out because its conversation goes on in a session not deleted.
    conversation_kept: tuple[tuple[str, str], ...] = ()
    # (child, relation) below the sessions it deletes, kept with their parent link cleared.
    kept_children: tuple[tuple[str, str], ...] = ()

    @property
    def typed_confirmation(self) -> TypedConfirmation | None:
        return typed_confirmation(sessions=self.count, messages=self.message_count)


def _count_live(ids) -> int:
    ids = list(ids)
    return sum(
        Session.objects.filter(id__in=ids[start : start + CHUNK], ended_at__isnull=True).count()
        for start in range(0, len(ids), CHUNK)
    )


def _takes_live(selection: Selection | None, include_live: bool) -> bool:
    preset = selection.preset if selection is not None and selection.kind == "preset" else None
    return core.takes_live(preset=preset, include_live=include_live)


def _dry_run(selection: Selection, include_live: bool) -> tuple[DryRun | None, list[str]]:
    try:
        ids = _selected_ids(selection)
        preview = core.preview_bulk_delete(
            session_ids=ids,
            include_live=include_live,
            preset=selection.preset if selection.kind == "preset" else None,
        )
    except core.StoreError as error:
        return None, [str(error)]
    sample = sorted(preview.sample, key=lambda row: (row.get("started_at") or 0, row["id"]))
    return DryRun(
        selected_ids=ids,
        session_ids=preview.session_ids,
        count=len(preview.session_ids),
        live_excluded=preview.live_excluded,
        held_excluded=preview.held_excluded,
        holds=preview.holds,
        live_included=_count_live(preview.session_ids) if include_live else 0,
        message_count=preview.message_count,
        sample=sample,
        digest=preview.digest,
        merge_kept=preview.merge_kept,
        merge_kept_with=preview.merge_kept_with,
        conversation_kept=preview.conversation_kept,
        kept_children=preview.kept_children,
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
        "max_days": PRESET_MAX_DAYS,
        "trash_days": configured_days(),
    }
    template = fragment(request, BULK_TEMPLATE, "dry-run")
    if template == BULK_TEMPLATE:
        context["sources"] = _source_choices()
    return render(request, template, context)


@require_GET
@require_perm(DELETE)
def bulk_delete(request: HtmxHttpRequest) -> HttpResponse:
    """The presets, and the dry run of the one asked for (or of a selection from the list)."""
    form = BulkSelectionForm(request.GET)
    form.is_valid()
    selection, problems = _selection(request, form, confirming=False)
    include_live = _takes_live(selection, form.cleaned_data["include_live"])
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
    form = BulkPreviewForm(request.POST)
    if not form.is_valid():
        messages.error(request, form.problem())
        return redirect_to(request, reverse("bulk_delete"))
    ids = form.cleaned_data["ids"]
    if form.cleaned_data["all_matching"]:
        # "All N matching this filter": the session list's filters, resolved to exact ids now.
        parsed = listing.parse(QueryDict(form.cleaned_data["filter"] or ""))
        try:
            if parsed.problems:  # a filter left out would widen the selection
                raise InvalidInput(" ".join(parsed.problems) + " Nothing was selected.")
            ids = listing.matching_session_ids(parsed.filters, limit=SELECTION_MAX)
        except InvalidInput as problem:
            messages.error(request, str(problem))
            return redirect_to(request, reverse("bulk_delete"))
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
    return redirect_to(request, url)


def _start_problems(form: BulkStartForm, dry_run: DryRun, include_live: bool) -> list[str]:
    """Why starting the job for ``dry_run`` with this form deletes nothing (none: go ahead)."""
    problems = [str(error) for error in form.errors.get("reason", [])]
    if not fingerprints.matches(form.cleaned_data.get("digest"), dry_run.digest):
        problems.append(
            "The matching sessions changed since the dry run: it now finds "
            f"{plural(dry_run.count, 'session')}. Nothing was deleted: review the dry run "
            "below and confirm again."
        )
    elif dry_run.count == 0:
        problems.append("Nothing to delete: no session matches (live sessions are kept).")
    else:
        if include_live and dry_run.live_included and not form.cleaned_data["confirm_live"]:
            problems.append(
                f"Tick the box to confirm that {plural(dry_run.live_included, 'live session')} "
                "will be deleted too. Nothing was deleted."
            )
        if problem := typed_count_problem(form, dry_run.typed_confirmation):
            problems.append(problem)
    return problems


@require_POST
@require_perm(DELETE)
def bulk_delete_start(request: HtmxHttpRequest) -> HttpResponse:
    """Create the job for exactly the set the dry run showed, then show its progress."""
    form = BulkStartForm(request.POST)
    form.is_valid()
    selection, problems = _selection(request, form, confirming=True)
    include_live = _takes_live(selection, form.cleaned_data["include_live"])
    reason = form.cleaned_data.get("reason", form.shown_back("reason"))
    dry_run = None
    if selection is None and not problems:
        problems = ["Choose what to delete first: run a dry run from a preset or the session list."]
    if selection is not None:
        dry_run, more = _dry_run(selection, include_live)
        problems += more
    if dry_run is not None and not problems:
        problems = _start_problems(form, dry_run, include_live)
    if problems:
        refuse(
            request,
            AuditAction.BULK_DELETE,
            " ".join(problems),
            session_ids=dry_run.selected_ids if dry_run else (),
            before={"digest": form.shown_back("digest")[:200]},
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
    job_id = attempt(
        request,
        AuditAction.BULK_DELETE,
        lambda: actions.start_bulk_delete(
            actor=request.user,
            session_ids=dry_run.selected_ids,
            include_live=include_live,
            reason=reason,
            description=description,
            expected_ids=dry_run.session_ids,
        ),
        session_ids=dry_run.selected_ids,
    )
    if isinstance(job_id, Refused):
        return _render_bulk(
            request,
            selection=selection,
            include_live=include_live,
            dry_run=dry_run,
            problems=job_id.said("Nothing was deleted: "),
            reason=reason,
        )
    if selection.kind == "ids":
        _drop_selection(request, selection.token)
    messages.success(
        request,
        f"Bulk delete job #{job_id} started for {plural(dry_run.count, 'session')}; "
        "everything it deletes is restorable from the trash.",
    )
    return redirect("job_detail", job_id=job_id)
