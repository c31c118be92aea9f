"""The session list: filters, sorts, keyset pages, full-text search, row selection."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from django.db import DatabaseError
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from sessions_admin.console.http import HtmxHttpRequest, fragment, require_perm
from sessions_admin.console.roles import VIEW
from sessions_admin.console.templatetags.console import end_reason_words
from sessions_admin.store import health, listing

logger = logging.getLogger(__name__)

TEMPLATE = "console/session_list.html"


@require_GET
@require_perm(VIEW)
def session_list(request: HtmxHttpRequest) -> HttpResponse:
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
    context = {
        "filters": filters,
        "problems": problems,
        "page": page,
        "rows": [_row(row, detail) for row in page.rows] if page else [],
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
    }
    if template == TEMPLATE:
        context["choices"] = listing.choices()
    response = render(request, template, context)
    # Fragment or whole page depends on these headers (a history restore wants the page).
    patch_vary_headers(response, ["HX-Request", "HX-History-Restore-Request"])
    return response


def _url(query: str, cursor: str | None = None) -> str:
    """The list's URL for a filter querystring, optionally after a page cursor."""
    parts = [query] if query else []
    if cursor:
        parts.append(urlencode({"after": cursor}))
    return reverse("session_list") + ("?" + "&".join(parts) if parts else "")


# ---------------------------------------------------------------------------
# What a row shows, formatted in Python: 50 rows through template filters
# cost more than the queries behind them.


class _DetailLinks:
    """session_detail URLs without a reverse() per row."""

    def __init__(self) -> None:
        marker = "session-id-placeholder"
        self._prefix, self._suffix = reverse("session_detail", args=[marker]).split(marker)

    def __call__(self, session_id: str | None) -> str | None:
        if not session_id or "/" in session_id:
            return None  # the detail route cannot address it
        return f"{self._prefix}{quote(session_id, safe='')}{self._suffix}"


@dataclass(frozen=True)
class _When:
    iso: str
    day: str
    clock: str


def _when(timestamp: float | None) -> _When | None:
    if timestamp is None:
        return None
    try:
        moment = dt.datetime.fromtimestamp(float(timestamp), tz=dt.UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return None
    return _When(moment.isoformat(), moment.strftime("%Y-%m-%d"), moment.strftime("%H:%M:%S"))


@dataclass(frozen=True)
class _Row:
    s: listing.SessionRow
    url: str | None
    tip_url: str | None
    started: _When | None
    last: _When | None
    status: str
    messages: str
    tokens: str
    cost: str | None


def _row(row: listing.SessionRow, detail: _DetailLinks) -> _Row:
    return _Row(
        s=row,
        url=detail(row.id),
        tip_url=detail(row.tip_id),
        started=_when(row.started_at),
        last=_when(row.last_activity),
        status=end_reason_words(row.end_reason),
        messages=f"{row.message_count:,}",
        tokens=f"{row.tokens:,}",
        cost=None if row.cost is None else f"${row.cost:,.4f}",
    )


@dataclass(frozen=True)
class _Hit:
    h: listing.SearchHit
    url: str | None
    when: _When | None


def _hit(hit: listing.SearchHit, detail: _DetailLinks) -> _Hit:
    return _Hit(h=hit, url=detail(hit.session_id), when=_when(hit.timestamp))
