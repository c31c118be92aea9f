"""The list in last-activity order.

A session's last activity is its latest message (message ids are monotonic). It is
not stored, so the first pages walk ``messages`` by id from the newest and keep each
session's latest one; a filter too narrow for that walk to pay off is answered from
the matching sessions instead (``activity_rows``).
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Sequence
from typing import Any

from sessions_admin.core import db, lineage
from sessions_admin.store.listing.conditions import after_sql, visible_sql
from sessions_admin.store.listing.params import Cursor, Filters

# The activity walk reads message ids in windows of this size, doubling up to the maximum.
WALK_WINDOW = 2048
WALK_MAX_WINDOW = 65536
# Beyond this many message ids without a full page, the walk gives way (see activity_rows).
WALK_BUDGET = 8192


def own_last_ids_statement(ids: Sequence[str]) -> tuple[str, list]:
    sql, params = db.in_list("s.id", ids)
    return (
        "SELECT s.id, (SELECT MAX(m.id) FROM messages m WHERE m.session_id = s.id) "
        f"FROM sessions s WHERE {sql}",
        params,
    )


def last_ids_from(rows: Sequence[tuple]) -> dict[str, int | None]:
    return {r[0]: (int(r[1]) if r[1] is not None else None) for r in rows}


def conversation_last_ids(ids: Sequence[str]) -> dict[str, int | None]:
    """Latest message id over each session and its compression continuations (all of them)."""
    if not ids:
        return {}
    return last_ids_from(db.fetchall(*conversation_last_ids_statement(ids)))


def conversation_last_ids_statement(ids: Sequence[str]) -> tuple[str, list]:
    sql, params = db.in_list("s.id", ids)
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
    sql, params = db.in_list("s.id", ids)
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
            extra, extra_params = after_sql("s.started_at", desc, after[0], after[1])
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


def activity_rows(
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
