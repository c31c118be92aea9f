"""Read queries behind the session list: filters, sorts, keyset pages, capped counts, search.

Read-only. Everything here is built for a big store that the runtime writes
while we read:

- pages are keyset pages (``WHERE (key, id) < cursor ORDER BY key DESC, id DESC
  LIMIT n + 1``), never OFFSET; the cursor is opaque (urlsafe base64 of JSON);
- counts are exact only up to ``COUNT_CAP`` (a COUNT over a LIMITed subquery);
- "last activity" is a session's latest message (message ids are monotonic).
  It is not stored, so the first pages walk ``messages`` by id from the newest
  and keep each session's latest one; a filter too narrow for that walk to
  pay off is answered from the matching sessions instead (see
  ``_activity_rows``);
- in the default ``roots`` scope a row is a conversation: a session with no
  parent (or whose parent is gone) or a branch. Compression continuations
  and delegates are hidden; a compressed root shows the figures of its
  compression tip, computed for the rows of the page only.

Input comes from the query string: ``parse`` turns it into a frozen
``Filters`` plus an optional ``Cursor`` and a list of problems to show; it
never raises on bad input.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime as dt
import heapq
import json
import math
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import urlencode

from django.db import connections, transaction

from sessions_admin.core import db, forks, lineage
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.schema import FTS_DOCUMENT_SQL
from sessions_admin.routers import store_alias
from sessions_admin.store import cached, health

PAGE_SIZE = 50
PAGE_SIZES = (25, 50, 100, 200)
COUNT_CAP = 1000
MAX_TEXT = 200
MAX_QUERY = 500
MAX_TERMS = 16
MAX_CURSOR = 1000
MAX_INT = 2**63 - 1
MAX_CHOICES = 200
# The filters' suggestions (three DISTINCT scans, ~15 ms at 10,000 sessions, more than
# half of the list page): a cached figure, recomputed in the background this often.
CHOICES_CACHE_SECONDS = 60

# The activity walk reads message ids in windows of this size, doubling up to the maximum.
WALK_WINDOW = 2048
WALK_MAX_WINDOW = 65536
# Beyond this many message ids without a full page, the walk gives way (see _activity_rows).
WALK_BUDGET = 8192
# PostgreSQL search: the first id window, then four times larger each time.
SEARCH_WINDOW = 4096
# A search with filters checks at most this many messages containing the words per page
# (and for its count): a common word under a selective filter otherwise read every match
# (300 ms at 20,000 sessions, growing with the store). The page says when it stopped
# there, and its next link searches on from the last message checked.
SEARCH_CANDIDATES = 10_000
# Titles are read up to this many characters (a runtime may store megabytes); the
# list shows fewer, and the session page links the whole title.
TITLE_READ = 1000
_TITLE_SQL = f"substr(s.title, 1, {TITLE_READ}) AS title"

SORTS = {
    "started": "Started",
    "activity": "Last activity",
    "messages": "Messages",
    "tokens": "Tokens (in + out)",
    "cost": "Cost",
}
DIRECTIONS = {"desc": "Highest / newest first", "asc": "Lowest / oldest first"}
SCOPES = {"roots": "Conversations", "all": "Every segment"}
ARCHIVED = {"": "Archived or not", "0": "Not archived", "1": "Archived only"}
EMPTY = {"": "Any number", "1": "None (empty)", "0": "At least one"}

# Sort keys as SQL over ``sessions s``; the indexes in schema.INDEX_SQL match these expressions.
SORT_SQL = {
    "started": "s.started_at",
    "messages": "COALESCE(s.message_count, 0)",
    "tokens": "(COALESCE(s.input_tokens, 0) + COALESCE(s.output_tokens, 0))",
    "cost": "COALESCE(s.estimated_cost_usd, 0)",
}

# Snippet highlight markers: private-use code points, turned into <mark> only after escaping
# (console/html.highlight).
MARK_START = "\ue000"
MARK_END = "\ue001"
SNIPPET_ELLIPSIS = "…"
SNIPPET_TOKENS = 24

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_WORD_RUN = re.compile(r"[^\W_]+")


# ---------------------------------------------------------------------------
# Parsing


@dataclass(frozen=True)
class Filters:
    """A validated session-list request (what the URL holds, minus the cursor)."""

    q: str = ""
    source: str = ""
    model: str = ""
    user: str = ""
    status: str = ""  # "", "live", "ended" or an end_reason
    started_from: dt.date | None = None
    started_to: dt.date | None = None
    title: str = ""
    forks: bool = False
    empty: str = ""  # "", "1" (no messages), "0" (some)
    archived: str = ""  # "", "1" (archived only), "0" (not archived)
    health: str = ""
    scope: str = "roots"
    sort: str = "started"
    direction: str = "desc"
    per_page: int = PAGE_SIZE

    @property
    def is_search(self) -> bool:
        return bool(self.q)

    @property
    def terms(self) -> tuple[str, ...]:
        return search_terms(self.q)

    @property
    def query(self) -> Query:
        return parse_query(self.q)

    def params(self) -> dict[str, str]:
        """The non-default parameters, in a stable order (URL names)."""
        default = Filters()
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value == getattr(default, f.name):
                continue
            name = PARAM_NAMES[f.name]
            if isinstance(value, bool):
                out[name] = "1"
            elif isinstance(value, dt.date):
                out[name] = value.isoformat()
            else:
                out[name] = str(value)
        return out

    def querystring(self) -> str:
        return urlencode(self.params())

    def filters_only(self) -> Filters:
        """The same selection without search, sort and page size (what a bulk action selects)."""
        return replace(self, q="", sort="started", direction="desc", per_page=PAGE_SIZE)

    @property
    def is_filtered(self) -> bool:
        return self.filters_only() != Filters(scope=self.scope)


PARAM_NAMES = {
    "q": "q",
    "source": "source",
    "model": "model",
    "user": "user",
    "status": "status",
    "started_from": "from",
    "started_to": "to",
    "title": "title",
    "forks": "forks",
    "empty": "empty",
    "archived": "archived",
    "health": "health",
    "scope": "scope",
    "sort": "sort",
    "direction": "dir",
    "per_page": "per",
}


@dataclass(frozen=True)
class Cursor:
    kind: str  # a SORTS key, or "search"
    direction: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Parsed:
    filters: Filters
    cursor: Cursor | None
    problems: tuple[str, ...]


def parse(params: Mapping[str, Any]) -> Parsed:
    """Validate query parameters; bad ones are dropped with a problem to show, never raised."""
    problems: list[str] = []

    def text(name: str, label: str, limit: int = MAX_TEXT) -> str:
        value = params.get(name, "")
        if not isinstance(value, str):
            return ""
        value = value.strip()
        if "\x00" in value:
            problems.append(f"{label} contains a NUL character; that filter is ignored.")
            return ""
        if len(value) > limit:
            problems.append(f"{label} is longer than {limit} characters; that filter is ignored.")
            return ""
        return value

    def choice(name: str, label: str, allowed: Mapping[str, str] | set[str], default: str) -> str:
        value = text(name, label)
        if value == "":
            return default
        if value not in allowed:
            shown = value if len(value) <= 40 else value[:40] + "…"
            problems.append(
                f"{label}: {shown!r} is not one of {', '.join(repr(a) for a in allowed if a)}; "
                "it is ignored."
            )
            return default
        return value

    def date(name: str, label: str) -> dt.date | None:
        value = text(name, label)
        if not value:
            return None
        parsed = None
        if _DATE.fullmatch(value):
            try:
                parsed = dt.date.fromisoformat(value)
            except ValueError:
                parsed = None
        if parsed is None or parsed.year < 1970:
            problems.append(f"{label}: {value[:40]!r} is not a date (YYYY-MM-DD, from 1970).")
            return None
        return parsed

    q = text("q", "Search", MAX_QUERY)
    if q and not search_terms(q):
        if parse_query(q).only_excludes:
            problems.append(
                'The search only excludes words (-word); add a word or "phrase" to look for.'
            )
        else:
            problems.append("The search has no words to look for (only punctuation or symbols).")
    forks_flag = choice("forks", "Has forks", {"1", "0"}, "0") == "1"
    health_kind = choice("health", "Health check", health.KINDS, "")
    per_raw = text("per", "Page size")
    per_page = PAGE_SIZE
    if per_raw:
        if per_raw.isdigit() and int(per_raw) in PAGE_SIZES:
            per_page = int(per_raw)
        else:
            problems.append(
                f"Page size must be one of {', '.join(map(str, PAGE_SIZES))}; "
                f"showing {PAGE_SIZE} per page."
            )
    filters = Filters(
        q=q,
        source=text("source", "Source"),
        model=text("model", "Model"),
        user=text("user", "User"),
        status=text("status", "Status"),
        started_from=date("from", "Started from"),
        started_to=date("to", "Started until"),
        title=text("title", "Title"),
        forks=forks_flag,
        empty=choice("empty", "Empty", EMPTY, ""),
        archived=choice("archived", "Archived", ARCHIVED, ""),
        health=health_kind,
        scope=choice("scope", "Scope", SCOPES, "roots"),
        sort=choice("sort", "Sort", SORTS, "started"),
        direction=choice("dir", "Direction", DIRECTIONS, "desc"),
        per_page=per_page,
    )
    if filters.started_from and filters.started_to and filters.started_from > filters.started_to:
        problems.append("The start date is after the end date: nothing can match.")
    cursor = None
    token = params.get("after", "")
    if isinstance(token, str) and token.strip():
        cursor = decode_cursor(token.strip(), filters)
        if cursor is None:
            problems.append(
                "That page link is not valid (or belongs to another sort): showing the first page."
            )
    return Parsed(filters=filters, cursor=cursor, problems=tuple(problems))


@dataclass(frozen=True)
class Query:
    """A search box's text, parsed once: what the list, the snippets and the transcript's
    highlighter all use.

    ``include``: phrases every hit contains; ``exclude``: phrases no hit contains. Each
    phrase is the runs of letters and digits of its words, space-separated, matched
    by the backends as adjacent tokens.
    """

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @property
    def only_excludes(self) -> bool:
        return not self.include and bool(self.exclude)


# A quoted phrase (optionally excluded) or a bare word (optionally excluded).
_QUERY_TOKEN = re.compile(r'(-?)"([^"]*)"|(-?)([^\s"]+)')


def _phrase(text: str) -> str:
    return " ".join(_WORD_RUN.findall(text))


def parse_query(q: str) -> Query:
    """``"exact phrase"``, ``-word`` and ``-"phrase"``; everything else is plain text.

    Unbalanced quotes are text (dropped as punctuation, like any other), so the
    words they surround are searched one by one. Punctuation inside a word
    splits it into adjacent tokens (``web_search`` -> ``web search``, ``NEAR(x`` ->
    ``NEAR x``): nothing a user types means what a query language means.
    Words with no letter or digit are dropped; at most MAX_TERMS phrases are kept.
    """
    include: list[str] = []
    exclude: list[str] = []
    if q.count('"') % 2:
        q = q.replace('"', " ")
    for match in _QUERY_TOKEN.finditer(q):
        quoted_minus, quoted, word_minus, word = match.groups()
        phrase = _phrase(quoted if quoted is not None else word)
        if not phrase:
            continue
        target = exclude if (quoted_minus or word_minus) else include
        if phrase not in target and len(include) + len(exclude) < MAX_TERMS:
            target.append(phrase)
    return Query(include=tuple(include), exclude=tuple(exclude))


def search_terms(q: str) -> tuple[str, ...]:
    """The phrases a search looks for (its exclusions aside): what hits highlight."""
    return parse_query(q).include


# ---------------------------------------------------------------------------
# Cursors


def encode_cursor(kind: str, direction: str, values: Sequence[Any]) -> str:
    raw = json.dumps([kind, direction, *values], separators=(",", ":"), allow_nan=False)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -MAX_INT <= value <= MAX_INT
    return isinstance(value, float) and math.isfinite(value)


def _session_id(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_TEXT and "\x00" not in value


def decode_cursor(token: str, filters: Filters) -> Cursor | None:
    """The cursor in ``token`` if it is well formed and fits ``filters``' sort, else None."""
    if len(token) > MAX_CURSOR:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw.decode(), parse_constant=_reject_constant)
    except (ValueError, binascii.Error, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(data, list) or len(data) < 3:
        return None
    kind, direction, values = data[0], data[1], tuple(data[2:])
    expected = "search" if filters.is_search else filters.sort
    if kind != expected or direction != filters.direction:
        return None
    if kind == "search":
        ok = len(values) == 1 and isinstance(values[0], int) and _number(values[0])
    elif kind == "activity":
        ok = (
            len(values) == 2
            and values[0] == "m"
            and isinstance(values[1], int)
            and _number(values[1])
        ) or (
            len(values) == 3 and values[0] == "e" and _number(values[1]) and _session_id(values[2])
        )
    else:
        ok = len(values) == 2 and _number(values[0]) and _session_id(values[1])
    return Cursor(kind, direction, values) if ok else None


# ---------------------------------------------------------------------------
# SQL pieces


_in_list = db.in_list


def visible_sql(alias: str = "s") -> str:
    """SQL: session ``alias`` is a row of the ``roots`` scope (one row per conversation)."""
    # The parent check is a scalar subquery, not NOT EXISTS: inside an OR, PostgreSQL
    # would hash the whole sessions table for it instead of one index lookup per row.
    return (
        f"({alias}.parent_session_id IS NULL "
        f"OR {lineage.is_branch_sql(alias)} "
        f"OR (SELECT vp.id FROM sessions vp WHERE vp.id = {alias}.parent_session_id) IS NULL)"
    )


def _day_start(day: dt.date) -> float:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()


FORKS_CACHE_SECONDS = 30


def fork_id_set() -> frozenset[str]:
    return frozenset(forks.fork_session_ids())


class ForkIds:
    """fork_session_ids(), computed at most once per request and cached briefly.

    Fork detection reads every keyed session and every response (about half a
    second on a 100,000-session store), so every worker shares one result,
    refreshed in the background every FORKS_CACHE_SECONDS (store.cached): a
    new fork group shows up within that time, and no request waits for it.

    Two reads: ``ids()`` for the fork filter, which needs the set to be right and so
    computes it inline on a cold cache; ``shown()`` for the rows' fork marks, which
    only display it: None while it is being computed in the background (the page
    says so, and reloads its rows once it is ready).
    """

    def __init__(self) -> None:
        # The cached frozenset itself, not a copy: at a million sessions copying it cost
        # each list request milliseconds.
        self._ids: frozenset[str] | None = None
        # Why the background computation failed, when it did (``shown()`` is None then too).
        self.failure: str | None = None

    def ids(self) -> frozenset[str]:
        if self._ids is None:
            self._ids = frozenset(
                cached.cached_figure(
                    "listing:forks", fork_id_set, fresh_seconds=FORKS_CACHE_SECONDS
                )
            )
        return self._ids

    def shown(self) -> frozenset[str] | None:
        if self._ids is None:
            try:
                entry = cached.ready_figure_at(
                    "listing:forks", fork_id_set, fresh_seconds=FORKS_CACHE_SECONDS
                )
            except cached.FigureFailed as failure:
                self.failure = failure.reason
                return None
            if entry is None:
                return None
            self._ids = frozenset(entry[1])
        return self._ids


cached.register("listing:forks", fork_id_set, fresh_seconds=FORKS_CACHE_SECONDS)


def fork_marks_ready() -> bool:
    """Whether the list's fork marks can be shown now (starting their computation if not).

    Raises ``cached.FigureFailed`` when their computation failed a moment ago.
    """
    forks = ForkIds()
    if forks.shown() is not None:
        return True
    if forks.failure is not None:
        raise cached.FigureFailed(forks.failure)
    return False


def _store_name() -> str:
    return str(connections[store_alias()].settings_dict["NAME"])


def where_sql(
    filters: Filters, *, fork_ids: ForkIds | None = None, scope: bool = True
) -> tuple[str, list]:
    """The WHERE over ``sessions s`` for ``filters`` (search text and sort excluded)."""
    fork_ids = fork_ids or ForkIds()
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("source", filters.source),
        ("model", filters.model),
        ("user_id", filters.user),
    ):
        if value:
            clauses.append(f"s.{column} = %s")
            params.append(value)
    if filters.status == "live":
        clauses.append("s.ended_at IS NULL")
    elif filters.status == "ended":
        clauses.append("s.ended_at IS NOT NULL")
    elif filters.status:
        clauses.append("s.end_reason = %s")
        params.append(filters.status)
    if filters.started_from:
        clauses.append("s.started_at >= %s")
        params.append(_day_start(filters.started_from))
    if filters.started_to:
        clauses.append("s.started_at < %s")
        params.append(_day_start(filters.started_to) + 86400.0)
    if filters.title:
        op = "ILIKE" if db.vendor() == "postgresql" else "LIKE"
        clauses.append(f"s.title {op} %s ESCAPE '\\'")
        params.append(db.contains_pattern(filters.title))
    if filters.forks or filters.health == "forks":
        ids = sorted(fork_ids.ids())
        if ids:
            sql, extra = _in_list("s.id", ids)
            clauses.append(sql)
            params.extend(extra)
        else:
            clauses.append("1 = 0")
    if filters.health and filters.health != "forks":
        sql, extra = health.predicate(filters.health, "s")
        clauses.append(f"({sql})")
        params.extend(extra)
    # "Has a message" as one index probe per row: PostgreSQL plans [NOT] EXISTS here as
    # a hash (anti) join over every message, even for one LIMITed page.
    first_message = "(SELECT em.id FROM messages em WHERE em.session_id = s.id LIMIT 1)"
    if filters.empty == "1":
        clauses.append(f"{first_message} IS NULL")
    elif filters.empty == "0":
        clauses.append(f"{first_message} IS NOT NULL")
    if filters.archived == "1":
        clauses.append("COALESCE(s.archived, 0) <> 0")
    elif filters.archived == "0":
        clauses.append("COALESCE(s.archived, 0) = 0")
    if scope and filters.scope == "roots":
        clauses.append(visible_sql("s"))
    return (" AND ".join(clauses) or "1 = 1"), params


def _after_sql(expr: str, desc: bool, value: Any, session_id: str) -> tuple[str, list]:
    """Keyset condition: rows strictly after (value, session_id) in the page order.

    Spelled ``key <= v AND (key < v OR id < i)`` so both backends seek the
    (key, id) index on the first term, expression indexes included.
    """
    op = "<" if desc else ">"
    return (
        f"({expr} {op}= %s AND ({expr} {op} %s OR s.id {op} %s))",
        [value, value, session_id],
    )


def count_capped(sql_from_where: str, params: list, cap: int | None = None) -> tuple[int, bool]:
    """COUNT over a LIMIT cap+1 subquery: (count up to cap, whether there are more)."""
    cap = COUNT_CAP if cap is None else cap
    row = db.fetchone(
        f"SELECT COUNT(*) FROM (SELECT 1 {sql_from_where} LIMIT {int(cap) + 1}) capped", params
    )
    n = int(row[0]) if row else 0
    return min(n, cap), n > cap


def _count_statement(where: str, params: list) -> tuple[str, list]:
    """count_capped's query over ``sessions s WHERE where``, for a batch."""
    return (
        f"SELECT COUNT(*) FROM (SELECT 1 FROM sessions s WHERE {where} "
        f"LIMIT {COUNT_CAP + 1}) capped",
        list(params),
    )


def _count_from(rows: Sequence[tuple]) -> tuple[int, bool]:
    n = int(rows[0][0]) if rows else 0
    return min(n, COUNT_CAP), n > COUNT_CAP


# ---------------------------------------------------------------------------
# Session pages


@dataclass(frozen=True)
class SessionRow:
    id: str
    title: str | None
    source: str
    user_id: str | None
    model: str | None
    started_at: float
    archived: bool
    parent_id: str | None
    branched_from: str | None
    delegate_from: str | None
    # Figures: the compression tip's on a compressed root in the roots scope.
    ended_at: float | None
    end_reason: str | None
    message_count: int
    tokens: int
    cost: float | None
    last_activity: float | None
    tip_id: str | None = None  # set when the figures come from another segment
    segments: int = 1
    branches: int = 0
    delegates: int = 0
    continuations: int = 0
    other_children: int = 0
    is_fork: bool = False
    # What labels the row when it has no title: its first user message (read up to
    # FIRST_MESSAGE_READ characters), else the gateway's display name.
    first_message: str | None = None
    display_name: str | None = None

    @property
    def is_live(self) -> bool:
        return self.ended_at is None

    @property
    def has_children(self) -> bool:
        return bool(self.branches or self.delegates or self.continuations or self.other_children)


@dataclass(frozen=True)
class SessionPage:
    rows: tuple[SessionRow, ...]
    next_cursor: str | None
    count: int
    count_capped: bool
    # The rows carry no fork marks yet: fork detection is running in the background.
    fork_marks_pending: bool = False
    # Why they will not come for now: fork detection failed in the background.
    fork_marks_failure: str | None = None
    choices: Choices | None = None  # when asked for (list_sessions' with_choices)


_BASE_COLUMNS = (
    f"s.id, {_TITLE_SQL}, s.source, s.user_id, s.model, s.started_at, s.archived, s.parent_session_id, "
    "s.ended_at, s.end_reason, s.message_count, s.input_tokens, s.output_tokens, "
    "s.estimated_cost_usd, "
    f"substr(s.display_name, 1, {TITLE_READ}) AS display_name"
)
# The row label's first user message: read in the rows' own query (no extra round trip),
# through idx_sa_messages_session_id (session_id, id), among the session's first
# FIRST_MESSAGE_SCAN messages only (the inner lookup bounds the id range), so a session
# of tool output without a user message costs a few index steps, not its whole transcript.
FIRST_MESSAGE_READ = 1000
FIRST_MESSAGE_SCAN = 20
_FIRST_MESSAGE_SQL = (
    f"(SELECT substr(m.content, 1, {FIRST_MESSAGE_READ}) FROM messages m "
    "WHERE m.session_id = s.id AND m.id <= COALESCE(("
    "SELECT scan.id FROM messages scan WHERE scan.session_id = s.id "
    f"ORDER BY scan.id LIMIT 1 OFFSET {FIRST_MESSAGE_SCAN - 1}), 9223372036854775807) "
    "AND m.role = 'user' AND m.active = 1 AND m.content <> '' "
    "ORDER BY m.id LIMIT 1) AS first_message"
)


_BASE_NAMES = (
    "id title source user_id model started_at archived parent_session_id ended_at end_reason "
    "message_count input_tokens output_tokens estimated_cost_usd display_name "
    "branched_from delegate_from first_message"
).split()


def _base_rows_statement(ids: Sequence[str], *, first_message: bool = False) -> tuple[str, list]:
    branched = lineage.marker("_branched_from", "s")
    delegate = lineage.marker("_delegate_from", "s")
    first = _FIRST_MESSAGE_SQL if first_message else "NULL AS first_message"
    sql, params = _in_list("s.id", ids)
    return (
        f"SELECT {_BASE_COLUMNS}, {branched} AS branched_from, {delegate} AS delegate_from, "
        f"{first} FROM sessions s WHERE {sql}",
        params,
    )


def _base_rows_from(rows: Sequence[tuple]) -> dict[str, dict]:
    return {row[0]: dict(zip(_BASE_NAMES, row, strict=True)) for row in rows}


def list_sessions(
    filters: Filters, cursor: Cursor | None = None, *, with_choices: bool = False
) -> SessionPage:
    """One keyset page of sessions matching ``filters``, after ``cursor``.

    No transaction around it: each statement reads on its own (JIT is off for the whole
    connection, dburl), and a session deleted between two of them drops out of the page.
    On PostgreSQL a page sorted by a column is three round trips: its ids with the count,
    the rows' figures, then their compression tips' figures and last-message times.
    ``with_choices``: the page's ``choices`` too (the filter form's), read with its ids
    when they are not cached.
    """
    return _list_sessions(filters, cursor, with_choices)


def _list_sessions(filters: Filters, cursor: Cursor | None, with_choices: bool) -> SessionPage:
    fork_ids = ForkIds()
    where, params = where_sql(filters, fork_ids=fork_ids)
    limit = filters.per_page
    desc = filters.direction == "desc"
    count: int | None = None
    capped = False
    reasons: dict[str, str | None] | None = None
    if filters.sort == "activity":
        # The count also picks the strategy (see _activity_rows).
        count, capped = count_capped(f"FROM sessions s WHERE {where}", params)
        ordered = _activity_rows(filters, where, params, cursor, limit + 1, small=not capped)
        ids = [sid for sid, _last, _started in ordered]
        more = len(ordered) > limit
        next_cursor = None
        if more:
            sid, last, started = ordered[limit - 1]
            values = ["m", last] if last is not None else ["e", started, sid]
            next_cursor = encode_cursor("activity", filters.direction, values)
        ids = ids[:limit]
    else:
        expr = SORT_SQL[filters.sort]
        page_where, page_params = where, list(params)
        if cursor is not None:
            extra, extra_params = _after_sql(expr, desc, cursor.values[0], cursor.values[1])
            page_where += f" AND {extra}"
            page_params += extra_params
        order = "DESC" if desc else "ASC"
        page_sql = (
            f"SELECT s.id, {expr}, s.end_reason FROM sessions s WHERE {page_where} "
            f"ORDER BY {expr} {order}, s.id {order} LIMIT %s",
            [*page_params, limit + 1],
        )
        if db.vendor() == "postgresql":
            # The count rides along with the page (one round trip), even when a first
            # page that is not full makes it redundant.
            found, counted = db.fetch_batch([page_sql, _count_statement(where, params)])
            count, capped = _count_from(counted)
        else:
            found = db.fetchall(*page_sql)
        more = len(found) > limit
        ids = [r[0] for r in found[:limit]]
        reasons = {r[0]: r[2] for r in found[:limit]}
        next_cursor = None
        if more:
            last_id, last_key, _reason = found[limit - 1]
            next_cursor = encode_cursor(
                filters.sort, filters.direction, [_jsonable(last_key), last_id]
            )
    if count is None:
        if cursor is None and not more:
            # A first page that is not full holds every match: no COUNT needed.
            count, capped = min(len(ids), COUNT_CAP), len(ids) > COUNT_CAP
        else:
            count, capped = count_capped(f"FROM sessions s WHERE {where}", params)
    rows = _enrich(ids, roots=filters.scope == "roots", fork_ids=fork_ids, reasons=reasons)
    return SessionPage(
        rows=tuple(rows),
        next_cursor=next_cursor,
        count=count,
        count_capped=capped,
        fork_marks_pending=bool(rows) and fork_ids.shown() is None and fork_ids.failure is None,
        fork_marks_failure=fork_ids.failure if rows else None,
        # A cached figure (never read in the request: issue 16), so no round trip.
        choices=choices() if with_choices else None,
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, int | float):
        return value
    # PostgreSQL may hand back Decimal for numeric expressions.
    number = float(value)
    return int(number) if number.is_integer() and not isinstance(value, float) else number


# --- last activity ---------------------------------------------------------


def _own_last_ids_statement(ids: Sequence[str]) -> tuple[str, list]:
    sql, params = _in_list("s.id", ids)
    return (
        "SELECT s.id, (SELECT MAX(m.id) FROM messages m WHERE m.session_id = s.id) "
        f"FROM sessions s WHERE {sql}",
        params,
    )


def _last_ids_from(rows: Sequence[tuple]) -> dict[str, int | None]:
    return {r[0]: (int(r[1]) if r[1] is not None else None) for r in rows}


def conversation_last_ids(ids: Sequence[str]) -> dict[str, int | None]:
    """Latest message id over each session and its compression continuations (all of them)."""
    if not ids:
        return {}
    return _last_ids_from(db.fetchall(*_conversation_last_ids_statement(ids)))


def _conversation_last_ids_statement(ids: Sequence[str]) -> tuple[str, list]:
    sql, params = _in_list("s.id", ids)
    continues = lineage.continues_parent_sql("c")
    if db.vendor() == "postgresql":
        # LATERAL with OFFSET 0 (no flattening): index lookups from each row found so far.
        recursive = (
            "SELECT sub.root_id, step.id FROM sub CROSS JOIN LATERAL ("
            "SELECT c.id FROM sessions p JOIN sessions c ON c.parent_session_id = p.id "
            f"WHERE p.id = sub.id AND p.end_reason = 'compression' AND {continues} "
            "OFFSET 0) step"
        )
    else:
        recursive = (
            "SELECT sub.root_id, c.id FROM sub JOIN sessions p ON p.id = sub.id "
            "JOIN sessions c ON c.parent_session_id = p.id "
            f"WHERE p.end_reason = 'compression' AND {continues}"
        )
    return (
        f"""
        WITH RECURSIVE sub(root_id, id) AS (
            SELECT s.id, s.id FROM sessions s WHERE {sql}
            UNION
            {recursive}
        )
        SELECT root_id, MAX(last_id) FROM (
            SELECT sub.root_id,
                   (SELECT MAX(m.id) FROM messages m WHERE m.session_id = sub.id) AS last_id
            FROM sub
        ) per_segment
        GROUP BY root_id
        """,
        params,
    )


def _display_roots(ids: Sequence[str]) -> dict[str, str]:
    """For each session, the roots-scope row that shows it (itself, or the root it continues)."""
    if not ids:
        return {}
    sql, params = _in_list("s.id", ids)
    continues = lineage.continues_parent_sql("c")
    step = (
        "SELECT p.id FROM sessions c JOIN sessions p ON p.id = c.parent_session_id "
        f"WHERE c.id = up.id AND p.end_reason = 'compression' AND {continues} "
        "LIMIT 1"  # one parent; the LIMIT also keeps PostgreSQL from flattening the LATERAL
    )
    if db.vendor() == "postgresql":
        # LATERAL pins the step to primary-key lookups from each row found so far; as
        # a plain join, PostgreSQL misjudges the marker tests and scans every session.
        recursive = f"SELECT up.start_id, step.id FROM up CROSS JOIN LATERAL ({step}) step"
    else:
        # Scalar subqueries, not joins: with a join in the recursive step SQLite (3.38+) builds
        # a Bloom filter over every session for each row the walk visits (1.1 s for 143 rows
        # at a million sessions; 1 ms this way). SQLite lets WHERE name the result column.
        parent = f"SELECT c.parent_session_id FROM sessions c WHERE c.id = up.id AND {continues}"
        recursive = (
            f"SELECT up.start_id, (SELECT p.id FROM sessions p WHERE p.id = ({parent}) "
            "AND p.end_reason = 'compression') AS next_id FROM up WHERE next_id IS NOT NULL"
        )
    rows = db.fetchall(
        f"""
        WITH RECURSIVE up(start_id, id) AS (
            SELECT s.id, s.id FROM sessions s WHERE {sql}
            UNION
            {recursive}
        )
        SELECT up.start_id, up.id FROM up JOIN sessions s ON s.id = up.id WHERE {visible_sql("s")}
        """,
        params,
    )
    return {start: root for start, root in rows}


def _latest_in_window(
    bounds_sql: str,
    bounds: list,
    desc: bool,
    extra: str = "",
    extra_params: Sequence[Any] = (),
    limit: int | None = None,
) -> list[tuple[int, str]]:
    order = "DESC" if desc else "ASC"
    # SQLite: CROSS JOIN keeps the scan on the message id range (a filter column's
    # index would otherwise drive the join and sort every message of those sessions).
    cross = "CROSS JOIN" if db.vendor() == "sqlite" else "JOIN"
    join = f"{cross} sessions s ON s.id = m.session_id" if extra else ""
    limit_sql = f" LIMIT {int(limit)}" if limit is not None else ""
    return [
        (int(r[0]), r[1])
        for r in db.fetchall(
            f"SELECT m.id, m.session_id FROM messages m {join} "
            f"WHERE {bounds_sql} AND NOT EXISTS (SELECT 1 FROM messages later "
            "WHERE later.session_id = m.session_id AND later.id > m.id)"
            f"{' AND ' + extra if extra else ''} ORDER BY m.id {order}{limit_sql}",
            [*bounds, *extra_params],
        )
    ]


def _activity_walk(
    filters: Filters, where: str, params: list, after_id: int | None, need: int
) -> list[tuple[str, int, float | None]] | None:
    """Rows with messages in activity order by walking message ids; None if over budget."""
    desc = filters.direction == "desc"
    roots = filters.scope == "roots"
    # Two queries: SQLite answers MIN or MAX from the primary key, but not both at once.
    low = db.fetchone("SELECT MIN(id) FROM messages")[0]
    high = db.fetchone("SELECT MAX(id) FROM messages")[0]
    if low is None or high is None:
        return []
    low, high = int(low), int(high)
    edge = after_id if after_id is not None else (high + 1 if desc else low - 1)
    window, scanned = WALK_WINDOW, 0
    out: list[tuple[str, int, float | None]] = []
    while len(out) < need:
        if desc:
            if edge <= low:
                break
            start = max(edge - window, low)
            bounds_sql, bounds, next_edge = "m.id >= %s AND m.id < %s", [start, edge], start
        else:
            if edge >= high:
                break
            stop = min(edge + window, high)
            bounds_sql, bounds, next_edge = "m.id > %s AND m.id <= %s", [edge, stop], stop
        if not roots:
            found = _latest_in_window(
                bounds_sql, bounds, desc, where, params, limit=need - len(out)
            )
            out.extend((sid, mid, None) for mid, sid in found)
        else:
            out.extend(_roots_in_window(bounds_sql, bounds, desc, where, params)[: need - len(out)])
        edge = next_edge
        scanned += window
        window = min(window * 2, WALK_MAX_WINDOW)
        if len(out) < need and scanned >= WALK_BUDGET:
            return None
    return out


def _roots_in_window(
    bounds_sql: str, bounds: list, desc: bool, where: str, params: list
) -> list[tuple[str, int, float | None]]:
    latest = _latest_in_window(bounds_sql, bounds, desc)
    if not latest:
        return []
    shown_by = _display_roots(sorted({sid for _mid, sid in latest}))
    candidates = sorted({shown_by[sid] for _mid, sid in latest if sid in shown_by})
    if not candidates:
        return []
    if db.vendor() == "postgresql":
        source, extra = "unnest(%s::text[]) AS picked(value)", [candidates]
    else:
        # CROSS JOIN keeps SQLite on the id list (primary key lookups) rather than
        # scanning an index of a filter column for the few ids in it.
        source, extra = "json_each(%s) AS picked", [json.dumps(candidates)]
    join = "CROSS JOIN" if db.vendor() == "sqlite" else "JOIN"
    matching = {
        r[0]: r[1]
        for r in db.fetchall(
            f"SELECT s.id, s.end_reason FROM {source} {join} sessions s ON s.id = picked.value "
            f"WHERE {where}",
            [*extra, *params],
        )
    }
    compressed = [sid for sid, reason in matching.items() if reason == "compression"]
    chain_last = conversation_last_ids(compressed) if compressed else {}
    out = []
    for mid, sid in latest:
        root = shown_by.get(sid)
        if root not in matching:
            continue
        # A root shows once, at its conversation's latest message.
        if root in chain_last and chain_last[root] != mid:
            continue
        out.append((root, mid, None))
    return out


def _activity_empty(
    filters: Filters, where: str, params: list, after: tuple[float, str] | None, need: int
) -> list[tuple[str, int | None, float]]:
    """Rows with no messages (their whole conversation in the roots scope), by started_at."""
    desc = filters.direction == "desc"
    order = "DESC" if desc else "ASC"
    out: list[tuple[str, int | None, float]] = []
    while len(out) < need:
        page_where, page_params = where, list(params)
        if after is not None:
            extra, extra_params = _after_sql("s.started_at", desc, after[0], after[1])
            page_where += f" AND {extra}"
            page_params += extra_params
        batch = need - len(out) + 10
        found = db.fetchall(
            f"SELECT s.id, s.started_at, s.end_reason FROM sessions s WHERE {page_where} "
            "AND (SELECT em.id FROM messages em WHERE em.session_id = s.id LIMIT 1) IS NULL "
            f"ORDER BY s.started_at {order}, s.id {order} LIMIT %s",
            [*page_params, batch],
        )
        if filters.scope == "roots":
            compressed = [r[0] for r in found if r[2] == "compression"]
            chain_last = conversation_last_ids(compressed) if compressed else {}
        else:
            chain_last = {}
        for sid, started, _reason in found:
            if chain_last.get(sid) is None:
                out.append((sid, None, float(started)))
        if len(found) < batch:
            break
        after = (found[-1][1], found[-1][0])
    return out[:need]


def _activity_by_sessions(
    filters: Filters, where: str, params: list, cursor: Cursor | None, need: int
) -> list[tuple[str, int | None, float]]:
    """Activity order computed from every matching session (one index probe each)."""
    desc = filters.direction == "desc"
    rows = db.fetchall(
        "SELECT s.id, s.end_reason, s.started_at, "
        "(SELECT MAX(m.id) FROM messages m WHERE m.session_id = s.id) "
        f"FROM sessions s WHERE {where}",
        params,
    )
    last = {r[0]: (int(r[3]) if r[3] is not None else None) for r in rows}
    if filters.scope == "roots":
        compressed = [r[0] for r in rows if r[1] == "compression"]
        for start in range(0, len(compressed), 500):
            last.update(conversation_last_ids(compressed[start : start + 500]))
    active = [
        (sid, last[sid], float(started)) for sid, _r, started, _l in rows if last[sid] is not None
    ]
    empty = [(sid, None, float(started)) for sid, _r, started, _l in rows if last[sid] is None]
    if cursor is not None and cursor.values[0] == "m":
        after = cursor.values[1]
        active = [r for r in active if (r[1] < after if desc else r[1] > after)]
    elif cursor is not None:
        key = (cursor.values[1], cursor.values[2])
        active = []
        empty = [r for r in empty if ((r[2], r[0]) < key if desc else (r[2], r[0]) > key)]
    pick = heapq.nlargest if desc else heapq.nsmallest
    first = pick(need, active, key=lambda r: r[1])
    if len(first) < need:
        first += pick(need - len(first), empty, key=lambda r: (r[2], r[0]))
    return first


def _compressed_with_activity(
    filters: Filters, where: str, params: list, cursor: Cursor | None, need: int
) -> list[tuple[str, int | None, float | None]]:
    """Roots-scope rows ended by compression whose chain has messages, in activity order."""
    if filters.scope != "roots":
        return []
    desc = filters.direction == "desc"
    ids = [
        r[0]
        for r in db.fetchall(
            f"SELECT s.id FROM sessions s WHERE {where} AND s.end_reason = 'compression'", params
        )
    ]
    found: list[tuple[str, int | None, float | None]] = []
    for start in range(0, len(ids), 500):
        for sid, last in conversation_last_ids(ids[start : start + 500]).items():
            if last is not None:
                found.append((sid, last, None))
    if cursor is not None:
        after = cursor.values[1]
        found = [r for r in found if (r[1] < after if desc else r[1] > after)]
    found.sort(key=lambda r: r[1], reverse=desc)
    return found[:need]


def _activity_rows(
    filters: Filters, where: str, params: list, cursor: Cursor | None, need: int, *, small: bool
) -> list[tuple[str, int | None, float | None]]:
    """The next ``need`` rows in last-activity order: (session id, last message id, started_at).

    Rows with messages come first, by their latest message id; then rows with
    none, by started_at. A filter matching few sessions (``small``: at most
    COUNT_CAP) is answered from those sessions; otherwise messages are walked
    by id from the cursor, which finds a page after reading a few windows of
    recent messages. If the walk reads WALK_BUDGET ids without filling the
    page (many matches, all long inactive), it gives way to the sessions.
    """
    if small:
        return _activity_by_sessions(filters, where, params, cursor, need)
    out: list[tuple[str, int | None, float | None]] = []
    empty_after: tuple[float, str] | None = None
    if filters.empty == "1" or filters.health == "empty":
        # No row has messages of its own: skip the walk (it would read every message
        # for nothing). Only a compressed root can still have activity, in its chain.
        if cursor is None or cursor.values[0] == "m":
            out.extend(_compressed_with_activity(filters, where, params, cursor, need))
            if len(out) >= need:
                return out[:need]
        else:
            empty_after = (cursor.values[1], cursor.values[2])
    elif cursor is None or cursor.values[0] == "m":
        walked = _activity_walk(filters, where, params, cursor.values[1] if cursor else None, need)
        if walked is None:
            return _activity_by_sessions(filters, where, params, cursor, need)
        out.extend(walked)
        if len(out) >= need:
            return out[:need]
    else:
        empty_after = (cursor.values[1], cursor.values[2])
    out.extend(_activity_empty(filters, where, params, empty_after, need - len(out)))
    return out


# --- enrichment of the rows on a page --------------------------------------


def _children_statement(ids: Sequence[str]) -> tuple[str, list]:
    sql, params = _in_list("c.parent_session_id", ids)
    return (
        f"SELECT c.parent_session_id, {lineage.link_kind_sql('c', 'p')} AS kind, COUNT(*) "
        f"FROM sessions c JOIN sessions p ON p.id = c.parent_session_id WHERE {sql} "
        "GROUP BY c.parent_session_id, kind",
        params,
    )


def _children_from(rows: Sequence[tuple]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for parent, link_kind, n in rows:
        out.setdefault(parent, {})[CHILD_COUNTS[link_kind]] = int(n)
    return out


# The SessionRow field counting each kind of child link (lineage.link_kind_sql).
CHILD_COUNTS = {
    "delegate": "delegates",
    "branch": "branches",
    "compression": "continuations",
    "child": "other_children",
}


def _message_times_statement(ids: Sequence[int]) -> tuple[str, list]:
    sql, params = _in_list("m.id", ids)
    return f"SELECT m.id, m.timestamp FROM messages m WHERE {sql}", params


def _enrich(
    ids: Sequence[str],
    *,
    roots: bool,
    fork_ids: ForkIds,
    reasons: dict[str, str | None] | None = None,
) -> list[SessionRow]:
    """The page's rows with their figures, in at most three batches of statements (each
    one round trip on PostgreSQL, db.fetch_batch); two when the page's end reasons are
    known (``reasons``), so the compressed rows' chains need not wait for the rows."""
    if not ids:
        return []
    first = [
        _base_rows_statement(ids, first_message=True),
        _own_last_ids_statement(ids),
        _children_statement(ids),
    ]
    chained = []  # (kind, statement) for the compressed rows of the roots scope

    def chain_statements(compressed: list[str]) -> list[tuple[str, tuple[str, list]]]:
        if not roots or not compressed:
            return []
        out = [("tips", lineage.forward_chains_statement(compressed))]
        for start in range(0, len(compressed), 500):
            batch = compressed[start : start + 500]
            out.append(("last", _conversation_last_ids_statement(batch)))
        return out

    if reasons is not None:
        chained = chain_statements([sid for sid in ids if reasons.get(sid) == "compression"])
    results = db.fetch_batch(first + [statement for _kind, statement in chained])
    base = _base_rows_from(results[0])
    last = _last_ids_from(results[1])
    children = _children_from(results[2])
    chain_results = results[3:]
    if reasons is None:
        compressed = [sid for sid in base if base[sid]["end_reason"] == "compression"]
        chained = chain_statements([sid for sid in ids if sid in compressed])
        chain_results = db.fetch_batch([statement for _kind, statement in chained])
    tips: dict[str, tuple[str, int]] = {}
    for (kind, _statement), rows in zip(chained, chain_results, strict=True):
        if kind == "tips":
            chains = lineage.chains_from_rows(rows)
            tips = {start: (chain[-1], len(chain)) for start, chain in chains.items()}
        else:
            last.update(_last_ids_from(rows))
    ids = [sid for sid in ids if sid in base]  # a session deleted meanwhile drops out
    tip_ids = [tip for tip, _n in tips.values() if tip not in base]
    message_ids = [mid for mid in last.values() if mid is not None]
    finishing = []
    if tip_ids:
        finishing.append(_base_rows_statement(tip_ids))
    if message_ids:
        finishing.append(_message_times_statement(message_ids))
    finished = db.fetch_batch(finishing)
    figures = {**base, **(_base_rows_from(finished[0]) if tip_ids else {})}
    times = {int(r[0]): float(r[1]) for r in (finished[-1] if message_ids else [])}
    fork_set = fork_ids.shown() or frozenset()
    out = []
    for sid in ids:
        row = base[sid]
        tip_id, segments = tips.get(sid, (sid, 1))
        fig = figures.get(tip_id, row)
        kinds = children.get(sid, {})
        last_id = last.get(sid)
        out.append(
            SessionRow(
                id=sid,
                title=row["title"],
                source=row["source"],
                user_id=row["user_id"],
                model=row["model"],
                started_at=float(row["started_at"]),
                archived=bool(row["archived"]),
                parent_id=row["parent_session_id"],
                branched_from=row["branched_from"],
                delegate_from=row["delegate_from"],
                ended_at=fig["ended_at"],
                end_reason=fig["end_reason"],
                message_count=int(fig["message_count"] or 0),
                tokens=int(fig["input_tokens"] or 0) + int(fig["output_tokens"] or 0),
                cost=float(fig["estimated_cost_usd"])
                if fig["estimated_cost_usd"] is not None
                else None,
                last_activity=times.get(last_id) if last_id is not None else None,
                tip_id=tip_id if tip_id != sid else None,
                segments=segments,
                branches=kinds.get("branches", 0),
                delegates=kinds.get("delegates", 0),
                continuations=kinds.get("continuations", 0),
                other_children=kinds.get("other_children", 0),
                is_fork=sid in fork_set,
                first_message=row["first_message"],
                display_name=row["display_name"],
            )
        )
    return out


# ---------------------------------------------------------------------------
# Full-text search, grouped by session
#
# A page walks the messages matching the query in id order from its cursor, at most
# SEARCH_CANDIDATES of them (each with whether its session passes the filters), and
# groups the passing ones by session in the order of each session's first hit. The
# page shows PAGE_SIZE sessions; the next page starts at the first hit of the next
# session. A session whose hits straddle that start has a hit before it, so it was
# on an earlier page: sessions with a hit before the page's start are left out
# (one probe per candidate session), and no session is listed twice.

SNIPPETS_PER_SESSION = 3
# Snippets cost (FTS5's snippet() about 0.25 ms each on a common word): every session of
# a page gets one, only the first this many up to SNIPPETS_PER_SESSION.
FULL_SNIPPET_SESSIONS = 12
# The first read of matches; each further read is four times larger.
SCAN_BATCH = 512
# A session's hit count above this shows as "100+".
SESSION_COUNT_SHOWN = 100
# Roles whose hits make the better snippets (tool results are mostly JSON).
_TEXT_ROLES = frozenset({"user", "assistant"})
_TOOL_CALL_NAME = re.compile(r'"name"\s*:\s*"([^"\\]{1,200})"')


@dataclass(frozen=True)
class SearchHit:
    message_id: int
    session_id: str
    role: str
    timestamp: float
    # The tool a tool result answers, or the (first) tool an assistant message calls.
    tool_name: str | None
    active: bool
    # The matching text around the hit, the words between MARK_START and MARK_END (raw text:
    # console/html.highlight escapes it and marks the words).
    snippet: str


@dataclass(frozen=True)
class SessionHits:
    """One session of a search page: who it is, how many of its messages match, the best."""

    session_id: str
    title: str | None
    source: str
    user_id: str | None
    chat_id: str | None
    display_name: str | None
    first_user_text: str | None
    # Matching messages (passing the filters) seen from the page's start: exact unless
    # ``count_more`` (over SESSION_COUNT_SHOWN, or the session goes on past the scan).
    count: int
    count_more: bool
    # Its first hit in the page's order: "more in this session" opens the transcript there.
    first_hit_id: int
    hits: tuple[SearchHit, ...]


@dataclass(frozen=True)
class NameMatch:
    """A session whose user id, chat id or display name matches the search text."""

    session_id: str
    title: str | None
    source: str
    user_id: str | None
    chat_id: str | None
    display_name: str | None
    started_at: float | None
    matched: str  # "user", "chat" or "name"


@dataclass(frozen=True)
class SearchPage:
    sessions: tuple[SessionHits, ...]
    next_cursor: str | None
    count: int
    count_capped: bool
    terms: tuple[str, ...] = field(default=())
    # The page stopped after checking SEARCH_CANDIDATES messages containing the words
    # before it had a page of sessions (its next link searches on).
    scan_capped: bool = False
    # The count covers only the first this many messages containing the words.
    count_within: int | None = None
    names: tuple[NameMatch, ...] = field(default=())

    @property
    def hits(self) -> tuple[SearchHit, ...]:
        return tuple(hit for group in self.sessions for hit in group.hits)


def fts5_query(terms: Sequence[str] | Query) -> str:
    """An FTS5 query matching every included phrase as plain text and none excluded.

    Each phrase is a quoted string: inside one only ``"`` is special (doubled), so
    operators, ``*``, ``^``, ``:``, parentheses and column filters are just characters
    there, and the tokenizer drops the punctuation exactly as it did when indexing.
    """
    query = terms if isinstance(terms, Query) else Query(include=tuple(terms))

    def quoted(phrase: str) -> str:
        return '"' + phrase.replace('"', '""') + '"'

    sql = " ".join(quoted(term) for term in query.include)
    if query.exclude:
        sql = f"({sql}) " + " ".join(f"NOT {quoted(term)}" for term in query.exclude)
    return sql


def search(filters: Filters, cursor: Cursor | None = None) -> SearchPage:
    """Sessions with messages matching ``filters.q``, grouped, in sessions matching the filters.

    Keyset-paginated by each session's first hit, newest first (``dir=asc``: oldest
    first). Search looks in every segment: the roots scope does not apply.
    """
    return _search(filters, cursor)


def _search(filters: Filters, cursor: Cursor | None) -> SearchPage:
    query = filters.query
    names = tuple(search_names(filters.q)) if cursor is None else ()
    if not query.include:
        return SearchPage(sessions=(), next_cursor=None, count=0, count_capped=False, names=names)
    backend = _PG if db.vendor() == "postgresql" else _SQLITE
    desc = filters.direction == "desc"
    limit = filters.per_page
    where, params = where_sql(filters, scope=False)
    start = int(cursor.values[0]) if cursor else None
    # Read matches in growing batches until the page has its sessions (and the next
    # page's first) or SEARCH_CANDIDATES matches were read: a common word stops after
    # the first batch, a rare one reads all of its few matches at once.
    scanned: list[tuple] = []
    groups: dict[str, list[tuple[int, str]]] = {}
    earlier: dict[str, bool] = {}
    # A word PostgreSQL's statistics know, unfiltered, first page: the first read takes the
    # count's COUNT_CAP + 1 matches too, in the one walk (PgSearch.common_word) or bitmap
    # read (PgSearch.first_window), not in a second that reads the word's list again.
    counted_here = (
        backend is _PG and cursor is None and where == "1 = 1" and _PG.word_share(query) is not None
    )
    batch = max(SCAN_BATCH, COUNT_CAP + 1) if counted_here else SCAN_BATCH
    more, bound = True, start
    while more and len(scanned) < SEARCH_CANDIDATES:
        take = min(batch, SEARCH_CANDIDATES - len(scanned))
        rows, more = backend.scan(query, where, params, desc, bound, take)
        if not rows:
            break
        scanned += rows
        for message_id, session_id, role, passes in rows:
            if passes:
                groups.setdefault(session_id, []).append((int(message_id), role))
        last = int(rows[-1][0])
        bound = last - 1 if desc else last + 1
        kept = _not_on_earlier_pages(backend, query, list(groups), start, desc, limit + 1, earlier)
        if len(kept) > limit:
            break
        batch *= 4
    kept = _not_on_earlier_pages(backend, query, list(groups), start, desc, limit + 1, earlier)
    next_start = None
    scan_capped = False
    if len(kept) > limit:
        next_start = groups[kept[limit]][0][0]
        kept = kept[:limit]
    elif more:
        next_start = bound  # the scan stopped at SEARCH_CANDIDATES: search on after it
        scan_capped = True
    if counted_here and (len(scanned) > COUNT_CAP or not more):
        count, capped, count_within = min(len(scanned), COUNT_CAP), len(scanned) > COUNT_CAP, None
    else:
        count, capped, count_within = backend.count(query, where, params, desc)
    sessions = _session_hits(backend, query, groups, kept, scanned if more else None, desc)
    next_cursor = None
    if next_start is not None:
        next_cursor = encode_cursor("search", filters.direction, [next_start])
    return SearchPage(
        sessions=sessions,
        next_cursor=next_cursor,
        count=count,
        count_capped=capped,
        terms=query.include,
        scan_capped=scan_capped,
        count_within=count_within,
        names=names,
    )


def _not_on_earlier_pages(
    backend: Any,
    query: Query,
    order: list[str],
    start: int | None,
    desc: bool,
    wanted: int,
    earlier: dict[str, bool],
) -> list[str]:
    """The first ``wanted`` sessions of ``order`` with no hit before ``start``
    (``earlier`` remembers the sessions already probed)."""
    if start is None:
        return order[:wanted]
    kept: list[str] = []
    at = 0
    while len(kept) < wanted and at < len(order):
        batch = order[at : at + wanted - len(kept)]
        at += len(batch)
        probe = [session_id for session_id in batch if session_id not in earlier]
        if probe:
            found = backend.hit_before(query, probe, start, desc)
            earlier.update((session_id, session_id in found) for session_id in probe)
        kept += [session_id for session_id in batch if not earlier[session_id]]
    return kept


def _best(hits: list[tuple[int, str]]) -> list[int]:
    """Up to SNIPPETS_PER_SESSION hits: text messages before tool ones, then page order."""
    ranked = sorted(enumerate(hits), key=lambda p: (p[1][1] not in _TEXT_ROLES, p[0]))
    return [hits[i][0] for i, _ in ranked[:SNIPPETS_PER_SESSION]]


def _session_hits(
    backend: Any,
    query: Query,
    groups: dict[str, list[tuple[int, str]]],
    kept: list[str],
    scanned: list[tuple] | None,
    desc: bool,
) -> tuple[SessionHits, ...]:
    if not kept:
        return ()
    budget = len(kept) + (SNIPPETS_PER_SESSION - 1) * min(len(kept), FULL_SNIPPET_SESSIONS)
    best: dict[str, list[int]] = {}
    for session_id in kept:
        share = max(1, min(SNIPPETS_PER_SESSION, budget - (len(kept) - len(best) - 1)))
        best[session_id] = _best(groups[session_id])[:share]
        budget -= len(best[session_id])
    wanted = sorted(i for ids in best.values() for i in ids)
    hits: dict[int, SearchHit] = {}
    for r in backend.snippets(query, wanted, desc):
        names = _TOOL_CALL_NAME.findall(r[6] or "")
        hits[int(r[0])] = SearchHit(
            message_id=int(r[0]),
            session_id=r[1],
            role=r[2],
            timestamp=float(r[3] or 0),
            tool_name=r[4] or (names[0] if names else None),
            active=bool(r[5]),
            snippet=r[7] or "",
        )
    # With the scan stopped at its cap, a session may match past its last scanned
    # message: its count is exact only if it has no message beyond that one.
    beyond: set[str] = set()
    if scanned is not None:
        last = int(scanned[-1][0])
        ids_sql, ids_params = _in_list("session_id", kept)
        edge = "MIN(id)" if desc else "MAX(id)"
        for session_id, edge_id in db.fetchall(
            f"SELECT session_id, {edge} FROM messages WHERE {ids_sql} GROUP BY session_id",
            ids_params,
        ):
            if edge_id is not None and (edge_id < last if desc else edge_id > last):
                beyond.add(session_id)
    info = _session_info(kept)
    out = []
    for session_id in kept:
        row = info.get(session_id, {})
        count = len(groups[session_id])
        out.append(
            SessionHits(
                session_id=session_id,
                title=row.get("title"),
                source=row.get("source") or "",
                user_id=row.get("user_id"),
                chat_id=row.get("chat_id"),
                display_name=row.get("display_name"),
                first_user_text=row.get("first_user_text"),
                count=min(count, SESSION_COUNT_SHOWN),
                count_more=count > SESSION_COUNT_SHOWN or session_id in beyond,
                first_hit_id=groups[session_id][0][0],
                hits=tuple(hits[i] for i in best[session_id] if i in hits),
            )
        )
    return tuple(out)


# What a session's label falls back to when it has no title, read for a page's sessions only.
FIRST_TEXT_READ = 200


def _session_info(ids: Sequence[str]) -> dict[str, dict]:
    ids_sql, ids_params = _in_list("s.id", ids)
    first_text = (
        f"(SELECT substr(fm.content, 1, {FIRST_TEXT_READ}) FROM messages fm "
        "WHERE fm.session_id = s.id AND fm.role = 'user' AND fm.content IS NOT NULL "
        "ORDER BY fm.id LIMIT 1)"
    )
    rows = db.fetchall(
        f"SELECT s.id, {_TITLE_SQL}, s.source, s.user_id, s.chat_id, "
        f"substr(s.display_name, 1, {MAX_TEXT}), "
        f"CASE WHEN s.title IS NULL THEN {first_text} END FROM sessions s WHERE {ids_sql}",
        ids_params,
    )
    keys = ("title", "source", "user_id", "chat_id", "display_name", "first_user_text")
    return {r[0]: dict(zip(keys, r[1:], strict=True)) for r in rows}


class SqliteSearch:
    """SQLite: the FTS5 index hands matches out in rowid order, so a scan is a LIMITed
    read of the index, and only those candidates are joined to their sessions."""

    @staticmethod
    def scan(
        query: Query, where: str, params: list, desc: bool, start: int | None, take: int
    ) -> tuple[list[tuple], bool]:
        """Up to ``take`` matches from ``start`` (inclusive; None: the first), each with
        whether its session passes the filters; and whether more matches follow."""
        order = "DESC" if desc else "ASC"
        bound = f" AND rowid {'<=' if desc else '>='} %s" if start is not None else ""
        rows = db.fetchall(
            f"SELECT c.id, m.session_id, m.role, CASE WHEN {where} THEN 1 ELSE 0 END FROM ("
            f"SELECT rowid AS id FROM messages_fts WHERE messages_fts MATCH %s{bound} "
            f"ORDER BY rowid {order} LIMIT %s) c JOIN messages m ON m.id = c.id "
            f"JOIN sessions s ON s.id = m.session_id ORDER BY c.id {order}",
            [
                *params,
                fts5_query(query),
                *([start] if start is not None else []),
                take + 1,
            ],
        )
        return rows[:take], len(rows) > take

    @staticmethod
    def count(query: Query, where: str, params: list, desc: bool) -> tuple[int, bool, int | None]:
        match = fts5_query(query)
        if where == "1 = 1":
            count, capped = count_capped("FROM messages_fts WHERE messages_fts MATCH %s", [match])
            return count, capped, None
        order = "DESC" if desc else "ASC"
        candidates = (
            "SELECT rowid AS id FROM messages_fts WHERE messages_fts MATCH %s "
            f"ORDER BY rowid {order} LIMIT {SEARCH_CANDIDATES}"
        )
        count, capped = count_capped(
            f"FROM ({candidates}) c JOIN messages m ON m.id = c.id "
            f"JOIN sessions s ON s.id = m.session_id WHERE {where}",
            [match, *params],
        )
        within = None
        if not capped:
            checked = db.fetchone(f"SELECT COUNT(*) FROM ({candidates}) c", [match])[0]
            within = SEARCH_CANDIDATES if checked >= SEARCH_CANDIDATES else None
        return count, capped, within

    @staticmethod
    def hit_before(query: Query, session_ids: list[str], start: int, desc: bool) -> set[str]:
        # Driven by the sessions' messages (CROSS JOIN keeps that order), each probed in
        # the index by rowid: bounded by those sessions' sizes, not the word's frequency.
        ids_sql, ids_params = _in_list("m.session_id", session_ids)
        rows = db.fetchall(
            "SELECT DISTINCT m.session_id FROM messages m CROSS JOIN messages_fts "
            f"ON messages_fts.rowid = m.id WHERE {ids_sql} AND m.id {'>' if desc else '<'} %s "
            "AND messages_fts MATCH %s",
            [*ids_params, start, fts5_query(query)],
        )
        return {r[0] for r in rows}

    @staticmethod
    def snippets(query: Query, ids: list[int], desc: bool) -> list[tuple]:
        if not ids:
            return []
        ids_sql, ids_params = _in_list("messages_fts.rowid", ids)
        # Read within the page's rowid range (FTS5 uses it).
        return db.fetchall(
            "SELECT messages_fts.rowid, m.session_id, m.role, m.timestamp, m.tool_name, m.active, "
            "substr(m.tool_calls, 1, 400), snippet(messages_fts, 0, %s, %s, %s, %s) "
            "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
            "WHERE messages_fts MATCH %s AND messages_fts.rowid >= %s "
            f"AND messages_fts.rowid <= %s AND {ids_sql}",
            [
                MARK_START,
                MARK_END,
                SNIPPET_ELLIPSIS,
                SNIPPET_TOKENS,
                fts5_query(query),
                min(ids),
                max(ids),
                *ids_params,
            ],
        )


class PgSearch:
    """PostgreSQL: matching messages in id windows from the cursor, then headlines.

    Left to itself the planner walks the primary key and computes to_tsvector for
    every message until enough match (seconds for a mid-frequency word, or with a
    narrow session filter). Here windows of ids from the cursor, growing (the first
    SEARCH_WINDOW ids), are read through the GIN index ANDed with the id range
    (bitmap scans only) until the scan has what it wants.
    """

    document = FTS_DOCUMENT_SQL.format(t="m.")

    @staticmethod
    def word_share(query: Query) -> float | None:
        """The share of messages holding the query's one word, when PostgreSQL's statistics
        for the index name it (its most common words); None otherwise."""
        if len(query.include) != 1 or query.exclude or " " in query.include[0]:
            return None
        return word_shares().get(query.include[0].lower())

    @classmethod
    def first_window(cls, query: Query, take: int) -> int:
        """How many message ids the first bitmap read covers.

        Each read of a word through the GIN index costs its whole list of messages, however
        narrow the id range ANDed with it (a word in 3% of 14.6 million messages: 117 ms a
        read). For a word the statistics know, the first window is sized from its share to
        hold ``take`` matches at once (twice that many ids: ids have gaps); for the others it
        is SEARCH_WINDOW, growing four times each read.
        """
        share = cls.word_share(query)
        if not share:
            return SEARCH_WINDOW
        return max(SEARCH_WINDOW, int((take + 1) / share * 2))

    @classmethod
    def common_word(cls, query: Query) -> bool:
        """The query is one word in at least COMMON_WORD_SHARE of the messages.

        The GIN index answers such a word with every message holding it (623,000 ids
        for "the" on a 1.5-million-message store: 100 ms a statement, whatever the id
        range ANDed with it), while reading messages in id order and testing each finds
        a page's matches, or the count's first COUNT_CAP, within a few thousand rows.
        The share is PostgreSQL's own statistic for the index (pg_stats, per ANALYZE).
        """
        return (cls.word_share(query) or 0.0) >= COMMON_WORD_SHARE

    @staticmethod
    def tsquery(query: Query) -> tuple[str, list]:
        sql = " && ".join("phraseto_tsquery('simple', %s)" for _ in query.include)
        if query.exclude:
            sql = f"({sql}) && " + " && ".join(
                "!!phraseto_tsquery('simple', %s)" for _ in query.exclude
            )
        return sql, [*query.include, *query.exclude]

    @classmethod
    def matches(cls, query: Query) -> tuple[str, list]:
        sql, params = cls.tsquery(query)
        # A one-token word can only match a message whose lower-cased text holds it: the
        # 'simple' configuration's lexemes are the text's tokens, lower-cased as lower()
        # does. Testing that first spares to_tsvector (the whole text parsed) for every
        # message without it: a common word's walk in id order, 80 -> 52 ms at 100,000
        # sessions. Other terms (phrases, "can't") are left to the full-text test alone.
        plain = [term.lower() for term in query.include if term.isalnum()]
        contains = "".join(f"strpos(lower({cls.document}), %s) > 0 AND " for _ in plain)
        return f"{contains}to_tsvector('simple', {cls.document}) @@ ({sql})", [*plain, *params]

    @classmethod
    def scan(
        cls, query: Query, where: str, params: list, desc: bool, start: int | None, take: int
    ) -> tuple[list[tuple], bool]:
        matches, match_params = cls.matches(query)
        order = "DESC" if desc else "ASC"
        low = db.fetchone("SELECT MIN(id) FROM messages")[0]
        high = db.fetchone("SELECT MAX(id) FROM messages")[0]
        out: list[tuple] = []
        if low is None:
            return out, False
        low, high = int(low), int(high)
        if start is None:
            edge = high + 1 if desc else low - 1
        else:
            edge = start + 1 if desc else start - 1  # the walk's bound is exclusive
        # Bitmap scans only, from the first window: a scan reads hundreds of matches, and a
        # freely planned window computed to_tsvector for every message until enough matched
        # (33 ms for a frequent word, 61 ms for a rarer one, against 15 and 2 ms). Except
        # for a word in a large share of messages (common_word).
        window = cls.first_window(query, take)
        with _bitmap_scans_only(not cls.common_word(query)):
            while len(out) <= take:
                if desc:
                    if edge <= low:
                        break
                    first = max(edge - window, low)
                    bounds, bound_params, next_edge = (
                        "m.id >= %s AND m.id < %s",
                        [first, edge],
                        first,
                    )
                else:
                    if edge >= high:
                        break
                    stop = min(edge + window, high)
                    bounds, bound_params, next_edge = "m.id > %s AND m.id <= %s", [edge, stop], stop
                out += db.fetchall(
                    f"SELECT m.id, m.session_id, m.role, CASE WHEN {where} THEN 1 ELSE 0 END "
                    f"FROM messages m JOIN sessions s ON s.id = m.session_id "
                    f"WHERE {bounds} AND {matches} ORDER BY m.id {order} LIMIT %s",
                    [*params, *bound_params, *match_params, take + 1 - len(out)],
                )
                edge = next_edge
                window *= 4
        return out[:take], len(out) > take

    @classmethod
    def count(
        cls, query: Query, where: str, params: list, desc: bool
    ) -> tuple[int, bool, int | None]:
        if where == "1 = 1":
            # Still bitmap-only: the capped count reads matches through the GIN index
            # (a common word's first COUNT_CAP matches are read as they come).
            matches, match_params = cls.matches(query)
            with _bitmap_scans_only(not cls.common_word(query)):
                count, capped = count_capped(
                    f"FROM messages m JOIN sessions s ON s.id = m.session_id WHERE {matches}",
                    match_params,
                )
            return count, capped, None
        rows, more = cls.scan(query, where, params, desc, None, SEARCH_CANDIDATES)
        passing = sum(1 for row in rows if row[3])
        capped = passing > COUNT_CAP
        return min(passing, COUNT_CAP), capped, SEARCH_CANDIDATES if more and not capped else None

    @classmethod
    def hit_before(cls, query: Query, session_ids: list[str], start: int, desc: bool) -> set[str]:
        matches, match_params = cls.matches(query)
        ids_sql, ids_params = _in_list("m.session_id", session_ids)
        rows = db.fetchall(
            f"SELECT DISTINCT m.session_id FROM messages m WHERE {ids_sql} "
            f"AND m.id {'>' if desc else '<'} %s AND {matches}",
            [*ids_params, start, *match_params],
        )
        return {r[0] for r in rows}

    @classmethod
    def snippets(cls, query: Query, ids: list[int], desc: bool) -> list[tuple]:
        if not ids:
            return []
        tsquery, tsquery_params = cls.tsquery(query)
        ids_sql, ids_params = _in_list("m.id", ids)
        options = (
            f'StartSel="{MARK_START}", StopSel="{MARK_END}", MaxWords=30, MinWords=12, '
            f'MaxFragments=2, FragmentDelimiter=" {SNIPPET_ELLIPSIS} "'
        )
        return db.fetchall(
            "SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, m.active, "
            f"substr(m.tool_calls, 1, 400), ts_headline('simple', {cls.document}, "
            f"({tsquery}), %s) FROM messages m WHERE {ids_sql}",
            [*tsquery_params, options, *ids_params],
        )


@contextlib.contextmanager
def _bitmap_scans_only(wanted: bool = True) -> Iterator[None]:
    """PostgreSQL reads matches through the GIN index ANDed with the id range."""
    if not wanted:
        yield
        return
    if connections[store_alias()].in_atomic_block:  # the caller's transaction goes on after
        db.execute("SET LOCAL enable_indexscan = off; SET LOCAL enable_seqscan = off")
        try:
            yield
        finally:
            db.execute("SET LOCAL enable_indexscan = on; SET LOCAL enable_seqscan = on")
        return
    # A transaction of its own, which the settings end with: BEGIN, one message for both
    # SETs, the reads, COMMIT. The rest of a search page reads in autocommit.
    with transaction.atomic(using=store_alias()):
        db.execute("SET LOCAL enable_indexscan = off; SET LOCAL enable_seqscan = off")
        yield


_SQLITE = SqliteSearch()
_PG = PgSearch()

# At this share of messages or more, a word is read in id order (PgSearch.common_word):
# a match every five messages or closer; below it the GIN index's list is cheaper.
COMMON_WORD_SHARE = 0.2
WORD_SHARES_SECONDS = 600
_word_share_cache: dict[str, tuple[float, dict[str, float]]] = {}


def word_shares() -> dict[str, float]:
    """Share of messages holding each of the search index's most common words (pg_stats),
    read once per WORD_SHARES_SECONDS per process."""
    name = _store_name()
    read_at, shares = _word_share_cache.get(name, (0.0, {}))
    if time.monotonic() - read_at < WORD_SHARES_SECONDS:
        return shares
    shares = {
        word: float(share)
        for word, share in db.fetchall(
            "SELECT f.word, f.share FROM pg_stats st CROSS JOIN LATERAL unnest("
            "st.most_common_elems::text::text[], st.most_common_elem_freqs) AS f(word, share) "
            "WHERE st.schemaname = current_schema() AND st.tablename = 'idx_sa_messages_fts' "
            "AND f.word IS NOT NULL"
        )
    }
    _word_share_cache[name] = (time.monotonic(), shares)
    return shares


# ---------------------------------------------------------------------------
# Sessions by user, chat or display name

NAME_MATCHES = 8
_NAME_COLUMNS = (("user_id", "user"), ("chat_id", "chat"), ("display_name", "name"))
NAME_INDEXES = (
    "idx_sa_sessions_user_lower",
    "idx_sa_sessions_chat_lower",
    "idx_sa_sessions_name_lower",
)
# A store attached without upgrade_runtime_tables lacks those indexes: then only this
# many of the newest sessions are looked at (idx_sessions_started), never the whole table.
NAME_SCAN_WITHOUT_INDEX = 5000


def name_indexes_present() -> bool:
    names = ", ".join(f"'{name}'" for name in NAME_INDEXES)  # constants above
    if db.vendor() == "postgresql":
        sql = f"SELECT COUNT(*) FROM pg_indexes WHERE indexname IN ({names})"
    else:
        sql = f"SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name IN ({names})"
    return db.fetchone(sql)[0] == len(NAME_INDEXES)


def search_names(q: str) -> list[NameMatch]:
    """Sessions whose user id, chat id or display name equals the search text, ignoring
    case (the whole text, trimmed; exact, not prefix): at most NAME_MATCHES, newest first.

    Each column has an index on its lower-cased value (schema.LOWER_INDEX_SQL), so this is
    three index probes whatever the store's size. ``lower`` folds ASCII only on SQLite.
    """
    text = q.strip().lower()
    if not text or len(text) > MAX_TEXT:
        return []
    if name_indexes_present():
        # One probe per index, then the few matches sorted. As ``a = x OR b = y OR ...``
        # with ORDER BY ... LIMIT, SQLite walks the whole store in started_at order
        # instead (1.1 s at a million sessions for a word that names nobody).
        # On SQLite each probe names its index: where a column is mostly NULL (display_name
        # in many stores) ANALYZE's figures make the planner scan the table instead.
        sqlite = db.vendor() == "sqlite"
        source = "sessions s"
        matched = (
            "s.id IN ("
            + " UNION ALL ".join(
                f"SELECT id FROM sessions {f'INDEXED BY {index} ' if sqlite else ''}"
                f"WHERE lower({column}) = %s"
                for (column, _), index in zip(_NAME_COLUMNS, NAME_INDEXES, strict=True)
            )
            + ")"
        )
    else:
        source = (
            f"(SELECT * FROM sessions ORDER BY started_at DESC LIMIT {NAME_SCAN_WITHOUT_INDEX}) s"
        )
        matched = " OR ".join(f"lower(s.{column}) = %s" for column, _ in _NAME_COLUMNS)
    rows = db.fetchall(
        f"SELECT s.id, {_TITLE_SQL}, s.source, s.user_id, s.chat_id, "
        f"substr(s.display_name, 1, {MAX_TEXT}), s.started_at FROM {source} "
        f"WHERE {matched} ORDER BY s.started_at DESC, s.id LIMIT %s",
        [text, text, text, NAME_MATCHES],
    )
    out = []
    for r in rows:
        kind = next(
            (kind for i, (_, kind) in enumerate(_NAME_COLUMNS) if (r[3 + i] or "").lower() == text),
            "name",
        )
        out.append(NameMatch(*r, matched=kind))
    return out


# ---------------------------------------------------------------------------
# Dropdown choices


@dataclass(frozen=True)
class Choices:
    sources: tuple[str, ...]
    models: tuple[str, ...]
    end_reasons: tuple[str, ...]


def _distinct_statements() -> list[tuple[str, list]]:
    return [
        (
            f"SELECT DISTINCT {column} FROM sessions WHERE {column} IS NOT NULL "
            f"ORDER BY {column} LIMIT {MAX_CHOICES}",
            [],
        )
        for column in ("source", "model", "end_reason")
    ]


def read_choices() -> Choices:
    sources, models, end_reasons = (
        tuple(r[0] for r in rows) for rows in db.fetch_batch(_distinct_statements())
    )
    return Choices(sources=sources, models=models, end_reasons=end_reasons)


NO_CHOICES = Choices(sources=(), models=(), end_reasons=())
cached.register("listing:choices", read_choices, fresh_seconds=CHOICES_CACHE_SECONDS)


def choices() -> Choices:
    """Distinct sources, models and end reasons: the filters' suggestions, a store-wide
    figure (three scans, 20-40 ms at 10k sessions). On a cold cache, none (the fields
    work without them, and the status menu keeps a chosen reason) while they are
    computed in the background for the next page."""
    entry = cached.ready_figure_at(
        "listing:choices", read_choices, fresh_seconds=CHOICES_CACHE_SECONDS
    )
    return NO_CHOICES if entry is None else entry[1]


SEARCH_SELECTS_NOTHING = (
    "A full-text search (q) is not a set of sessions to export or delete: clear the search and "
    "use the list's filters, or pick the sessions from its results. Nothing was selected."
)


def matching_session_ids(filters: Filters, *, limit: int) -> list[str]:
    """The ids of every session these filters list, oldest first.

    Returns at most ``limit + 1`` ids, so a caller can tell "more than limit". Filters
    with search words are refused (``InvalidInput``): the set would otherwise be every
    session the other filters list, far more than the search shows.
    """
    if filters.q:
        raise InvalidInput(SEARCH_SELECTS_NOTHING)
    where, params = where_sql(filters.filters_only())
    return [
        r[0]
        for r in db.fetchall(
            f"SELECT s.id FROM sessions s WHERE {where} ORDER BY s.started_at, s.id LIMIT %s",
            [*params, int(limit) + 1],
        )
    ]


def conversation_session_ids(row_ids: Sequence[str]) -> list[str]:
    """Every session of the conversations these rows belong to, for "export what these
    filters match".

    A row of the ``roots`` scope is a whole conversation: the list hides every session
    that has a parent and is not a branch (``visible_sql``) under the row it continues
    (compression continuations, delegates and untyped children, which a runtime often
    leaves without the user id or source a filter matched). Each row is taken up to the
    row that shows it (an ``all`` scope row may be such a hidden segment), then down to
    every session hidden under it. Conversations in the rows' order, each from its row,
    then by start.
    """
    ids = list(dict.fromkeys(row_ids))
    if not ids:
        return []
    roots: dict[str, str] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        sql, params = _in_list("s.id", chunk)
        roots.update(
            db.fetchall(
                f"""
                WITH RECURSIVE up(start_id, id, depth) AS (
                    SELECT s.id, s.id, 0 FROM sessions s WHERE {sql}
                    UNION
                    SELECT up.start_id, s.parent_session_id, up.depth + 1
                    FROM up JOIN sessions s ON s.id = up.id
                    WHERE NOT {visible_sql("s")} AND up.depth < %s
                )
                SELECT up.start_id, up.id FROM up JOIN sessions s ON s.id = up.id
                WHERE {visible_sql("s")}
                """,
                [*params, lineage.MAX_DEPTH],
            )
        )
    # A session in a parent cycle has no row showing it: it stands for itself.
    ordered_roots = list(dict.fromkeys(roots.get(sid, sid) for sid in ids))
    members: dict[str, list[tuple[float, str]]] = {root: [] for root in ordered_roots}
    for start in range(0, len(ordered_roots), 500):
        chunk = ordered_roots[start : start + 500]
        sql, params = _in_list("s.id", chunk)
        for root, sid, started in db.fetchall(
            f"""
            WITH RECURSIVE down(root_id, id, depth) AS (
                SELECT s.id, s.id, 0 FROM sessions s WHERE {sql}
                UNION
                SELECT down.root_id, c.id, down.depth + 1
                FROM down JOIN sessions c ON c.parent_session_id = down.id
                WHERE NOT {lineage.is_branch_sql("c")} AND down.depth < %s
            )
            SELECT DISTINCT down.root_id, s.id, s.started_at
            FROM down JOIN sessions s ON s.id = down.id WHERE s.id <> down.root_id
            """,
            [*params, lineage.MAX_DEPTH],
        ):
            members[root].append((float(started or 0), sid))
    found: dict[str, None] = {}
    for root in ordered_roots:
        found[root] = None
        for _started, sid in sorted(members[root]):
            found.setdefault(sid, None)
    return list(found)
