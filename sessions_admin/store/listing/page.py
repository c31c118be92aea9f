"""One keyset page of the session list (``WHERE (key, id) < cursor ORDER BY key DESC, id
DESC LIMIT n + 1``, never OFFSET) and the figures of its rows.

In the default ``roots`` scope a row is a conversation: a session with no parent (or
whose parent is gone) or a branch. Compression continuations and delegates are hidden;
a compressed root shows the figures of its compression tip, computed for the rows of
the page only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sessions_admin.core import db, lineage
from sessions_admin.core.rows import stored_cost, stored_count
from sessions_admin.store.listing import conditions
from sessions_admin.store.listing.activity import (
    activity_rows,
    conversation_last_ids_statement,
    last_ids_from,
    own_last_ids_statement,
)
from sessions_admin.store.listing.conditions import (
    TITLE_READ,
    TITLE_SQL,
    ForkIds,
    after_sql,
    capped_count_from,
    capped_count_statement,
    count_capped,
    where_sql,
)
from sessions_admin.store.listing.filter_choices import Choices, choices
from sessions_admin.store.listing.params import Cursor, Filters, encode_cursor

# Sort keys as SQL over ``sessions s``; the indexes in schema.INDEX_SQL match these expressions.
SORT_SQL = {
    "started": "s.started_at",
    "messages": "COALESCE(s.message_count, 0)",
    "tokens": "(COALESCE(s.input_tokens, 0) + COALESCE(s.output_tokens, 0))",
    "cost": "COALESCE(s.estimated_cost_usd, 0)",
}


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
    tokens: int | None  # None (as cost): a total no reader can show (core.rows.stored_count)
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
    f"s.id, {TITLE_SQL}, s.source, s.user_id, s.model, s.started_at, s.archived, s.parent_session_id, "
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
    sql, params = db.in_list("s.id", ids)
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
        # The count also picks the strategy (see activity_rows).
        count, capped = count_capped(f"FROM sessions s WHERE {where}", params)
        ordered = activity_rows(filters, where, params, cursor, limit + 1, small=not capped)
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
            extra, extra_params = after_sql(expr, desc, cursor.values[0], cursor.values[1])
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
            found, counted = db.fetch_batch([page_sql, capped_count_statement(where, params)])
            count, capped = capped_count_from(counted)
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
            count, capped = min(len(ids), conditions.COUNT_CAP), len(ids) > conditions.COUNT_CAP
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


def _tokens(figures: dict) -> int | None:
    """Tokens in + out; None when either total is not a count (another writer's overflow)."""
    counts = [stored_count(figures[name] or 0) for name in ("input_tokens", "output_tokens")]
    return None if None in counts else sum(counts)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "inf", "-inf", "nan": a sort key another writer left (params)
    if isinstance(value, int | float):
        return value
    # PostgreSQL may hand back Decimal for numeric expressions.
    number = float(value)
    return int(number) if number.is_integer() and not isinstance(value, float) else number


def _children_statement(ids: Sequence[str]) -> tuple[str, list]:
    sql, params = db.in_list("c.parent_session_id", ids)
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
    sql, params = db.in_list("m.id", ids)
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
        own_last_ids_statement(ids),
        _children_statement(ids),
    ]
    chained = []  # (kind, statement) for the compressed rows of the roots scope

    def chain_statements(compressed: list[str]) -> list[tuple[str, tuple[str, list]]]:
        if not roots or not compressed:
            return []
        out = [("tips", lineage.forward_chains_statement(compressed))]
        for start in range(0, len(compressed), 500):
            batch = compressed[start : start + 500]
            out.append(("last", conversation_last_ids_statement(batch)))
        return out

    if reasons is not None:
        chained = chain_statements([sid for sid in ids if reasons.get(sid) == "compression"])
    results = db.fetch_batch(first + [statement for _kind, statement in chained])
    base = _base_rows_from(results[0])
    last = last_ids_from(results[1])
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
            last.update(last_ids_from(rows))
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
                tokens=_tokens(fig),
                cost=stored_cost(fig["estimated_cost_usd"]),
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
