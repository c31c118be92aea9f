"""The session list's query string: ``parse`` turns it into a frozen ``Filters``, an
optional ``Cursor`` and the problems to show, and never raises on bad input.

Cursors are opaque (urlsafe base64 of JSON) and only fit the sort they were made for.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any
from urllib.parse import urlencode

from sessions_admin.store import health

PAGE_SIZE = 50
PAGE_SIZES = (25, 50, 100, 200)
MAX_TEXT = 200
MAX_QUERY = 500
MAX_TERMS = 16
MAX_CURSOR = 1000
MAX_INT = 2**63 - 1

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

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_WORD_RUN = re.compile(r"[^\W_]+")


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
    # Each problem's fault alone, with the query parameter it is about (the API's field
    # errors: the API lists nothing, so the page's "it is ignored" would be untrue there).
    field_problems: tuple[tuple[str, str], ...] = ()


def _said(fault: str, instead: str, separator: str) -> str:
    if instead:
        return f"{fault}{separator}{instead}."
    return fault if fault.endswith(".") else fault + "."


def parse(params: Mapping[str, Any]) -> Parsed:
    """Validate query parameters; bad ones are dropped with a problem to show, never raised."""
    # (parameter, the fault, what the page does instead, the words between them)
    problems: list[tuple[str, str, str, str]] = []

    def problem(name: str, fault: str, instead: str = "", separator: str = "; ") -> None:
        problems.append((name, fault, instead, separator))

    def text(name: str, label: str, limit: int = MAX_TEXT) -> str:
        value = params.get(name, "")
        if not isinstance(value, str):
            return ""
        value = value.strip()
        if "\x00" in value:
            problem(name, f"{label} contains a NUL character", "that filter is ignored")
            return ""
        if len(value) > limit:
            problem(name, f"{label} is longer than {limit} characters", "that filter is ignored")
            return ""
        return value

    def choice(name: str, label: str, allowed: Mapping[str, str] | set[str], default: str) -> str:
        value = text(name, label)
        if value == "":
            return default
        if value not in allowed:
            shown = value if len(value) <= 40 else value[:40] + "…"
            problem(
                name,
                f"{label}: {shown!r} is not one of {', '.join(repr(a) for a in allowed if a)}",
                "it is ignored",
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
            problem(name, f"{label}: {value[:40]!r} is not a date (YYYY-MM-DD, from 1970).")
            return None
        return parsed

    q = text("q", "Search", MAX_QUERY)
    if q and not search_terms(q):
        if parse_query(q).only_excludes:
            problem(
                "q", 'The search only excludes words (-word); add a word or "phrase" to look for.'
            )
        else:
            problem("q", "The search has no words to look for (only punctuation or symbols).")
    forks_flag = choice("forks", "Has forks", {"1", "0"}, "0") == "1"
    health_kind = choice("health", "Health check", health.KINDS, "")
    per_raw = text("per", "Page size")
    per_page = PAGE_SIZE
    if per_raw:
        # ASCII digits only: "³" is a digit to str.isdigit but not to int() (a 500, found by
        # the schema fuzzer).
        if per_raw.isascii() and per_raw.isdigit() and int(per_raw) in PAGE_SIZES:
            per_page = int(per_raw)
        else:
            problem(
                "per",
                f"Page size must be one of {', '.join(map(str, PAGE_SIZES))}",
                f"showing {PAGE_SIZE} per page",
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
        problem("from", "The start date is after the end date: nothing can match.")
    cursor = None
    token = params.get("after", "")
    if isinstance(token, str) and token.strip():
        cursor = decode_cursor(token.strip(), filters)
        if cursor is None:
            problem(
                "after",
                "That page link is not valid (or belongs to another sort)",
                "showing the first page",
                separator=": ",
            )
    return Parsed(
        filters=filters,
        cursor=cursor,
        problems=tuple(_said(fault, instead, sep) for _name, fault, instead, sep in problems),
        field_problems=tuple((name, _said(fault, "", "")) for name, fault, *_ in problems),
    )


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


# A sort key another writer left non-finite (a cost of inf), written in a cursor as text.
NON_FINITE_KEYS = frozenset({"inf", "-inf", "nan"})


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


def cursor_values(token: str, *, kind: str, direction: str) -> tuple[Any, ...] | None:
    """The values of an ``encode_cursor`` token made for ``kind`` and ``direction``, else None
    (not a cursor, or one of another list or order); their types are the caller's to check."""
    if len(token) > MAX_CURSOR:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw.decode(), parse_constant=_reject_constant)
    except (ValueError, binascii.Error, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(data, list) or len(data) < 3 or data[:2] != [kind, direction]:
        return None
    return tuple(data[2:])


def decode_cursor(token: str, filters: Filters) -> Cursor | None:
    """The cursor in ``token`` if it is well formed and fits ``filters``' sort, else None."""
    kind = "search" if filters.is_search else filters.sort
    values = cursor_values(token, kind=kind, direction=filters.direction)
    if values is None:
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
        non_finite = len(values) == 2 and str(values[0]) in NON_FINITE_KEYS
        non_finite = non_finite and isinstance(values[0], str)
        ok = len(values) == 2 and (_number(values[0]) or non_finite) and _session_id(values[1])
        if ok and non_finite:
            values = (float(values[0]), values[1])
    return Cursor(kind, filters.direction, values) if ok else None
