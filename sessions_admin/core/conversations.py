"""Conversation continuity for OpenAI-style ``/v1/responses`` clients.

A client names its conversation with a slug; the runtime keeps ``responses`` (LRU-bounded,
lost on restart) and ``conversations`` (slug -> latest response). Before hermes-agent #16517
the session lived only in ``responses.data``, so an evicted row made a known slug mint an
unlinked session: one conversation became N forks. Here the slug's session is kept on its
``conversations`` row at every turn, and since hermes-agent 0.19's own turn nulls that column
(``INSERT OR REPLACE``) and its LRU deletes the row, also in the slug history
(``slug_history.remember_core_session``): a slug whose row and responses name no session
continues the latest session recorded there, if it still exists. These tables may live in a
separate database (Hermes's ``response_store.db``): ``responses_alias()``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from sessions_admin.core import clock, db, faults, lineage
from sessions_admin.core.db import store_operation
from sessions_admin.core.errors import ConversationNotFound, InvalidInput
from sessions_admin.core.lifecycle import (
    continue_session,
    create_session,
    new_session_id,
    require_writable,
    where_it_continues,
)
from sessions_admin.core.rows import (
    conversation_row,
    conversation_session,
    decoded_content,
    json_text,
    repoint_conversations,
    require_text,
    response_session,
    responses_transaction,
    slugs_of_sessions,
)
from sessions_admin.core.slug_history import latest_recorded_session, remember_core_session
from sessions_admin.routers import responses_alias


@dataclass(frozen=True)
class ConversationTarget:
    session_id: str
    conversation: str | None
    resolved_by: str  # "response", "conversation" or "new"
    created: bool


def _alias() -> str:
    return responses_alias()


def _check_slug(conversation: str) -> str:
    return require_text("conversation", conversation, max_length=500)


def _check_response_id(response_id: str | None, name: str = "response_id") -> str | None:
    return None if response_id is None else require_text(name, response_id, max_length=500)


def _continue_ended(session_id: str, conversation: str | None) -> tuple[str, bool]:
    """The live session carrying the conversation recorded at ``session_id``; (id, created).

    A conversation whose session ended (idle expiry, an operator's end) goes on in
    the live session that continues it (compression tip, merge target, its key's
    live session) or, when none does, in a new session linked to it
    (``parent_session_id`` and ``_continued_from``): one slug stays one lineage
    instead of a second, unlinked session (hermes-agent #16517 by another road).
    The slug and the key are locked, so racing requests agree on one continuation.
    """
    current = lineage.current_session(session_id=session_id)
    row = lineage.session_row(current)
    if row is None or row["ended_at"] is None:
        return current, False
    db.lock_names(
        f"conversation:{conversation}" if conversation else None,
        db.key_lock_name(row.get("session_key")),
        db.session_lock_name(current),
    )
    current = lineage.current_session(session_id=session_id)
    row = lineage.session_row(current, lock=True)
    if row is None or row["ended_at"] is None:
        return current, False
    live, _via = where_it_continues(row)
    if live is not None:
        return live, False
    continuation = continue_session(row)
    faults.checkpoint("continuation.before_commit")
    return continuation, True


@store_operation
def resolve_conversation(
    *,
    conversation: str | None = None,
    previous_response_id: str | None = None,
    source: str = "api_server",
    user_id: str | None = None,
    model: str | None = None,
) -> ConversationTarget:
    """The session a ``/v1/responses`` request continues.

    - a known ``previous_response_id``: its session;
    - a known slug: the session on its row, else (the column nulled by Hermes's ``INSERT OR
      REPLACE``) the one its latest response names, else the latest the slug history records;
    - a slug whose row Hermes's LRU deleted but whose recorded session exists: that session,
      the row written again;
    - an unknown ``previous_response_id`` without a slug, or a slug with no recorded session:
      ``ConversationNotFound`` (never a silent fork);
    - a new slug: a new session, created once even when requests race;
    - an ended session: the live one continuing it, or a new one linked to it (``resolved_by``
      ``"continuation"``), the slug moved there."""
    if conversation is not None:
        _check_slug(conversation)
    _check_response_id(previous_response_id, "previous_response_id")
    for name, value in (("source", source), ("user_id", user_id), ("model", model)):
        if value is not None:
            require_text(name, value, max_length=500)
    if not conversation and not previous_response_id:
        raise InvalidInput("Give a conversation slug or a previous response id.")
    if previous_response_id:
        session_id = response_session(previous_response_id)
        if session_id:
            return _live_target(session_id, conversation, "response")
        if not conversation:
            raise ConversationNotFound(
                f"Previous response {previous_response_id!r} is not stored (evicted or never "
                "recorded) and no conversation slug was given to continue by."
            )
    row = conversation_row(conversation)
    if row is None:
        recorded = _recorded_session(conversation)
        if recorded:
            with responses_transaction():
                _claim_slug(conversation, recorded)
            row = conversation_row(conversation)
    if row is not None:
        session_id = row[1] or response_session(row[0]) or _recorded_session(conversation)
        if not session_id:
            raise ConversationNotFound(
                f"Conversation {conversation!r} has no recorded session (its responses were "
                "evicted before sessions were recorded on conversations); start a new slug."
            )
        if row[1] is None:
            with responses_transaction():
                db.execute(
                    "UPDATE conversations SET session_id = %s WHERE name = %s "
                    "AND session_id IS NULL",
                    [session_id, conversation],
                    alias=_alias(),
                )
            remember_core_session(slug=conversation, session_id=session_id)
        if lineage.session_row(session_id) is None:
            # The slug was claimed but its session never written (a crash between
            # the two databases): create it now under the recorded id.
            create_session(session_id=session_id, source=source, user_id=user_id, model=model)
        return _live_target(session_id, conversation, "conversation")
    if previous_response_id:
        raise ConversationNotFound(
            f"Previous response {previous_response_id!r} is not stored and conversation "
            f"{conversation!r} is unknown."
        )
    candidate = new_session_id()
    with responses_transaction():
        # The slug is claimed before the session exists, so racing requests for
        # one new slug agree on one session id (ON CONFLICT waits for the winner).
        _claim_slug(conversation, candidate)
        session_id = conversation_session(conversation)
    created = session_id == candidate
    create_session(session_id=session_id, source=source, user_id=user_id, model=model)
    if created:
        remember_core_session(slug=conversation, session_id=session_id)
        return ConversationTarget(session_id, conversation, "new", True)
    return _live_target(session_id, conversation, "conversation")


def _claim_slug(conversation: str, session_id: str) -> None:
    """A row for the slug naming ``session_id``, unless the slug has one (the first wins)."""
    db.execute(
        "INSERT INTO conversations (name, response_id, session_id) VALUES (%s, '', %s) "
        "ON CONFLICT (name) DO NOTHING",
        [conversation, session_id],
        alias=_alias(),
    )


def _recorded_session(conversation: str) -> str | None:
    """The latest session the slug history records for the slug, if that session still exists.

    Only the latest: when an operator deleted it, an older session of the slug
    is not brought back instead.
    """
    session_id = latest_recorded_session(conversation)
    if session_id and lineage.session_row(session_id) is not None:
        return session_id
    return None


def _live_target(session_id: str, conversation: str | None, resolved_by: str) -> ConversationTarget:
    """The target for a recorded session: where it continues, live; the slug moved there."""
    target, created = _continue_ended(session_id, conversation)
    if target != session_id:
        repoint_conversations(
            from_session_ids=lineage.compression_chain(session_id=session_id)
            + [lineage.current_session(session_id=session_id)],
            to_session_id=target,
        )
        if conversation:
            remember_core_session(slug=conversation, session_id=target)
    return ConversationTarget(
        target, conversation, "continuation" if created else resolved_by, created
    )


@store_operation
def record_turn(
    *,
    response_id: str,
    session_id: str,
    conversation: str | None = None,
    data: Mapping[str, Any] | None = None,
) -> None:
    """Store a response and advance its conversation, persisting the slug's session id.

    The session is persisted on the slug's row and in the slug history (the
    core's entry), which outlasts the runtime's next ``INSERT OR REPLACE`` of
    the row and the eviction of every response.

    The session must be live, as for an append: a turn recorded against an ended
    session (a stale id) would move the slug back onto it, so it raises
    ``SessionEnded`` naming the live session instead.
    """
    require_text("response_id", response_id, max_length=500)
    if conversation is not None:
        _check_slug(conversation)
    if data is not None and not isinstance(data, Mapping):
        raise InvalidInput("data must be a mapping.")
    # Locked: a delete of this session under way either finishes first (SessionNotFound
    # here) or waits for this turn and then takes its slug and response with it.
    require_writable(session_id)
    payload = dict(data or {})
    payload["session_id"] = session_id
    if conversation:
        payload.setdefault("conversation", conversation)
        remember_core_session(slug=conversation, session_id=session_id, response_id=response_id)
    with responses_transaction():
        db.execute(
            "INSERT INTO responses (response_id, data, accessed_at) VALUES (%s, %s, %s) "
            "ON CONFLICT (response_id) DO UPDATE SET data = excluded.data, "
            "accessed_at = excluded.accessed_at",
            [response_id, json_text("data", payload), clock.now()],
            alias=_alias(),
        )
        if conversation:
            db.execute(
                "INSERT INTO conversations (name, response_id, session_id) VALUES (%s, %s, %s) "
                "ON CONFLICT (name) DO UPDATE SET response_id = excluded.response_id, "
                "session_id = excluded.session_id",
                [conversation, response_id, session_id],
                alias=_alias(),
            )


def evict_responses(*, keep_latest: int) -> int:
    """Drop all but the ``keep_latest`` most recently used responses, as the runtime's LRU does."""
    if keep_latest < 0:
        raise InvalidInput("keep_latest must be zero or more.")
    with transaction.atomic(using=_alias()):
        return db.execute(
            "DELETE FROM responses WHERE response_id NOT IN ("
            " SELECT response_id FROM responses ORDER BY accessed_at DESC, response_id DESC "
            " LIMIT %s)",
            [keep_latest],
            alias=_alias(),
        )


@store_operation
def refill_all_conversation_sessions() -> int:
    """Repopulate ``conversations.session_id`` wherever the runtime left it NULL.

    Hermes's own ``INSERT OR REPLACE`` on ``conversations`` drops the column at
    every turn; the slug's latest response still names its session. Run on
    attach (``init_store``); readers never depend on it having run.
    """
    rows = db.fetchall(
        "SELECT name, response_id FROM conversations WHERE session_id IS NULL", alias=_alias()
    )
    filled = 0
    with responses_transaction():
        for name, response_id in rows:
            session_id = response_session(response_id)
            if session_id:
                filled += db.execute(
                    "UPDATE conversations SET session_id = %s WHERE name = %s "
                    "AND session_id IS NULL",
                    [session_id, name],
                    alias=_alias(),
                )
    return filled


def _response_session_sql(alias: str) -> str:
    """``data`` with its session_id set to the %s parameter (a JSON object of a stored response)."""
    if db.vendor(alias) == "postgresql":
        return "(jsonb_set(data::jsonb, '{session_id}', to_jsonb(%s::text)))::text"
    return "json_set(data, '$.session_id', %s)"


def repoint_responses(*, from_session_ids: list[str], to_session_id: str) -> list[list[str]]:
    """Make stored responses of ``from_session_ids`` name ``to_session_id``.

    Returns ``[response id, old session, old data]`` for each: the data text as
    it was, so an unmerge puts back the very same text (re-serializing would
    reorder keys and respace it, jsonb most of all).

    Hermes's API server continues a slug in the session its latest response
    names (``responses.data.session_id``), not the conversations column, so a
    merge repoints those too. Runs inside the caller's store operation.
    """
    ids = [i for i in from_session_ids if i and i != to_session_id]
    if not ids:
        return []
    field = db.json_field("data", "session_id", alias=_alias())
    moved = [
        [r[0], r[1], r[2]]
        for r in db.fetchall(
            f"SELECT response_id, {field}, data FROM responses "
            f"WHERE {field} IN ({db.placeholders(ids)}) ORDER BY response_id",
            ids,
            alias=_alias(),
        )
    ]
    set_data = _response_session_sql(_alias())
    with responses_transaction():
        for response_id, _old, _data in moved:
            db.execute(
                f"UPDATE responses SET data = {set_data} WHERE response_id = %s",
                [to_session_id, response_id],
                alias=_alias(),
            )
    return moved


def restore_responses(*, moved: list[list[str]], from_session_id: str) -> int:
    """Undo ``repoint_responses``: responses still naming ``from_session_id`` name their old session.

    Their data text comes back as it was; merges recorded before the text was
    kept (two-item entries) set the session id back inside the JSON instead.
    """
    field = db.json_field("data", "session_id", alias=_alias())
    set_data = _response_session_sql(_alias())
    restored = 0
    with responses_transaction():
        for entry in moved:
            response_id, old_session = entry[0], entry[1]
            if len(entry) > 2 and entry[2] is not None:
                sql, params = "%s", [entry[2]]
            else:
                sql, params = set_data, [old_session]
            restored += db.execute(
                f"UPDATE responses SET data = {sql} WHERE response_id = %s AND {field} = %s",
                [*params, response_id, from_session_id],
                alias=_alias(),
            )
    return restored


def latest_responses_of(session_ids: list[str]) -> list[tuple[str, str]]:
    """(slug, latest response id) for the slugs of ``session_ids`` whose latest response is stored.

    That response is what Hermes's API server reads the next turn's context from
    (its ``conversation_history``), so a merge can offer to rewrite it.
    """
    found = []
    for name, _session in slugs_of_sessions(session_ids):
        row = db.fetchone(
            "SELECT c.response_id FROM conversations c "
            "JOIN responses r ON r.response_id = c.response_id WHERE c.name = %s",
            [name],
            alias=_alias(),
        )
        if row is not None and row[0]:
            found.append((name, row[0]))
    return found


def conversation_history_of(session_id: str) -> list[dict[str, Any]]:
    """The session's active messages in id order, as an API conversation history.

    The shape Hermes's API server stores and replays (``conversation_history``):
    role and content, with ``tool_calls`` (decoded), ``tool_call_id`` and
    ``tool_name`` where the message has them; the same messages Hermes's own
    ``get_messages_as_conversation`` loads for the session.
    """
    history = []
    for role, content, tool_call_id, tool_calls, tool_name in db.fetchall(
        "SELECT role, content, tool_call_id, tool_calls, tool_name FROM messages "
        "WHERE session_id = %s AND active = 1 ORDER BY id",
        [session_id],
    ):
        message: dict[str, Any] = {"role": role, "content": decoded_content(content)}
        if tool_call_id:
            message["tool_call_id"] = tool_call_id
        if tool_name:
            message["tool_name"] = tool_name
        if tool_calls:
            try:
                message["tool_calls"] = json.loads(tool_calls)
            except ValueError:
                message["tool_calls"] = []
        history.append(message)
    return history


def rewrite_response_histories(
    *, response_ids: list[str], history: list[dict[str, Any]], naming_session: str
) -> list[list[str]]:
    """Make each response's stored ``conversation_history`` ``history``; the rest of its data kept.

    Returns ``[response id, session its data names, old data text]`` for each
    response rewritten, the shape ``restore_responses`` puts back byte-exact.
    Only responses whose data names ``naming_session`` are rewritten (the
    session ``history`` is from); data that is not a JSON object is left alone.
    Written as Hermes writes it (``json.dumps(data, default=str)``). Runs inside
    the caller's store operation.
    """
    rewritten = []
    with responses_transaction():
        for response_id in dict.fromkeys(response_ids):
            row = db.fetchone(
                "SELECT data FROM responses WHERE response_id = %s" + db.for_update(),
                [response_id],
                alias=_alias(),
            )
            if row is None:
                continue
            try:
                data = json.loads(row[0])
            except (TypeError, ValueError):
                continue
            if not isinstance(data, dict) or data.get("session_id") != naming_session:
                continue
            data["conversation_history"] = history
            db.execute(
                "UPDATE responses SET data = %s WHERE response_id = %s",
                [json.dumps(data, default=str), response_id],
                alias=_alias(),
            )
            rewritten.append([response_id, naming_session, row[0]])
    return rewritten
