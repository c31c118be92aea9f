"""The session list: filters, sorts, keyset pages, full-text search, row selection.

The selection form posts (it carries the CSRF token): "Delete selected…" to the bulk
delete preview, "Merge selected…" back here, answered by a redirect to the merge
preview's GET URL holding the picked ids only (submitted as a GET, the whole form,
token included, had landed in the URL, the access log, the history and the Referer).
"""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from django.contrib import messages
from django.db import DatabaseError
from django.http import HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_http_methods

from sessions_admin.console.http import HtmxHttpRequest, fragment, require_perm
from sessions_admin.console.templatetags.console import end_reason_words
from sessions_admin.core.clock import moment_of
from sessions_admin.signin.roles import VIEW
from sessions_admin.store import health, listing

logger = logging.getLogger(__name__)

TEMPLATE = "console/session_list.html"
# The merge preview is a GET page; gunicorn refuses request lines over 4094 bytes.
MERGE_URL_LIMIT = 4000
# Runtime-written text a row shows, at most (the session page has the whole of it):
# a 1 MB title made a 2 MB list page.
TITLE_SHOWN = 200
VALUE_SHOWN = 200


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
        "search_candidates": listing.SEARCH_CANDIDATES,
    }
    if template == TEMPLATE:
        context["choices"] = listing.choices()
    response = render(request, template, context)
    # Fragment or whole page depends on these headers (a history restore wants the page).
    patch_vary_headers(response, ["HX-Request", "HX-History-Restore-Request"])
    return response


def _merge_selection(request: HtmxHttpRequest) -> HttpResponse:
    """The merge button: a 303 to the merge preview, its URL holding the picked ids only.

    The preview itself refuses what cannot be merged and says why; a selection
    whose preview URL would be too long goes back to the list with a message.
    """
    picks = list(dict.fromkeys(value for value in request.POST.getlist("ids") if value))
    url = reverse("merge_preview")
    if picks:
        url += "?" + urlencode([("ids", pick) for pick in picks])
    if len(url) > MERGE_URL_LIMIT:
        messages.error(
            request,
            f"{len(picks)} selected sessions are too many to preview a merge from the list; "
            "select fewer.",
        )
        filters = listing.parse(QueryDict(request.POST.get("filter", ""))).filters
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
    moment = moment_of(timestamp)
    if moment is None:
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

    @property
    def html(self) -> SafeString:
        return _row_html(self)


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


def _clip(text: str | None, limit: int = VALUE_SHOWN) -> str:
    if not text:
        return ""
    return text if len(text) <= limit else text[:limit] + "…"


def escape(value: object) -> str:
    # Django's escape() is this call behind lazy-string handling, which costs more than
    # the escaping itself at 20 values a row.
    return html.escape(str(value), quote=True)


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _time_html(when: _When) -> str:
    return (
        f'<time datetime="{escape(when.iso)}">{escape(when.day)} '
        f'<span class="time">{escape(when.clock)}</span></time>'
    )


def _row_html(item: _Row) -> SafeString:
    """One <tr> of the session table, built here rather than by the template engine.

    Fifty rows of about a hundred template nodes each were most of the page's time
    (bench/run.py); the markup is the same, every value escaped.
    """
    row = item.s
    sid = escape(row.id)
    code = f"<code>{sid}</code>"
    markers = []
    if row.branched_from:
        markers.append(
            f'<span class="badge branch" title="Branched from {escape(row.branched_from)}">'
            "branch</span>"
        )
    if row.delegate_from:
        markers.append(
            f'<span class="badge delegate" title="Delegate of {escape(row.delegate_from)}">'
            "delegate</span>"
        )
    if row.is_fork:
        markers.append(
            '<span class="badge fork" title="In a fork group: unlinked sessions of one '
            'conversation">fork</span>'
        )
    if row.segments > 1:
        markers.append(
            f'<span class="badge segments" title="Compressed: {row.segments} segments">'
            f"{row.segments} segments</span>"
        )
    elif row.continuations:
        markers.append('<span class="badge segments">continued</span>')
    if row.branches:
        markers.append(
            f'<span class="badge children">{_plural(row.branches, "branch", "branches")}</span>'
        )
    if row.delegates:
        markers.append(
            f'<span class="badge children">{_plural(row.delegates, "delegate", "delegates")}</span>'
        )
    if row.other_children:
        markers.append(
            f'<span class="badge children">{_plural(row.other_children, "child", "children")}'
            "</span>"
        )
    if row.archived:
        markers.append('<span class="badge">archived</span>')
    classes = " ".join(
        c for c in ("live" if row.is_live else "", "archived" if row.archived else "") if c
    )
    if row.is_live:
        status = '<span class="badge live">live</span>'
    else:
        status = (
            f'<span class="ended" title="{escape(row.end_reason or "")}">'
            f"{escape(item.status)}</span>"
        )
    if row.tip_id:
        tip = f"<code>{escape(row.tip_id)}</code>"
        if item.tip_url:
            tip = f'<a href="{escape(item.tip_url)}">{tip}</a>'
        status += f'<div class="tip hint">latest segment {tip}</div>'
    if row.user_id:
        user_id = escape(_clip(row.user_id))
        user = f'<td class="user" title="{user_id}"><code>{user_id}</code></td>'
    else:
        user = '<td class="user"><span class="hint">—</span></td>'
    shown_title = escape(_clip(row.title, TITLE_SHOWN))
    title = f'<div class="title" title="{shown_title}">{shown_title}</div>' if row.title else ""
    link = f'<a href="{escape(item.url)}">{code}</a>' if item.url else code
    cost = '<span class="hint">—</span>' if item.cost is None else escape(item.cost)
    started = _time_html(item.started) if item.started else ""
    last = _time_html(item.last) if item.last else '<span class="hint">no messages</span>'
    return mark_safe(  # noqa: S308 - every value above is escaped
        f'<tr class="{classes}">'
        f'<td class="pick"><input type="checkbox" name="ids" value="{sid}" '
        f'aria-label="Select {sid}"></td>'
        f'<td class="session">{link}{title}<div class="markers">{"".join(markers)}</div></td>'
        f"<td>{escape(_clip(row.source))}</td>"
        f"{user}"
        f'<td class="model">{escape(_clip(row.model))}</td>'
        f'<td class="when">{started}</td>'
        f'<td class="when">{last}</td>'
        f'<td class="status">{status}</td>'
        f'<td class="num">{escape(item.messages)}</td>'
        f'<td class="num">{escape(item.tokens)}</td>'
        f'<td class="num">{cost}</td>'
        "</tr>"
    )


@dataclass(frozen=True)
class _Hit:
    h: listing.SearchHit
    url: str | None
    when: _When | None
    title: str
    source: str


def _hit(hit: listing.SearchHit, detail: _DetailLinks) -> _Hit:
    return _Hit(
        h=hit,
        url=detail(hit.session_id),
        when=_when(hit.timestamp),
        title=_clip(hit.session_title, TITLE_SHOWN),
        source=_clip(hit.session_source),
    )
