"""Transcript rewrites: undo, redo, retry, and the guarded full-transcript save.

Undo and retry change the store, not just a runtime's memory (hermes-agent
#210/#217: they once changed only memory, so the next reload brought the turn
back). Rows are never deleted here: they become inactive (``active = 0``), so
every rewrite can be restored, and the counters always count active rows only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sessions_admin.core import clock, db, fingerprints, lineage
from sessions_admin.core.db import store_operation
from sessions_admin.core.errors import (
    InvalidInput,
    NothingToUndo,
    SessionEnded,
    SessionNotFound,
    StoreError,
    TruncationRefused,
    TurnInProgress,
)
from sessions_admin.core.fingerprints import plan_fingerprint
from sessions_admin.core.lifecycle import require_writable, where_it_continues
from sessions_admin.core.rows import (
    decoded_content,
    insert_messages,
    recompute_counters,
    require_session_id,
)


@dataclass(frozen=True)
class RewriteResult:
    session_id: str
    action: str  # undo, redo, retry
    message_ids: tuple[int, ...]
    message_count: int
    tool_call_count: int


@dataclass(frozen=True)
class RewritePlan:
    """What an undo, redo or retry would change now: the rows it turns inactive (or active)."""

    session_id: str
    action: str  # undo, redo, retry
    message_ids: tuple[int, ...]
    fingerprint: str


class RewritePlanChanged(StoreError):
    """The rows an undo, redo or retry would change are not the ones previewed."""

    def __init__(self, plan: RewritePlan):
        self.plan = plan
        super().__init__(
            f"The transcript of {plan.session_id} changed since the {plan.action} was "
            "previewed (the runtime is still writing). Nothing was changed: check the new "
            "preview and confirm again."
        )


REWRITES = ("undo", "redo", "retry")


@dataclass(frozen=True)
class SaveResult:
    session_id: str
    kept: int
    appended: int
    deactivated: int


def _set_active(session_id: str, ids: list[int], active: int) -> None:
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        db.execute(
            f"UPDATE messages SET active = %s WHERE session_id = %s AND id IN ({db.placeholders(chunk)})",
            [active, session_id, *chunk],
        )


def _record_rewind(session_id: str, ids: list[int]) -> None:
    """Remember what an undo or retry made inactive: redo restores exactly that, newest first."""
    db.execute(
        "INSERT INTO sessions_admin_undos (created_at, session_id, message_ids) VALUES (%s, %s, %s)",
        [clock.now(), session_id, json.dumps(ids)],
    )


def _result(session_id: str, action: str, ids: list[int]) -> RewriteResult:
    count, tools = recompute_counters(session_id)
    return RewriteResult(session_id, action, tuple(ids), count, tools)


def _last_active_user_id(session_id: str) -> int | None:
    row = db.fetchone(
        "SELECT MAX(id) FROM messages WHERE session_id = %s AND active = 1 AND role = 'user'",
        [session_id],
    )
    return int(row[0]) if row and row[0] is not None else None


def _active_ids_from(session_id: str, first: int) -> list[int]:
    return [
        int(r[0])
        for r in db.fetchall(
            "SELECT id FROM messages WHERE session_id = %s AND active = 1 AND id >= %s ORDER BY id",
            [session_id, first],
        )
    ]


def _last_rewind(session_id: str) -> tuple[int, list[int]]:
    """The last undo or retry not redone (its record and rows), if it can still come back."""
    record = db.fetchone(
        "SELECT id, message_ids FROM sessions_admin_undos WHERE session_id = %s "
        "ORDER BY id DESC LIMIT 1",
        [session_id],
    )
    if record is None:
        raise NothingToUndo(f"Session {session_id} has nothing to redo.")
    record_id, ids = int(record[0]), [int(i) for i in json.loads(record[1])]
    (last_active,) = db.fetchone(
        "SELECT COALESCE(MAX(id), 0) FROM messages WHERE session_id = %s AND active = 1",
        [session_id],
    )
    restorable = 0
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        (count,) = db.fetchone(
            "SELECT COUNT(*) FROM messages WHERE session_id = %s AND active = 0 "
            f"AND compacted = 0 AND id > %s AND id IN ({db.placeholders(chunk)})",
            [session_id, int(last_active), *chunk],
        )
        restorable += int(count)
    if not ids or restorable != len(ids):
        raise NothingToUndo(
            f"Session {session_id} has nothing to redo: the conversation has moved on "
            "since the last undo or retry."
        )
    return record_id, ids


# An operator's undo or retry waits while the runtime is still answering the last turn: its
# last active message is the user's question, a tool call or a tool result, written this
# recently. Undone meanwhile, the runtime's next rows would land as the tail of a turn that
# is gone (a tool result without its call, an answer to an undone question). Older than this,
# the runtime has stopped answering, and what it left may be cleaned up.
TURN_IN_PROGRESS_SECONDS = 120.0


def turn_in_progress(session_id: str) -> str | None:
    """Why the runtime is still answering ``session_id``'s last turn, or None."""
    rows = db.fetchdicts(
        "SELECT role, tool_calls, timestamp FROM messages WHERE session_id = %s AND active = 1 "
        "ORDER BY id DESC LIMIT 1",
        [session_id],
    )
    if not rows:
        return None
    last = rows[0]
    calls = last["tool_calls"]
    calls_tools = calls not in (None, "", "[]", "null") and last["role"] == "assistant"
    waiting = {"user": "the question", "tool": "a tool's result"}.get(last["role"])
    if calls_tools:
        waiting = "a tool call"
    try:
        age = clock.now() - float(last["timestamp"])
    except (TypeError, ValueError):
        return None
    if waiting is None or age >= TURN_IN_PROGRESS_SECONDS:
        return None
    return (
        f"The runtime is still answering the last turn of {session_id}: its last message, "
        f"{waiting}, was written {max(age, 0):.0f} s ago. Undo or retry it once the reply is "
        f"in (or, if the runtime has stopped, {TURN_IN_PROGRESS_SECONDS:.0f} s after that "
        "message). Nothing was changed."
    )


def _rewrite_rows(
    session_id: str, action: str, *, wait_for_reply: bool = False
) -> tuple[list[int], int | None]:
    """The rows ``action`` changes now, and for a redo the undo record it consumes.

    The one computation behind both the preview (``plan_rewrite``) and the operation.
    ``wait_for_reply``: an undo or retry refuses (``TurnInProgress``) while the runtime is
    still answering the last turn (``turn_in_progress``).
    """
    if action == "redo":
        record_id, ids = _last_rewind(session_id)
        return ids, record_id
    if wait_for_reply and (why := turn_in_progress(session_id)):
        raise TurnInProgress(why)
    last_user = _last_active_user_id(session_id)
    if action == "undo":
        if last_user is None:
            raise NothingToUndo(f"Session {session_id} has no turn to undo.")
        return _active_ids_from(session_id, last_user), None
    ids = _active_ids_from(session_id, last_user + 1) if last_user is not None else []
    if not ids:
        raise NothingToUndo(f"Session {session_id} has no reply to retry.")
    return ids, None


def _plan(session_id: str, action: str, ids: list[int]) -> RewritePlan:
    fingerprint = plan_fingerprint("rewrite", [session_id, action, ids], length=64)
    return RewritePlan(session_id, action, tuple(ids), fingerprint)


def plan_rewrite(*, session_id: str, action: str, wait_for_reply: bool = False) -> RewritePlan:
    """What ``undo_last_turn``, ``redo_turn`` or ``retry_last_turn`` would change now.

    Nothing is written and nothing locked. Raises what the operation would
    (``NothingToUndo``, ``SessionEnded`` naming the live session). Pass the plan's
    ``fingerprint`` to the operation to change only the rows previewed.
    """
    if action not in REWRITES:
        raise InvalidInput(f"Unknown transcript action {action!r}.")
    row = lineage.session_row(require_session_id(session_id))
    if row is None:
        raise SessionNotFound(session_id)
    if row["ended_at"] is not None:
        live, via = where_it_continues(row)
        raise SessionEnded(session_id, row["end_reason"], live, via)
    rows = _rewrite_rows(session_id, action, wait_for_reply=wait_for_reply)[0]
    return _plan(session_id, action, rows)


def _planned_rows(
    session_id: str, action: str, expected_fingerprint: str | None, wait_for_reply: bool = False
) -> tuple[list[int], int | None]:
    """Lock the live session, read what ``action`` changes, refuse if it is not as previewed."""
    require_writable(session_id)
    ids, record_id = _rewrite_rows(session_id, action, wait_for_reply=wait_for_reply)
    if expected_fingerprint is not None:
        plan = _plan(session_id, action, ids)
        if not fingerprints.matches(expected_fingerprint, plan.fingerprint):
            raise RewritePlanChanged(plan)
    return ids, record_id


def _rewind(
    session_id: str, action: str, expected_fingerprint: str | None, wait_for_reply: bool
) -> RewriteResult:
    ids, _ = _planned_rows(session_id, action, expected_fingerprint, wait_for_reply)
    _set_active(session_id, ids, 0)
    db.execute(
        "UPDATE sessions SET rewind_count = COALESCE(rewind_count, 0) + 1 WHERE id = %s",
        [session_id],
    )
    _record_rewind(session_id, ids)
    return _result(session_id, action, ids)


@store_operation
def undo_last_turn(
    *, session_id: str, expected_fingerprint: str | None = None, wait_for_reply: bool = False
) -> RewriteResult:
    """Make the last turn (last active user message and everything after it) inactive.

    Only the live session's transcript is rewound: an ended segment's id (a
    runtime's stale cache, an operator on an old page) raises ``SessionEnded``
    naming the live session, so the turn the conversation really continues from
    is the one undone. ``expected_fingerprint`` (a ``plan_rewrite`` fingerprint):
    refused with ``RewritePlanChanged``, nothing written, unless the rows are those planned.
    ``wait_for_reply`` (an operator's undo, not the runtime's own): refused with
    ``TurnInProgress`` while the runtime is still answering the last turn.
    """
    return _rewind(session_id, "undo", expected_fingerprint, wait_for_reply)


@store_operation
def retry_last_turn(
    *, session_id: str, expected_fingerprint: str | None = None, wait_for_reply: bool = False
) -> RewriteResult:
    """Drop the reply to the last user message (it becomes inactive) so it can be generated again.

    Like undo, only on the live session (``SessionEnded`` otherwise), and only as
    planned when given a fingerprint, and with ``wait_for_reply`` as undo.
    """
    return _rewind(session_id, "retry", expected_fingerprint, wait_for_reply)


@store_operation
def redo_turn(*, session_id: str, expected_fingerprint: str | None = None) -> RewriteResult:
    """Bring back what the last undo or retry made inactive, exactly those rows.

    Undo and retry record what they took (``sessions_admin_undos``), because the
    rows alone cannot tell the rewind just made from an older one (a reply a
    retry dropped before the turn was undone, an older undone turn). Only a turn after every active row can come back: once the
    conversation has moved on past it, restoring it would reorder history.
    Like undo, only on the live session (``SessionEnded`` otherwise), and only as
    planned when given a fingerprint.
    """
    ids, record_id = _planned_rows(session_id, "redo", expected_fingerprint)
    _set_active(session_id, ids, 1)
    db.execute("DELETE FROM sessions_admin_undos WHERE id = %s", [record_id])
    return _result(session_id, "redo", ids)


def _canonical_json(value: Any) -> str | None:
    """One text per JSON value (keys sorted, no spaces, unescaped); None if it is not JSON."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _same_content(offered: Any, stored: str | None) -> bool:
    """Whether offered content is what a stored ``content`` column holds.

    A list or dict (multimodal parts) is the same as its JSON text: Hermes's
    (its prefix and ``json.dumps``, spaced and ASCII-escaped, see
    ``rows.HERMES_CONTENT_PREFIX``) compared as JSON values, whatever the spacing,
    escapes or key order; unprefixed JSON text of the same value only when it is
    compact, as the core writes it (``rows.message_values``), or on PostgreSQL,
    where structured content can only be unprefixed. A plain string is compared
    as text: it never equals Hermes's prefixed row of a list (that row was a list,
    whatever the string looks like), and on SQLite a list never equals a plain
    string that merely looks like its JSON (Hermes would have prefixed a list),
    unless that string is the very compact text the core writes for one.
    """
    offered = decoded_content(offered)
    if offered is None or offered == "":
        return stored is None or stored == ""
    if stored is None:
        return False
    held = decoded_content(stored)
    if isinstance(offered, str):
        return held is stored and offered == stored
    wanted = _canonical_json(offered)
    if wanted is None:
        return False
    if held is not stored:  # Hermes's prefixed JSON
        return _canonical_json(held) == wanted
    try:
        held = json.loads(stored)
    except (ValueError, RecursionError):
        return False
    if _canonical_json(held) != wanted:
        return False
    compact = json.dumps(held, ensure_ascii=False, separators=(",", ":"))
    return stored == compact or db.vendor() == "postgresql"


def _same_row(offered: Mapping[str, Any], row: Mapping[str, Any]) -> bool:
    """Whether an offered message is this stored row: same text, and same id/time where given."""
    if offered.get("role") != row["role"]:
        return False
    if (offered.get("tool_call_id") or "") != (row["tool_call_id"] or ""):
        return False
    if not _same_content(offered.get("content"), row["content"]):
        return False
    if offered.get("id") is not None and offered.get("id") != row["id"]:
        return False
    stamp = offered.get("timestamp")
    return stamp is None or row["timestamp"] is None or float(stamp) == float(row["timestamp"])


def _rewound_runs(session_id: str) -> list[list[dict]]:
    """The rows of each undo/retry not redone, oldest first: history the runtime may still hold."""
    runs = []
    for (ids_text,) in db.fetchall(
        "SELECT message_ids FROM sessions_admin_undos WHERE session_id = %s ORDER BY id",
        [session_id],
    ):
        ids = [int(i) for i in json.loads(ids_text)]
        if not ids:
            continue
        rows = {
            r["id"]: r
            for r in db.fetchdicts(
                "SELECT id, role, content, tool_call_id, timestamp FROM messages "
                f"WHERE session_id = %s AND active = 0 AND id IN ({db.placeholders(ids)})",
                [session_id, *ids],
            )
        }
        if len(rows) == len(ids):
            runs.append([rows[i] for i in ids])
    return runs


def _rewound_run_at(offered: list, start: int, runs: list[list[dict]]) -> int:
    """How many offered messages from ``start`` repeat one whole undone turn (0: none does)."""
    for run in runs:
        end = start + len(run)
        if end <= len(offered) and all(
            _same_row(m, r) for m, r in zip(offered[start:end], run, strict=True)
        ):
            return len(run)
    return 0


@store_operation
def save_transcript(
    *, session_id: str, messages: Iterable[Mapping[str, Any]], rewrite: bool = False
) -> SaveResult:
    """Make the session's active transcript equal ``messages``, guarding against truncation.

    The common prefix is kept and the rest appended. A save that would drop stored messages (a
    resume that loaded a partial history saving over the full one, hermes-agent #3123) is refused
    unless ``rewrite=True``, and even then the dropped rows become inactive, never deleted. A
    whole undone turn repeated where it stood (a runtime that missed an operator's undo or retry)
    is known history and stays inactive: an undo sticks. An offered message is a stored row when
    role, ``tool_call_id`` and content match (``_same_content``). A save that would change an
    ended session raises ``SessionEnded`` naming the live one; one matching it exactly is a no-op."""
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Iterable):
        raise InvalidInput("messages must be a list of message mappings.")
    offered = list(messages)
    if any(not isinstance(m, Mapping) for m in offered):
        raise InvalidInput("Each message must be a mapping with a role.")
    row = lineage.session_row(require_session_id(session_id), lock=True)
    if row is None:
        raise SessionNotFound(session_id)
    stored = db.fetchdicts(
        "SELECT id, role, content, tool_call_id, timestamp FROM messages "
        "WHERE session_id = %s AND active = 1 ORDER BY id",
        [session_id],
    )
    runs = _rewound_runs(session_id)
    kept = 0  # stored rows matched
    position = 0  # offered messages consumed
    skipped = 0  # offered messages that repeat undone turns
    while position < len(offered):
        if kept < len(stored) and _same_row(offered[position], stored[kept]):
            kept += 1
            position += 1
            continue
        repeated = _rewound_run_at(offered, position, runs)
        if not repeated:
            break
        position += repeated
        skipped += repeated
    dropped = [int(m["id"]) for m in stored[kept:]]
    tail = offered[position:]
    if dropped and not rewrite:
        reason = (
            "it is shorter than the stored transcript"
            if len(offered) - skipped < len(stored)
            else f"it differs from the stored transcript at message {kept + 1}"
        )
        raise TruncationRefused(session_id, len(stored), len(offered), reason)
    if tail or dropped:
        require_writable(session_id)
    _set_active(session_id, dropped, 0)
    insert_messages(session_id, tail)
    if dropped:
        db.execute(
            "UPDATE sessions SET rewind_count = COALESCE(rewind_count, 0) + 1 WHERE id = %s",
            [session_id],
        )
        recompute_counters(session_id)
    return SaveResult(session_id, kept=kept, appended=len(tail), deactivated=len(dropped))


def active_transcript(*, session_id: str) -> list[dict[str, Any]]:
    """The active messages of one session in id order, as dicts (small sessions; views page)."""
    return _with_tool_calls(
        db.fetchdicts(
            "SELECT id, role, content, tool_call_id, tool_calls, tool_name, timestamp, reasoning "
            "FROM messages WHERE session_id = %s AND active = 1 ORDER BY id",
            [session_id],
        )
    )


def active_transcript_page(*, session_id: str, after_id: int = 0, limit: int = 100) -> list[dict]:
    """Up to ``limit`` active messages of one session after message ``after_id``, in id order
    (a keyset page: the last id read is the next page's ``after_id``)."""
    return _with_tool_calls(
        db.fetchdicts(
            "SELECT id, role, content, tool_call_id, tool_calls, tool_name, timestamp, "
            "token_count, finish_reason, reasoning FROM messages "
            "WHERE session_id = %s AND active = 1 AND id > %s ORDER BY id LIMIT %s",
            [session_id, int(after_id), int(limit)],
        )
    )


def _with_tool_calls(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row's ``tool_calls`` parsed where it is JSON (a runtime may have written other text)."""
    for row in rows:
        if row["tool_calls"]:
            try:
                row["tool_calls"] = json.loads(row["tool_calls"])
            except ValueError:
                pass
    return rows
