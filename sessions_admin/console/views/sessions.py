"""The session list: filters, sorts, keyset pages, full-text search, row selection.

The selection form posts (it carries the CSRF token): "Delete selected…" to the bulk
delete preview, "Merge selected…" back here, answered by a redirect to the merge
preview's GET URL holding the picked ids only (submitted as a GET, the whole form,
token included, had landed in the URL, the access log, the history and the Referer).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from django.contrib import messages
from django.db import DatabaseError
from django.http import HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET, require_http_methods

from sessions_admin.console.forms import SelectionForm
from sessions_admin.console.html import (
    TITLE_SHOWN,
    ListedSession,
    When,
    clip,
    end_reason_words,
    highlight,
    when,
)
from sessions_admin.console.http import HtmxHttpRequest, fragment, require_perm
from sessions_admin.signin.roles import OPERATE, VIEW
from sessions_admin.store import activity, health, listing

logger = logging.getLogger(__name__)

TEMPLATE = "console/session_list.html"
# The merge preview is a GET page; gunicorn refuses request lines over 4094 bytes.
MERGE_URL_LIMIT = 4000


@require_http_methods(["GET", "POST"])
@require_perm(VIEW)
def session_list(request: HtmxHttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _merge_selection(request)
    parsed = listing.parse(request.GET)
    filters = parsed.filters
    problems = list(parsed.problems)
    page = search = None
    if filters.is_search:
        try:
            search = listing.search(filters, parsed.cursor)
        except DatabaseError:
            # The query is quoted so this should not happen; never turn a search into a 500.
            logger.exception("session search failed for %r", filters.q)
            problems.append("The search could not be run; try other words.")
    else:
        page = listing.list_sessions(filters, parsed.cursor)
    results = search or page
    query = filters.querystring()
    template = fragment(request, TEMPLATE, "results")
    detail = _DetailLinks()
    # Viewers get no checkboxes: every action on a selection needs the operate permission.
    selectable = request.user.has_perm(OPERATE)
    context = {
        "filters": filters,
        "problems": problems,
        "page": page,
        "rows": [_row(row, detail, selectable) for row in page.rows] if page else [],
        "selectable": selectable,
        "active_filters": len(filters.filters_only().params()),
        "search": search,
        "hits": [_hit(hit, detail) for hit in search.hits] if search else [],
        "query": query,
        "first_url": _url(query),
        "next_url": _url(query, results.next_cursor) if results and results.next_cursor else None,
        "is_paged": parsed.cursor is not None,
        "selection_query": filters.filters_only().querystring(),
        "sorts": listing.SORTS,
        "directions": listing.DIRECTIONS,
        "scopes": listing.SCOPES,
        "archived_choices": listing.ARCHIVED,
        "empty_choices": listing.EMPTY,
        "health_checks": health.CHECKS,
        "page_sizes": listing.PAGE_SIZES,
        "search_candidates": listing.SEARCH_CANDIDATES,
    }
    if template == TEMPLATE:
        context["choices"] = listing.choices()
        context["activity_url"] = _activity_url(time.time(), query)
        context["activity_seconds"] = ACTIVITY_SECONDS
    return render(request, template, context)


# How often an open list asks whether sessions started since it was opened (static/js/live.js).
ACTIVITY_SECONDS = 15


def _activity_url(since: float, query: str) -> str:
    params = {"since": f"{since:.3f}"}
    if query:
        params["list"] = query
    return f"{reverse('session_activity')}?{urlencode(params)}"


@require_GET
@require_perm(VIEW)
def session_activity(request: HtmxHttpRequest) -> HttpResponse:
    """The open list's banner: how many sessions started since it was opened (``?since=``,
    a Unix time), linking to the list again (``?list=``, its filters); 204 while none did.

    One bounded query on the started_at index per poll: no recount of the store.
    """
    try:
        since = float(request.GET.get("since", ""))
    except ValueError:
        since = math.nan
    if not math.isfinite(since) or since < 0:
        return HttpResponse(
            "since must be the Unix time the list was opened, such as since=1764160000.5",
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    count, more = activity.sessions_started_since(since)
    if not count:
        return HttpResponse(status=204)
    # Only the list's own filters go back into its links.
    query = listing.parse(QueryDict(request.GET.get("list", "")[:4000])).filters.querystring()
    return render(
        request,
        f"{TEMPLATE}#activity-banner",
        {
            "activity_count": count,
            "activity_more": more,
            "activity_url": _activity_url(since, query),
            "show_url": _url(query),
            "activity_seconds": ACTIVITY_SECONDS,
        },
    )


def _merge_selection(request: HtmxHttpRequest) -> HttpResponse:
    """The merge button: a 303 to the merge preview, its URL holding the picked ids only.

    The preview itself refuses what cannot be merged and says why; a selection
    holding something that is not a session id, or whose preview URL would be too
    long, goes back to the list with a message.
    """
    form = SelectionForm(request.POST)
    valid = form.is_valid()
    picks = form.cleaned_data.get("ids", [])
    url = reverse("merge_preview")
    if picks:
        url += "?" + urlencode([("ids", pick) for pick in picks])
    problem = None
    if not valid:
        problem = f"{form.problem()} Nothing was selected."
    elif len(url) > MERGE_URL_LIMIT:
        problem = (
            f"{len(picks)} selected sessions are too many to preview a merge from the list; "
            "select fewer."
        )
    if problem:
        messages.error(request, problem)
        filters = listing.parse(QueryDict(form.cleaned_data.get("filter", ""))).filters
        url = _url(filters.querystring())
    response = HttpResponseRedirect(url)
    response.status_code = 303  # after a POST: the browser GETs the preview
    return response


def _url(query: str, cursor: str | None = None) -> str:
    """The list's URL for a filter querystring, optionally after a page cursor."""
    parts = [query] if query else []
    if cursor:
        parts.append(urlencode({"after": cursor}))
    return reverse("session_list") + ("?" + "&".join(parts) if parts else "")


# ---------------------------------------------------------------------------
# What a row shows, formatted in Python (console/html.py builds its markup): 50 rows
# through template filters cost more than the queries behind them.


class _DetailLinks:
    """session_detail URLs without a reverse() per row."""

    def __init__(self) -> None:
        marker = "session-id-placeholder"
        self._prefix, self._suffix = reverse("session_detail", args=[marker]).split(marker)

    def __call__(self, session_id: str | None) -> str | None:
        if not session_id or "/" in session_id:
            return None  # the detail route cannot address it
        return f"{self._prefix}{quote(session_id, safe='')}{self._suffix}"


def _row(row: listing.SessionRow, detail: _DetailLinks, selectable: bool) -> ListedSession:
    return ListedSession(
        session=row,
        url=detail(row.id),
        tip_url=detail(row.tip_id),
        started=when(row.started_at),
        last=when(row.last_activity),
        status=end_reason_words(row.end_reason),
        messages=f"{row.message_count:,}",
        tokens=f"{row.tokens:,}",
        cost=None if row.cost is None else f"${row.cost:,.4f}",
        selectable=selectable,
    )


@dataclass(frozen=True)
class _Hit:
    """A search hit with its values formatted for the results list."""

    hit: listing.SearchHit
    url: str | None
    when: When | None
    title: str
    source: str
    snippet: SafeString


def _hit(hit: listing.SearchHit, detail: _DetailLinks) -> _Hit:
    return _Hit(
        hit=hit,
        url=detail(hit.session_id),
        when=when(hit.timestamp),
        title=clip(hit.session_title, TITLE_SHOWN),
        source=clip(hit.session_source),
        snippet=highlight(hit.snippet),
    )
