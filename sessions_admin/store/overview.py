"""Read queries for the overview pages: store totals, sessions per day, the conversations list.

Reads only, each a single statement over one database alias. The runtime writes
while we read, so nothing here opens a store transaction (on SQLite that would
take the write lock); counts that belong together come from one statement so
they agree with each other.

``conversations`` and ``responses`` may live in a separate database
(``responses_alias()``): they are read there, and the sessions they name are
looked up in the store afterwards with one ``IN`` query, never a cross-alias join.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from sessions_admin.core import db, forks
from sessions_admin.routers import responses_alias
from sessions_admin.store import health

DEFAULT_DAYS = 30
CONVERSATION_PAGE_SIZE = 50
# Bound on the parameters of one IN list (SQLite's limit is far higher, but stay small).
IN_CHUNK = db.IN_CHUNK


# --- store totals ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StatusCount:
    """Sessions of one status: live (``end_reason`` None) or ended for ``end_reason``.

    Ended sessions without a recorded reason have ``end_reason == ""``.
    """

    live: bool
    end_reason: str | None
    sessions: int


@dataclass(frozen=True)
class StoreTotals:
    sessions: int
    messages: int
    live: int
    by_source: tuple[tuple[str, int], ...]  # most sessions first
    by_status: tuple[StatusCount, ...]  # live first, then most sessions first


def store_totals() -> StoreTotals:
    """Sessions by source and by status, and the total sessions and messages.

    Sources, statuses and the session total come from one grouped statement, so
    they add up even while the runtime writes; messages are a second count.
    """
    groups = db.fetchall(
        "SELECT source, CASE WHEN ended_at IS NULL THEN 1 ELSE 0 END, end_reason, COUNT(*) "
        "FROM sessions GROUP BY source, CASE WHEN ended_at IS NULL THEN 1 ELSE 0 END, end_reason"
    )
    by_source: dict[str, int] = {}
    by_status: dict[str | None, int] = {}
    for source, live, end_reason, n in groups:
        n = int(n)
        source = "" if source is None else str(source)
        by_source[source] = by_source.get(source, 0) + n
        status = None if live else (end_reason or "")
        by_status[status] = by_status.get(status, 0) + n
    (messages,) = db.fetchone("SELECT COUNT(*) FROM messages")
    statuses = sorted(by_status.items(), key=lambda item: (item[0] is not None, -item[1], item[0]))
    return StoreTotals(
        sessions=sum(by_source.values()),
        messages=int(messages),
        live=by_status.get(None, 0),
        by_source=tuple(sorted(by_source.items(), key=lambda item: (-item[1], item[0]))),
        by_status=tuple(
            StatusCount(live=reason is None, end_reason=reason, sessions=n)
            for reason, n in statuses
        ),
    )


# --- sessions started per day -----------------------------------------------------------------


@dataclass(frozen=True)
class DayCount:
    day: dt.date  # a UTC calendar day
    sessions: int


def _utc_midnight(day: dt.date) -> float:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()


def sessions_per_day(*, days: int = DEFAULT_DAYS, now: dt.datetime | None = None) -> list[DayCount]:
    """Sessions started on each of the last ``days`` UTC days, today last; every day present.

    One range scan over ``started_at`` (indexed), grouped by day offset in SQL.
    """
    if days < 1:
        raise ValueError("days must be at least 1")
    now = now or dt.datetime.now(dt.UTC)
    today = now.astimezone(dt.UTC).date()
    first = today - dt.timedelta(days=days - 1)
    start = _utc_midnight(first)
    end = _utc_midnight(today + dt.timedelta(days=1))
    if db.vendor() == "postgresql":
        offset = "CAST(FLOOR((started_at - %s) / 86400.0) AS INTEGER)"
    else:
        # started_at >= start, so truncation toward zero is the floor.
        offset = "CAST((started_at - %s) / 86400.0 AS INTEGER)"
    rows = db.fetchall(
        f"SELECT {offset} AS day_offset, COUNT(*) FROM sessions "
        "WHERE started_at >= %s AND started_at < %s GROUP BY day_offset",
        [start, start, end],
    )
    counts = {int(offset_): int(n) for offset_, n in rows}
    return [
        DayCount(day=first + dt.timedelta(days=i), sessions=counts.get(i, 0)) for i in range(days)
    ]


# --- recently started sessions ----------------------------------------------------------------


def recent_sessions(limit: int = 10) -> list[dict]:
    return db.fetchdicts(
        "SELECT id, source, user_id, title, started_at, ended_at, end_reason, message_count "
        "FROM sessions ORDER BY started_at DESC, id DESC LIMIT %s",
        [limit],
    )


# --- store health -------------------------------------------------------------------------


@dataclass(frozen=True)
class HealthCount:
    kind: str
    label: str
    explanation: str
    sessions: int
    groups: int | None  # fork groups; None for the other checks


def health_counts(groups: list[forks.ForkGroup] | None = None) -> list[HealthCount]:
    """Every check of ``health.CHECKS`` counted, in their order.

    Fork groups are found once and give both numbers (``health.fork_group_count()``
    and ``health.count("forks")`` would each search the whole store again); pass
    ``groups`` (``find_fork_groups()``) to reuse a search already made.
    """
    found: list[HealthCount] = []
    for check in health.CHECKS:
        if check.kind == "forks":
            if groups is None:
                groups = forks.find_fork_groups()
            sessions = {sid for group in groups for sid in group.session_ids}
            found.append(
                HealthCount(check.kind, check.label, check.explanation, len(sessions), len(groups))
            )
        else:
            found.append(
                HealthCount(
                    check.kind, check.label, check.explanation, health.count(check.kind), None
                )
            )
    return found


# --- conversations --------------------------------------------------------------------------


@dataclass(frozen=True)
class ConversationRow:
    name: str
    response_id: str  # "" while a new slug has no turn yet
    session_id: str | None  # the session the slug continues
    recorded_by: str | None  # "conversation" (the row's column), "response" (its data) or None
    session: dict | None  # id, title, source, user_id, ended_at, end_reason; None if missing
    fork_session_ids: tuple[str, ...]  # the slug's fork group, oldest first; () if none

    @property
    def has_forks(self) -> bool:
        return bool(self.fork_session_ids)

    @property
    def session_exists(self) -> bool:
        return self.session is not None


@dataclass(frozen=True)
class ConversationPage:
    rows: tuple[ConversationRow, ...]
    next_after: str | None  # pass as ``after`` for the next page; None on the last page


def like_pattern(text: str) -> str:
    """A LIKE pattern matching ``text`` anywhere, its wildcards taken literally (ESCAPE '\\')."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _conversation_select(alias: str) -> str:
    data_session = db.json_field("r.data", "session_id", alias=alias)
    # The response's data is only parsed when the row's own column is NULL.
    return (
        "SELECT c.name, c.response_id, c.session_id, "
        f"CASE WHEN c.session_id IS NULL THEN {data_session} END "
        "FROM conversations c LEFT JOIN responses r ON r.response_id = c.response_id"
    )


def _conversation_rows(
    *, after: str | None, pattern: str | None, names: list[str] | None, limit: int
) -> list[tuple]:
    alias = responses_alias()
    where: list[str] = []
    params: list = []
    if after is not None:
        where.append("c.name > %s")
        params.append(after)
    if pattern is not None:
        where.append("LOWER(c.name) LIKE %s ESCAPE '\\'")
        params.append(pattern)
    if names is not None:
        where.append(f"c.name IN ({db.placeholders(names)})")
        params.extend(names)
    sql = _conversation_select(alias)
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY c.name LIMIT %s"
    return db.fetchall(sql, [*params, limit], alias=alias)


def _sessions_by_id(ids: Iterable[str]) -> dict[str, dict]:
    return {
        row["id"]: row
        for row in db.fetchdicts_in(
            "SELECT id, title, source, user_id, started_at, ended_at, end_reason "
            "FROM sessions WHERE id IN ({marks})",
            sorted(set(ids)),
        )
    }


def conversation_forks(
    groups: list[forks.ForkGroup] | None = None,
) -> dict[str, tuple[str, ...]]:
    """slug -> the unlinked sessions recorded for it (fork groups of kind "conversation")."""
    if groups is None:
        groups = forks.find_fork_groups()
    return {group.key: group.session_ids for group in groups if group.kind == "conversation"}


def conversation_page(
    *,
    after: str | None = None,
    contains: str = "",
    forks_only: bool = False,
    limit: int = CONVERSATION_PAGE_SIZE,
    fork_groups: list[forks.ForkGroup] | None = None,
) -> ConversationPage:
    """One page of conversations in name order, after the slug ``after``.

    ``contains`` filters by case-insensitive slug substring (wildcards literal);
    ``forks_only`` keeps slugs whose sessions form a fork group. Fork groups
    come from ``find_fork_groups()``, or ``fork_groups`` when given (a whole-store
    search: callers on a big store reuse a recent one).
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    pattern = like_pattern(contains.lower()) if contains else None
    fork_map = conversation_forks(fork_groups)
    if forks_only:
        # Walk the fork slugs in order, a chunk at a time, until the page is full.
        # Ordered in Python here, so ``after`` compares the same way on every backend.
        candidates = sorted(name for name in fork_map if after is None or name > after)
        raw: list[tuple] = []
        for start in range(0, len(candidates), IN_CHUNK):
            chunk = candidates[start : start + IN_CHUNK]
            raw.extend(
                _conversation_rows(after=None, pattern=pattern, names=chunk, limit=len(chunk))
            )
            if len(raw) > limit:
                break
        raw.sort(key=lambda row: row[0])
    else:
        raw = _conversation_rows(after=after, pattern=pattern, names=None, limit=limit + 1)
    more = len(raw) > limit
    raw = raw[:limit]
    sessions = _sessions_by_id(
        sid for _name, _response, column, data in raw for sid in (column, data) if sid
    )
    rows = []
    for name, response_id, column_session, data_session in raw:
        session_id = column_session or data_session
        recorded_by = "conversation" if column_session else ("response" if data_session else None)
        rows.append(
            ConversationRow(
                name=name,
                response_id=response_id or "",
                session_id=session_id,
                recorded_by=recorded_by,
                session=sessions.get(session_id) if session_id else None,
                fork_session_ids=fork_map.get(name, ()),
            )
        )
    return ConversationPage(rows=tuple(rows), next_after=rows[-1].name if more and rows else None)
