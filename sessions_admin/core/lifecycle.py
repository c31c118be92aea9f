"""Session lifecycle: create, append, end, resume, reset, branch, rotate for compression.

Each public function is one store transaction (``store_operation``), takes
keyword-only arguments and returns a small frozen dataclass; failures are the
domain errors of ``sessions_admin.core.errors``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sessions_admin.core import clock, db, events, lineage
from sessions_admin.core.db import store_operation
from sessions_admin.core.errors import (
    AmbiguousSessionRef,
    InvalidInput,
    SessionEnded,
    SessionNotFound,
    TitleTaken,
)
from sessions_admin.store.models import parse_model_config

MESSAGE_ROLES = frozenset({"system", "user", "assistant", "tool"})
LINEAGE_MARKERS = ("_branched_from", "_delegate_from", "_reset_from", "_merged_into")
METADATA_FIELDS = ("user_id", "session_key", "chat_id", "chat_type", "thread_id", "model")


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


@dataclass(frozen=True)
class ResetResult:
    ended_session_id: str | None
    new_session_id: str


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


def _require_text(name: str, value: Any, *, max_length: int = 4000) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{name} must be a non-empty string.")
    if len(value) > max_length:
        raise InvalidInput(f"{name} is longer than {max_length} characters.")
    if "\x00" in value:
        raise InvalidInput(f"{name} must not contain NUL characters.")
    if not is_storable_text(value):
        raise InvalidInput(f"{name} is not valid Unicode text (it holds a lone surrogate).")
    return value


def is_storable_text(value: str) -> bool:
    """Whether both backends can store ``value``: UTF-8 encodable (no lone surrogates)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _config_text(model_config: Mapping[str, Any] | str | None) -> str | None:
    if model_config is None:
        return None
    if isinstance(model_config, str):
        return model_config
    return db.dumps(dict(model_config))


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
    _require_text("title", title, max_length=500)
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
    db.execute(
        "INSERT INTO sessions (id, source, user_id, session_key, chat_id, chat_type, thread_id, "
        "model, model_config, parent_session_id, started_at, title) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        [
            session_id,
            source,
            *(metadata.get(f) for f in METADATA_FIELDS),
            model_config,
            parent_session_id,
            started_at if started_at is not None else clock.now(),
            title,
        ],
    )


def _require_session(session_id: str, *, lock: bool = False) -> dict:
    row = lineage.session_row(session_id, lock=lock)
    if row is None:
        raise SessionNotFound(session_id)
    return row


def _end(session_id: str, end_reason: str, *, at: float | None = None) -> bool:
    return (
        db.execute(
            "UPDATE sessions SET ended_at = %s, end_reason = %s WHERE id = %s AND ended_at IS NULL",
            [at if at is not None else clock.now(), end_reason, session_id],
        )
        > 0
    )


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


def _move_conversations(from_ids: Iterable[str], to_id: str) -> None:
    from sessions_admin.core import conversations

    conversations.repoint_conversations(from_session_ids=list(from_ids), to_session_id=to_id)


def where_it_continues(row: dict) -> tuple[str | None, str | None]:
    """For an ended session: the live session that now carries its conversation, and how found."""
    if row["end_reason"] == "compression":
        tip = lineage.compression_tip(session_id=row["id"])
        if tip != row["id"] and _is_live(tip):
            return tip, "compression chain"
    if row["end_reason"] == "merged":
        current = lineage.current_session(session_id=row["id"])
        if current != row["id"] and _is_live(current):
            return current, "merge target"
    live = lineage.live_session_for_key(row.get("session_key"), exclude=row["id"])
    if live:
        return live, f"session_key {row['session_key']!r}"
    from sessions_admin.core import conversations

    for name, session_id in conversations.conversations_of_session(row["id"]):
        if session_id and session_id != row["id"]:
            tip = lineage.compression_tip(session_id=session_id)
            if _is_live(tip):
                return tip, f"conversation {name!r}"
    return None, None


def _is_live(session_id: str) -> bool:
    row = db.fetchone("SELECT ended_at FROM sessions WHERE id = %s", [session_id])
    return row is not None and row[0] is None


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
) -> SessionRef:
    """Register a session. Idempotent: an existing id is a no-op that fills NULL metadata.

    Registering twice is never an error (hermes-agent #3123: a UNIQUE error
    there once switched persistence off and lost every later message). A new
    root session for a session_key ends the key's previous live session
    (``new_session``) and is announced to listeners as a switch (reset=True).
    """
    _require_text("source", source, max_length=200)
    session_id = session_id or new_session_id()
    _require_text("session_id", session_id, max_length=200)
    metadata = {
        "user_id": user_id,
        "session_key": session_key,
        "chat_id": chat_id,
        "chat_type": chat_type,
        "thread_id": thread_id,
        "model": model,
    }
    config_text = _config_text(model_config)
    existing = lineage.session_row(session_id, lock=True)
    if existing is not None:
        fills = {k: v for k, v in metadata.items() if v is not None and existing.get(k) is None}
        if config_text is not None and existing.get("model_config") is None:
            fills["model_config"] = config_text
        if fills:
            assignments = ", ".join(f"{k} = %s" for k in fills)
            db.execute(
                f"UPDATE sessions SET {assignments} WHERE id = %s", [*fills.values(), session_id]
            )
        return SessionRef(session_id=session_id, created=False)
    if parent_session_id is not None:
        _require_session(parent_session_id)
    previous_live = None
    is_delegate = "_delegate_from" in parse_model_config(config_text)
    if parent_session_id is None and not is_delegate and session_key:
        ended = _end_live_of_key(session_key, "new_session")
        previous_live = ended[0] if ended else None
    _insert_session(
        session_id=session_id,
        source=source,
        parent_session_id=parent_session_id,
        model_config=config_text,
        title=title,
        started_at=started_at,
        **metadata,
    )
    if parent_session_id is None and not is_delegate:
        events.record_switch(
            new_session_id=session_id,
            previous_session_id=previous_live,
            parent_session_id=previous_live,
            reset=True,
            reason="new",
            session_key=session_key,
        )
    return SessionRef(session_id=session_id, created=True)


def _message_values(session_id: str, message: Mapping[str, Any]) -> list[Any]:
    role = message.get("role")
    if role not in MESSAGE_ROLES:
        raise InvalidInput(f"role must be one of {sorted(MESSAGE_ROLES)}, not {role!r}.")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        content = db.dumps(content)  # multimodal parts: kept, as JSON text
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, str):
        tool_calls = db.dumps(tool_calls) if tool_calls else None
    timestamp = message.get("timestamp")
    values = [
        session_id,
        role,
        content,
        message.get("tool_call_id"),
        tool_calls,
        message.get("tool_name"),
        float(timestamp) if timestamp is not None else clock.now(),
        message.get("token_count"),
        message.get("finish_reason"),
        message.get("reasoning"),
    ]
    texts = [v for v in values if isinstance(v, str)]
    if any(chr(0) in v for v in texts):
        # PostgreSQL text cannot hold NUL; refuse it on every backend alike.
        raise InvalidInput("A message field contains a NUL character.")
    if not all(is_storable_text(v) for v in texts):
        # A lone surrogate cannot be encoded for either database: refuse it cleanly.
        raise InvalidInput("A message field is not valid Unicode text (a lone surrogate).")
    return values


def tool_call_total(tool_calls: str | None) -> int:
    if not tool_calls:
        return 0
    try:
        value = json.loads(tool_calls)
    except ValueError:
        return 1
    return len(value) if isinstance(value, list) else 1


def insert_messages(session_id: str, messages: Iterable[Mapping[str, Any]]) -> list[int]:
    """Insert rows and bump the counters; the caller holds the transaction and checks the session."""
    ids: list[int] = []
    tool_calls = 0
    with db.cursor() as c:
        for message in messages:
            values = _message_values(session_id, message)
            c.execute(
                "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, "
                "tool_name, timestamp, token_count, finish_reason, reasoning, active, compacted) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 1, 0) RETURNING id",
                values,
            )
            ids.append(int(c.fetchone()[0]))
            tool_calls += tool_call_total(values[4])
        if ids:
            c.execute(
                "UPDATE sessions SET message_count = COALESCE(message_count, 0) + %s, "
                "tool_call_count = COALESCE(tool_call_count, 0) + %s WHERE id = %s",
                [len(ids), tool_calls, session_id],
            )
    return ids


def _counters(session_id: str) -> tuple[int, int]:
    row = db.fetchone(
        "SELECT message_count, tool_call_count FROM sessions WHERE id = %s", [session_id]
    )
    return int(row[0] or 0), int(row[1] or 0)


def require_writable(session_id: str) -> dict:
    """Lock the session row and refuse if it has ended, naming where to write instead."""
    row = _require_session(session_id, lock=True)
    if row["ended_at"] is not None:
        live, via = where_it_continues(row)
        raise SessionEnded(session_id, row["end_reason"], live, via)
    return row


@store_operation
def append_messages(*, session_id: str, messages: Iterable[Mapping[str, Any]]) -> AppendResult:
    """Append messages to a live session. Never silently dropped: it lands or it raises."""
    messages = list(messages)
    if not messages:
        raise InvalidInput("No messages to append.")
    require_writable(session_id)
    ids = insert_messages(session_id, messages)
    count, tools = _counters(session_id)
    return AppendResult(session_id, tuple(ids), count, tools)


def append_message(
    *, session_id: str, role: str, content: Any = None, **fields: Any
) -> AppendResult:
    return append_messages(
        session_id=session_id, messages=[{"role": role, "content": content, **fields}]
    )


@store_operation
def end_session(*, session_id: str, end_reason: str) -> EndResult:
    """End a session. The first end reason wins: ending an ended session changes nothing."""
    _require_text("end_reason", end_reason, max_length=100)
    row = _require_session(session_id, lock=True)
    if row["ended_at"] is not None:
        return EndResult(session_id, False, row["end_reason"])
    _end(session_id, end_reason)
    return EndResult(session_id, True, end_reason)


def resolve_session_ref(ref: str) -> str:
    """A session id from an exact id, an exact title, or a unique id prefix."""
    _require_text("session reference", ref, max_length=500)
    ref = ref.strip()
    if db.fetchone("SELECT 1 FROM sessions WHERE id = %s", [ref]):
        return ref
    row = db.fetchone("SELECT id FROM sessions WHERE title = %s", [ref])
    if row:
        return row[0]
    if len(ref) >= 4:
        escaped = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = db.fetchall(
            "SELECT id FROM sessions WHERE id LIKE %s ESCAPE '\\' ORDER BY id LIMIT 6",
            [escaped + "%"],
        )
        if len(rows) == 1:
            return rows[0][0]
        if rows:
            raise AmbiguousSessionRef(ref, [r[0] for r in rows])
    raise SessionNotFound(ref)


@store_operation
def resume_session(*, ref: str) -> ResumeResult:
    """Reopen the latest session of the lineage ``ref`` names and make it live for its key.

    Resolves by id, title or id prefix, then follows compression forward so the
    latest segment is reopened, not an old one whose short transcript would
    replace the long one (hermes-agent #3123). The key's previous live session
    ends with ``session_switch``; conversations of the lineage point at it.
    """
    matched = resolve_session_ref(ref)
    target = lineage.current_session(session_id=matched)
    row = _require_session(target, lock=True)
    switched_from = lineage.live_session_for_key(row.get("session_key"), exclude=target)
    if switched_from:
        _end(switched_from, "session_switch")
    db.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = %s", [target])
    _move_conversations(lineage.compression_chain(session_id=target), target)
    events.record_switch(
        new_session_id=target,
        previous_session_id=switched_from,
        parent_session_id=switched_from,
        reset=False,
        reason="resume",
        session_key=row.get("session_key"),
    )
    return ResumeResult(
        session_id=target,
        matched_session_id=matched,
        previous_end_reason=row["end_reason"],
        switched_from_session_id=switched_from,
        message_count=int(row["message_count"] or 0),
    )


@store_operation
def reset_session_key(*, session_key: str, summary: str | None = None) -> ResetResult:
    """End the key's live session (``session_reset``) and start a fresh one linked by ``_reset_from``."""
    _require_text("session_key", session_key, max_length=500)
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
    _end_live_of_key(session_key, "session_reset")
    new_id = new_session_id()
    _insert_session(
        session_id=new_id,
        source=template["source"],
        model_config=_inherited_config(template, _reset_from=template_id),
        **{f: template.get(f) for f in METADATA_FIELDS},
    )
    if summary:
        insert_messages(new_id, [{"role": "system", "content": summary}])
    _move_conversations([template_id], new_id)
    events.record_switch(
        new_session_id=new_id,
        previous_session_id=live,
        parent_session_id=template_id,
        reset=True,
        reason="reset",
        session_key=session_key,
    )
    return ResetResult(ended_session_id=live, new_session_id=new_id)


@store_operation
def branch_session(
    *, session_id: str, at_message_id: int | None = None, title: str | None = None
) -> BranchResult:
    """Start a branch of ``session_id`` carrying its active transcript up to ``at_message_id``.

    The branch links to its parent (``parent_session_id`` and ``_branched_from``)
    and becomes the live session of the key; a live parent ends ``branched``.
    """
    row = _require_session(session_id, lock=True)
    if at_message_id is None:
        last = db.fetchone(
            "SELECT MAX(id) FROM messages WHERE session_id = %s AND active = 1", [session_id]
        )
        at_message_id = int(last[0]) if last and last[0] is not None else 0
    elif not db.fetchone(
        "SELECT 1 FROM messages WHERE id = %s AND session_id = %s AND active = 1",
        [int(at_message_id), session_id],
    ):
        raise InvalidInput(f"Message {at_message_id} is not an active message of {session_id}.")
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
        **{f: row.get(f) for f in METADATA_FIELDS},
    )
    copied = db.execute(
        "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name, "
        "timestamp, token_count, finish_reason, reasoning, active, compacted) "
        "SELECT %s, role, content, tool_call_id, tool_calls, tool_name, timestamp, token_count, "
        "finish_reason, reasoning, 1, 0 FROM messages "
        "WHERE session_id = %s AND active = 1 AND id <= %s ORDER BY id",
        [new_id, session_id, int(at_message_id)],
    )
    from sessions_admin.core.transcript import recompute_counters

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
    row = require_writable(session_id)
    _end(session_id, "compression")
    new_id = new_session_id()
    _insert_session(
        session_id=new_id,
        source=row["source"],
        parent_session_id=session_id,
        model_config=_inherited_config(row),
        **{f: row.get(f) for f in METADATA_FIELDS},
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
    return CompressionResult(new_session_id=new_id, parent_session_id=session_id)


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
    """Add a turn's token usage and cost to a session's totals."""
    _require_session(session_id, lock=True)
    values = [input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens]
    if any(not isinstance(v, int) or v < 0 for v in values) or cost_usd < 0:
        raise InvalidInput("Usage figures must be non-negative.")
    db.execute(
        "UPDATE sessions SET input_tokens = COALESCE(input_tokens, 0) + %s, "
        "output_tokens = COALESCE(output_tokens, 0) + %s, "
        "cache_read_tokens = COALESCE(cache_read_tokens, 0) + %s, "
        "cache_write_tokens = COALESCE(cache_write_tokens, 0) + %s, "
        "reasoning_tokens = COALESCE(reasoning_tokens, 0) + %s, "
        "estimated_cost_usd = COALESCE(estimated_cost_usd, 0) + %s WHERE id = %s",
        [*values, float(cost_usd), session_id],
    )
