"""The session list: filters, sorts, keyset pages, full-text search, row selection.

The selection form posts (it carries the CSRF token): "Delete selected…" to the bulk
delete preview, "Merge selected…" back here, answered by a redirect to the merge
preview's GET URL holding the picked ids only (submitted as a GET, the whole form,
token included, had landed in the URL, the access log, the history and the Referer).
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from django.contrib import messages
from django.db import DatabaseError
from django.http import HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET, require_http_methods

from sessions_admin.console.forms import SelectionForm
from sessions_admin.console.html import escape
from sessions_admin.console.http import HtmxHttpRequest, fragment, require_perm
from sessions_admin.console.listed import ListedSession, When, when
from sessions_admin.console.words import TITLE_SHOWN, clip, end_reason_words
from sessions_admin.signin.roles import OPERATE, VIEW
from sessions_admin.store import activity, cached, health, listing

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
    template = fragment(request, TEMPLATE, "results")
    if not filters.is_search:
        # The whole page's filter form needs the choices: read with the rows' ids.
        page = listing.list_sessions(filters, parsed.cursor, with_choices=template == TEMPLATE)
    results = search or page
    query = filters.querystring()
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
        "groups": [_group(group, detail, filters.q) for group in search.sessions] if search else [],
        "names": [_name(match, detail) for match in search.names] if search else [],
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
        # Fork detection still running in the background: the rows reload once it is done.
        "fork_marks_pending": bool(page and page.fork_marks_pending),
        "fork_marks_failure": page.fork_marks_failure if page else None,
        "reload_url": request.get_full_path(),
    }
    if template == TEMPLATE:
        context["choices"] = page.choices if page and page.choices else listing.choices()
        context["activity_url"] = _activity_url(time.time(), query)
        context["activity_seconds"] = ACTIVITY_SECONDS
    return render(request, template, context)


@require_GET
@require_perm(VIEW)
def fork_marks(request: HtmxHttpRequest) -> HttpResponse:
    """Asked by a list shown before fork detection finished: itself again while it runs;
    once the marks are ready, nothing, and a ``fork-marks-ready`` event on which the list
    reloads its rows (a plain GET is sent back to the list)."""
    try:
        ready = listing.fork_marks_ready()
    except cached.FigureFailed as failure:
        # Stop asking: the list says why it has no fork marks.
        return render(
            request, f"{TEMPLATE}#fork-marks-failed", {"fork_marks_failure": failure.reason}
        )
    if not ready:
        return render(request, f"{TEMPLATE}#fork-marks-poll")
    if not request.htmx:
        return HttpResponseRedirect(reverse("session_list"))
    response = HttpResponse("")
    response["HX-Trigger"] = "fork-marks-ready"
    return response


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
        tokens="—" if row.tokens is None else f"{row.tokens:,}",
        cost=None if row.cost is None else f"${row.cost:,.4f}",
        selectable=selectable,
    )


# ---------------------------------------------------------------------------
# Search results: one entry per session, its best snippets, and sessions by name.


_MARKS = re.compile(f"({listing.MARK_START}|{listing.MARK_END})")


def highlight(raw: str | None) -> SafeString:
    """Escape a snippet, then turn our markers into balanced <mark> elements.

    The snippet text is untrusted; it is escaped piece by piece and only the
    markers (never produced by escaping) become markup. A marker character
    that was in the content itself can at worst move a highlight.
    """
    out: list[str] = []
    inside = False
    for piece in _MARKS.split(raw or ""):
        if piece == listing.MARK_START:
            if not inside:
                out.append("<mark>")
                inside = True
        elif piece == listing.MARK_END:
            if inside:
                out.append("</mark>")
                inside = False
        elif piece:
            out.append(escape(piece))
    if inside:
        out.append("</mark>")
    return mark_safe("".join(out))  # noqa: S308 - every piece above is escaped


# A snippet cut from JSON (a tool's arguments or result): a key, a bracket, an escape.
_LOOKS_LIKE_JSON = re.compile(r'[{\[]\s*"|"\s*:\s*[{\["\d\-tfn]|\\"')
# Keys that say nothing to a reader: call ids, "type": "function", the "function" wrapper.
_JSON_NOISE = re.compile(
    r'"(?:id|type|call_id|tool_call_id|index)"\s*:\s*("[^"]*"|\d+)\s*,?\s*|"function"\s*:\s*'
)


def readable_snippet(raw: str) -> str:
    """A snippet of JSON as words: ``key: value, key: value`` without the braces, quotes
    and escapes (the markers stay where they are); other text is returned as it is."""
    if not _LOOKS_LIKE_JSON.search(raw):
        return raw
    text = re.sub(r"\\[nrt]", " ", raw).replace('\\"', '"').replace("\\\\", "\\")
    # A snippet cut inside a value (``call_9", "type": ...``): that value's tail says nothing.
    text = re.sub(r'^(\W*)[^"\s\ue000]*"\s*,\s*', r"\1", text)
    text = _JSON_NOISE.sub("", text)
    text = re.sub(r'"\s*:\s*', ": ", text)
    text = re.sub(r'"\s*,\s*"', ", ", text)
    text = re.sub(r'[{}\[\]"]+', " ", text)
    text = re.sub(r"\s+,", ",", text)
    return re.sub(r"\s+", " ", text).strip()


def _hit_url(url: str | None, message_id: int, q: str) -> str | None:
    """A hit's link: the transcript around the message, the search's words marked there."""
    if url is None:
        return None
    return f"{url}?{urlencode({'around': message_id, 'q': q})}#m{message_id}"


@dataclass(frozen=True)
class _Snippet:
    hit: listing.SearchHit
    url: str | None
    when: When | None
    tool: str
    snippet: SafeString


@dataclass(frozen=True)
class _Group:
    """A session of the search results with its values formatted."""

    group: listing.SessionHits
    url: str | None
    label: str
    label_is_id: bool
    source: str
    user: str
    count: str
    snippets: list[_Snippet]
    more: str  # "4 more in this session", or "" when the snippets are all of them
    more_url: str | None


def _label(title: str | None, first_text: str | None, name: str | None) -> str:
    """What names a session for a reader: its title, else its first user message, else
    the display name; empty when it has none of them (the id is shown instead)."""
    for text in (title, first_text, name):
        if text and text.strip():
            return clip(" ".join(text.split()), TITLE_SHOWN)
    return ""


def _group(group: listing.SessionHits, detail: _DetailLinks, q: str) -> _Group:
    url = detail(group.session_id)
    label = _label(group.title, group.first_user_text, group.display_name)
    more = group.count - len(group.hits)
    more_text = ""
    if more > 0:
        more_text = f"{more:,}{'+' if group.count_more else ''} more in this session"
    elif group.count_more:
        more_text = "More in this session"
    count = f"{group.count:,}{'+' if group.count_more else ''}"
    return _Group(
        group=group,
        url=url,
        label=label or group.session_id,
        label_is_id=not label,
        source=clip(group.source),
        user=clip(group.display_name or group.user_id),
        count=f"{count} matching message{'' if count == '1' else 's'}",
        snippets=[
            _Snippet(
                hit=hit,
                url=_hit_url(url, hit.message_id, q),
                when=when(hit.timestamp),
                tool=clip(hit.tool_name, 80),
                snippet=highlight(readable_snippet(hit.snippet)),
            )
            for hit in group.hits
        ],
        more=more_text,
        more_url=_hit_url(url, group.first_hit_id, q),
    )


@dataclass(frozen=True)
class _Name:
    """One person the search text names: their newest session, and how many it names."""

    match: listing.NameMatch
    url: str | None
    label: str
    matched: str
    started: When | None
    person: str
    sessions: int
    all_url: str | None  # the session list filtered to this user (None: no user id)


NAME_MATCHED = {"user": "user id", "chat": "chat id", "name": "display name"}


def _name(match: listing.NameMatch, detail: _DetailLinks) -> _Name:
    return _Name(
        match=match,
        url=detail(match.session_id),
        label=clip(match.title or match.display_name or match.session_id, TITLE_SHOWN),
        matched=NAME_MATCHED[match.matched],
        started=when(match.started_at),
        person=clip(match.display_name or match.user_id or match.chat_id or "", TITLE_SHOWN),
        sessions=match.sessions,
        all_url=(
            reverse("session_list")
            + "?"
            + urlencode({"user": match.user_id, "source": match.source})
            if match.user_id
            else None
        ),
    )
