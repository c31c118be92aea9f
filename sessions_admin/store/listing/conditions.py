"""The WHERE over ``sessions s`` that a list's filters make, the fork ids it may need,
and counts capped at ``COUNT_CAP`` (a COUNT over a LIMITed subquery)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sessions_admin.core import db, forks, lineage
from sessions_admin.store import cached, health
from sessions_admin.store.listing.params import Filters

# The other modules read it as ``conditions.COUNT_CAP``: one value for all (tests lower it).
COUNT_CAP = 1000
# Titles are read up to this many characters (a runtime may store megabytes); the
# list shows fewer, and the session page links the whole title.
TITLE_READ = 1000
TITLE_SQL = f"substr(s.title, 1, {TITLE_READ}) AS title"


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
            sql, extra = db.in_list("s.id", ids)
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


def after_sql(expr: str, desc: bool, value: Any, session_id: str) -> tuple[str, list]:
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


def capped_count_statement(where: str, params: list) -> tuple[str, list]:
    """count_capped's query over ``sessions s WHERE where``, for a batch."""
    return (
        f"SELECT COUNT(*) FROM (SELECT 1 FROM sessions s WHERE {where} "
        f"LIMIT {COUNT_CAP + 1}) capped",
        list(params),
    )


def capped_count_from(rows: Sequence[tuple]) -> tuple[int, bool]:
    n = int(rows[0][0]) if rows else 0
    return min(n, COUNT_CAP), n > COUNT_CAP
