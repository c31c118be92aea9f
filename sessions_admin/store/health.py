"""Store health checks: each one a SQL predicate over ``sessions s``, counted on the home page
and usable as a session-list filter (``/sessions/?health=<kind>``).

Reads only. The fork check is evidence-based (``core.forks``) and the stranded-conversation
check's slugs may live in another database, so both are given as sets of ids. One check finds
what a fault leaves (a delete in parts stopped partway, ``core.being_deleted``); three find
what only a runtime writing past the core can leave (the core refuses each): several live
sessions for one key, messages written after their session ended, slugs left on a session a
rotation ended with nothing continuing it."""

from __future__ import annotations

from dataclasses import dataclass

from sessions_admin.core import being_deleted, db, forks, lineage
from sessions_admin.core.lifecycle import where_it_continues
from sessions_admin.core.stray import END_TOLERANCE_SECONDS, husk_sql, marked_late_sql
from sessions_admin.routers import responses_alias


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
        "message_count differs from the number of active messages (a runtime's own rewind "
        "keeps it, for one). Recount it from the session's page (support).",
    ),
    HealthCheck(
        "several_live",
        "Keys with several live sessions",
        "Live sessions sharing a session_key with another live session (delegates aside): "
        "a chat's messages land in either one.",
    ),
    HealthCheck(
        "written_after_end",
        "Written after they ended",
        "Ended sessions holding a message stamped later than their end: a runtime kept "
        "writing with a stale session id.",
    ),
    HealthCheck(
        "stranded_conversation",
        "Conversations stranded on an ended session",
        "A conversation slug names a session that a rotation (reset, switch, new, branch, "
        "compression, merge) ended, and no live session continues it.",
    ),
    HealthCheck(
        "being_deleted",
        "Left being deleted",
        "A delete in parts stopped partway (a fault: a full disk, a killed process): part of "
        "each one's messages is in the trash and writes to it are refused. Finish it (resume "
        "its job, or delete the session again) or undo it (restore its entry from the trash). "
        "A delete running right now shows here until it finishes.",
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
        continuation = lineage.continues_parent_sql("c")
        # A scalar probe per row, not NOT EXISTS: PostgreSQL plans that as a hash
        # anti-join over the whole table.
        return (
            f"{alias}.end_reason = 'compression' AND (SELECT c.id FROM sessions c "
            f"WHERE c.parent_session_id = {alias}.id AND {continuation} LIMIT 1) IS NULL",
            [],
        )
    if kind == "stranded_conversation":
        ids = sorted({sid for _name, sid in stranded_conversations()})
        if not ids:
            return "1 = 0", []
        return db.in_list(f"{alias}.id", ids)
    if kind == "several_live":
        # Delegates carry their parent's key but are never a key's live session
        # (lineage.live_session_for_key). One index probe (session_key) per live keyed row.
        return (
            f"{alias}.ended_at IS NULL AND {alias}.session_key IS NOT NULL "
            f"AND {alias}.session_key <> '' "
            f"AND {lineage.marker('_delegate_from', alias)} IS NULL "
            f"AND (SELECT o.id FROM sessions o WHERE o.session_key = {alias}.session_key "
            f"AND o.id <> {alias}.id AND o.ended_at IS NULL "
            f"AND {lineage.marker('_delegate_from', 'o')} IS NULL LIMIT 1) IS NOT NULL",
            [],
        )
    if kind == "written_after_end":
        return _written_after_end(alias), []
    if kind == "being_deleted":
        if not being_deleted.table_present():
            return "1 = 0", []
        return f"{alias}.id IN (SELECT d.session_id FROM sessions_admin_deletions d)", []
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
            f"WHERE m.session_id = {alias}.id AND m.active = 1)"
            # A session a delete is removing in parts keeps its counters until its row goes.
            + (
                f" AND {alias}.id NOT IN (SELECT session_id FROM sessions_admin_deletions)"
                if being_deleted.table_present()
                else ""
            ),
            [],
        )
    raise ValueError(f"unknown health check {kind!r}")


def count(kind: str) -> int:
    if kind == "forks":
        return len(forks.fork_session_ids())
    if kind == "stranded_conversation":
        return len({sid for _name, sid in stranded_conversations()})
    sql, params = predicate(kind)
    return int(db.fetchone(f"SELECT COUNT(*) FROM sessions s WHERE {sql}", params)[0])


def fork_group_count() -> int:
    return len(forks.find_fork_groups())


def _written_after_end(alias: str) -> str:
    """Ended sessions holding a message stamped later than the session could have received it.

    A merge legitimately moves messages into an ended target that were written
    after the target ended (two ended forks, the older one kept): those were
    written into the absorbed session, before it ended. So a session's bound is
    its own end or, if it absorbed sessions, the latest end among them (one
    level of merges is followed: rows that came through a merge of a merge of
    ended sessions can still be reported). An unmerge moves the rows back to the
    session they were written in and restores its end: within their bound again.

    A merge's husk is the exception: the merge gave its target every message the husk had,
    so any message a husk holds was written after the merge, however soon (``husk_sql``).

    The expensive probes run only for a session whose latest message is already
    past its own end: ``CASE`` fixes the order of evaluation on both backends.
    """
    # An empty session has no latest message: its end bounds nothing.
    latest = (
        f"COALESCE((SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = {alias}.id), "
        f"{alias}.ended_at)"
    )
    absorbed_end = (
        "(SELECT MAX(a.ended_at) FROM sessions a WHERE a.end_reason = 'merged' "
        f"AND {lineage.marker('_merged_into', 'a')} = {alias}.id)"
    )
    tolerance = END_TOLERANCE_SECONDS
    return (
        f"CASE WHEN {alias}.ended_at IS NULL THEN 0 "
        # A merge's husk gave the target every message it had: any it holds came later.
        f"WHEN {husk_sql(alias)} AND EXISTS "
        f"(SELECT 1 FROM messages h WHERE h.session_id = {alias}.id) THEN 1 "
        # Nothing stamped after the end at all: nothing late (the probes below are skipped).
        f"WHEN {latest} <= {alias}.ended_at THEN 0 "
        # The core marked its end: a later message id is late however soon it came.
        f"WHEN {marked_late_sql(alias)} THEN 1 "
        f"WHEN {latest} <= {alias}.ended_at + {tolerance} THEN 0 "
        f"WHEN {latest} <= COALESCE({absorbed_end}, {alias}.ended_at) + {tolerance} THEN 0 "
        "ELSE 1 END = 1"
    )


# End reasons of a rotation: the conversation was meant to go on in another
# session, so its slug should have moved there. A session that simply ended
# (idle, user_exit...) is not stranded: resolving its slug continues it in a new
# linked session.
ROTATION_END_REASONS = frozenset(
    {"compression", "merged", "session_reset", "session_switch", "branched", "new_session"}
)


def stranded_conversations() -> list[tuple[str, str]]:
    """(slug, recorded session id) of every conversation stranded on an ended session.

    Stranded: the recorded session ended, the session it continues in
    (``lineage.current_session``: compression and merges forward) ended too, by a
    rotation (the tip's reason decides: a chain that compressed and then went idle
    simply ended), and no live session continues either of them
    (``lifecycle.where_it_continues``). The slugs may live in another database:
    no cross-database join, the recorded sessions are looked up by id.
    """
    recorded = db.fetchall(
        "SELECT name, session_id FROM conversations WHERE session_id IS NOT NULL ORDER BY name",
        alias=responses_alias(),
    )
    ended = {
        row["id"]: row
        for row in db.fetchall_in(
            f"SELECT {lineage.SESSION_FIELDS} FROM sessions "
            "WHERE ended_at IS NOT NULL AND id IN ({marks})",
            sorted({sid for _name, sid in recorded}),
            dicts=True,
        )
    }
    stranded_ids: dict[str, bool] = {}
    for session_id, row in ended.items():
        stranded_ids[session_id] = _is_stranded(row, where_it_continues)
    return [(name, sid) for name, sid in recorded if stranded_ids.get(sid)]


def _is_stranded(row: dict, where_it_continues) -> bool:
    current_id = lineage.current_session(session_id=row["id"])
    current = row if current_id == row["id"] else lineage.session_row(current_id)
    if current is None or current["ended_at"] is None:
        return False
    if current["end_reason"] not in ROTATION_END_REASONS:
        return False
    for candidate in (row, current):
        if where_it_continues(candidate) != (None, None):
            return False
        if candidate["end_reason"] == "branched" and _live_branch_of(candidate["id"]):
            return False
    return True


def _live_branch_of(session_id: str) -> bool:
    """Whether a branch of ``session_id`` (or where the branch went on) is live.

    ``core.branch_session`` ends a live session ``branched`` and leaves its slugs
    where they were; a session with a key is continued through the key
    (``where_it_continues``), one without (an API conversation) only through the
    branch, which is its live continuation all the same.
    """
    branches = db.fetchall(
        "SELECT id FROM sessions WHERE parent_session_id = %s "
        f"AND {lineage.marker('_branched_from')} = %s",
        [session_id, session_id],
    )
    for (branch_id,) in branches:
        tip = lineage.current_session(session_id=branch_id)
        found = db.fetchone("SELECT ended_at FROM sessions WHERE id = %s", [tip])
        if found is not None and found[0] is None:
            return True
    return False
