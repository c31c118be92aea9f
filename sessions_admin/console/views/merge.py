"""Fork groups, merge preview and execute, unmerge, and the audit log.

Every action goes through ``sessions_admin.ledger.actions`` (core operation plus
audit entry); the views here only read the store and the ledger.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect

from sessions_admin import core
from sessions_admin.console.http import HtmxHttpRequest, fragment, require_perm, session_url
from sessions_admin.core.merge import MAX_MERGE_SESSIONS
from sessions_admin.core.text import shown_back
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditEntry, AuditSession
from sessions_admin.signin.roles import OPERATE, VIEW
from sessions_admin.store.models import Session

FORKS_TEMPLATE = "console/forks.html"
PREVIEW_TEMPLATE = "console/merge_preview.html"
AUDIT_TEMPLATE = "console/audit.html"

PREVIEW_MESSAGES = 200  # transcript rows shown in a merge preview
PREVIEW_CONTENT_CHARS = 4000  # longer message content is cut in the preview
MAX_PICKS = MAX_MERGE_SESSIONS + 1  # one more than allowed, so the core says why
MAX_ID_LENGTH = 200
AUDIT_PAGE_SIZE = 50
HISTORY_ENTRIES = 20  # entries in the session history fragment
SESSION_LINKS_SHOWN = 12  # session ids linked per audit entry before "and N more"
JSON_INLINE_CHARS = 140  # before/after shown inline up to this length, folded beyond


# --- helpers ----------------------------------------------------------------------------------


def _template(request: HtmxHttpRequest, template: str, name: str) -> str:
    """``fragment()``, except that htmx restoring history after a cache miss needs the page."""
    if request.htmx and request.htmx.history_restore_request:
        return template
    return fragment(request, template, name)


def _redirect(request: HtmxHttpRequest, url: str) -> HttpResponse:
    """A redirect that htmx follows as a full navigation (so the next page shows the message)."""
    if request.htmx:
        return HttpResponseClientRedirect(url)
    return HttpResponseRedirect(url)


def _safe_next(request: HtmxHttpRequest) -> str | None:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return None


def _status(session: Session | None) -> dict:
    if session is None:
        return {"live": False, "end_reason": None, "known": False}
    return {"live": session.ended_at is None, "end_reason": session.end_reason, "known": True}


def _sessions_by_id(ids: Iterable[str]) -> dict[str, Session]:
    wanted = list(dict.fromkeys(ids))
    found: dict[str, Session] = {}
    for start in range(0, len(wanted), 500):
        for session in Session.objects.filter(id__in=wanted[start : start + 500]).only(
            "id", "title", "source", "started_at", "ended_at", "end_reason", "message_count"
        ):
            found[session.id] = session
    return found


def _session_row(session_id: str, session: Session | None) -> dict:
    return {
        "id": session_id,
        "url": session_url(session_id) if session is not None else None,
        "title": session.title if session else None,
        "source": session.source if session else None,
        "started_at": session.started_at if session else None,
        "message_count": session.message_count if session else None,
        **_status(session),
    }


def _preview_url(ids: Sequence[str], target: str | None = None) -> str:
    params: list[tuple[str, str]] = [("ids", sid) for sid in ids]
    if target:
        params.append(("target", target))
    return reverse("merge_preview") + "?" + urlencode(params)


def _parse_picks(values: Iterable[str], text: str = "") -> list[str]:
    """Session ids from repeated ``ids`` values (taken as they are) and a free-text list."""
    picks: list[str] = []
    for value in values:
        value = value.strip()
        if value:
            picks.append(value)
    picks.extend(part for part in re.split(r"[\s,;]+", text) if part)
    return list(dict.fromkeys(picks))[:MAX_PICKS]


def _malformed(ids: Iterable[str]) -> list[str]:
    """Values no store could hold as a session id (and PostgreSQL would refuse to compare)."""
    return [i for i in ids if len(i) > MAX_ID_LENGTH or "\x00" in i]


# --- fork groups ------------------------------------------------------------------------------

KIND_LABELS = {"conversation": "conversation slug", "session_key": "session key"}


@require_GET
@vary_on_headers("HX-Request")
@require_perm(VIEW)
def fork_list(request: HtmxHttpRequest) -> HttpResponse:
    """Every fork group the core finds, with its evidence and a merge preview link."""
    groups = core.find_fork_groups()
    sessions = _sessions_by_id(sid for group in groups for sid in group.session_ids)
    rows = [
        {
            "group": group,
            "kind_label": KIND_LABELS.get(group.kind, group.kind),
            "sessions": [_session_row(sid, sessions.get(sid)) for sid in group.session_ids],
            "preview_url": _preview_url(group.session_ids),
        }
        for group in groups
    ]
    return render(
        request,
        _template(request, FORKS_TEMPLATE, "fork-groups"),
        {"groups": rows, "max_picks": MAX_MERGE_SESSIONS},
    )


# --- merge preview and execute ----------------------------------------------------------------


def _preview_context(
    request: HtmxHttpRequest,
    *,
    picks: list[str],
    target: str | None,
    error: str | None = None,
    reason: str = "",
    continue_history: bool | None = None,
) -> dict:
    """What the preview page shows: the plan for ``picks`` or why there is none.

    ``continue_history`` is the operator's last choice (a re-rendered form);
    None: the default, on for API-conversation merges.
    """
    malformed = _malformed(picks)
    sessions = _sessions_by_id(p for p in picks if p not in malformed)
    plan = None
    plan_error = None
    if malformed:
        plan_error = (
            f"{malformed[0][:40]!r}… is not a session id (too long, or it holds a NUL character)."
        )
    elif target and target not in picks:
        plan_error = f"The target {target!r} is not one of the picked sessions."
    else:
        try:
            plan = core.plan_merge(session_ids=picks, target_id=target or None)
        except core.StoreError as problem:
            plan_error = str(problem)
    if target is None or target not in picks:
        known = [p for p in picks if p in sessions]
        target = (
            min(known, key=lambda s: (sessions[s].started_at, s)) if known else None
        )  # the core's default: the oldest pick
    context: dict = {
        "picks": picks,
        "choices": [_session_row(sid, sessions.get(sid)) for sid in picks],
        "chosen": target,
        "plan": plan,
        "error": error,
        "plan_error": plan_error,
        "reason": reason,
        "can_operate": request.user.has_perm(OPERATE),
    }
    if plan is None:
        return context
    all_ids = [plan.target_id, *plan.absorbed_ids]
    details = _sessions_by_id([*all_ids, *plan.reparented_children])
    index = {sid: n for n, sid in enumerate(all_ids)}
    transcript = core.merge_preview(plan=plan, limit=PREVIEW_MESSAGES + 1)
    total = sum(source.messages for source in plan.sources)
    rows = []
    for message in transcript[:PREVIEW_MESSAGES]:
        content = message["content"]
        cut = content is not None and len(content) > PREVIEW_CONTENT_CHARS
        rows.append(
            {
                **message,
                "content": content[:PREVIEW_CONTENT_CHARS] if cut else content,
                "cut": cut,
                "source_index": index.get(message["session_id"], 0) % 6,
                "from_target": message["session_id"] == plan.target_id,
            }
        )
    context.update(
        {
            "sources": [
                {
                    "source": source,
                    "row": _session_row(source.session_id, details.get(source.session_id)),
                    "index": index[source.session_id] % 6,
                    "picked": source.session_id in picks,
                }
                for source in plan.sources
            ],
            "target_is_tip": plan.target_id != target,
            "transcript": rows,
            "transcript_total": total,
            "transcript_more": max(total - len(rows), 0),
            "children": [_session_row(sid, details.get(sid)) for sid in plan.reparented_children],
            "absorbed_count": len(plan.absorbed_ids),
            "continue_history": (
                plan.is_api_conversation if continue_history is None else continue_history
            ),
        }
    )
    return context


@require_GET
@vary_on_headers("HX-Request")
@require_perm(VIEW)
def merge_preview(request: HtmxHttpRequest) -> HttpResponse:
    """What merging the picked sessions would change; only OPERATE gets the confirm button."""
    picks = _parse_picks(request.GET.getlist("ids"), request.GET.get("pick", ""))
    target = request.GET.get("target", "").strip() or None
    context = _preview_context(request, picks=picks, target=target)
    return render(request, _template(request, PREVIEW_TEMPLATE, "merge-preview"), context)


@require_POST
@require_perm(OPERATE)
def merge_execute(request: HtmxHttpRequest) -> HttpResponse:
    """Merge as previewed, or re-render the preview saying why nothing changed."""
    picks = _parse_picks(request.POST.getlist("ids"))
    target = request.POST.get("target", "").strip() or None
    fingerprint = request.POST.get("fingerprint", "").strip()
    # Checked by actions.merge (core.text); the preview shows it back for correction.
    raw_reason = request.POST.get("reason", "")
    reason = shown_back(raw_reason)
    # A checkbox: present when ticked (the preview ticks it for API conversations).
    continue_history = request.POST.get("continue_history", "") == "1"

    def again(error: str | core.StoreError) -> HttpResponse:
        actions.record_refusal(
            request=request,
            action="merge",
            why=error,
            session_ids=picks,
            before={"target": target, "fingerprint": fingerprint[:200]},
        )
        error = str(error)
        context = _preview_context(
            request,
            picks=picks,
            target=target,
            error=error,
            reason=reason,
            continue_history=continue_history,
        )
        return render(request, fragment(request, PREVIEW_TEMPLATE, "merge-preview"), context)

    if len(picks) < 2:
        return again("Pick at least two sessions to merge.")
    if _malformed([*picks, target or ""]):
        return again("The form carried something that is not a session id.")
    if not fingerprint:
        return again(
            "The form did not carry the preview's fingerprint, so nothing was merged: "
            "review the preview below and confirm again."
        )
    try:
        result = actions.merge(
            actor=request.user,
            session_ids=picks,
            target_id=target,
            expected_fingerprint=fingerprint,
            reason=raw_reason,
            continue_history=continue_history,
        )
    except core.StoreError as problem:
        return again(problem)  # a refusal the core raised is audited already
    count = len(result.absorbed_ids)
    rewritten = len(result.rewritten_responses)
    messages.success(
        request,
        f"Merged {count} session{'s' if count != 1 else ''} into {result.target_id} "
        f"(merge #{result.merge_id}; undo available): "
        f"{result.moved_messages} message{'s' if result.moved_messages != 1 else ''} moved"
        + (
            f"; the next API turn continues with the merged transcript "
            f"({rewritten} stored response{'s' if rewritten != 1 else ''} updated)."
            if rewritten
            else "."
        ),
    )
    return _redirect(request, session_url(result.target_id) or reverse("fork_list"))


@require_POST
@require_perm(OPERATE)
def merge_undo(request: HtmxHttpRequest, merge_id: int) -> HttpResponse:
    """Undo a merge exactly; back to where the operator came from, or the target's page."""
    try:
        record = core.merge_record(merge_id=merge_id)
    except core.MergeNotFound as missing:
        actions.record_refusal(
            request=request, action="unmerge", why=missing, before={"merge_id": merge_id}
        )
        raise Http404(f"No merge {merge_id}.") from missing
    back = _safe_next(request) or session_url(record.target_id) or reverse("audit_log")
    if record.undone_at is not None:
        messages.info(request, f"Merge #{merge_id} was already undone; nothing changed.")
        return _redirect(request, back)
    reason = request.POST.get("reason", "")  # checked by actions.unmerge (core.text)
    try:
        result = actions.unmerge(actor=request.user, merge_id=merge_id, reason=reason)
    except core.StoreError as problem:
        actions.record_refusal(
            request=request, action="unmerge", why=problem, before={"merge_id": merge_id}
        )
        messages.error(request, f"Merge #{merge_id} was not undone: {problem}")
        return _redirect(request, back)
    restored = len(result.restored_ids)
    messages.success(
        request,
        f"Undid merge #{merge_id}: {result.returned_messages} "
        f"message{'s' if result.returned_messages != 1 else ''} went back to "
        f"{restored} session{'s' if restored != 1 else ''}.",
    )
    return _redirect(request, back)


# --- audit log --------------------------------------------------------------------------------


class AuditFilterForm(forms.Form):
    action = forms.ChoiceField(required=False)
    actor = forms.CharField(required=False, max_length=150)
    session = forms.CharField(required=False, max_length=MAX_ID_LENGTH)
    outcome = forms.ChoiceField(required=False, choices=[("", "any"), *AuditEntry.OUTCOMES])
    since = forms.DateField(
        required=False, label="from", widget=forms.DateInput(attrs={"type": "date"})
    )
    until = forms.DateField(
        required=False, label="to", widget=forms.DateInput(attrs={"type": "date"})
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        known = AuditEntry.objects.order_by("action").values_list("action", flat=True).distinct()
        self.fields["action"].choices = [("", "any")] + [(a, a) for a in known]


def _compact_json(value) -> dict:
    if not value:
        return {"empty": True}
    inline = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))
    if len(inline) <= JSON_INLINE_CHARS:
        return {"empty": False, "inline": inline, "full": None}
    return {
        "empty": False,
        "inline": inline[:JSON_INLINE_CHARS] + "…",
        "full": json.dumps(value, sort_keys=True, ensure_ascii=False, indent=2),
    }


def _merge_state(merge_id) -> dict | None:
    try:
        record = core.merge_record(merge_id=int(merge_id))
    except (core.MergeNotFound, TypeError, ValueError):
        return None
    return {"id": record.merge_id, "undone": record.undone_at is not None}


def _entry_rows(entries: Sequence[AuditEntry]) -> list[dict]:
    rows = []
    for entry in entries:
        ids = list(entry.session_ids or [])
        merge = None
        if entry.action == "merge" and entry.outcome == "ok" and isinstance(entry.after, dict):
            merge = _merge_state(entry.after.get("merge_id"))
        rows.append(
            {
                "entry": entry,
                "sessions": [
                    {"id": sid, "url": session_url(sid)} for sid in ids[:SESSION_LINKS_SHOWN]
                ],
                "more_sessions": max(len(ids) - SESSION_LINKS_SHOWN, 0),
                "before": _compact_json(entry.before),
                "after": _compact_json(entry.after),
                "merge": merge,
            }
        )
    return rows


def _merge_rows(session_id: str) -> list[dict]:
    return [
        {
            "record": record,
            "target_url": session_url(record.target_id),
            "absorbed": [{"id": sid, "url": session_url(sid)} for sid in record.absorbed_ids],
            "undone": record.undone_at is not None,
        }
        for record in core.merges_of_session(session_id=session_id)
    ]


def _entries_of_session(session_id: str):
    return AuditEntry.objects.filter(
        pk__in=AuditSession.objects.filter(session_id=session_id).values("entry_id")
    )


@require_GET
@vary_on_headers("HX-Request")
@require_perm(VIEW)
def audit_log(request: HtmxHttpRequest) -> HttpResponse:
    """The audit log, newest first, filtered and paginated."""
    form = AuditFilterForm(request.GET or None)
    entries = AuditEntry.objects.all()
    cleaned: dict = {}
    if form.is_bound:
        form.is_valid()  # invalid fields are left out of cleaned_data and shown as errors
        cleaned = form.cleaned_data
    if cleaned.get("action"):
        entries = entries.filter(action=cleaned["action"])
    if cleaned.get("actor"):
        entries = entries.filter(actor_name__icontains=cleaned["actor"].strip())
    session_id = (cleaned.get("session") or "").strip()
    if session_id:
        entries = entries.filter(
            pk__in=AuditSession.objects.filter(session_id=session_id).values("entry_id")
        )
    if cleaned.get("outcome"):
        entries = entries.filter(outcome=cleaned["outcome"])
    if cleaned.get("since"):
        entries = entries.filter(created_at__date__gte=cleaned["since"])
    if cleaned.get("until"):
        entries = entries.filter(created_at__date__lte=cleaned["until"])
    page = Paginator(entries.order_by("-created_at", "-id"), AUDIT_PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    context = {
        "form": form,
        "page": page,
        "rows": _entry_rows(page.object_list),
        "session_filter": session_id,
        "session_filter_url": session_url(session_id),
        "merges": _merge_rows(session_id) if session_id else [],
        "can_operate": request.user.has_perm(OPERATE),
        "here": request.get_full_path(),
        "filtered": any(cleaned.get(name) for name in form.fields),
    }
    return render(request, _template(request, AUDIT_TEMPLATE, "audit-results"), context)


@require_GET
@vary_on_headers("HX-Request")
@require_perm(VIEW)
def session_history(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """One session's merges (with undo) and audit entries: a fragment for its detail page.

    Without htmx this is the audit log filtered to the session, which shows the same.
    """
    if "\x00" in session_id:
        raise Http404("No such session.")
    if not request.htmx or request.htmx.history_restore_request:
        return HttpResponseRedirect(reverse("audit_log") + "?" + urlencode({"session": session_id}))
    entries = _entries_of_session(session_id).order_by("-created_at", "-id")
    shown = list(entries[: HISTORY_ENTRIES + 1])
    here = request.htmx.current_url_abs_path or session_url(session_id) or reverse("audit_log")
    context = {
        "history_session": session_id,
        "rows": _entry_rows(shown[:HISTORY_ENTRIES]),
        "history_more": len(shown) > HISTORY_ENTRIES,
        "history_all_url": reverse("audit_log") + "?" + urlencode({"session": session_id}),
        "merges": _merge_rows(session_id),
        "can_operate": request.user.has_perm(OPERATE),
        "here": here,
    }
    return render(request, f"{AUDIT_TEMPLATE}#session-history", context)
