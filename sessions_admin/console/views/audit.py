"""The audit log (filtered, paginated, exported as CSV) and one session's history.

All only read: the ledger's entries and the core's merge records. Each entry's
before/after is shown in words (``ledger.audit_log.readable``, which the API and the CSV
export share with this page, as they share its filters): every session once, with what the
action did to it, and links to what the entry made (a merge, a job, trash entries);
the raw JSON stays one click away. What the reader's role may not see of an entry (a legal
hold's details, an erasure's reference: ``signin.roles.withheld_from``) is withheld here, in
the history fragment and in the CSV alike. Undoing a merge listed here posts to the merge
screen (``merge_undo``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from sessions_admin import core
from sessions_admin.console.http import (
    HtmxHttpRequest,
    fragment,
    require_perm,
    session_url,
    wants_fragment,
)
from sessions_admin.ledger import audit_log as ledger_audit
from sessions_admin.ledger.models import AuditEntry, AuditSession, TrashEntry
from sessions_admin.signin.roles import DELETE, OPERATE, VIEW, role_of, withheld_for

AUDIT_TEMPLATE = "console/audit.html"

AUDIT_PAGE_SIZE = 50
HISTORY_ENTRIES = 20  # entries in the session history fragment
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
    return {
        "id": record.merge_id,
        "undone": record.undone_at is not None,
        "lost": record.undo_lost,
        "closed": record.closed_by_erasure,
    }


class Links(ledger_audit.NoLinks):
    """Where an entry's identifiers lead; links only to pages the reader may open."""

    def __init__(self, *, can_delete: bool, trash: dict[int, str] | None = None):
        self.can_delete = can_delete
        self.trash_sessions = trash or {}  # trash entry id: a session it holds (the search)

    def session(self, session_id: str) -> str | None:
        return session_url(session_id)

    def job(self, job_id) -> str | None:
        if not self.can_delete:
            return None
        try:
            return reverse("job_detail", args=[int(job_id)])
        except (NoReverseMatch, TypeError, ValueError, OverflowError):
            return None

    def trash(self, entry_id) -> str | None:
        if not self.can_delete:
            return None
        try:
            entry_id = int(entry_id)
        except (TypeError, ValueError):
            return None
        found = self.trash_sessions.get(entry_id)
        query = "?" + urlencode({"q": found}) if found else ""
        return reverse("trash") + query + f"#trash-{entry_id}"

    def merge(self, merge_id, target) -> str | None:
        if not isinstance(target, str) or not target:
            return None
        return reverse("audit_log") + "?" + urlencode({"session": target}) + f"#merge-{merge_id}"


def _trash_searches(entries: Iterable[AuditEntry]) -> dict[int, str]:
    """For each trash entry the entries name, a session it holds (the trash page's search)."""
    wanted: set[int] = set()
    for entry in entries:
        for side in (entry.before, entry.after):
            if not isinstance(side, dict):
                continue
            for key in ledger_audit.TRASH_KEYS:
                value = side.get(key)
                for item in value if isinstance(value, list) else [value]:
                    if isinstance(item, int) and not isinstance(item, bool):
                        wanted.add(item)
    if not wanted:
        return {}
    found = TrashEntry.objects.filter(pk__in=list(wanted)[:1000]).values_list("pk", "session_ids")
    return {pk: ids[0] for pk, ids in found if isinstance(ids, list) and ids}


def _entry_rows(
    entries: Sequence[AuditEntry], *, withheld: ledger_audit.WithheldFor, can_delete: bool = False
) -> list[dict]:
    entries = [ledger_audit.as_shown(entry, withheld(entry.action)) for entry in entries]
    links = Links(can_delete=can_delete, trash=_trash_searches(entries) if can_delete else {})
    rows = []
    for entry in entries:
        merge = None
        if entry.action == "merge" and entry.outcome == "ok" and isinstance(entry.after, dict):
            merge = _merge_state(entry.after.get("merge_id"))
        words = ledger_audit.readable(entry, links)
        rows.append(
            {
                "entry": entry,
                "sessions": words.sessions,
                "more_sessions": words.more_sessions,
                "changes": words.changes,
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
            "closed": record.closed_by_erasure,
        }
        for record in core.merges_of_session(session_id=session_id)
    ]


def _entries_of_session(session_id: str):
    return AuditEntry.objects.filter(
        pk__in=AuditSession.objects.filter(session_id=session_id).values("entry_id")
    )


def _export_url(request: HtmxHttpRequest) -> str:
    """The CSV export of what the page shows: its filters, every page."""
    query = request.GET.copy()
    query.pop("page", None)
    encoded = query.urlencode()
    return reverse("audit_export") + ("?" + encoded if encoded else "")


@require_GET
@require_perm(VIEW)
def audit_log(request: HtmxHttpRequest) -> HttpResponse:
    """The audit log, newest first, filtered and paginated."""
    found = ledger_audit.filtered(request.GET)
    page = Paginator(found.entries, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "form": found.form,
        "page": page,
        "rows": _entry_rows(
            page.object_list,
            withheld=withheld_for(role_of(request.user)),
            can_delete=request.user.has_perm(DELETE),
        ),
        "session_filter": found.session_id,
        "session_filter_url": session_url(found.session_id),
        "merges": _merge_rows(found.session_id) if found.session_id else [],
        "can_operate": request.user.has_perm(OPERATE),
        "here": request.get_full_path(),
        "filtered": found.filtered,
        "export_url": _export_url(request),
    }
    return render(request, fragment(request, AUDIT_TEMPLATE, "audit-results"), context)


@require_GET
@require_perm(VIEW)
def audit_export(request: HtmxHttpRequest) -> StreamingHttpResponse:
    """The entries the audit log's filters match (every page), as CSV, newest first.

    Streamed as it is read. Every cell that a spreadsheet would run as a formula starts
    with a quote; before and after come as JSON, and in words in ``changes``; what the
    reader's role may not see is left blank, said so in ``reason`` and ``changes``.
    """
    found = ledger_audit.filtered(request.GET)
    response = StreamingHttpResponse(
        ledger_audit.csv_lines(found.entries, withheld_for=withheld_for(role_of(request.user))),
        content_type="text/csv; charset=utf-8",
    )
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.csv"'
    return response


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
        "rows": _entry_rows(
            shown[:HISTORY_ENTRIES],
            withheld=withheld_for(role_of(request.user)),
            can_delete=request.user.has_perm(DELETE),
        ),
        "history_more": len(shown) > HISTORY_ENTRIES,
        "history_all_url": reverse("audit_log") + "?" + urlencode({"session": session_id}),
        "merges": _merge_rows(session_id),
        "can_operate": request.user.has_perm(OPERATE),
        "here": here,
    }
    return render(request, f"{AUDIT_TEMPLATE}#session-history", context)
