"""Messages written into a session after it ended, moved to where its conversation continues.

hermes-agent 0.19's ``append_message`` does not check ``ended_at``: a gateway still holding a
session a merge absorbed (or a reset or switch left behind) keeps writing into it; the health
check ``written_after_end`` finds such sessions. ``plan_stray_move`` (reads only) names the
messages stamped after the session could have received them (the health check's bound), the
live session where the conversation continues (``lifecycle.where_it_continues``) and a
fingerprint; ``move_stray_messages`` executes exactly that plan (ids and columns unchanged,
counters recounted, full-text indexes following); ``return_stray_messages`` undoes it. Only a
live destination is offered: moving rows into another ended session would only move the
finding; and only the same person's (``_another_person``): a move records no person, so an
erasure would not follow the rows into another person's session."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sessions_admin.core import being_deleted, db, fingerprints, holds, lineage
from sessions_admin.core.db import store_operation
from sessions_admin.core.errors import InvalidInput, SessionNotFound
from sessions_admin.core.fingerprints import plan_fingerprint
from sessions_admin.core.lifecycle import lock_keys_of, where_it_continues
from sessions_admin.core.merge import PlanChanged, move_messages
from sessions_admin.core.rows import parse_model_config, recompute_counters, require_session_id
from sessions_admin.core.schema import END_MARKS_TABLE

SAMPLE_SIZE = 20


@dataclass(frozen=True)
class StrayPlan:
    session_id: str
    end_reason: str | None
    ended_at: float | None
    bound: float | None  # messages stamped later than this are stray
    destination_id: str | None  # None: nothing live continues the session
    destination_via: str | None
    message_ids: tuple[int, ...]
    sample: tuple[dict, ...]  # the first stray messages, for the preview
    fingerprint: str
    # A merge's husk: the merge gave the target every message it had, so every message it
    # holds was written after the merge, whatever its stamp.
    merged_into: str | None = None
    # Why the destination is another person's conversation (None: the same person's).
    another_person: str | None = None
    # A legal hold the move would take the messages out of, in its refusal's words.
    held: str | None = None

    @property
    def movable(self) -> bool:
        return (
            bool(self.message_ids)
            and self.destination_id is not None
            and not self.another_person
            and not self.held
        )


@dataclass(frozen=True)
class StrayMoveResult:
    session_id: str
    destination_id: str
    message_ids: tuple[int, ...]


@dataclass(frozen=True)
class StrayReturnResult:
    session_id: str
    destination_id: str
    returned_ids: tuple[int, ...]


# Seconds a message may be stamped after its session's end before it counts as
# written after it. Within the core a message's stamp is taken under the session's
# lock, so it always precedes an end committed after it; but a runtime may stamp
# messages with its own clock (``timestamp=``), and two hosts' clocks drift by a
# little. A stale writer is typically minutes or hours late.
END_TOLERANCE_SECONDS = 5.0


def husk_sql(alias: str) -> str:
    """SQL: the session ``alias`` is a merge's husk (``merged_into``): it holds no message a
    runtime wrote before the merge. ``health._written_after_end`` uses the same rule."""
    return (
        f"({alias}.end_reason = 'merged' AND {lineage.marker('_merged_into', alias)} IS NOT NULL)"
    )


# How far a mark's end may be from the session's: the same float, written twice.
MARK_MATCH_SECONDS = 0.001


def _absorbed_into_sql(target: str) -> str:
    """SQL after FROM: the husks a merge absorbed into ``target`` (a column or ``%s``)."""
    return (
        f"sessions a WHERE a.end_reason = 'merged' "
        f"AND {lineage.marker('_merged_into', 'a')} = {target}"
    )


def marked_late_sql(alias: str) -> str:
    """SQL: the session ``alias`` holds a message written after the end the core marked on it
    (``rows.mark_end``: a higher id than the store's last at that end), the mark still its
    end, and no merge moved messages into it since (those came later by id, rightly)."""
    return (
        f"EXISTS (SELECT 1 FROM {END_MARKS_TABLE} k WHERE k.session_id = {alias}.id "
        f"AND ABS(k.ended_at - {alias}.ended_at) < {MARK_MATCH_SECONDS} "
        f"AND NOT EXISTS (SELECT 1 FROM {_absorbed_into_sql(f'{alias}.id')}) "
        f"AND EXISTS (SELECT 1 FROM messages w WHERE w.session_id = {alias}.id "
        "AND w.id > k.last_message_id))"
    )


def _marked_last_id(row: dict, absorbed_end: float | None) -> int | None:
    """The last message id ``marked_late_sql``'s rule holds ``row`` to, or None (no mark, a
    mark of another end, or a session a merge absorbed others into: ``absorbed_end``)."""
    if row["ended_at"] is None or absorbed_end is not None:
        return None
    mark = db.fetchone(
        f"SELECT ended_at, last_message_id FROM {END_MARKS_TABLE} WHERE session_id = %s",
        [row["id"]],
    )
    if mark is None or abs(float(mark[0]) - float(row["ended_at"])) >= MARK_MATCH_SECONDS:
        return None
    return int(mark[1])


def merged_into(row: dict) -> str | None:
    """The merge target a husk's ``row`` names, else None (``husk_sql``'s rule in Python)."""
    if row["end_reason"] != "merged":
        return None
    target = parse_model_config(row.get("model_config")).get("_merged_into")
    return target if isinstance(target, str) and target else None


def _absorbed_end(session_id: str) -> float | None:
    """The latest end of a session a merge absorbed into ``session_id`` (None: none)."""
    (end,) = db.fetchone(f"SELECT MAX(a.ended_at) FROM {_absorbed_into_sql('%s')}", [session_id])
    return None if end is None else float(end)


def _bound(row: dict, absorbed_end: float | None) -> float | None:
    """The latest time ``row`` could have received a message (``health._written_after_end``)."""
    if row["ended_at"] is None:
        return None
    return max(float(row["ended_at"]), absorbed_end or 0.0) + END_TOLERANCE_SECONDS


def _fingerprint(row: dict, destination: str | None, ids: Sequence[int]) -> str:
    destination_row = lineage.session_row(destination) if destination else None
    payload = [
        row["id"],
        row["ended_at"],
        row["end_reason"],
        destination,
        destination_row["ended_at"] if destination_row else None,
        list(ids),
    ]
    return plan_fingerprint("stray-move", payload)


def _another_person(row: dict, destination: dict | None) -> str | None:
    """Why ``destination`` is not the same person's as ``row`` (None: it is), as an erasure
    tells people apart: by user id, and without one by chat id and session key. A move
    records no person, so an erasure of ``row``'s person would miss the messages there."""
    if destination is None:
        return None
    if row["user_id"] is not None or destination["user_id"] is not None:
        if row["user_id"] == destination["user_id"]:
            return None
        return f"user {row['user_id'] or '(none)'} against {destination['user_id'] or '(none)'}"
    for column, words in (("chat_id", "chat"), ("session_key", "session key")):
        if row[column] != destination[column]:
            return f"{words} {row[column] or '(none)'} against {destination[column] or '(none)'}"
    return None


def _plan(session_id: str) -> StrayPlan:
    require_session_id(session_id)
    row = lineage.session_row(session_id)
    if row is None:
        raise SessionNotFound(session_id)
    absorbed_end = _absorbed_end(session_id)
    bound = _bound(row, absorbed_end)
    husk_of = merged_into(row)
    ids: list[int] = []
    if husk_of is not None:
        ids = [
            int(r[0])
            for r in db.fetchall(
                "SELECT id FROM messages WHERE session_id = %s ORDER BY id", [session_id]
            )
        ]
    elif bound is not None:
        # Stamped past the bound, or (the core ended it, and something is stamped after
        # that end: the health check's gate) written after its end by id.
        (latest,) = db.fetchone(
            "SELECT MAX(timestamp) FROM messages WHERE session_id = %s", [session_id]
        )
        late = latest is not None and float(latest) > float(row["ended_at"])
        last = _marked_last_id(row, absorbed_end) if late else None
        ids = [
            int(r[0])
            for r in db.fetchall(
                "SELECT id FROM messages WHERE session_id = %s AND (timestamp > %s OR id > %s) "
                "ORDER BY id",
                [session_id, bound, last if last is not None else 2**62],
            )
        ]
    destination, via = where_it_continues(row) if row["ended_at"] is not None else (None, None)
    another_person = _another_person(row, lineage.session_row(destination) if destination else None)
    leaving = (
        holds.held_moves(moves=[(session_id, destination)], action="move of stray messages")
        if destination and ids
        else []
    )
    sample = ()
    if ids:
        sample = tuple(
            db.fetchdicts(
                "SELECT id, role, content, tool_name, timestamp, active FROM messages "
                f"WHERE id IN ({db.placeholders(ids[:SAMPLE_SIZE])}) ORDER BY id",
                ids[:SAMPLE_SIZE],
            )
        )
    return StrayPlan(
        session_id=session_id,
        end_reason=row["end_reason"],
        ended_at=row["ended_at"],
        bound=bound,
        destination_id=destination,
        destination_via=via,
        message_ids=tuple(ids),
        sample=sample,
        fingerprint=_fingerprint(row, destination, ids),
        merged_into=husk_of,
        another_person=another_person,
        held=str(leaving[0]) if leaving else None,
    )


def plan_stray_move(*, session_id: str) -> StrayPlan:
    """What ``move_stray_messages`` would move, and where; reads only."""
    return _plan(session_id)


def _move(ids: Sequence[int], from_session: str, to_session: str) -> int:
    moved = 0
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        moved += move_messages(
            f"session_id = %s AND id IN ({db.placeholders(chunk)})",
            [from_session, *chunk],
            to_session,
        )
    recompute_counters(from_session)
    recompute_counters(to_session)
    return moved


@store_operation
def move_stray_messages(*, session_id: str, expected_fingerprint: str) -> StrayMoveResult:
    """Move the previewed stray messages of ``session_id`` into the live session that continues it.

    Refuses (``PlanChanged``, nothing written) when the plan read under the
    locks differs from the preview: another stray message arrived, the
    destination changed or ended.
    """
    require_session_id(session_id)
    first = _plan(session_id)
    lock_keys_of([session_id, *([first.destination_id] if first.destination_id else [])])
    being_deleted.lock_and_refuse([session_id, first.destination_id])
    plan = _plan(session_id)
    if not fingerprints.matches(expected_fingerprint, plan.fingerprint):
        raise PlanChanged("move")
    if not plan.message_ids:
        raise InvalidInput(f"{session_id} holds no message written after it ended.")
    if plan.destination_id is None:
        raise InvalidInput(
            f"No live session continues {session_id}: resume where its conversation went, "
            "then move the messages."
        )
    if plan.another_person:
        raise InvalidInput(
            f"{plan.destination_id}, where {session_id}'s conversation continues, is another "
            f"person's ({plan.another_person}): moved there, these messages would be out of "
            "reach of an erasure of their own person. They stay where they were written."
        )
    holds.refuse_moving_out(
        moves=[(session_id, plan.destination_id)], action="move of stray messages"
    )
    _move(plan.message_ids, session_id, plan.destination_id)
    return StrayMoveResult(session_id, plan.destination_id, plan.message_ids)


@store_operation
def return_stray_messages(
    *, session_id: str, destination_id: str, message_ids: Sequence[int]
) -> StrayReturnResult:
    """Undo a move: the ``message_ids`` still in ``destination_id`` go back to ``session_id``."""
    require_session_id(session_id)
    require_session_id(destination_id, "destination_id")
    ids = sorted({int(m) for m in message_ids if not isinstance(m, bool)})
    if not ids:
        raise InvalidInput("No message ids to return.")
    lock_keys_of([session_id, destination_id])
    being_deleted.lock_and_refuse([session_id, destination_id])
    for sid in (session_id, destination_id):
        if lineage.session_row(sid, lock=True) is None:
            raise SessionNotFound(sid)
    present = []
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        present += [
            int(r[0])
            for r in db.fetchall(
                f"SELECT id FROM messages WHERE session_id = %s AND id IN ({db.placeholders(chunk)})",
                [destination_id, *chunk],
            )
        ]
    if not present:
        raise InvalidInput(
            f"None of the moved messages is in {destination_id} any more: already returned, "
            "deleted or moved on."
        )
    holds.refuse_moving_out(moves=[(destination_id, session_id)], action="return of stray messages")
    _move(sorted(present), destination_id, session_id)
    return StrayReturnResult(session_id, destination_id, tuple(sorted(present)))
