"""The session list's rows, or a search's results, as CSV: what the page shows, every page.

The same parameters as the page (``listing.parse``: filters, search text, sort), walked
page by page with the list's own keyset cursors from the first page on, and streamed as it
is read: an export of a large store holds one page in memory, never the whole. Cells a
spreadsheet would run as a formula start with a quote (``audit.safe_cell``).
"""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Iterator
from dataclasses import replace

from django.http import HttpResponse, StreamingHttpResponse
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from sessions_admin.console.http import HtmxHttpRequest, require_perm
from sessions_admin.ledger.audit_log import safe_cell
from sessions_admin.signin.roles import VIEW
from sessions_admin.store import listing
from sessions_admin.store.listing import MARK_END, MARK_START

SEARCH_COLUMNS = [
    "session_id",
    "title",
    "source",
    "user_id",
    "display_name",
    "matching_messages",
    "first_match_id",
    "first_match_url",
    "snippet",
]
LIST_COLUMNS = [
    "session_id",
    "title",
    "source",
    "user_id",
    "model",
    "started_at",
    "ended_at",
    "end_reason",
    "messages",
    "tokens",
    "cost_usd",
    "last_activity",
]


class _Line:
    """csv.writer's file: each row written is handed back as a string to stream."""

    def write(self, value: str) -> str:
        return value


def _iso(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()


def _pages(filters: listing.Filters, read) -> Iterator:
    """Every page of ``read`` (the list's or the search's), from the first on."""
    cursor = None
    while True:
        page = read(filters, cursor)
        yield page
        if not page.next_cursor:
            return
        cursor = listing.decode_cursor(page.next_cursor, filters)
        if cursor is None:
            return


def _search_rows(filters: listing.Filters) -> Iterator[list]:
    for page in _pages(filters, listing.search):
        for found in page.sessions:
            detail = reverse("session_detail", args=[found.session_id])
            snippet = found.hits[0].snippet if found.hits else ""
            yield [
                found.session_id,
                found.title or "",
                found.source,
                found.user_id or "",
                found.display_name or "",
                f"{found.count}+" if found.count_more else found.count,
                found.first_hit_id,
                f"{detail}?around={found.first_hit_id}#m{found.first_hit_id}",
                snippet.replace(MARK_START, "").replace(MARK_END, ""),
            ]


def _list_rows(filters: listing.Filters) -> Iterator[list]:
    def read(filters, cursor):
        return listing.list_sessions(filters, cursor, with_choices=False)

    for page in _pages(filters, read):
        for row in page.rows:
            yield [
                row.id,
                row.title or "",
                row.source,
                row.user_id or "",
                row.model or "",
                _iso(row.started_at),
                _iso(row.ended_at),
                row.end_reason or "",
                row.message_count,
                row.tokens,
                "" if row.cost is None else row.cost,
                _iso(row.last_activity),
            ]


def _csv(header: list[str], rows: Iterator[list]) -> Iterator[str]:
    writer = csv.writer(_Line())
    yield writer.writerow(header)
    for row in rows:
        yield writer.writerow([safe_cell(cell) for cell in row])


@require_GET
@require_perm(VIEW)
def session_export(request: HtmxHttpRequest) -> HttpResponse:
    """The rows the session list's parameters select (a search's results when it has
    search text), every page of them, as CSV; the page's cursor is ignored."""
    parsed = listing.parse(request.GET)
    if parsed.problems:
        return HttpResponse(
            " ".join(parsed.problems), status=400, content_type="text/plain; charset=utf-8"
        )
    filters = replace(parsed.filters, per_page=max(listing.PAGE_SIZES))
    if filters.is_search:
        header, rows = SEARCH_COLUMNS, _search_rows(filters)
        name = "search"
    else:
        header, rows = LIST_COLUMNS, _list_rows(filters)
        name = "sessions"
    response = StreamingHttpResponse(_csv(header, rows), content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="{name}-{stamp}.csv"'
    return response
