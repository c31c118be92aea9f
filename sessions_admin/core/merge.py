"""Merge forks back into one conversation, and undo a merge exactly.

``plan_merge`` previews by SQL with a fingerprint; ``merge_sessions`` runs only if the store still
matches it. Messages move by re-pointing (their ids order the stitched transcript as written);
children, slugs and keys move to the target; absorbed sessions end ``merged`` (``_merged_into``);
the prior state kept in the store lets ``unmerge`` restore it exactly. Hermes builds a slug's next
turn from its latest stored response: ``continue_history`` writes the merged transcript there,
and unmerge puts its text back byte-exact. Against merging two customers, ``differences`` names
which of user, source, key and first message differ (the console asks a typed confirmation); no
target given, it is the live session, else the latest active, not the oldest (``target_rule``).

Over 800 lines on purpose: the merge's plan and fingerprint, the merge, its exact undo and the
merge records share one prior-state format.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sessions_admin.core import (
    being_deleted,
    clock,
    db,
    events,
    faults,
    fingerprints,
    holds,
    lineage,
)
from sessions_admin.core.conversations import (
    conversation_history_of,
    latest_responses_of,
    repoint_responses,
    restore_responses,
    rewrite_response_histories,
)
from sessions_admin.core.db import store_operation
from sessions_admin.core.errors import InvalidInput, SessionNotFound, StoreError
from sessions_admin.core.fingerprints import plan_fingerprint
from sessions_admin.core.lifecycle import keep_one_live, live_of_key, lock_keys_of
from sessions_admin.core.rows import (
    parse_model_config,
    recompute_counters,
    repoint_conversations,
    slugs_of_sessions,
)
from sessions_admin.core.schema import USAGE_COLUMNS
from sessions_admin.core.text import says_something
from sessions_admin.routers import responses_alias

SAVED_COLUMNS = (
    "ended_at",
    "end_reason",
    "model_config",
    "session_key",
    "message_count",
    "tool_call_count",
    *USAGE_COLUMNS,
)
MAX_MERGE_SESSIONS = 200
FIRST_MESSAGE_CHARS = 200  # a first user message is cut to this in a plan
# What identifies whose conversation a session is: (column, what the console calls it).
IDENTITY_COLUMNS = (("user_id", "user"), ("source", "source"), ("session_key", "session key"))


class PlanChanged(StoreError):
    def __init__(self, what: str):
        super().__init__(
            f"The store changed since the {what} was previewed (a runtime wrote to it, or "
            "an operator placed a hold, merged or deleted). Nothing was changed: review the "
            "new preview and confirm again."
        )


class MergeNotFound(StoreError):
    def __init__(self, merge_id: int):
        self.merge_id = merge_id
        super().__init__(f"No merge {merge_id}.")


@dataclass(frozen=True)
class MergeSource:
    session_id: str
    role: str  # "target" or "absorbed"
    messages: int
    active_messages: int
    started_at: float
    ended_at: float | None
    end_reason: str | None
    session_key: str | None
    user_id: str | None = None
    source: str | None = None
    first_user_message: str | None = None  # cut to FIRST_MESSAGE_CHARS


@dataclass(frozen=True)
class MergeDifference:
    """One identity column not the same for all sessions: its distinct values, in order."""

    column: str  # "user_id", "source" or "session_key"
    label: str  # "user", "source" or "session key"
    values: tuple[str | None, ...]


@dataclass(frozen=True)
class MergePlan:
    target_id: str
    absorbed_ids: tuple[str, ...]
    sources: tuple[MergeSource, ...]
    moved_messages: int
    conversations_moved: tuple[str, ...]
    session_key_for_target: str | None
    reparented_children: tuple[str, ...]
    reopen_target: bool
    fingerprint: str
    # (slug, its latest stored response) of every slug of these sessions: the responses
    # whose conversation_history ``continue_history`` rewrites to the merged transcript.
    latest_responses: tuple[tuple[str, str], ...] = ()
    # Which of user, source and session key differ between these sessions (none: one customer).
    differences: tuple[MergeDifference, ...] = ()
    # The pick the target was chosen as (``target_id`` is its compression tip), and why:
    # "chosen" (given), "oldest" (same customer), "live" or "latest activity" (they differ).
    chosen_id: str = ""
    target_rule: str = "chosen"
    # Why the merge would be refused under a legal hold (a held session's messages would leave
    # its hold), in words; empty: no hold stands in the way. The merge checks again under its
    # locks (``holds.refuse_moving_out``).
    held: tuple[str, ...] = ()

    @property
    def differs(self) -> bool:
        """The sessions are not all of one user, source and session key."""
        return bool(self.differences)

    @property
    def is_api_conversation(self) -> bool:
        """The merged sessions carry a /v1/responses slug whose next turn reads a stored history."""
        return bool(self.latest_responses)


@dataclass(frozen=True)
class MergeResult:
    merge_id: int
    target_id: str
    absorbed_ids: tuple[str, ...]
    moved_messages: int
    rewritten_responses: tuple[str, ...] = ()  # responses given the merged history


@dataclass(frozen=True)
class UnmergeResult:
    merge_id: int
    target_id: str
    restored_ids: tuple[str, ...]
    returned_messages: int


# What an erasure (core.erasure) leaves as a merge's prior state when the merge moved the
# erased person's rows into a session that stays: nothing to undo with, and it says so.
CLOSED_BY_ERASURE = {"closed_by_erasure": True}
_CLOSED_PREFIX = '{"closed_by_erasure"'


@dataclass(frozen=True)
class MergeRecord:
    merge_id: int
    created_at: float
    target_id: str
    absorbed_ids: tuple[str, ...]
    undone_at: float | None
    # Its sessions no longer in the store (deleted since): it cannot be undone until they
    # are back (restored from the trash), and says so instead of failing.
    missing_ids: tuple[str, ...] = ()
    # An erasure removed rows this merge moved: it can never be undone again.
    closed_by_erasure: bool = False
    # Its sessions deleted since whose ids a runtime has used again for new sessions: the
    # rows the undo needs are in the trash, and a restore would clash with the new ones.
    replaced_ids: tuple[str, ...] = ()

    @property
    def undo_lost(self) -> str:
        """Why this merge cannot be undone now ("" if it can, or was undone)."""
        if self.undone_at is not None:
            return ""
        if self.closed_by_erasure:
            return (
                f"Merge #{self.merge_id} can no longer be undone: an erasure removed rows it moved."
            )
        if self.missing_ids:
            return (
                f"Merge #{self.merge_id} can no longer be undone: session(s) "
                f"{', '.join(self.missing_ids[:5])} were deleted (restore them from the trash "
                "first; once purged or erased, the merge cannot be undone at all)."
            )
        if self.replaced_ids:
            return (
                f"Merge #{self.merge_id} can no longer be undone: session(s) "
                f"{', '.join(self.replaced_ids[:5])} were deleted after it and a runtime has "
                "since started new sessions with the same ids (while the deleted ones are "
                "still in the trash, delete the new ones and restore the trash entry to undo "
                "the merge; once purged or erased, it cannot be undone at all)."
            )
        return ""

    @property
    def undoable(self) -> bool:
        return self.undone_at is None and not self.undo_lost


@dataclass(frozen=True)
class UndoableMerge:
    """A merge that can still be undone, as one of its sessions sees it."""

    merge_id: int
    role: str  # "target" or "absorbed"

    def describe(self) -> str:
        what = "target of" if self.role == "target" else "absorbed by"
        return f"{what} merge #{self.merge_id}, which can still be undone"


def undoable_merges_of(session_ids: Iterable[str] | None = None) -> dict[str, UndoableMerge]:
    """The sessions a merge that can still be undone needs, each with that merge (its newest).

    An unmerge puts every session of the merge back, the target and each absorbed one
    (its husk): deleting any of them loses the undo. The one rule every delete asks (a
    bulk preset or selection and retention leave them out, a cascade warns and asks).
    ``session_ids``: only these (default: every such session).
    """
    wanted = None if session_ids is None else set(session_ids)
    found: dict[str, UndoableMerge] = {}
    for merge_id, target, absorbed in db.fetchall(
        "SELECT id, target_session_id, absorbed_session_ids FROM sessions_admin_merges "
        "WHERE undone_at IS NULL ORDER BY id"
    ):
        members = [(target, "target"), *((sid, "absorbed") for sid in json.loads(absorbed))]
        for sid, role in members:
            if wanted is None or sid in wanted:
                found[sid] = UndoableMerge(int(merge_id), role)
    return found


def _rows(ids: Sequence[str], *, lock: bool = False) -> dict[str, dict]:
    if not ids:
        return {}
    columns = ", ".join(
        ("id", "started_at", "parent_session_id", "user_id", "source", *SAVED_COLUMNS)
    )
    rows = db.fetchdicts(
        f"SELECT {columns} FROM sessions WHERE id IN ({db.placeholders(ids)}) ORDER BY id"
        + (db.for_update() if lock else ""),
        list(ids),
    )
    return {row["id"]: row for row in rows}


def differing_words(labels: Sequence[str]) -> str:
    """ "users", "users and sources", "users, sources and session keys"."""
    words = [label + "s" for label in labels]
    return " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 2 else words)


def confirmation_problem(plan: MergePlan, *, typed_count: int | None, reason: str) -> str | None:
    """Why a merge of sessions that differ (``plan.differences``) is not confirmed yet; None
    when it is, or when nothing differs. The rule the preview states: the number of sessions
    merged into the target typed, and a reason given. A number typed where none is asked must
    still match: one that contradicts the plan (another plan's, a stale script's) is no yes."""
    count = len(plan.absorbed_ids)
    if not plan.differs:
        if typed_count is not None and typed_count != count:
            return (
                f"The number typed ({typed_count}) is not the number of sessions this merges "
                f"into the target ({count}): type {count} to confirm, or leave it out."
            )
        return None
    differing = differing_words([d.label for d in plan.differences])
    if typed_count != count:
        return (
            f"These sessions' {differing} differ: type {count} (the number of sessions merged "
            "into the target) to confirm the merge."
        )
    if not says_something(reason or ""):
        return f"These sessions' {differing} differ: give a reason for merging them."
    return None


def session_differences(rows: Sequence[dict]) -> tuple[MergeDifference, ...]:
    """Which identity columns (user, source, session key) are not the same for all ``rows``.

    A missing value (a CLI session of nobody) differs from any value: that is the
    mistake this guards against (a customer's chat merged into a session of no one).
    """
    found = []
    for column, label in IDENTITY_COLUMNS:
        values = tuple(dict.fromkeys(row.get(column) for row in rows))
        if len(values) > 1:
            found.append(MergeDifference(column=column, label=label, values=values))
    return tuple(found)


def _last_activity(ids: Sequence[str]) -> dict[str, float]:
    rows = db.fetchall(
        "SELECT session_id, MAX(timestamp) FROM messages "
        f"WHERE session_id IN ({db.placeholders(ids)}) GROUP BY session_id",
        list(ids),
    )
    return {r[0]: float(r[1]) for r in rows if r[1] is not None}


def _default_target(picks: list[str], rows: dict[str, dict]) -> tuple[str, str]:
    """(the pick to merge into, the rule that chose it) when the operator named none.

    One customer's forks: the oldest, where the conversation began. Sessions of
    different users, sources or keys: never silently the oldest, but the live
    one (the conversation the runtime goes on with: merging into it ends no
    live chat and reopens no ended one), else the one with the latest activity.
    """
    if not session_differences([rows[p] for p in picks]):
        return min(picks, key=lambda s: (rows[s]["started_at"], s)), "oldest"
    activity = _last_activity(picks)

    def latest(sid: str) -> tuple[float, str]:
        row = rows[sid]
        return (max(activity.get(sid, 0.0), row["started_at"], row["ended_at"] or 0.0), sid)

    live = [p for p in picks if rows[p]["ended_at"] is None]
    if live:
        return max(live, key=latest), "live"
    return max(picks, key=latest), "latest activity"


def first_user_messages(session_ids: Sequence[str]) -> dict[str, str]:
    """session -> its first user message (undone or not), cut to FIRST_MESSAGE_CHARS."""
    ids = list(dict.fromkeys(session_ids))
    found: dict[str, str] = {}
    for start in range(0, len(ids), 500):
        part = ids[start : start + 500]
        rows = db.fetchall(
            "SELECT session_id, content FROM messages WHERE id IN (SELECT MIN(id) FROM messages "
            f"WHERE session_id IN ({db.placeholders(part)}) AND role = 'user' "
            "AND content IS NOT NULL AND content <> '' GROUP BY session_id)",
            part,
        )
        for session_id, content in rows:
            text = " ".join(str(content).split())
            if len(text) > FIRST_MESSAGE_CHARS:
                text = text[: FIRST_MESSAGE_CHARS - 1] + "…"
            found[session_id] = text
    return found


def _ancestors(session_id: str) -> set[str]:
    found: set[str] = set()
    current = lineage.parent_of(session_id=session_id)
    while current and current not in found and len(found) < lineage.MAX_DEPTH:
        found.add(current)
        current = lineage.parent_of(session_id=current)
    return found


def _members(session_ids: Sequence[str], target_id: str | None) -> tuple[str, list[str], str, str]:
    """(target tip, absorbed sessions, the pick chosen as target, the rule that chose it)."""
    picks = list(dict.fromkeys(s for s in session_ids if s))
    if target_id and target_id not in picks:
        picks.insert(0, target_id)
    if len(picks) < 2:
        raise InvalidInput("Pick at least two sessions to merge.")
    if len(picks) > MAX_MERGE_SESSIONS:
        raise InvalidInput(f"Merge at most {MAX_MERGE_SESSIONS} sessions at once.")
    found = _rows(picks)
    for pick in picks:
        if pick not in found:
            raise SessionNotFound(pick)
    rule = "chosen"
    if target_id is None:
        target_id, rule = _default_target(picks, found)
    # Messages go where the target's conversation is now: its compression tip.
    target = lineage.compression_tip(session_id=target_id)
    target_chain = set(lineage.compression_chain(session_id=target))
    absorbed: list[str] = []
    for pick in picks:
        if pick in target_chain:
            continue
        for member in lineage.compression_chain(session_id=pick):
            if member not in target_chain and member not in absorbed:
                absorbed.append(member)
    if not absorbed:
        raise InvalidInput("These sessions are already one conversation: nothing to merge.")
    rows = _rows([target, *absorbed])
    if rows[target]["end_reason"] == "merged":
        raise InvalidInput(f"Session {target} was itself merged into another; merge into that one.")
    for sid in absorbed:
        if rows[sid]["end_reason"] == "merged":
            raise InvalidInput(f"Session {sid} is already merged into another session.")
    if _ancestors(target) & set(absorbed):
        raise InvalidInput(
            "The target descends from a session being absorbed; merge into that session instead."
        )
    members = target_chain | set(absorbed)
    for sid in absorbed:
        branched_from = _branched_from_member(sid, members)
        if branched_from is not None:
            raise InvalidInput(
                f"Session {sid} is a branch of {branched_from} (or of a branch of it): it "
                "begins with a copy of that transcript, so a merge would repeat it. A branch "
                "is another conversation on purpose; merge forks of one conversation instead."
            )
    return target, absorbed, target_id, rule


def _is_branch_of(child: dict, parent: dict) -> bool:
    """``child`` branched from ``parent``: by its marker or, as Hermes still reads rows older
    than the marker, started once ``parent`` had ended ``branched``."""
    if lineage.edge_kind(child, parent["end_reason"]) == "branch":
        return True
    return (
        parent["end_reason"] == "branched"
        and parent["ended_at"] is not None
        and float(child["started_at"]) >= float(parent["ended_at"])
        and lineage.edge_kind(child, parent["end_reason"]) == "child"
    )


def _branched_from_member(session_id: str, members: set[str]) -> str | None:
    """The member ``session_id`` descends from through a branch link somewhere on the way
    (a branch copies its parent's transcript up to where it branched), else None."""
    through_branch = False
    current = lineage.session_row(session_id)
    seen = {session_id}
    while current and current["parent_session_id"] and len(seen) < lineage.MAX_DEPTH:
        parent = lineage.session_row(current["parent_session_id"])
        if parent is None or parent["id"] in seen:
            return None
        through_branch = through_branch or _is_branch_of(current, parent)
        if parent["id"] in members:
            # Reached without a branch: that member's own walk goes on from there (the
            # target's chain descends from no absorbed session: refused above).
            return parent["id"] if through_branch else None
        seen.add(parent["id"])
        current = parent
    return None


def _message_stats(ids: Sequence[str]) -> dict[str, tuple[int, int, int]]:
    """session -> (messages, active messages, max message id), by SQL."""
    rows = db.fetchall(
        "SELECT session_id, COUNT(*), COALESCE(SUM(active), 0), MAX(id) FROM messages "
        f"WHERE session_id IN ({db.placeholders(ids)}) GROUP BY session_id",
        list(ids),
    )
    return {r[0]: (int(r[1]), int(r[2]), int(r[3] or 0)) for r in rows}


def _conversations_of(ids: Sequence[str]) -> list[tuple[str, str]]:
    # Slugs by their column or, where Hermes left it NULL, by their latest response.
    return slugs_of_sessions(list(ids))


def _children_of(ids: Sequence[str]) -> list[tuple[str, str]]:
    return [
        (r[0], r[1])
        for r in db.fetchall(
            f"SELECT id, parent_session_id FROM sessions WHERE parent_session_id IN "
            f"({db.placeholders(ids)}) AND id NOT IN ({db.placeholders(ids)}) ORDER BY id",
            [*ids, *ids],
        )
    ]


def _build_plan(
    target: str,
    absorbed: list[str],
    *,
    lock: bool,
    chosen: str = "",
    rule: str = "chosen",
) -> MergePlan:
    rows = _rows([target, *absorbed], lock=lock)
    stats = _message_stats([target, *absorbed])
    first_messages = first_user_messages([target, *absorbed])
    conversations = _conversations_of(absorbed)
    children = _children_of(absorbed)
    latest = latest_responses_of([target, *absorbed])
    sources = tuple(
        MergeSource(
            session_id=sid,
            role="target" if sid == target else "absorbed",
            messages=stats.get(sid, (0, 0, 0))[0],
            active_messages=stats.get(sid, (0, 0, 0))[1],
            started_at=rows[sid]["started_at"],
            ended_at=rows[sid]["ended_at"],
            end_reason=rows[sid]["end_reason"],
            session_key=rows[sid]["session_key"],
            user_id=rows[sid]["user_id"],
            source=rows[sid]["source"],
            first_user_message=first_messages.get(sid),
        )
        for sid in [target, *sorted(absorbed, key=lambda s: (rows[s]["started_at"], s))]
    )
    key_for_target = None
    if not rows[target]["session_key"]:
        keyed = [s for s in sources if s.role == "absorbed" and s.session_key]
        if keyed:
            key_for_target = max(keyed, key=lambda s: (s.started_at, s.session_id)).session_key
    reopen = rows[target]["ended_at"] is not None and any(
        rows[sid]["ended_at"] is None for sid in absorbed
    )
    fingerprint_source = {
        "target": target,
        "sessions": {
            sid: [rows[sid]["ended_at"], rows[sid]["end_reason"], *stats.get(sid, (0, 0, 0))]
            for sid in sorted([target, *absorbed])
        },
        "conversations": conversations,
        "children": children,
    }
    if latest:
        # Only where there is one, so fingerprints of merges without slugs stay as they were.
        fingerprint_source["latest_responses"] = latest
    differences = session_differences([rows[s.session_id] for s in sources])
    if differences:
        # A confirmation typed for one customer's forks does not confirm a merge of two
        # (a session's key or user changed since the preview): only where there are some.
        fingerprint_source["differences"] = [[d.column, list(d.values)] for d in differences]
    fingerprint = plan_fingerprint("merge", fingerprint_source)
    return MergePlan(
        target_id=target,
        absorbed_ids=tuple(s.session_id for s in sources if s.role == "absorbed"),
        sources=sources,
        moved_messages=sum(s.messages for s in sources if s.role == "absorbed"),
        conversations_moved=tuple(name for name, _ in conversations),
        session_key_for_target=key_for_target,
        reparented_children=tuple(child for child, _ in children),
        reopen_target=reopen,
        fingerprint=fingerprint,
        latest_responses=tuple(latest),
        differences=differences,
        chosen_id=chosen or target,
        target_rule=rule,
    )


def plan_merge(*, session_ids: Sequence[str], target_id: str | None = None) -> MergePlan:
    """What merging ``session_ids`` into ``target_id`` would change.

    Default target: the oldest session, or where users, sources or keys differ the
    live one, else the latest active (``_default_target``; ``plan.target_rule``).
    """
    target, absorbed, chosen, rule = _members(session_ids, target_id)
    plan = _build_plan(target, absorbed, lock=False, chosen=chosen, rule=rule)
    refused = holds.held_moves(moves=[(sid, target) for sid in plan.absorbed_ids], action="merge")
    if not refused:
        return plan
    return dataclasses.replace(plan, held=tuple(str(refusal) for refusal in refused))


def merge_preview(*, plan: MergePlan, limit: int = 200) -> list[dict]:
    """The merged transcript's first ``limit`` messages, in the order the merge will give them."""
    ids = [plan.target_id, *plan.absorbed_ids]
    return db.fetchdicts(
        "SELECT id, session_id, role, content, tool_name, tool_call_id, tool_calls, timestamp, "
        "active FROM messages "
        f"WHERE session_id IN ({db.placeholders(ids)}) ORDER BY id LIMIT %s",
        [*ids, int(limit)],
    )


def _moves_reindex() -> bool:
    """Whether a message changing session must be deleted and re-inserted, not updated.

    A newer Hermes store's trigram index reads a view joining ``sessions`` (it
    leaves out cron, subagent and delegate sessions), and its triggers fire on
    insert, delete and content updates only: re-pointing ``session_id`` in
    place would leave the index out of step with its view, and FTS5 corrupts
    on the next delete. Deleting and re-inserting the rows (same ids, same
    columns) lets every such trigger see the message leave one session and
    join the other. Not done where another table references ``messages``
    (the delete would cascade to it).
    """
    if db.vendor() != "sqlite":
        return False
    session_dependent = db.fetchone(
        "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages' "
        "AND sql LIKE '%%sessions%%' LIMIT 1"
    )
    if session_dependent is None:
        return False
    for (table,) in db.fetchall(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%%'"
    ):
        quoted = '"' + table.replace('"', '""') + '"'
        if any(key[2] == "messages" for key in db.fetchall(f"PRAGMA foreign_key_list({quoted})")):
            return False
    return True


def move_messages(where: str, params: list, to_session: str) -> int:
    """Give the messages matching ``where`` to ``to_session``, ids and order unchanged."""
    if not _moves_reindex():
        return db.execute(
            f"UPDATE messages SET session_id = %s WHERE {where}", [to_session, *params]
        )
    rows = db.fetchdicts(f"SELECT * FROM messages WHERE {where} ORDER BY id", params)
    if not rows:
        return 0
    db.execute(f"DELETE FROM messages WHERE {where}", params)
    columns = list(rows[0])
    with db.cursor() as c:
        c.executemany(
            f"INSERT INTO messages ({', '.join(columns)}) VALUES ({db.placeholders(columns)})",
            [[to_session if col == "session_id" else row[col] for col in columns] for row in rows],
        )
    return len(rows)


def _id_ranges(ids: list[int]) -> list[list[int]]:
    ranges: list[list[int]] = []
    for message_id in sorted(ids):
        if ranges and ranges[-1][1] == message_id - 1:
            ranges[-1][1] = message_id
        else:
            ranges.append([message_id, message_id])
    return ranges


def _set_marker(model_config: str | None, key: str, value: str) -> str:
    config = parse_model_config(model_config)
    config[key] = value
    return db.dumps(config)


@store_operation
def merge_sessions(
    *,
    session_ids: Sequence[str],
    target_id: str | None = None,
    expected_fingerprint: str | None = None,
    continue_history: bool = False,
) -> MergeResult:
    """Merge the sessions into the target in one transaction; see the module docstring.

    ``continue_history``: also write the merged active transcript into the
    latest stored response of each slug of these sessions (``plan.latest_responses``).
    """
    target, absorbed, _chosen, _rule = _members(session_ids, target_id)
    lock_keys_of([target, *absorbed])
    plan = _build_plan(target, absorbed, lock=True)
    being_deleted.refuse_being_deleted([target, *plan.absorbed_ids])
    # Under the locks: a held session's messages and children never leave its hold (a merge
    # into a session the same hold covers is fine, and so is one into a held target).
    holds.refuse_moving_out(moves=[(sid, target) for sid in plan.absorbed_ids], action="merge")
    if expected_fingerprint is not None and not fingerprints.matches(
        expected_fingerprint, plan.fingerprint
    ):
        raise PlanChanged("merge")
    absorbed = list(plan.absorbed_ids)
    rows = _rows([target, *absorbed])
    moved = {
        sid: _id_ranges(
            [int(r[0]) for r in db.fetchall("SELECT id FROM messages WHERE session_id = %s", [sid])]
        )
        for sid in absorbed
    }
    children = _children_of(absorbed)
    conversations = _conversations_of(absorbed)
    now = clock.now()
    marks = db.placeholders(absorbed)

    move_messages(f"session_id IN ({marks})", list(absorbed), target)
    if children:
        db.execute(
            f"UPDATE sessions SET parent_session_id = %s WHERE parent_session_id IN ({marks}) "
            f"AND id NOT IN ({marks})",
            [target, *absorbed, *absorbed],
        )
    faults.checkpoint("merge.after_move")
    sums = {c: sum(float(rows[s][c] or 0) for s in absorbed) for c in USAGE_COLUMNS}
    for sid in absorbed:
        db.execute(
            "UPDATE sessions SET ended_at = %s, end_reason = 'merged', model_config = %s, "
            + ", ".join(f"{c} = 0" for c in USAGE_COLUMNS)
            + " WHERE id = %s",
            [
                rows[sid]["ended_at"] or now,
                _set_marker(rows[sid]["model_config"], "_merged_into", target),
                sid,
            ],
        )
        recompute_counters(sid)
    assignments = [f"{c} = COALESCE({c}, 0) + %s" for c in USAGE_COLUMNS]
    params: list = [sums[c] for c in USAGE_COLUMNS]
    if plan.session_key_for_target:
        assignments.append("session_key = %s")
        params.append(plan.session_key_for_target)
    if plan.reopen_target:
        assignments.append("ended_at = NULL, end_reason = NULL")
    db.execute(f"UPDATE sessions SET {', '.join(assignments)} WHERE id = %s", [*params, target])
    recompute_counters(target)
    after_key = _rows([target])[target]
    # The conversation goes on in a live target: one live session for its key.
    switched = (
        keep_one_live(after_key["session_key"], prefer=[target])
        if after_key["ended_at"] is None
        else []
    )
    if conversations:
        repoint_conversations(from_session_ids=absorbed, to_session_id=target)
    # Hermes's API server continues a slug in the session its latest response names.
    moved_responses = repoint_responses(from_session_ids=absorbed, to_session_id=target)
    rewritten = _continue_histories(plan, moved_responses) if continue_history else []
    after = _rows([target])[target]
    prior_state = {
        "sessions": {sid: {c: rows[sid][c] for c in SAVED_COLUMNS} for sid in [target, *absorbed]},
        # Which sessions these are: an id deleted since and used again is another session.
        "started_at": {sid: rows[sid]["started_at"] for sid in [target, *absorbed]},
        "target_after": {c: after[c] for c in SAVED_COLUMNS},
        "messages": moved,
        "children": children,
        "conversations": conversations,
        "responses": moved_responses,
        "switched": switched,
        "rewritten_histories": rewritten,
    }
    with db.cursor() as c:
        c.execute(
            "INSERT INTO sessions_admin_merges (created_at, target_session_id, "
            "absorbed_session_ids, prior_state) VALUES (%s, %s, %s, %s) RETURNING id",
            [now, target, db.dumps(absorbed), db.dumps(prior_state)],
        )
        merge_id = int(c.fetchone()[0])
    was_live = [sid for sid in absorbed if rows[sid]["ended_at"] is None]
    events.record_switch(
        new_session_id=target,
        previous_session_id=was_live[-1] if was_live else absorbed[-1],
        parent_session_id=absorbed[-1],
        reset=False,
        reason="merge",
        session_key=after["session_key"],
    )
    faults.checkpoint("merge.before_commit")
    return MergeResult(merge_id, target, tuple(absorbed), plan.moved_messages, tuple(rewritten))


def _continue_histories(plan: MergePlan, moved_responses: list[list[str]]) -> list[str]:
    """Give the slugs' latest responses the merged transcript; their old text joins ``moved_responses``.

    A response the merge already repointed has its original text there (the
    unmerge restores that, which also undoes this); the others are added with
    the target as the session they name now, so ``restore_responses`` finds them.
    """
    if not plan.latest_responses:
        return []
    history = conversation_history_of(plan.target_id)
    kept = {entry[0] for entry in moved_responses}
    rewritten = rewrite_response_histories(
        response_ids=[response_id for _slug, response_id in plan.latest_responses],
        history=history,
        naming_session=plan.target_id,
    )
    for response_id, session_id, old_text in rewritten:
        if response_id not in kept:
            moved_responses.append([response_id, session_id, old_text])
    return [entry[0] for entry in rewritten]


# A merge made before the sessions' start times were recorded: a session of it that started
# this long after the merge is a new session with an old id (clocks of two hosts may differ).
REPLACED_AFTER_SECONDS = 60.0


def _replaced(
    started: dict[str, float], recorded: dict[str, float] | None, created_at: float
) -> tuple[str, ...]:
    """The sessions (of those present, with their ``started_at``) that are not the ones the
    merge took: started at another time than it recorded, or, for a merge that recorded no
    times, well after it was made. A runtime holding a deleted session's id can write it
    again as a new session (attack round 41: an unmerge then 'undid' into it, ending it)."""
    if recorded is not None:
        return tuple(sid for sid, at in started.items() if sid in recorded and at != recorded[sid])
    return tuple(
        sid
        for sid, at in started.items()
        if at is not None and float(at) > float(created_at) + REPLACED_AFTER_SECONDS
    )


def _started_at(ids: Sequence[str]) -> dict[str, float]:
    return {
        r[0]: r[1]
        for r in db.fetchall(
            f"SELECT id, started_at FROM sessions WHERE id IN ({db.placeholders(ids)})", list(ids)
        )
    }


def _record(row: tuple) -> MergeRecord:
    target, absorbed = row[2], tuple(json.loads(row[3]))
    missing: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    if row[4] is None:
        started = _started_at([target, *absorbed])
        missing = tuple(sid for sid in (target, *absorbed) if sid not in started)
        recorded = json.loads(row[6]) if row[6] else None
        replaced = _replaced(started, recorded, row[1])
    return MergeRecord(
        int(row[0]), row[1], target, absorbed, row[4], missing, bool(row[5]), replaced
    )


def _record_columns() -> str:
    return (
        "id, created_at, target_session_id, absorbed_session_ids, undone_at, "
        f"CASE WHEN substr(prior_state, 1, {len(_CLOSED_PREFIX)}) = '{_CLOSED_PREFIX}' "
        f"THEN 1 ELSE 0 END, {db.json_field('prior_state', 'started_at')}"
    )


def merge_record(*, merge_id: int) -> MergeRecord:
    row = db.fetchone(
        f"SELECT {_record_columns()} FROM sessions_admin_merges WHERE id = %s", [int(merge_id)]
    )
    if row is None:
        raise MergeNotFound(merge_id)
    return _record(row)


def merges_of_session(*, session_id: str) -> list[MergeRecord]:
    """Merges this session took part in, newest first (targets and absorbed alike)."""
    # absorbed_session_ids is a JSON list of strings: match the quoted id exactly.
    quoted = json.dumps(session_id)
    pattern = "%" + quoted.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = db.fetchall(
        f"SELECT {_record_columns()} FROM sessions_admin_merges WHERE target_session_id = %s "
        "OR absorbed_session_ids LIKE %s ESCAPE '\\' ORDER BY id DESC",
        [session_id, pattern],
    )
    return [
        r for r in map(_record, rows) if r.target_id == session_id or session_id in r.absorbed_ids
    ]


def _refuse_undone_moved_turns(merge_id: int, target: str, moved: dict) -> None:
    """Refused while an undo or retry on the target (not redone) made messages the merge
    moved inactive: they would go back inactive into a session that has ended, where no
    redo can reach them (attack round 41)."""
    ranges = [(start, end) for spans in moved.values() for start, end in spans]
    for (ids_text,) in db.fetchall(
        "SELECT message_ids FROM sessions_admin_undos WHERE session_id = %s", [target]
    ):
        undone = [int(i) for i in json.loads(ids_text)]
        if any(start <= i <= end for i in undone for start, end in ranges):
            raise InvalidInput(
                f"Merge #{merge_id} cannot be undone while a turn it moved is undone on "
                f"{target}: redo that turn first (then undo the merge, and undo the turn "
                "again where it belongs if it should stay undone)."
            )


def _live_of_keys(keys: set[str]) -> dict[str, str]:
    """The live session of each of ``keys`` that has one."""
    return {key: live[0] for key in keys if (live := live_of_key(key))}


@store_operation
def unmerge(*, merge_id: int) -> UnmergeResult:
    """Undo a merge: every moved message, child, slug and session row goes back."""
    row = db.fetchone(
        "SELECT target_session_id, absorbed_session_ids, prior_state, undone_at, created_at "
        "FROM sessions_admin_merges WHERE id = %s" + db.for_update(),
        [int(merge_id)],
    )
    if row is None:
        raise MergeNotFound(merge_id)
    if row[3] is not None:
        raise InvalidInput(f"Merge {merge_id} was already undone.")
    target, absorbed, prior = row[0], json.loads(row[1]), json.loads(row[2])
    if prior.get("closed_by_erasure"):
        raise InvalidInput(
            f"Merge {merge_id} can no longer be undone: an erasure removed rows it moved."
        )
    members = {target, *absorbed}
    later = [
        _record(r)
        for r in db.fetchall(
            f"SELECT {_record_columns()} FROM sessions_admin_merges "
            "WHERE id > %s AND undone_at IS NULL ORDER BY id",
            [int(merge_id)],
        )
    ]
    blocking = [r.merge_id for r in later if members & {r.target_id, *r.absorbed_ids}]
    if blocking:
        # Undoing out of order would hand back rows a later merge moved on.
        raise InvalidInput(
            f"Undo merge {', '.join(f'#{m}' for m in reversed(blocking))} first: "
            f"it moved sessions of merge #{merge_id} again."
        )
    keys = lock_keys_of([target, *absorbed, *prior.get("switched", [])])
    being_deleted.lock_and_refuse([target, *absorbed])
    keys.update(s["session_key"] for s in prior["sessions"].values() if s.get("session_key"))
    db.lock_names(*(db.key_lock_name(k) for k in keys))
    present = _rows([target, *absorbed], lock=True)
    missing = [sid for sid in [target, *absorbed] if sid not in present]
    if missing:
        raise InvalidInput(
            MergeRecord(int(merge_id), 0.0, target, tuple(absorbed), None, tuple(missing)).undo_lost
        )
    replaced = _replaced(
        {sid: present[sid]["started_at"] for sid in present}, prior.get("started_at"), row[4]
    )
    if replaced:
        raise InvalidInput(
            MergeRecord(
                int(merge_id), 0.0, target, tuple(absorbed), None, replaced_ids=replaced
            ).undo_lost
        )
    _refuse_undone_moved_turns(merge_id, target, prior["messages"])
    # The merged messages (and any a hold placed since covers through the target) stay under
    # every hold covering the target: each session they go back to must be covered too.
    holds.refuse_moving_out(moves=[(target, sid) for sid in absorbed], action="undo of the merge")
    returned = 0
    for sid, ranges in prior["messages"].items():
        for start, end in ranges:
            returned += move_messages(
                "session_id = %s AND id BETWEEN %s AND %s", [target, start, end], sid
            )
    for child, old_parent in prior["children"]:
        db.execute(
            "UPDATE sessions SET parent_session_id = %s WHERE id = %s AND parent_session_id = %s",
            [old_parent, child, target],
        )
    target_now = present[target]
    target_prior = prior["sessions"][target]
    target_after = prior["target_after"]
    live_before = _live_of_keys(keys)
    restored = dict(target_prior)
    # What the target's row went through after the merge (a resume, a reset, a new key) is not
    # the merge's to undo: such a column keeps its value now, and only what the merge left as
    # it was goes back. The end is one value in two columns.
    for columns in (("ended_at", "end_reason"), ("model_config",), ("session_key",)):
        if any(target_now[c] != target_after[c] for c in columns):
            restored.update({c: target_now[c] for c in columns})
    # The target made live since the merge is the key's live session now, and stays it.
    live_since_merge = (
        [target] if target_now["ended_at"] is None and target_after["ended_at"] is not None else []
    )
    for column in USAGE_COLUMNS:
        # Usage the target gained after the merge stays with it.
        gained = (target_now[column] or 0) - (target_after[column] or 0)
        restored[column] = (
            target_prior[column] if gained == 0 else (target_prior[column] or 0) + gained
        )
    for sid in [target, *absorbed]:
        values = restored if sid == target else prior["sessions"][sid]
        db.execute(
            "UPDATE sessions SET "
            + ", ".join(f"{c} = %s" for c in SAVED_COLUMNS)
            + " WHERE id = %s",
            [*(values[c] for c in SAVED_COLUMNS), sid],
        )
    for sid in [target, *absorbed]:
        recompute_counters(sid)
    # Sessions the merge ended to keep one live per key come back if nothing replaced them.
    for sid in prior.get("switched", []):
        db.execute(
            "UPDATE sessions SET ended_at = NULL, end_reason = NULL "
            "WHERE id = %s AND end_reason = 'session_switch'",
            [sid],
        )
    # What became live since the merge stays live; what the unmerge brings back makes way.
    part_of_merge = {target, *absorbed, *prior.get("switched", [])}
    for key in keys:
        newer = [
            r[0]
            for r in db.fetchall(
                "SELECT id FROM sessions WHERE session_key = %s AND ended_at IS NULL "
                "ORDER BY started_at DESC, id DESC",
                [key],
            )
            if r[0] not in part_of_merge
        ]
        keep_one_live(key, prefer=[*live_since_merge, *newer])
    if prior["conversations"]:
        for name, old_session in prior["conversations"]:
            db.execute(
                "UPDATE conversations SET session_id = %s WHERE name = %s AND session_id = %s",
                [old_session, name, target],
                alias=responses_alias(),
            )
    if prior.get("responses"):
        restore_responses(moved=prior["responses"], from_session_id=target)
    db.execute(
        "UPDATE sessions_admin_merges SET undone_at = %s WHERE id = %s",
        [clock.now(), int(merge_id)],
    )
    # A key whose live session the unmerge changed hears of it, as of every switch.
    live_after = _live_of_keys(keys)
    for key in sorted(keys):
        now_live = live_after.get(key)
        if now_live is None or now_live == live_before.get(key):
            continue
        events.record_switch(
            new_session_id=now_live,
            previous_session_id=live_before.get(key) or target,
            parent_session_id=target if now_live in absorbed else None,
            reset=False,
            reason="unmerge",
            session_key=key,
        )
    faults.checkpoint("unmerge.before_commit")
    return UnmergeResult(int(merge_id), target, tuple(absorbed), returned)
