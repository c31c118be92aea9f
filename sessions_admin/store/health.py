"""Store health checks: each one a SQL predicate over ``sessions s``, counted on the home page
and usable as a session-list filter (``/sessions/?health=<kind>``).

Reads only. The fork check is evidence-based (see ``sessions_admin.core.forks``)
rather than a single predicate, so it is given as a set of ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from sessions_admin.core import db, forks, lineage


@dataclass(frozen=True)
class HealthCheck:
    kind: str
    label: str
    explanation: str


CHECKS = (
    HealthCheck(
        "forks",
        "Sessions in fork groups",
        "One conversation split over unlinked sessions (cold starts, lost session keys).",
    ),
    HealthCheck(
        "dangling_compression",
        "Compressed with no continuation",
        "Ended by compression, but no session continues them: the conversation stops there.",
    ),
    HealthCheck(
        "missing_parent",
        "Children whose parent is missing",
        "parent_session_id names a session that is not in the store.",
    ),
    HealthCheck("empty", "Empty sessions", "Sessions with no messages at all."),
    HealthCheck(
        "counter_mismatch",
        "Counters that disagree with the rows",
        "message_count differs from the number of active messages.",
    ),
)
KINDS = {check.kind for check in CHECKS}


def predicate(kind: str, alias: str = "s") -> tuple[str, list]:
    """SQL (and params) selecting sessions ``alias`` that fail the check ``kind``."""
    if kind == "forks":
        ids = sorted(forks.fork_session_ids())
        if not ids:
            return "1 = 0", []
        return db.in_list(f"{alias}.id", ids)
    if kind == "dangling_compression":
        continuation = (
            f"{lineage.marker('_branched_from', 'c')} IS NULL "
            f"AND {lineage.marker('_delegate_from', 'c')} IS NULL"
        )
        # A scalar probe per row, not NOT EXISTS: PostgreSQL plans that as a hash
        # anti-join over the whole table.
        return (
            f"{alias}.end_reason = 'compression' AND (SELECT c.id FROM sessions c "
            f"WHERE c.parent_session_id = {alias}.id AND {continuation} LIMIT 1) IS NULL",
            [],
        )
    if kind == "missing_parent":
        return (
            f"{alias}.parent_session_id IS NOT NULL AND NOT EXISTS "
            f"(SELECT 1 FROM sessions p WHERE p.id = {alias}.parent_session_id)",
            [],
        )
    if kind == "empty":
        return f"(SELECT m.id FROM messages m WHERE m.session_id = {alias}.id LIMIT 1) IS NULL", []
    if kind == "counter_mismatch":
        return (
            f"COALESCE({alias}.message_count, 0) <> (SELECT COUNT(*) FROM messages m "
            f"WHERE m.session_id = {alias}.id AND m.active = 1)",
            [],
        )
    raise ValueError(f"unknown health check {kind!r}")


def count(kind: str) -> int:
    if kind == "forks":
        return len(forks.fork_session_ids())
    sql, params = predicate(kind)
    return int(db.fetchone(f"SELECT COUNT(*) FROM sessions s WHERE {sql}", params)[0])


def fork_group_count() -> int:
    return len(forks.find_fork_groups())
