"""The sessions a list's filters select, for an export or a bulk delete."""

from __future__ import annotations

from collections.abc import Sequence

from sessions_admin.core import db, lineage
from sessions_admin.core.errors import InvalidInput
from sessions_admin.store.listing.conditions import visible_sql, where_sql
from sessions_admin.store.listing.params import Filters

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
        sql, params = db.in_list("s.id", chunk)
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
        sql, params = db.in_list("s.id", chunk)
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
