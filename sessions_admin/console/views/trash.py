"""The trash: what deletes removed, restorable until purged (admin only).

The page only reads the dashboard's own database; a restore or a purge goes
through ``ledger.actions``, validated by its form (``console.forms``) first.
How long an entry stays restorable is ``ledger.trash_retention``'s.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from sessions_admin import core
from sessions_admin.console.forms import (
    SearchTermField,
    TrashPurgeForm,
    TrashRestoreForm,
    form_problems,
)
from sessions_admin.console.http import HtmxHttpRequest, fragment, plural, require_perm
from sessions_admin.console.views.delete import plural_days
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import TrashEntry, TrashSession
from sessions_admin.ledger.trash_retention import configured_days
from sessions_admin.signin.roles import DELETE

TRASH_TEMPLATE = "console/trash.html"

TRASH_PAGE_SIZE = 25
TRASH_SESSIONS_SHOWN = 12
NUL_SEARCH = "A session id cannot contain a NUL character: showing every entry."


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
    days = configured_days()
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
    return render(request, fragment(request, TRASH_TEMPLATE, "entries"), context)


@require_GET
@require_perm(DELETE)
def trash(request: HtmxHttpRequest) -> HttpResponse:
    """Deleted rows, restorable until purged; searchable by session id."""
    problems = [NUL_SEARCH] if "\x00" in (request.GET.get("q") or "") else []
    return _render_trash(
        request,
        q=SearchTermField().clean(request.GET.get("q")),
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
    form = TrashRestoreForm(request.POST)
    form.is_valid()  # only the search to go back to, which is never refused
    back = _trash_url(form.cleaned_data["q"])
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
        f"Restored {plural(len(result.restored_sessions), 'session')} and "
        f"{plural(result.restored_messages, 'message')} from trash entry #{entry.pk}.",
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
    form = TrashPurgeForm(request.POST)
    valid = form.is_valid()
    q = form.cleaned_data["q"]
    scope = form.cleaned_data.get("scope") or "expired"
    reason = form.cleaned_data.get("reason", form.shown_back("reason"))
    if not valid:
        problems = form_problems(form)
        actions.record_refusal(request=request, action="purge_trash", why=" ".join(problems))
        return _render_trash(
            request, q=q, problems=problems, purge_reason=reason, purge_scope=scope
        )
    days = configured_days() if scope == "expired" else None
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
        f"Purged {plural(expected, 'trash entry', 'trash entries')}"
        + (f" older than {plural_days(days)}" if days is not None else "")
        + "; they can no longer be restored.",
    )
    return redirect("trash")
