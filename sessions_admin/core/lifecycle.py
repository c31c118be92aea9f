"""Session lifecycle: create, append, end, resume, reset, branch, rotate for compression.

Each public function is one store transaction (``store_operation``), takes
keyword-only arguments and returns a small frozen dataclass; failures are the
domain errors of ``sessions_admin.core.errors``.

Over 800 lines on purpose: every operation here (create, end, reset, resume, rotate, branch,
switch) keeps the one rule of one live session per key under the key's lock, which would
otherwise be copied into each.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sessions_admin.core import (
    being_deleted,
    clock,
    db,
    events,
    faults,
    fingerprints,
    ids,
    lineage,
)
from sessions_admin.core.db import store_operation
from sessions_admin.core.errors import (
    AmbiguousSessionRef,
    InvalidInput,
    ResumePlanChanged,
    SessionEnded,
    SessionNotFound,
    TitleTaken,
)
from sessions_admin.core.fingerprints import plan_fingerprint
from sessions_admin.core.rows import (
    COST_MAX_USD,
    COUNT_MAX,
    checked_cost,
    checked_count,
    config_text,
    conversations_of_session,
    epoch_seconds,
    insert_counted_messages,
    insert_messages,
    mark_end,
    optional_text,
    parse_model_config,
    recompute_counters,
    repoint_conversations,
    require_session_id,
    require_text,
)
from sessions_admin.core.schema import (
    COPIED_MESSAGES_SQL,
    INSERTED_SESSION_COLUMNS,
    SESSION_METADATA_COLUMNS,
)

LINEAGE_MARKERS = (
    "_branched_from",
    "_delegate_from",
    "_reset_from",
    "_merged_into",
    "_continued_from",
)


@dataclass(frozen=True)
class SessionRef:
    session_id: str
    created: bool


@dataclass(frozen=True)
class AppendResult:
    session_id: str
    message_ids: tuple[int, ...]
    message_count: int
    tool_call_count: int


@dataclass(frozen=True)
class EndResult:
    session_id: str
    ended_now: bool
    end_reason: str


@dataclass(frozen=True)
class ResumeResult:
    session_id: str
    matched_session_id: str
    previous_end_reason: str | None
    switched_from_session_id: str | None
    message_count: int
    # (id, end reason it had) of siblings a gateway would have reopened over the resumed
    # session; each now ends ``session_switch`` (see ``close_recoverable_siblings``).
    closed_recoverable: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ResumePlan:
    """What resuming ``asked_id`` would do, read as ``resume_session`` reads it.

    The preview shows it; ``fingerprint`` names it, and ``resume_session`` given that
    fingerprint acts only if the plan it reads under its locks is still this one.
    """

    asked_id: str  # the session the reference names
    target_id: str  # the session made live: where the asked one's conversation now continues
    # Why the target is not the asked session: None (it is), "compression" (a later
    # segment continues it) or "merged" (another session absorbed it).
    followed: str | None
    chain_length: int  # compression segments of the target's conversation
    target_end_reason: str | None  # None while the target is live
    already_live: bool
    # Live sessions ended ``session_switch``: the one the caller leaves, then the key's others.
    ending_ids: tuple[str, ...]
    # (id, end reason) of siblings a gateway would reopen over the target: re-ended.
    recoverable: tuple[tuple[str, str], ...]
    fingerprint: str

    @property
    def switch_from_id(self) -> str | None:
        """The live session the resume switches away from (the one named in the switch event)."""
        return self.ending_ids[0] if self.ending_ids else None

    @property
    def nothing_to_do(self) -> bool:
        return self.already_live and not self.ending_ids

    @property
    def touched_ids(self) -> tuple[str, ...]:
        """Every session the resume reads or changes: the one the reference names, the one
        made live, those it ends. A caller limited to some sessions checks all of them, not
        only the one it named (a merge may have carried that one into another's lineage)."""
        ids = [self.asked_id, self.target_id, *self.ending_ids, *(r[0] for r in self.recoverable)]
        return tuple(dict.fromkeys(ids))


@dataclass(frozen=True)
class ResetResult:
    ended_session_id: str | None
    # None when a Hermes gateway routes the key: it starts the next session itself.
    new_session_id: str | None
    closed_recoverable: tuple[tuple[str, str], ...] = ()
    left_to_gateway: bool = False


@dataclass(frozen=True)
class BranchResult:
    new_session_id: str
    parent_session_id: str
    copied_messages: int


@dataclass(frozen=True)
class CompressionResult:
    new_session_id: str
    parent_session_id: str


def new_session_id() -> str:
    # Hermes's shape: sortable by time, short enough to type a prefix of.
    return f"{time.strftime('%Y%m%d_%H%M%S', time.gmtime(clock.now()))}_{uuid.uuid4().hex[:8]}"


def _inherited_config(row: dict, **markers: Any) -> str:
    """The parent's model_config without its lineage markers, plus ``markers``."""
    config = {
        k: v
        for k, v in parse_model_config(row.get("model_config")).items()
        if k not in LINEAGE_MARKERS
    }
    config.update({k: v for k, v in markers.items() if v is not None})
    return db.dumps(config)


def _check_title(title: str | None, *, session_id: str) -> None:
    if title is None:
        return
    require_text("title", title, max_length=500)
    db.lock_names(f"title:{title}")  # two sessions given one title at once: one wins
    owner = db.fetchone(
        "SELECT id FROM sessions WHERE title = %s AND id <> %s", [title, session_id]
    )
    if owner:
        raise TitleTaken(title, owner[0])


def _insert_session(
    *,
    session_id: str,
    source: str,
    parent_session_id: str | None = None,
    model_config: str | None = None,
    title: str | None = None,
    started_at: float | None = None,
    **metadata: Any,
) -> None:
    _check_title(title, session_id=session_id)
    values = {
        "id": session_id,
        "source": source,
        **{f: metadata.get(f) for f in SESSION_METADATA_COLUMNS},
        "model_config": model_config,
        "parent_session_id": parent_session_id,
        "started_at": started_at if started_at is not None else clock.now(),
        "title": title,
    }
    db.execute(
        f"INSERT INTO sessions ({', '.join(INSERTED_SESSION_COLUMNS)}) "
        f"VALUES ({db.placeholders(INSERTED_SESSION_COLUMNS)})",
        [values[c] for c in INSERTED_SESSION_COLUMNS],
    )


def _require_session(session_id: str, *, lock: bool = False) -> dict:
    require_session_id(session_id)
    row = lineage.session_row(session_id, lock=lock)
    if row is None:
        raise SessionNotFound(session_id)
    return row


def _end(session_id: str, end_reason: str, *, at: float | None = None) -> bool:
    # The row lock first, then the time: an append holding the lock commits with a
    # timestamp before ended_at, never after it.
    db.fetchone("SELECT id FROM sessions WHERE id = %s" + db.for_update(), [session_id])
    ended_at = at if at is not None else clock.now()
    ended = (
        db.execute(
            "UPDATE sessions SET ended_at = %s, end_reason = %s WHERE id = %s AND ended_at IS NULL",
            [ended_at, end_reason, session_id],
        )
        > 0
    )
    if ended:
        mark_end(session_id, ended_at)  # what a stale runtime writes later is told apart
    return ended


def _end_live_of_key(
    session_key: str | None, end_reason: str, *, keep: str | None = None
) -> list[str]:
    """End every live session of a key but ``keep``, newest first; one live session per key.

    A store written by a forking runtime can hold several; all of them end.
    """
    if not session_key:
        return []
    ended = []
    while True:
        live = lineage.live_session_for_key(session_key, exclude=keep)
        if live is None or live in ended:
            return ended
        _end(live, end_reason)
        ended.append(live)


def live_of_key(session_key: str) -> list[str]:
    """The live sessions of ``session_key``, newest started first (one, but for a moment
    inside an operation that brings sessions back); delegates are not their key's."""
    return [
        r[0]
        for r in db.fetchall(
            "SELECT id FROM sessions WHERE session_key = %s AND ended_at IS NULL "
            f"AND {lineage.marker('_delegate_from')} IS NULL ORDER BY started_at DESC, id DESC",
            [session_key],
        )
    ]


def keep_one_live(session_key: str | None, *, prefer: Iterable[str | None] = ()) -> list[str]:
    """End every live session of ``session_key`` but one (``session_switch``); the ended ids.

    The one kept is the first of ``prefer`` that is live for the key, else the newest
    started. For operations that bring sessions back to life as they were (merge,
    unmerge, a trash restore) while the key may have moved on meanwhile: one live
    session per key, whatever the store held before. The caller holds the key's lock.
    """
    if not session_key:
        return []
    live = live_of_key(session_key)
    if len(live) < 2:
        return []
    kept = next((p for p in prefer if p in live), live[0])
    ended = [sid for sid in live if sid != kept]
    for sid in ended:
        _end(sid, "session_switch")
    return ended


def end_switched(session_id: str) -> bool:
    """End a live session brought back as it was (a trash restore) whose conversation went on
    in another session meanwhile: ``session_switch``, as ``keep_one_live`` ends one of a key.
    False when it was not live. The caller holds the session's or its key's lock."""
    return _end(session_id, "session_switch")


def lock_keys_of(session_ids: Iterable[str]) -> set[str]:
    """Lock the keys of these sessions (as they are read now); the keys."""
    ids = list(dict.fromkeys(session_ids))
    keys = {
        r[0]
        for r in db.fetchall_in(
            "SELECT DISTINCT session_key FROM sessions WHERE id IN ({marks}) "
            "AND session_key IS NOT NULL",
            ids,
        )
    }
    db.lock_names(*(db.key_lock_name(k) for k in keys))
    return keys


# End reasons Hermes's gateway treats as accidents: when the session it routes a chat to
# has ended, it reopens "the latest recoverable session for the peer", newest by
# started_at, live or ended with one of these, and with messages
# (hermes_state.SessionDB.find_latest_gateway_session_for_peer; 0.19 recovers these
# two, upstream widens the set). An operator's resume or reset must leave no such
# sibling for it to pick over the operator's choice.
GATEWAY_RECOVERABLE_END_REASONS = ("agent_close", "ws_orphan_reap")


def recoverable_siblings(
    session_key: str | None, *, over: str | None = None
) -> list[tuple[str, str]]:
    """(id, end reason) of the key's sessions a gateway's recovery would reopen, newest first.

    With ``over`` (the session the key should continue in): only those its
    recovery would pick instead of ``over``, i.e. started no earlier than it,
    or any when ``over`` has no message (recovery skips empty sessions).
    Delegates count: Hermes's recovery query does not tell them apart.
    """
    if not session_key:
        return []
    marks = db.placeholders(GATEWAY_RECOVERABLE_END_REASONS)
    sql = (
        "SELECT id, end_reason FROM sessions WHERE session_key = %s AND ended_at IS NOT NULL "
        f"AND end_reason IN ({marks})"
    )
    params: list[Any] = [session_key, *GATEWAY_RECOVERABLE_END_REASONS]
    if over is not None:
        sql += " AND id <> %s"
        params.append(over)
        has_messages = db.fetchone("SELECT 1 FROM messages WHERE session_id = %s LIMIT 1", [over])
        if has_messages:
            sql += " AND started_at >= (SELECT started_at FROM sessions WHERE id = %s)"
            params.append(over)
    return [(r[0], r[1]) for r in db.fetchall(sql + " ORDER BY started_at DESC, id DESC", params)]


def close_recoverable_siblings(
    session_key: str | None, end_reason: str, *, over: str | None = None
) -> tuple[tuple[str, str], ...]:
    """Re-end ``recoverable_siblings`` with ``end_reason``, a boundary the gateway respects.

    Hermes's own ``/reset`` and ``/resume`` do the same to the session they leave
    (``promote_to_session_reset``); ``ended_at`` is kept, only the reason
    changes. The caller holds the key's lock. Returns what was changed, with the
    reasons they had, for the audit entry.
    """
    closed = tuple(recoverable_siblings(session_key, over=over))
    for session_id, previous in closed:
        db.execute(
            "UPDATE sessions SET end_reason = %s WHERE id = %s AND end_reason = %s",
            [end_reason, session_id, previous],
        )
    return closed


def gateway_routes_key(session_key: str | None) -> bool:
    """Whether a Hermes gateway routes this key (and so starts its next session itself).

    The layout is Hermes's (a SQLite store with its ``gateway_routing`` table, as
    0.19 and schema 30 create it) and the key shows the gateway's hand: a routing
    entry, or a session whose peer the gateway recorded (``origin_json``, which
    nothing but ``record_gateway_session_peer`` writes).
    """
    if not session_key or db.vendor() != "sqlite":
        return False
    tables = {
        r[0]
        for r in db.fetchall(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name IN ('gateway_routing', 'sessions')"
        )
    }
    if "gateway_routing" not in tables:
        return False
    if db.fetchone("SELECT 1 FROM gateway_routing WHERE session_key = %s LIMIT 1", [session_key]):
        return True
    columns = {r[1] for r in db.fetchall("PRAGMA table_info(sessions)")}
    return "origin_json" in columns and (
        db.fetchone(
            "SELECT 1 FROM sessions WHERE session_key = %s AND origin_json IS NOT NULL LIMIT 1",
            [session_key],
        )
        is not None
    )


def _move_conversations(from_ids: Iterable[str], to_id: str) -> None:
    repoint_conversations(from_session_ids=list(from_ids), to_session_id=to_id)


def where_it_continues(row: dict) -> tuple[str | None, str | None]:
    """For an ended session: the live session that now carries its conversation, and how found."""
    question = (
        "where_it_continues",
        row["id"],
        row["end_reason"],
        str(row.get("model_config")),
        row.get("session_key"),
    )
    return db.remembered(question, lambda: _where_it_continues(row))


def _where_it_continues(row: dict) -> tuple[str | None, str | None]:
    if row["end_reason"] == "compression":
        tip = lineage.compression_tip(session_id=row["id"])
        if tip != row["id"] and _is_live(tip):
            return tip, "compression chain"
    if row["end_reason"] == "merged":
        current = lineage.current_session(session_id=row["id"])
        if current != row["id"] and _is_live(current):
            return current, "merge target"
    if row["end_reason"] == "branched":
        branch = db.fetchone(
            "SELECT id FROM sessions WHERE parent_session_id = %s AND ended_at IS NULL "
            f"AND {lineage.marker('_branched_from')} = %s ORDER BY started_at DESC, id DESC LIMIT 1",
            [row["id"], row["id"]],
        )
        if branch:
            return branch[0], "branch"
    live = lineage.live_session_for_key(row.get("session_key"), exclude=row["id"])
    if live:
        return live, f"session_key {row['session_key']!r}"
    for name, session_id in conversations_of_session(row["id"]):
        if session_id and session_id != row["id"]:
            tip = lineage.compression_tip(session_id=session_id)
            if _is_live(tip):
                return tip, f"conversation {name!r}"
    return None, None


def _is_live(session_id: str) -> bool:
    row = db.fetchone("SELECT ended_at FROM sessions WHERE id = %s", [session_id])
    return row is not None and row[0] is None


# What tells one conversation's session from another's when an id is registered again.
_IDENTIFYING = ("source", "session_key", "user_id", "chat_id")


@store_operation
def create_session(
    *,
    source: str,
    session_id: str | None = None,
    user_id: str | None = None,
    session_key: str | None = None,
    chat_id: str | None = None,
    chat_type: str | None = None,
    thread_id: str | None = None,
    model: str | None = None,
    model_config: Mapping[str, Any] | str | None = None,
    parent_session_id: str | None = None,
    title: str | None = None,
    started_at: float | None = None,
    join_live: bool = False,
) -> SessionRef:
    """Register a session. Idempotent: an existing id is a no-op that fills NULL metadata that
    does not identify a conversation (``model``, ``chat_type``, ``thread_id``, ``model_config``);
    a source, key, user or chat other than the row's, or given where the row has none, is
    refused: the id is another conversation's (or would be handed to this one).

    Registering twice is never an error, not even from two processes at the same
    moment (hermes-agent #3123: a UNIQUE error there once switched persistence off
    and lost every later message). A new root session for a session_key ends the
    key's previous live session (``new_session``, a ``/new``) and is announced to
    listeners as a switch (reset=True); with ``join_live=True`` (a gateway's "get or
    create" for an incoming message) the key's live session is returned instead, if
    it has one. Either way a key never has two live sessions: the key is locked
    while its live session is read and replaced.
    """
    require_text("source", source, max_length=200)
    session_id = new_session_id() if session_id is None else session_id
    require_text("session_id", session_id, max_length=200)
    metadata = {
        "user_id": user_id,
        "session_key": session_key,
        "chat_id": chat_id,
        "chat_type": chat_type,
        "thread_id": thread_id,
        "model": model,
    }
    for name, value in metadata.items():
        optional_text(name, value, max_length=500)
    if parent_session_id is not None:
        require_session_id(parent_session_id, "parent_session_id")
    optional_text("title", title, max_length=500)
    started_at = epoch_seconds("started_at", started_at)
    stored_config = config_text(model_config)
    db.lock_names(db.key_lock_name(session_key), db.session_lock_name(session_id))
    existing = lineage.session_row(session_id, lock=True)
    if existing is not None:
        # Registering again is the same session's own id coming back; an id of another
        # conversation (another key, person or source) is not joined: the caller would write
        # into someone else's transcript (attack round 46, Y1).
        # A column the row left empty is not filled from here either: a key, user or chat
        # given to a session that had none would hand it to whoever registered it so
        # (attack round 46, AA1: another runtime's key then named it live, its user's
        # erasure took it). What does not tell conversations apart is still filled.
        differing = [
            name
            for name, value in {"source": source, **metadata}.items()
            if name in _IDENTIFYING and value is not None and existing.get(name) != value
        ]
        if differing:
            raise InvalidInput(
                f"Session id {session_id} exists already with another {' and '.join(differing)}: "
                "it is another conversation's. Register the session under an id of its own.",
                field="session_id",
            )
        fills = {
            k: v
            for k, v in metadata.items()
            if v is not None and existing.get(k) is None and k not in _IDENTIFYING
        }
        if stored_config is not None and existing.get("model_config") is None:
            fills["model_config"] = stored_config
        if fills:
            assignments = ", ".join(f"{k} = %s" for k in fills)
            db.execute(
                f"UPDATE sessions SET {assignments} WHERE id = %s", [*fills.values(), session_id]
            )
        return SessionRef(session_id=session_id, created=False)
    # A new id from outside must read as itself wherever it is shown, and be addressable by
    # the console (an import's rule; attack round 46, Y8: "<id>\u200b", "<id>/../x").
    if problem := ids.new_session_id_problem(session_id):
        raise InvalidInput(f"The id {session_id!r} {problem}.", field="session_id")
    if parent_session_id is not None:
        _require_session(parent_session_id)
    previous_live = None
    is_delegate = "_delegate_from" in parse_model_config(stored_config)
    starts_conversation = parent_session_id is None and not is_delegate
    if starts_conversation and session_key:
        if join_live:
            live = lineage.live_session_for_key(session_key)
            if live is not None:
                return SessionRef(session_id=live, created=False)
        ended = _end_live_of_key(session_key, "new_session")
        previous_live = ended[0] if ended else None
    faults.checkpoint("create.before_insert")
    _insert_session(
        session_id=session_id,
        source=source,
        parent_session_id=parent_session_id,
        model_config=stored_config,
        title=title,
        started_at=started_at,
        **metadata,
    )
    if starts_conversation:
        events.record_switch(
            new_session_id=session_id,
            previous_session_id=previous_live,
            parent_session_id=previous_live,
            reset=True,
            reason="new",
            session_key=session_key,
        )
    faults.checkpoint("create.before_commit")
    return SessionRef(session_id=session_id, created=True)


def require_writable(session_id: str) -> dict:
    """Lock the session row and refuse if it has ended, naming where to write instead."""
    row = _require_session(session_id, lock=True)
    if row["ended_at"] is not None:
        live, via = where_it_continues(row)
        raise SessionEnded(session_id, row["end_reason"], live, via)
    being_deleted.refuse_being_deleted([session_id])
    return row


@store_operation
def append_messages(*, session_id: str, messages: Iterable[Mapping[str, Any]]) -> AppendResult:
    """Append messages to a live session. Never silently dropped: it lands or it raises."""
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Iterable):
        raise InvalidInput("messages must be a list of message mappings.")
    messages = list(messages)
    if not messages:
        raise InvalidInput("No messages to append.")
    require_writable(session_id)
    message_ids, count, tools = insert_counted_messages(session_id, messages)
    return AppendResult(session_id, tuple(message_ids), count, tools)


@dataclass(frozen=True)
class RecountResult:
    session_id: str
    before: tuple[int, int]  # (message_count, tool_call_count) as they were stored
    after: tuple[int, int]  # as the active rows count them


@store_operation
def recount_session(*, session_id: str) -> RecountResult:
    """Set a session's counters from its active rows, live or ended: the repair of what a
    runtime writing past the core left (Hermes's own rewind flips rows inactive and keeps
    ``message_count``). Every core operation recounts what it touches; this touches nothing
    else."""
    require_session_id(session_id)
    being_deleted.lock_and_refuse([session_id])
    row = lineage.session_row(session_id, lock=True)
    if row is None:
        raise SessionNotFound(session_id)
    before = (int(row["message_count"] or 0), int(row["tool_call_count"] or 0))
    return RecountResult(session_id, before, recompute_counters(session_id))


def append_message(
    *, session_id: str, role: str, content: Any = None, **fields: Any
) -> AppendResult:
    return append_messages(
        session_id=session_id, messages=[{"role": role, "content": content, **fields}]
    )


@store_operation
def end_session(*, session_id: str, end_reason: str) -> EndResult:
    """End a session. The first end reason wins: ending an ended session changes nothing."""
    require_text("end_reason", end_reason, max_length=100)
    row = _require_session(session_id, lock=True)
    if row["ended_at"] is not None:
        return EndResult(session_id, False, row["end_reason"])
    _end(session_id, end_reason)
    return EndResult(session_id, True, end_reason)


def resolve_session_ref(ref: str, *, sources: Sequence[str] = ()) -> str:
    """A session id from an exact id, an exact title, or a unique id prefix.

    The prefix match is case-sensitive on every backend (ids are case-sensitive;
    SQLite's LIKE is not, PostgreSQL's is), so a reference means the same
    session whichever store is attached. With ``sources`` (a caller limited to them), a
    title or prefix finds only those sources' sessions: whether another source has a
    session it would match, and how many, is not the caller's to learn. A whole id is
    returned whatever its source; the caller refuses another source's by name.
    """
    require_text("session reference", ref, max_length=500)
    ref = ref.strip()
    if db.fetchone("SELECT 1 FROM sessions WHERE id = %s", [ref]):
        return ref
    only, limit = "", []
    if sources:
        only = f" AND source IN ({db.placeholders(sources)})"
        limit = list(sources)
    row = db.fetchone(f"SELECT id FROM sessions WHERE title = %s{only}", [ref, *limit])
    if row:
        return row[0]
    if len(ref) >= 4:
        rows = db.fetchall(
            f"SELECT id FROM sessions WHERE substr(id, 1, %s) = %s{only} ORDER BY id LIMIT 6",
            [len(ref), ref, *limit],
        )
        if len(rows) == 1:
            return rows[0][0]
        if rows:
            raise AmbiguousSessionRef(ref, [r[0] for r in rows])
    raise SessionNotFound(ref)


def _lock_key_of(session_id: str) -> dict:
    """Lock ``session_id``'s key (then the row) and return the row as it is under the locks.

    The key is read before its lock is held, so it is read again after: a row
    whose key was filled meanwhile locks the new key too.
    """
    locked: set[str] = set()
    while True:
        row = _require_session(session_id)
        name = db.key_lock_name(row.get("session_key"))
        if name is None or name in locked:
            return _require_session(session_id, lock=True)
        db.lock_names(name)
        locked.add(name)


def _followed(asked: dict, target_id: str) -> str | None:
    if target_id == asked["id"]:
        return None
    if asked["end_reason"] == "merged" or target_id != lineage.compression_tip(
        session_id=asked["id"]
    ):
        return "merged"
    return "compression"


def _plan_resume(
    matched: str, *, current_session_id: str | None, lock: bool
) -> tuple[ResumePlan, dict]:
    """The plan for resuming ``matched``, and the target's row (locked with ``lock``).

    ``lock``: the caller holds the lock of the key ``matched`` continues in; the
    target's key (re-read under its lock) and the session being left are locked here.
    """
    target = lineage.current_session(session_id=matched)
    row = _lock_key_of(target) if lock else _require_session(target)
    key = row.get("session_key")
    ending: list[str] = []
    if current_session_id and current_session_id != target:
        leaving_row = _require_session(current_session_id, lock=lock)
        if leaving_row["ended_at"] is None:
            ending.append(current_session_id)
    if key:
        ending.extend(
            r[0]
            for r in db.fetchall(
                "SELECT id FROM sessions WHERE session_key = %s AND ended_at IS NULL AND id <> %s "
                f"AND {lineage.marker('_delegate_from')} IS NULL ORDER BY started_at DESC, id DESC",
                [key, target],
            )
            if r[0] not in ending
        )
    asked = row if matched == target else _require_session(matched)
    already_live = row["ended_at"] is None
    recoverable = tuple(recoverable_siblings(key, over=target))
    # What the resume acts on: a change to any of it makes another plan.
    fingerprint = plan_fingerprint(
        "resume",
        [
            matched,
            target,
            None if already_live else [row["ended_at"], row["end_reason"]],
            ending,
            recoverable,
        ],
        length=64,
    )
    plan = ResumePlan(
        asked_id=matched,
        target_id=target,
        followed=_followed(asked, target),
        chain_length=len(lineage.compression_chain(session_id=target)),
        target_end_reason=row["end_reason"] if not already_live else None,
        already_live=already_live,
        ending_ids=tuple(ending),
        recoverable=recoverable,
        fingerprint=fingerprint,
    )
    return plan, row


def plan_resume(*, ref: str, current_session_id: str | None = None) -> ResumePlan:
    """What ``resume_session`` with these arguments would do now (nothing is written).

    Pass its ``fingerprint`` to ``resume_session`` to resume only as planned.
    """
    if current_session_id is not None:
        require_session_id(current_session_id, "current_session_id")
    return _plan_resume(
        resolve_session_ref(ref), current_session_id=current_session_id, lock=False
    )[0]


@store_operation
def resume_session(
    *,
    ref: str,
    current_session_id: str | None = None,
    expected_fingerprint: str | None = None,
) -> ResumeResult:
    """Reopen the latest session of the lineage ``ref`` names and make it live for its key.

    Resolves by id, title or id prefix, then follows compression forward: the latest segment is
    reopened, not an old one whose short transcript would replace the long one (hermes-agent
    #3123). Every other live session of the key, and ``current_session_id`` (what a keyless
    caller such as the CLI leaves), ends ``session_switch``; so do later siblings Hermes's gateway
    would reopen instead (``closed_recoverable``). The lineage's conversations point at it.
    Resuming the only live session switches nothing. With ``expected_fingerprint`` (from
    ``plan_resume``), a plan that differs under the locks raises ``ResumePlanChanged``."""
    if current_session_id is not None:
        require_session_id(current_session_id, "current_session_id")
    matched = resolve_session_ref(ref)
    _lock_key_of(lineage.current_session(session_id=matched))
    # Read what is acted on under the lock: a compression or merge may have moved the tip.
    plan, row = _plan_resume(matched, current_session_id=current_session_id, lock=True)
    being_deleted.refuse_being_deleted([plan.target_id])
    if expected_fingerprint is not None and not fingerprints.matches(
        expected_fingerprint, plan.fingerprint
    ):
        raise ResumePlanChanged(plan)
    target, key = plan.target_id, row.get("session_key")
    chain = lineage.compression_chain(session_id=target)
    # A sibling ended by accident (agent_close...) and started after the target would be
    # what Hermes's gateway reopens for the chat: the resume silently undone, two live.
    closed = close_recoverable_siblings(key, "session_switch", over=target)
    if plan.nothing_to_do:
        _move_conversations(chain, target)  # slugs left on older segments: no switch
        return ResumeResult(
            session_id=target,
            matched_session_id=matched,
            previous_end_reason=None,
            switched_from_session_id=None,
            message_count=int(row["message_count"] or 0),
            closed_recoverable=closed,
        )
    switched_from = plan.switch_from_id
    for other in plan.ending_ids:
        _end(other, "session_switch")
    db.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = %s", [target])
    _move_conversations(chain, target)
    events.record_switch(
        new_session_id=target,
        previous_session_id=switched_from,
        parent_session_id=switched_from,
        reset=False,
        reason="resume",
        session_key=key,
    )
    faults.checkpoint("resume.before_commit")
    return ResumeResult(
        session_id=target,
        matched_session_id=matched,
        previous_end_reason=row["end_reason"],
        switched_from_session_id=switched_from,
        message_count=int(row["message_count"] or 0),
        closed_recoverable=closed,
    )


@store_operation
def reset_session_key(*, session_key: str, summary: str | None = None) -> ResetResult:
    """End the key's live session (``session_reset``) and start a fresh one linked by ``_reset_from``.

    The key is locked before its live session is read: a compression, resume or ``/new`` of the
    same key in flight commits first (and is what the reset ends) or waits. Siblings a gateway
    would reopen (``recoverable_siblings``) end ``session_reset`` too. A key a Hermes gateway
    routes (``gateway_routes_key``) is left as Hermes's own ``/reset`` leaves it: the gateway
    starts the next session itself, and an empty one of ours would stay live beside it (its
    recovery reopens only sessions with messages). So none is created (``left_to_gateway``),
    unless a ``summary`` is given: then it is created as Hermes creates one (no lineage marker,
    the peer copied), since a live session holding a message is what that recovery reopens."""
    require_text("session_key", session_key, max_length=500)
    optional_text("summary", summary, max_length=1_000_000)
    db.lock_names(db.key_lock_name(session_key))
    live = lineage.live_session_for_key(session_key)
    template_id = live
    if template_id is None:
        row = db.fetchone(
            "SELECT id FROM sessions WHERE session_key = %s ORDER BY started_at DESC, id DESC LIMIT 1",
            [session_key],
        )
        if row is None:
            raise SessionNotFound(f"session_key {session_key}")
        template_id = row[0]
    template = _require_session(template_id, lock=True)
    gateway = gateway_routes_key(session_key)
    _end_live_of_key(session_key, "session_reset")
    closed = close_recoverable_siblings(session_key, "session_reset")
    if gateway and not summary:
        faults.checkpoint("reset.before_commit")
        return ResetResult(
            ended_session_id=live,
            new_session_id=None,
            closed_recoverable=closed,
            left_to_gateway=True,
        )
    new_id = new_session_id()
    _insert_session(
        session_id=new_id,
        source=template["source"],
        # Hermes's agent fills model_config only where it is NULL: none on a gateway's row.
        model_config=None if gateway else _inherited_config(template, _reset_from=template_id),
        **{f: template.get(f) for f in SESSION_METADATA_COLUMNS},
    )
    if gateway:
        _copy_gateway_peer(template_id, new_id)
    if summary:
        insert_messages(new_id, [{"role": "system", "content": summary}])
    _move_conversations(lineage.compression_chain(session_id=template_id), new_id)
    events.record_switch(
        new_session_id=new_id,
        previous_session_id=live,
        parent_session_id=template_id,
        reset=True,
        reason="reset",
        session_key=session_key,
    )
    faults.checkpoint("reset.before_commit")
    return ResetResult(
        ended_session_id=live,
        new_session_id=new_id,
        closed_recoverable=closed,
        left_to_gateway=False,
    )


# What Hermes's gateway records of a chat on each session it routes (record_gateway_session_peer).
GATEWAY_PEER_COLUMNS = ("display_name", "origin_json", "profile_name")


def _copy_gateway_peer(from_id: str, to_id: str) -> None:
    columns = {r[1] for r in db.fetchall("PRAGMA table_info(sessions)")}
    present = [c for c in GATEWAY_PEER_COLUMNS if c in columns]
    if present:
        db.execute(
            f"UPDATE sessions SET ({', '.join(present)}) = "
            f"(SELECT {', '.join(present)} FROM sessions WHERE id = %s) WHERE id = %s",
            [from_id, to_id],
        )


@store_operation
def branch_session(
    *, session_id: str, at_message_id: int | None = None, title: str | None = None
) -> BranchResult:
    """Start a branch of ``session_id`` carrying its active transcript up to ``at_message_id``.

    The branch links to its parent (``parent_session_id`` and ``_branched_from``)
    and becomes the live session of the key; a live parent ends ``branched``.
    """
    optional_text("title", title, max_length=500)
    row = _lock_key_of(session_id)
    being_deleted.refuse_being_deleted([session_id])
    if at_message_id is None:
        last = db.fetchone(
            "SELECT MAX(id) FROM messages WHERE session_id = %s AND active = 1", [session_id]
        )
        at_message_id = int(last[0]) if last and last[0] is not None else 0
    elif (
        isinstance(at_message_id, bool)
        or not isinstance(at_message_id, int)
        or not -(2**63) <= at_message_id < 2**63
        or not db.fetchone(
            "SELECT 1 FROM messages WHERE id = %s AND session_id = %s AND active = 1",
            [at_message_id, session_id],
        )
    ):
        raise InvalidInput(
            f"Message {at_message_id} is not an active message of {session_id}.",
            field="at_message_id",
        )
    new_id = new_session_id()
    _check_title(title, session_id=new_id)
    if row["ended_at"] is None:
        _end(session_id, "branched")
    _end_live_of_key(row.get("session_key"), "session_switch")
    _insert_session(
        session_id=new_id,
        source=row["source"],
        parent_session_id=session_id,
        model_config=_inherited_config(row, _branched_from=session_id),
        title=title,
        **{f: row.get(f) for f in SESSION_METADATA_COLUMNS},
    )
    copied = db.execute(
        COPIED_MESSAGES_SQL + "WHERE session_id = %s AND active = 1 AND id <= %s ORDER BY id",
        [new_id, session_id, int(at_message_id)],
    )
    recompute_counters(new_id)
    events.record_switch(
        new_session_id=new_id,
        previous_session_id=session_id,
        parent_session_id=session_id,
        reset=False,
        reason="branch",
        session_key=row.get("session_key"),
    )
    return BranchResult(new_session_id=new_id, parent_session_id=session_id, copied_messages=copied)


@store_operation
def rotate_for_compression(
    *,
    session_id: str,
    summary: str | None = None,
    carry_messages: Iterable[Mapping[str, Any]] = (),
) -> CompressionResult:
    """End a live session with ``compression`` and continue in a linked child.

    The child carries ``parent_session_id`` and no branch/delegate marker, so
    every lineage reader follows it as the continuation.
    """
    optional_text("summary", summary, max_length=1_000_000)
    _lock_key_of(session_id)
    row = require_writable(session_id)
    _end(session_id, "compression")
    new_id = new_session_id()
    _insert_session(
        session_id=new_id,
        source=row["source"],
        parent_session_id=session_id,
        model_config=_inherited_config(row),
        **{f: row.get(f) for f in SESSION_METADATA_COLUMNS},
    )
    carried = list(carry_messages)
    if summary:
        carried.insert(0, {"role": "system", "content": summary})
    if carried:
        insert_messages(new_id, carried)
    _move_conversations([session_id], new_id)
    events.record_switch(
        new_session_id=new_id,
        previous_session_id=session_id,
        parent_session_id=session_id,
        reset=False,
        reason="compression",
        session_key=row.get("session_key"),
    )
    faults.checkpoint("compression.before_commit")
    return CompressionResult(new_session_id=new_id, parent_session_id=session_id)


def continue_session(row: dict) -> str:
    """Start a live session continuing the ended session ``row``; its id.

    Linked by ``parent_session_id`` and ``_continued_from``, with the same source,
    key and chat, so every lineage reader shows one conversation. The caller holds
    the transaction and the locks (``conversations.resolve_conversation``).
    """
    new_id = new_session_id()
    _end_live_of_key(row.get("session_key"), "session_switch")
    _insert_session(
        session_id=new_id,
        source=row["source"],
        parent_session_id=row["id"],
        model_config=_inherited_config(row, _continued_from=row["id"]),
        **{f: row.get(f) for f in SESSION_METADATA_COLUMNS},
    )
    events.record_switch(
        new_session_id=new_id,
        previous_session_id=row["id"],
        parent_session_id=row["id"],
        reset=False,
        reason="continuation",
        session_key=row.get("session_key"),
    )
    return new_id


@store_operation
def set_title(*, session_id: str, title: str | None) -> str | None:
    """Set or clear a session's title; titles are unique when set."""
    _require_session(session_id, lock=True)
    _check_title(title, session_id=session_id)
    db.execute("UPDATE sessions SET title = %s WHERE id = %s", [title, session_id])
    return title


@store_operation
def add_usage(
    *,
    session_id: str,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    reasoning_tokens: int = 0,
    cost_usd: float = 0.0,
) -> None:
    """Add a turn's token usage and cost to a live session's totals.

    Usage belongs to the session that is live for the conversation: an ended
    session refuses it (``SessionEnded`` naming the live one), as an append does.
    Each figure, and each total it adds to, stays within ``rows.COUNT_MAX`` (a cost
    within ``rows.COST_MAX_USD``): a call that would take a total past its bound (or
    add to a total another writer left out of range) is refused naming the field,
    and nothing of it is recorded.
    """
    counts = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_tokens": cache_read_tokens,
        "cache_write_tokens": cache_write_tokens,
        "reasoning_tokens": reasoning_tokens,
    }
    counts = {name: checked_count(name, value) for name, value in counts.items()}
    cost = checked_cost("cost_usd", cost_usd)
    require_writable(session_id)  # locks the row: the totals read here are the ones added to
    (totals,) = db.fetchdicts(
        f"SELECT {', '.join(counts)}, estimated_cost_usd FROM sessions WHERE id = %s",
        [session_id],
    )
    adding = {**counts, "estimated_cost_usd": cost}
    for column, value in adding.items():
        bound = COST_MAX_USD if column == "estimated_cost_usd" else COUNT_MAX
        if value and not _total_within(totals[column], value, bound):
            field = "cost_usd" if column == "estimated_cost_usd" else column
            raise InvalidInput(
                f"{field}: adding {value!r} to the session's {column} ({totals[column]!r}) "
                f"would pass its bound of {bound:,.0f}; nothing was recorded.",
                field=field,
            )
    db.execute(
        "UPDATE sessions SET input_tokens = COALESCE(input_tokens, 0) + %s, "
        "output_tokens = COALESCE(output_tokens, 0) + %s, "
        "cache_read_tokens = COALESCE(cache_read_tokens, 0) + %s, "
        "cache_write_tokens = COALESCE(cache_write_tokens, 0) + %s, "
        "reasoning_tokens = COALESCE(reasoning_tokens, 0) + %s, "
        "estimated_cost_usd = COALESCE(estimated_cost_usd, 0) + %s WHERE id = %s",
        [*counts.values(), cost, session_id],
    )


def _total_within(total: Any, adding: int | float, bound: int | float) -> bool:
    """Whether a stored total (whatever another writer left there) plus ``adding`` is
    a number within ``bound``."""
    if total is None:
        total = 0
    if isinstance(total, int) and not isinstance(total, bool):
        return 0 <= total and total + adding <= bound
    try:
        number = float(total)
    except (TypeError, ValueError):
        return False
    return math.isfinite(number) and 0 <= number and number + adding <= bound
