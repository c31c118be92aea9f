"""Lineage: how sessions of one conversation are linked, and reads over those links.

Links, as the runtime writes them:

- ``parent_session_id`` with the parent ended by ``compression``: a compression
  continuation (the conversation goes on in the child).
- ``parent_session_id`` with ``model_config._branched_from``: a branch.
- ``parent_session_id`` with ``model_config._delegate_from``: a delegate (subagent).
- ``model_config._reset_from`` (no parent link, so runtimes still list the new
  session as a conversation of its own): a reset of the same session_key.
- ``model_config._merged_into``: a session absorbed by a merge.
- ``parent_session_id`` with ``model_config._continued_from``: a conversation
  (an API slug) whose session had ended, going on in a new session.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sessions_admin.core import db
from sessions_admin.core.rows import parse_model_config
from sessions_admin.core.schema import SESSION_ROW_COLUMNS

MAX_DEPTH = 500

SESSION_FIELDS = ", ".join(SESSION_ROW_COLUMNS)  # what session_row reads


@dataclass(frozen=True)
class LineageNode:
    session_id: str
    lineage_parent_id: str | None
    edge_kind: str | None  # compression, branch, delegate, reset, merge, child; None for the root
    depth: int
    source: str
    title: str | None
    started_at: float
    ended_at: float | None
    end_reason: str | None
    message_count: int
    is_live: bool


def marker(key: str, alias: str = "") -> str:
    column = f"{alias}.model_config" if alias else "model_config"
    return db.json_field(column, key)


def session_row(session_id: str, *, lock: bool = False) -> dict | None:
    def read() -> dict | None:
        rows = db.fetchdicts(
            f"SELECT {SESSION_FIELDS} FROM sessions WHERE id = %s"
            + (db.for_update() if lock else ""),
            [session_id],
        )
        return rows[0] if rows else None

    if lock:
        return read()
    row = db.remembered(("session_row", session_id), read)
    return dict(row) if row is not None else None


def existing_session_ids(ids: Iterable[str]) -> set[str]:
    """Which of ``ids`` are sessions in the store."""
    return {r[0] for r in db.fetchall_in("SELECT id FROM sessions WHERE id IN ({marks})", ids)}


# --- the edge rule ---------------------------------------------------------------------------
# Which link is which kind of edge, in one place: ``edge_kind`` for rows already read, the
# ``*_sql`` builders below for queries that walk or group links. A child's markers decide
# first (a delegate, then a branch, whatever else it carries); any other parent link
# continues the conversation, as a compression continuation when the parent ended by
# compression. Every walk and grouping is built from these, so they agree on both backends.


def edge_kind(child: dict, parent_end_reason: str | None) -> str:
    """The kind of the link from a child row to the session it continues.

    ``link_kind_sql`` is its SQL form for a child joined to its parent, where a slug
    continuation (``_continued_from``) counts as what its parent's end makes it.
    """
    config = parse_model_config(child.get("model_config"))
    if config.get("_delegate_from"):
        return "delegate"
    if config.get("_branched_from"):
        return "branch"
    if child.get("parent_session_id") and config.get("_continued_from"):
        return "continuation"
    if child.get("parent_session_id"):
        return "compression" if parent_end_reason == "compression" else "child"
    if config.get("_reset_from"):
        return "reset"
    if config.get("_merged_into"):
        return "merge"
    return "child"


def is_branch_sql(child: str) -> str:
    """SQL: session ``child`` is a branch (a delegate's marker decides first)."""
    return (
        f"({marker('_branched_from', child)} IS NOT NULL "
        f"AND {marker('_delegate_from', child)} IS NULL)"
    )


def continues_parent_sql(child: str) -> str:
    """SQL: session ``child`` continues its parent's conversation (neither branch nor delegate).

    With the parent ended by compression, the child is a compression continuation.
    """
    return (
        f"{marker('_branched_from', child)} IS NULL AND {marker('_delegate_from', child)} IS NULL"
    )


def link_kind_sql(child: str, parent: str) -> str:
    """SQL: ``edge_kind`` of session ``child``'s link to its parent row ``parent``.

    'delegate', 'branch', 'compression' (a continuation of a parent ended by
    compression) or 'child'.
    """
    return (
        f"CASE WHEN {marker('_delegate_from', child)} IS NOT NULL THEN 'delegate' "
        f"WHEN {marker('_branched_from', child)} IS NOT NULL THEN 'branch' "
        f"WHEN {parent}.end_reason = 'compression' THEN 'compression' ELSE 'child' END"
    )


def _continuation_of_sql(parent: str) -> str:
    """SQL subquery: the compression continuation of session ``parent``, among its children.

    A child that itself continues the chain, then a live one, is preferred over a
    stale closed sibling (a runtime that rotated twice from one parent).
    """
    return (
        "SELECT c.id FROM sessions c "
        f"WHERE c.parent_session_id = {parent}.id AND {continues_parent_sql('c')} "
        "ORDER BY CASE WHEN c.end_reason = 'compression' THEN 0 "
        "WHEN c.ended_at IS NULL THEN 1 ELSE 2 END, c.started_at DESC, c.id DESC "
        "LIMIT 1"
    )


def parent_of(*, session_id: str) -> str | None:
    row = db.fetchone("SELECT parent_session_id FROM sessions WHERE id = %s", [session_id])
    return row[0] if row else None


def children_of(*, session_id: str) -> list[str]:
    return [
        r[0]
        for r in db.fetchall(
            "SELECT id FROM sessions WHERE parent_session_id = %s ORDER BY started_at, id",
            [session_id],
        )
    ]


def root_of(*, session_id: str) -> str:
    """The first session of the conversation: follow parent and reset links up."""
    up_link = f"COALESCE(parent_session_id, {marker('_reset_from')})"
    up_link_s = f"COALESCE(s.parent_session_id, {marker('_reset_from', 's')})"
    row = db.fetchone(
        f"""
        WITH RECURSIVE up(id, next_id, depth) AS (
            SELECT id, {up_link}, 0 FROM sessions WHERE id = %s
            UNION
            SELECT s.id, {up_link_s}, up.depth + 1
            FROM sessions s JOIN up ON s.id = up.next_id
            WHERE up.depth < %s
        )
        SELECT id FROM up ORDER BY depth DESC LIMIT 1
        """,
        [session_id, MAX_DEPTH],
    )
    return row[0] if row else session_id


def roots_of(session_ids: list[str]) -> dict[str, str]:
    """``root_of`` for many sessions in one recursive query per 500 ids."""
    up_link = f"COALESCE(parent_session_id, {marker('_reset_from')})"
    up_link_s = f"COALESCE(s.parent_session_id, {marker('_reset_from', 's')})"
    roots: dict[str, tuple[int, str]] = {}
    ids = list(dict.fromkeys(session_ids))
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        for origin, found, depth in db.fetchall(
            f"""
            WITH RECURSIVE up(origin, id, next_id, depth) AS (
                SELECT id, id, {up_link}, 0 FROM sessions WHERE id IN ({db.placeholders(chunk)})
                UNION
                SELECT up.origin, s.id, {up_link_s}, up.depth + 1
                FROM sessions s JOIN up ON s.id = up.next_id
                WHERE up.depth < %s
            )
            SELECT origin, id, depth FROM up
            """,
            [*chunk, MAX_DEPTH],
        ):
            if origin not in roots or depth > roots[origin][0]:
                roots[origin] = (int(depth), found)
    return {origin: root for origin, (_, root) in roots.items()}


def lineage_tree(*, session_id: str) -> list[LineageNode]:
    """Every session of the conversation around ``session_id``, root first, depth-first order."""
    root = root_of(session_id=session_id)
    reset_from = marker("_reset_from", "c")
    parent_step = "SELECT c.id, c.session_key FROM sessions c WHERE c.parent_session_id = tree.id"
    reset_step = (
        "SELECT c.id, c.session_key FROM sessions c WHERE c.session_key = tree.session_key "
        f"AND {reset_from} = tree.id AND c.parent_session_id IS NULL"
    )
    if db.vendor() == "postgresql":
        # PostgreSQL allows one recursive reference: both link kinds in one LATERAL step.
        recursive_step = f"""
            SELECT step.id, tree.id, step.session_key, tree.depth + 1
            FROM tree CROSS JOIN LATERAL ({parent_step} UNION ALL {reset_step}) step
            WHERE tree.depth < %s"""
        depth_params = [MAX_DEPTH]
    else:
        # SQLite has no LATERAL but accepts several recursive SELECTs.
        recursive_step = f"""
            SELECT c.id, tree.id, c.session_key, tree.depth + 1
            FROM tree JOIN sessions c ON c.parent_session_id = tree.id
            WHERE tree.depth < %s
            UNION
            SELECT c.id, tree.id, c.session_key, tree.depth + 1
            FROM tree JOIN sessions c
              ON c.session_key = tree.session_key AND {reset_from} = tree.id
            WHERE tree.depth < %s AND c.parent_session_id IS NULL"""
        depth_params = [MAX_DEPTH, MAX_DEPTH]
    rows = db.fetchdicts(
        f"""
        WITH RECURSIVE tree(id, lineage_parent_id, session_key, depth) AS (
            SELECT id, CAST(NULL AS TEXT), session_key, 0 FROM sessions WHERE id = %s
            UNION
            {recursive_step}
        )
        SELECT t.lineage_parent_id, t.depth, p.end_reason AS parent_end_reason,
               s.id, s.source, s.title, s.started_at, s.ended_at, s.end_reason,
               s.message_count, s.model_config, s.parent_session_id
        FROM tree t
        JOIN sessions s ON s.id = t.id
        LEFT JOIN sessions p ON p.id = t.lineage_parent_id
        ORDER BY t.depth, s.started_at, s.id
        """,
        [root, *depth_params],
    )
    seen: set[str] = set()
    by_parent: dict[str | None, list[dict]] = {}
    for row in rows:
        if row["id"] in seen:
            continue  # a cycle written by a broken runtime: show each session once
        seen.add(row["id"])
        by_parent.setdefault(row["lineage_parent_id"], []).append(row)

    ordered: list[LineageNode] = []

    def visit(parent_id: str | None) -> None:
        for row in by_parent.get(parent_id, []):
            ordered.append(
                LineageNode(
                    session_id=row["id"],
                    lineage_parent_id=row["lineage_parent_id"],
                    edge_kind=None
                    if row["lineage_parent_id"] is None
                    else edge_kind(row, row["parent_end_reason"]),
                    depth=int(row["depth"]),
                    source=row["source"],
                    title=row["title"],
                    started_at=row["started_at"],
                    ended_at=row["ended_at"],
                    end_reason=row["end_reason"],
                    message_count=int(row["message_count"] or 0),
                    is_live=row["ended_at"] is None,
                )
            )
            visit(row["id"])

    visit(None)
    return ordered


def compression_tip(*, session_id: str) -> str:
    """Follow compression continuations forward: the session where the conversation now is."""
    return compression_chain(session_id=session_id, upward=False)[-1]


def _forward_chains_sql(start_sql: str) -> str:
    """The compression-chain walk forward from each start row ``start_sql`` gives (start, id, 0).

    One recursive query (a 50-segment chain was a hundred round trips); params: the
    start's, then MAX_DEPTH.
    """
    return f"""
        WITH RECURSIVE chain(start_id, id, depth) AS (
            {start_sql}
            UNION ALL
            SELECT chain.start_id, nxt.id, chain.depth + 1
            FROM chain
            JOIN sessions p ON p.id = chain.id
            JOIN sessions nxt ON nxt.id = ({_continuation_of_sql("p")})
            WHERE p.end_reason = 'compression' AND chain.depth < %s
        )
        SELECT start_id, id FROM chain ORDER BY start_id, depth
        """


def _chains(rows: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """(start, id) rows in depth order as chains, each cut before a segment repeats."""
    chains: dict[str, list[str]] = {}
    stopped: set[str] = set()
    for start, following in rows:
        chain = chains.setdefault(start, [])
        if start in stopped:
            continue
        if following in chain:
            stopped.add(start)  # a cycle written by a broken runtime
            continue
        chain.append(following)
    return chains


def forward_chains(session_ids: Sequence[str]) -> dict[str, list[str]]:
    """For each existing session: it and the compression continuations after it, in order."""
    if not session_ids:
        return {}
    return chains_from_rows(db.fetchall(*forward_chains_statement(session_ids)))


def forward_chains_statement(session_ids: Sequence[str]) -> tuple[str, list]:
    """forward_chains' query and parameters, for a caller batching it with others;
    chains_from_rows turns its rows into forward_chains' answer."""
    sql, params = db.in_list("s.id", session_ids)
    return (
        _forward_chains_sql(f"SELECT s.id, s.id, 0 FROM sessions s WHERE {sql}"),
        [*params, MAX_DEPTH],
    )


def chains_from_rows(rows: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    return _chains(rows)


def compression_chain(*, session_id: str, upward: bool = True) -> list[str]:
    """The segments of the conversation, from its compression root (or ``session_id``) to the tip.

    One recursive query each way: upward through the parents it continues, forward
    through ``_continuation_of_sql``'s choice among siblings. A cycle written by a
    broken runtime stops the walk before a segment repeats.
    """
    read = functools.partial(_compression_chain, session_id, upward)
    return list(db.remembered(("compression_chain", session_id, upward), read))


def _compression_chain(session_id: str, upward: bool) -> tuple[str, ...]:
    chain = [session_id]
    if upward:
        rows = db.fetchall(
            f"""
            WITH RECURSIVE up(id, depth) AS (
                SELECT %s, 0
                UNION ALL
                SELECT p.id, up.depth + 1
                FROM up
                JOIN sessions c ON c.id = up.id
                JOIN sessions p ON p.id = c.parent_session_id
                WHERE p.end_reason = 'compression' AND {continues_parent_sql("c")}
                  AND up.depth < %s
            )
            SELECT id FROM up WHERE depth > 0 ORDER BY depth
            """,
            [session_id, MAX_DEPTH],
        )
        for (previous,) in rows:
            if previous in chain:
                break
            chain.insert(0, previous)
    start = chain[-1]
    forward = _chains(
        db.fetchall(_forward_chains_sql("SELECT %s, %s, 0"), [start, start, MAX_DEPTH])
    )
    for following in forward.get(start, [start])[1:]:
        if following in chain:
            break
        chain.append(following)
    return tuple(chain)


def current_session(*, session_id: str) -> str:
    """Where the conversation recorded at ``session_id`` now continues.

    Follows compression forward, and a merged session to the session that absorbed it.
    """
    current = compression_tip(session_id=session_id)
    for _ in range(MAX_DEPTH):
        row = db.fetchone("SELECT end_reason, model_config FROM sessions WHERE id = %s", [current])
        if row is None or row[0] != "merged":
            break
        target = parse_model_config(row[1]).get("_merged_into")
        if not isinstance(target, str) or not target or target == current:
            break
        current = compression_tip(session_id=target)
    return current


def live_session_for_key(session_key: str | None, *, exclude: str | None = None) -> str | None:
    """The live session of a session_key: the latest started one not ended.

    Delegates (subagent runs) may carry their parent's key but are never the
    conversation's live session.
    """
    if not session_key:
        return None
    row = db.fetchone(
        "SELECT id FROM sessions WHERE session_key = %s AND ended_at IS NULL AND id <> %s "
        f"AND {marker('_delegate_from')} IS NULL "
        "ORDER BY started_at DESC, id DESC LIMIT 1",
        [session_key, exclude or ""],
    )
    return row[0] if row else None
