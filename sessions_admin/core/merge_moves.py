"""What merges not undone moved, as their records say: the children they re-parented onto
their targets and the messages they moved out of the absorbed sessions.

A merge takes an absorbed session's children and messages into its target (``core.merge``);
its record (``sessions_admin_merges``) is all that still says whose they were. Holds and
erasures follow it (attack round 44): a delegate another person's session had is covered by
the holds on that person and taken by their erasure, wherever the merge put it and wherever it
went since (the dashboard's trash after a cascade of the target); the messages moved are that
person's, in the store or in the trash; and one person's erasure refuses a session that holds
another person's moved rows, in the store or in the trash, as it does while the merge can be
undone. A record an erasure closed (``closed_by_erasure``) keeps the moves of the other people
it absorbed, and only those.

Read once per check: the merges table holds one row per merge an operator confirmed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sessions_admin.core import db
from sessions_admin.core.schema import existing_tables
from sessions_admin.routers import store_alias


@dataclass(frozen=True)
class MergeMoves:
    # child -> (the absorbed session it was below, the merge's target it went below) of every
    # merge not undone that moved it, oldest first (a merge of merges moves it again)
    children: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    # absorbed session -> the (first, last) message id ranges the merge moved out of it
    messages: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    # absorbed session -> the target it went into
    targets: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.children or self.messages or self.targets)

    def original_parent(self, session_id: str) -> str | None:
        """The session ``session_id`` was below before the first merge not undone moved it (whose
        it is), or None."""
        moved = self.children.get(session_id)
        return moved[0][0] if moved else None

    def parents_before(self, session_id: str) -> tuple[str, ...]:
        """Every session ``session_id`` was below before a merge not undone moved it."""
        return tuple(before for before, _target in self.children.get(session_id, ()))

    def moved_from(self, message_id: int, session_ids: set[str]) -> str | None:
        """Which of ``session_ids`` a merge moved message ``message_id`` out of, or None."""
        for session_id in session_ids:
            for first, last in self.messages.get(session_id, ()):
                if first <= message_id <= last:
                    return session_id
        return None

    def absorbed_into(self, target_ids: set[str]) -> dict[str, str]:
        """absorbed -> target, for the merges into one of ``target_ids``."""
        return {a: t for a, t in self.targets.items() if t in target_ids}


NONE = MergeMoves()


def recorded_children(prior: object) -> list[tuple[str, str]]:
    """(child, the absorbed session it was below) of each child a merge record's prior state
    says the merge moved onto its target; nothing for a record that cannot be read."""
    pairs = prior.get("children") if isinstance(prior, dict) else None
    return [
        (str(pair[0]), str(pair[1]))
        for pair in pairs or []
        if isinstance(pair, list | tuple) and len(pair) == 2
    ]


# A record whose merge moved no child (``db.dumps`` writes no spaces; inside a JSON string the
# quotes would be escaped, so only the key itself matches).
_NO_CHILDREN = '%"children":[]%'


def merge_moves(*, children_only: bool = False) -> MergeMoves:
    """Every move recorded by a merge that is not undone (of one an erasure closed, what it
    moved of the other people it absorbed).
    ``children_only``: only the merges that moved a child are read (a hold check runs under
    the store's write lock, once per batch of a delete: most merges moved none)."""
    if "sessions_admin_merges" not in existing_tables(store_alias()):
        return NONE
    children: dict[str, tuple[tuple[str, str], ...]] = {}
    messages: dict[str, tuple[tuple[int, int], ...]] = {}
    targets: dict[str, str] = {}
    sql = (
        "SELECT target_session_id, absorbed_session_ids, prior_state FROM sessions_admin_merges "
        "WHERE undone_at IS NULL"
    )
    params: list = []
    if children_only:
        sql += " AND prior_state NOT LIKE %s"
        params.append(_NO_CHILDREN)
    for target, absorbed, prior in db.fetchall(sql + " ORDER BY id", params):
        try:
            state = json.loads(prior or "{}")
            absorbed_ids = [str(s) for s in json.loads(absorbed or "[]")]
        except (TypeError, ValueError):
            continue
        if not isinstance(state, dict):
            continue
        # A record an erasure closed keeps only what it moved of the other people it absorbed.
        for session_id in absorbed_ids:
            targets[session_id] = str(target)
        for child, before in recorded_children(state):
            children[child] = children.get(child, ()) + ((before, str(target)),)
        for session_id, ranges in (state.get("messages") or {}).items():
            try:
                found = tuple((int(first), int(last)) for first, last in ranges)
            except (TypeError, ValueError):
                continue
            messages[str(session_id)] = messages.get(str(session_id), ()) + found
    return MergeMoves(children=children, messages=messages, targets=targets)
