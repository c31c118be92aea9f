"""The audit log (filtered, paginated) and one session's history of merges and entries.

Both only read: the ledger's entries and the core's merge records. Undoing a merge
listed here posts to the merge screen (``merge_undo``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from sessions_admin import core
from sessions_admin.console.forms import AuditFilterForm
from sessions_admin.console.http import (
    HtmxHttpRequest,
    fragment,
    require_perm,
    session_url,
    wants_fragment,
)
from sessions_admin.ledger.models import AuditEntry, AuditSession
from sessions_admin.signin.roles import OPERATE, VIEW

AUDIT_TEMPLATE = "console/audit.html"

AUDIT_PAGE_SIZE = 50
HISTORY_ENTRIES = 20  # entries in the session history fragment
SESSION_LINKS_SHOWN = 12  # session ids linked per audit entry before "and N more"
JSON_INLINE_CHARS = 140  # before/after shown inline up to this length, folded beyond


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
    return render(request, fragment(request, AUDIT_TEMPLATE, "audit-results"), context)


@require_GET
@require_perm(VIEW)
def session_history(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """One session's merges (with undo) and audit entries: a fragment for its detail page.

    Without htmx this is the audit log filtered to the session, which shows the same.
    """
    if "\x00" in session_id:
        raise Http404("No such session.")
    if not wants_fragment(request):
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
