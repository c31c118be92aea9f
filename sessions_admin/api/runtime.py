"""The runtime's lifecycle over HTTP: what ``sessions_admin.core`` offers a Python runtime.

A runtime in another language calls these instead of writing the store itself; each route is
one core call (its transaction, its rules, its errors: a write to an ended session is a 409
naming ``live_session_id``, as ``SessionEnded`` does). Only ``runtime`` tokens call them, and a
token limited to sources touches only sessions of those sources (checked before the call, on
every session the call reads or changes, not only the one it names: a merge may lead into
another source's), and is never told the id of another source's session. A runtime is not an operator, so these routes call the core
directly rather than ``ledger.actions`` (pyproject's writes contract lists them), but each
changing request still gets one audit entry (``api:<token name>``, outcome ok or failed),
written after the store committed: a process killed in between leaves the change unaudited,
as a Python runtime's writes always are. Appends take an ``Idempotency-Key``: the key commits
with the messages (``core.idempotency``), so a retried request never stores a message twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from django.db import connections
from django.http import HttpRequest, HttpResponse
from ninja import Field, Header, Query, Router, Schema
from ninja.responses import Status
from pydantic import ConfigDict

from sessions_admin import core
from sessions_admin.api.auth import RUNTIME, Caller, api_auth
from sessions_admin.api.problems import Problem, invalid_input, not_found
from sessions_admin.api.schemas import Identifier, Text
from sessions_admin.core import idempotency, lineage, rows
from sessions_admin.core import transcript as core_transcript
from sessions_admin.core.errors import (
    AmbiguousSessionRef,
    InvalidInput,
    SessionEnded,
    SessionNotFound,
    StoreError,
    TitleTaken,
)
from sessions_admin.core.lifecycle import plan_resume, where_it_continues
from sessions_admin.core.slug_history import (
    latest_recorded_session,
    sessions_recorded_for_response,
)
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditAction, AuditEntry
from sessions_admin.ledger.trash import deleted_session, trashed_title_holder
from sessions_admin.routers import store_alias

logger = logging.getLogger(__name__)
router = Router(tags=["runtime"], auth=api_auth(RUNTIME))
T = TypeVar("T")
PAGE_MAX = 500
REPLAYED_HEADER = "Idempotent-Replayed"


# --- schemas -----------------------------------------------------------------------------------


class Strict(Schema):
    """A request body: unknown fields and values of another JSON type (``0`` for ``false``,
    ``"5"`` for ``5``) are refused, not coerced, so what is accepted is what the schema says."""

    model_config = ConfigDict(extra="forbid", strict=True)


class MessageIn(Strict):
    role: Literal["system", "user", "assistant", "tool"]
    content: Any = None
    tool_call_id: Text | None = None
    tool_calls: Any = None
    tool_name: Text | None = None
    timestamp: float | None = None
    token_count: int | None = Field(None, ge=0, le=rows.COUNT_MAX)
    finish_reason: Text | None = None
    reasoning: Text | None = None


class StartIn(Strict):
    source: Identifier
    session_key: Identifier | None = None
    session_id: Identifier | None = None
    user_id: Text | None = None
    chat_id: Text | None = None
    chat_type: Text | None = None
    thread_id: Text | None = None
    model: Text | None = None
    model_config_: dict[str, Any] | None = Field(None, alias="model_config")
    title: Text | None = None
    join_live: bool = Field(
        True, description="With a session_key: return its live session if it has one."
    )


class SessionRefOut(Schema):
    session_id: str
    created: bool


class SessionOut(Schema):
    session_id: str
    source: str
    session_key: str | None
    user_id: str | None
    title: str | None
    started_at: float
    ended_at: float | None
    end_reason: str | None
    message_count: int
    parent_session_id: str | None
    live_session_id: str | None = Field(
        description="Where the session's conversation is written now: itself while live."
    )


class LiveOut(Schema):
    session_key: str
    session_id: str | None


class AppendIn(Strict):
    messages: list[MessageIn] = Field(min_length=1, max_length=1000)


class AppendOut(Schema):
    session_id: str
    message_ids: list[int]
    message_count: int
    tool_call_count: int


class MessageOut(Schema):
    id: int
    role: str
    content: str | None
    tool_call_id: str | None
    tool_calls: Any = None
    tool_name: str | None
    timestamp: float | None
    token_count: int | None
    finish_reason: str | None
    reasoning: str | None


class MessagePage(Schema):
    session_id: str
    messages: list[MessageOut]
    next_after: int | None = Field(
        description="Pass as `after` for the next page; null at the end."
    )


class TurnIn(Strict):
    response_id: Identifier
    conversation: Identifier | None = None
    data: dict[str, Any] | None = None


class UsageIn(Strict):
    # The core's bounds (rows.COUNT_MAX, rows.COST_MAX_USD), also on the session's totals.
    input_tokens: int = Field(0, ge=0, le=rows.COUNT_MAX)
    output_tokens: int = Field(0, ge=0, le=rows.COUNT_MAX)
    cache_read_tokens: int = Field(0, ge=0, le=rows.COUNT_MAX)
    cache_write_tokens: int = Field(0, ge=0, le=rows.COUNT_MAX)
    reasoning_tokens: int = Field(0, ge=0, le=rows.COUNT_MAX)
    cost_usd: float = Field(0.0, ge=0, le=rows.COST_MAX_USD, allow_inf_nan=False)


class OkOut(Schema):
    session_id: str


class RotateIn(Strict):
    summary: Text | None = None
    carry_messages: list[MessageIn] = Field(default_factory=list, max_length=1000)


class RotateOut(Schema):
    new_session_id: str
    parent_session_id: str


class ResetIn(Strict):
    session_key: Identifier
    summary: Text | None = None


class ResetOut(Schema):
    ended_session_id: str | None
    new_session_id: str | None
    left_to_gateway: bool


class ResumeIn(Strict):
    ref: Identifier
    current_session_id: Identifier | None = None


class ResumeOut(Schema):
    session_id: str
    matched_session_id: str
    previous_end_reason: str | None
    switched_from_session_id: str | None
    message_count: int


class BranchIn(Strict):
    at_message_id: int | None = Field(None, ge=1)
    title: Text | None = None


class BranchOut(Schema):
    new_session_id: str
    parent_session_id: str
    copied_messages: int


class RewriteOut(Schema):
    session_id: str
    action: str
    message_ids: list[int]


class SaveIn(Strict):
    messages: list[MessageIn] = Field(max_length=10_000)
    rewrite: bool = False


class SaveOut(Schema):
    session_id: str
    kept: int
    appended: int
    deactivated: int


class ResolveIn(Strict):
    conversation: Identifier | None = None
    previous_response_id: Identifier | None = None
    source: Identifier = "api_server"
    user_id: Text | None = None
    model: Text | None = None


class ResolveOut(Schema):
    session_id: str
    conversation: str | None
    resolved_by: str
    created: bool


# --- helpers -----------------------------------------------------------------------------------


def _caller(request: HttpRequest) -> Caller:
    return request.auth  # type: ignore[attr-defined]


def _session(request: HttpRequest, session_id: str) -> dict:
    """The session a route names (404 if none), once the token may touch its source."""
    row = lineage.session_row(session_id)
    if row is None:
        raise not_found(f"No session has the id {session_id!r}.")
    _caller(request).require_source(row["source"], session_id)
    return row


def _require_sources_of(caller: Caller, session_ids: Sequence[str | None]) -> None:
    """403 unless every one of ``session_ids`` that exists is of the token's sources."""
    if not caller.sources:
        return
    for session_id in dict.fromkeys(sid for sid in session_ids if sid):
        row = lineage.session_row(session_id)
        if row is not None:
            caller.require_source(row["source"], session_id)


def _visible_continuation(caller: Caller, live_session_id: str | None) -> str | None:
    """``live_session_id`` when the token may use its source, else None: a limited token is
    not told the id of another source's session (a merge may have carried its own there)."""
    if live_session_id is None or not caller.sources:
        return live_session_id
    row = lineage.session_row(live_session_id)
    return live_session_id if row is not None and caller.may_touch_source(row["source"]) else None


def _title_taken_for(caller: Caller, error: TitleTaken) -> TitleTaken | Problem:
    """A title in use, as this token may hear it: titles are unique across the store (as
    Hermes keeps them), so a limited token learns that one is taken, but not by which session
    when that session is of a source it may not use."""
    row = lineage.session_row(error.owner)
    if not caller.sources or (row is not None and caller.may_touch_source(row["source"])):
        return error
    return Problem(
        409,
        "title-taken",
        "Title taken",
        f"The title {error.title!r} is already used by a session of a source the token "
        f"{caller.name} may not use: nothing was changed.",
        {"owner": None},
    )


def _ended_for(caller: Caller, error: SessionEnded) -> SessionEnded | Problem:
    """A write to an ended session, as this token may hear it: where it continues is named only
    when that session is of the token's sources."""
    if _visible_continuation(caller, error.live_session_id) == error.live_session_id:
        return error
    return Problem(
        409,
        "session-ended",
        "Session ended",
        f"Session {error.session_id} has ended ({error.end_reason or 'no reason recorded'}). "
        f"It continues in a session of a source the token {caller.name} may not use: "
        "nothing was changed.",
        {
            "session_id": error.session_id,
            "end_reason": error.end_reason,
            "live_session_id": None,
            "via": None,
        },
    )


def _where_resolving_leads(
    *, response_id: str | None, conversation: str | None
) -> list[str | None]:
    """The sessions resolving a conversation would continue in: the ones the response and the
    slug name, and for an ended one the live session carrying it on (its merge target, its
    compression tip, its key's live session)."""
    named = [
        rows.response_session(response_id) if response_id else None,
        rows.conversation_session(conversation) if conversation else None,
    ]
    leads: list[str | None] = []
    for session_id in dict.fromkeys(sid for sid in named if sid):
        current = lineage.current_session(session_id=session_id)
        row = lineage.session_row(current)
        leads += [session_id, current]
        if row is not None and row["ended_at"] is not None:
            leads.append(where_it_continues(row)[0])
    return leads


def _require_sources_named(
    caller: Caller, *, response_id: str | None, conversation: str | None
) -> None:
    """A limited token touches a stored response or a conversation slug only while the
    session it names now is of its sources (recording a turn re-points both, resolving may
    continue it): another source's conversation is not its to move."""
    if not caller.sources:
        return
    named = [
        rows.response_session(response_id) if response_id else None,
        rows.conversation_session(conversation) if conversation else None,
    ]
    # A response the runtime evicted is still the latest of the conversations naming it, and
    # an older one is still what a client continues from: a turn storing it again would carry
    # those conversations into the caller's session. The slug history remembers whose it was.
    for slug, session_column in rows.conversations_naming_response(response_id or ""):
        owner = session_column or latest_recorded_session(slug)
        if owner is None:
            # Whose it is cannot be told: not a limited token's to take.
            caller.require_source(None, slug)
        named.append(owner)
    named += sessions_recorded_for_response(response_id or "")
    for session_id in dict.fromkeys(sid for sid in named if sid):
        row = lineage.session_row(session_id)
        if row is not None:
            caller.require_source(row["source"], session_id)


# SQLite has one write lock, and a writer that finds it taken sleeps (1, 2, 5, 10 ... 100 ms:
# SQLite's busy handler) instead of being woken when it is free. With a worker's threads all
# appending, most of an append's time went in such sleeps (bench/api.py); the threads of one
# process take turns here instead, so at most one of them waits inside SQLite.
_SQLITE_WRITER = threading.Lock()


def _one_writer_per_process():
    if connections[store_alias()].vendor != "sqlite":
        return contextlib.nullcontext()
    return _SQLITE_WRITER


def _audited(
    request: HttpRequest,
    action: str,
    session_ids: Sequence[str | None],
    run: Callable[[], T],
    *,
    before: dict | None = None,
    after: Callable[[T], dict] = lambda _: {},
    result_ids: Callable[[T], Sequence[str | None]] = lambda _: (),
) -> T:
    """Run one core call and write its one audit entry (ok with ``after``, or failed)."""
    actor = _caller(request).actor
    ids = [sid for sid in session_ids if sid]
    try:
        with _one_writer_per_process():
            result = run()
    except StoreError as error:
        entry = _record(actor, action, ids, before, {}, AuditEntry.FAILED, str(error))
        answer = error
        if isinstance(error, SessionEnded):
            answer = _ended_for(_caller(request), error)
        elif isinstance(error, TitleTaken):
            answer = _title_taken_for(_caller(request), error)
        if entry is not None:
            answer.audited_entry = entry.pk  # its refusal is not recorded a second time
        if answer is not error:
            raise answer from None
        raise
    try:
        state = after(result)
        more = [sid for sid in result_ids(result) if sid]
    except Exception as error:  # the outcome is known; reading it back is a courtesy
        state, more = {"unreadable": f"{type(error).__name__}: {error}"}, []
    _record(actor, action, list(dict.fromkeys([*ids, *more])), before, state, AuditEntry.OK, "")
    return result


def _record(actor, action, ids, before, after, outcome, detail) -> AuditEntry | None:
    try:
        return actions.record(
            actor=actor,
            action=action,
            session_ids=ids,
            before=before,
            after=after,
            outcome=outcome,
            detail=detail,
        )
    except Exception:
        # The store change (or refusal) stands; the runtime must hear about it, not a 500.
        logger.exception("API audit entry for %s by %s could not be written", action, actor)
        return None


def _messages(messages: list[MessageIn]) -> list[dict[str, Any]]:
    return [m.model_dump(exclude_none=True) for m in messages]


def _session_out(caller: Caller, row: dict) -> SessionOut:
    live = (
        row["id"]
        if row["ended_at"] is None
        else _visible_continuation(caller, where_it_continues(row)[0])
    )
    return SessionOut(
        session_id=row["id"],
        source=row["source"],
        session_key=row.get("session_key"),
        user_id=row.get("user_id"),
        title=row.get("title"),
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        end_reason=row["end_reason"],
        message_count=int(row.get("message_count") or 0),
        parent_session_id=row.get("parent_session_id"),
        live_session_id=live,
    )


# --- routes ------------------------------------------------------------------------------------


@router.post("/sessions", response={200: SessionRefOut, 201: SessionRefOut})
def start_session(request: HttpRequest, body: StartIn):
    """Get or create the live session of a session key (or register a session by id)."""
    caller = _caller(request)
    caller.require_source(body.source)
    # Joined, or ended by a new root session (``join_live`` false): either way it is touched.
    live = lineage.live_session_for_key(body.session_key)
    for existing in (live, body.session_id):
        row = lineage.session_row(existing) if existing else None
        if row is not None:
            caller.require_source(row["source"], existing)
    if body.session_id and lineage.session_row(body.session_id) is None:
        _refuse_an_id_in_the_trash(caller, body.session_id)
    _refuse_a_title_in_the_trash(caller, body.title)
    fields = body.model_dump(exclude_none=True, by_alias=False)
    fields.pop("model_config_", None)
    ref = _audited(
        request,
        AuditAction.START_SESSION,
        [body.session_id, live],
        lambda: core.create_session(**fields, model_config=body.model_config_),
        before={"source": body.source, "session_key": body.session_key},
        after=lambda r: {"session_id": r.session_id, "created": r.created},
        result_ids=lambda r: [r.session_id],
    )
    return Status(
        201 if ref.created else 200, SessionRefOut(session_id=ref.session_id, created=ref.created)
    )


def _refuse_a_title_in_the_trash(caller: Caller, title: str | None) -> None:
    """A title a deleted session in the trash holds is taken, as one in the store is: given
    to another session, it would keep that one from being restored (attack round 46, Y4)."""
    deleted = trashed_title_holder(title) if title else None
    if deleted is None:
        return
    owner = deleted.session_id if caller.may_touch_source(deleted.source or None) else None
    raise Problem(
        409,
        "title-taken",
        "Title taken",
        f"The title {title!r} is held by a deleted session in the trash"
        + (f" ({owner}, entry #{deleted.entry.pk})" if owner else "")
        + ": given to another session, it would keep that one from being restored. Nothing "
        "was changed.",
        {"owner": owner},
    )


def _refuse_an_id_in_the_trash(caller: Caller, session_id: str) -> None:
    """A session started under the id of a deleted one still in the trash would take that
    id from it: its restore would be refused for good. 403 for a limited token when the
    deleted session is of another source (as for a session in the store), else 422."""
    deleted = deleted_session(session_id)
    if deleted is None:
        return
    caller.require_source(deleted.source or None, session_id)
    raise InvalidInput(
        f"Session id {session_id} is a deleted session's, in the trash (entry "
        f"#{deleted.entry.pk}): a session started under it would keep that session from "
        "being restored. Start the session with another id (or have an admin restore it).",
        field="session_id",
    )


@router.get("/live", response=LiveOut)
def live_session(request: HttpRequest, session_key: Identifier = Query(...)):
    """The live session of a session key (null when it has none)."""
    live = lineage.live_session_for_key(session_key)
    if live:
        _session(request, live)
    return LiveOut(session_key=session_key, session_id=live)


@router.get("/sessions/{session_id}", response=SessionOut)
def session(request: HttpRequest, session_id: Identifier):
    """A session, and where its conversation is written now (``live_session_id``)."""
    return _session_out(_caller(request), _session(request, session_id))


@router.get("/sessions/{session_id}/messages", response=MessagePage)
def messages(
    request: HttpRequest,
    session_id: Identifier,
    after: int = Query(0, ge=0, lt=2**63, description="The last message id read (0: start)."),
    limit: int = Query(100, ge=1, le=PAGE_MAX),
):
    """The session's active transcript, a page at a time (``after``: the last id read)."""
    _session(request, session_id)
    rows = core_transcript.active_transcript_page(
        session_id=session_id, after_id=after, limit=limit
    )
    next_after = rows[-1]["id"] if len(rows) == limit else None
    return MessagePage(session_id=session_id, messages=rows, next_after=next_after)


def _request_hash(session_id: str, body: AppendIn) -> str:
    canonical = json.dumps(
        {"session_id": session_id, "messages": _messages(body.messages)},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@router.post(
    "/sessions/{session_id}/messages",
    response={201: AppendOut},
)
def append(
    request: HttpRequest,
    session_id: Identifier,
    body: AppendIn,
    idempotency_key: Identifier | None = Header(None, alias="Idempotency-Key"),
):
    """Append one or many messages to a live session.

    With an ``Idempotency-Key`` (up to 200 characters, new for each new request) a retry of the
    same request returns the first answer and stores nothing (``Idempotent-Replayed: true``); the
    same key with another body is a 422."""
    _session(request, session_id)
    caller = _caller(request)
    messages = _messages(body.messages)
    if idempotency_key is None:
        result = _audited(
            request,
            AuditAction.APPEND,
            [session_id],
            lambda: core.append_messages(session_id=session_id, messages=messages),
            before={"messages": len(messages)},
            # Every id (at most 1,000 a request): the audit log reads the list as the messages.
            after=lambda r: {"message_ids": list(r.message_ids)},
        )
        return Status(
            201,
            AppendOut(
                session_id=result.session_id,
                message_ids=list(result.message_ids),
                message_count=result.message_count,
                tool_call_count=result.tool_call_count,
            ),
        )
    once = _audited(
        request,
        AuditAction.APPEND,
        [session_id],
        lambda: idempotency.append_messages_once(
            key=idempotency_key,
            scope=str(caller),
            request_hash=_request_hash(session_id, body),
            session_id=session_id,
            messages=messages,
        ),
        before={"messages": len(messages), "idempotency_key": idempotency_key},
        # A replay stored nothing: it names the first request's messages, marked replayed.
        after=lambda r: {"replayed": r.replayed, "message_ids": list(r.response["message_ids"])},
    )
    answer = HttpResponse(json.dumps(once.response), status=201, content_type="application/json")
    answer[REPLAYED_HEADER] = "true" if once.replayed else "false"
    return answer


@router.post("/sessions/{session_id}/turns", response={201: OkOut})
def record_turn(request: HttpRequest, session_id: Identifier, body: TurnIn):
    """Record a /v1/responses turn: store the response and move its conversation here."""
    _session(request, session_id)
    _require_sources_named(
        _caller(request), response_id=body.response_id, conversation=body.conversation
    )
    _audited(
        request,
        AuditAction.TURN,
        [session_id],
        lambda: core.record_turn(
            response_id=body.response_id,
            session_id=session_id,
            conversation=body.conversation,
            data=body.data,
        ),
        before={"response_id": body.response_id, "conversation": body.conversation},
    )
    return Status(201, OkOut(session_id=session_id))


@router.post("/sessions/{session_id}/usage", response=OkOut)
def add_usage(request: HttpRequest, session_id: Identifier, body: UsageIn):
    """Add a turn's token usage and cost to a live session's totals."""
    _session(request, session_id)
    usage = body.model_dump()
    _audited(
        request,
        AuditAction.USAGE,
        [session_id],
        lambda: core.add_usage(session_id=session_id, **usage),
        before=usage,
    )
    return OkOut(session_id=session_id)


@router.post("/sessions/{session_id}/rotate", response={201: RotateOut})
def rotate(request: HttpRequest, session_id: Identifier, body: RotateIn):
    """End the session for compression and continue in a linked child (returned)."""
    _session(request, session_id)
    carried = _messages(body.carry_messages)
    result = _audited(
        request,
        AuditAction.ROTATE_FOR_COMPRESSION,
        [session_id],
        lambda: core.rotate_for_compression(
            session_id=session_id, summary=body.summary, carry_messages=carried
        ),
        before={"carried": len(carried)},
        after=lambda r: {"new_session_id": r.new_session_id},
        result_ids=lambda r: [r.new_session_id],
    )
    return Status(
        201,
        RotateOut(new_session_id=result.new_session_id, parent_session_id=result.parent_session_id),
    )


@router.post("/reset", response=ResetOut)
def reset(request: HttpRequest, body: ResetIn):
    """End the key's live session and start a fresh one (``new_session_id``; null when a Hermes
    gateway routes the key and starts it itself)."""
    live = lineage.live_session_for_key(body.session_key)
    if live:
        _session(request, live)
    elif _caller(request).sources:
        # Nothing live to check the source of: a limited token resets only what it can see.
        raise not_found(f"The session key {body.session_key!r} has no live session.")
    result = _audited(
        request,
        AuditAction.RESET,
        [live],
        lambda: core.reset_session_key(session_key=body.session_key, summary=body.summary),
        before={"session_key": body.session_key},
        after=lambda r: {"ended": r.ended_session_id, "new_session_id": r.new_session_id},
        result_ids=lambda r: [r.ended_session_id, r.new_session_id],
    )
    return result  # the core's ResetResult, read by the schema (ResetOut)


@router.post("/resume", response=ResumeOut)
def resume(request: HttpRequest, body: ResumeIn):
    """Reopen the latest session of the lineage ``ref`` (an id, a title or an id prefix) names.

    A token limited to sources resumes only when every session the resume reads or changes is
    of its sources (the one the ref names, the one it makes live, possibly another source's
    merge target, and those it ends), and only as checked: a plan that changed meanwhile is a
    409 ``plan-changed``."""
    caller = _caller(request)
    if body.current_session_id:
        _session(request, body.current_session_id)
    ref = body.ref
    try:
        if caller.sources:
            # A title or prefix looks among this token's sources only: whether it would match
            # another source's sessions, and how many, is not this token's to learn (a 422
            # for two matches against a 404 for none told it, attack 40).
            ref = core.resolve_session_ref(body.ref, sources=caller.sources)
        plan = plan_resume(ref=ref, current_session_id=body.current_session_id)
    except AmbiguousSessionRef as error:
        if not caller.sources:
            raise
        # Neither the candidates' ids nor how many there are is said to a limited token.
        raise invalid_input(
            f"{error.ref!r} matches more than one session; give more of the id."
        ) from None
    asked = lineage.session_row(plan.asked_id)
    if (
        caller.sources
        and plan.asked_id != body.ref
        and (asked is None or not caller.may_touch_source(asked["source"]))
    ):
        # A title or id prefix that finds only another source's session is answered as one
        # that finds none: a 403 would tell the token such a title exists. (A whole session
        # id is refused with a 403, as on every route that names one.)
        raise SessionNotFound(body.ref)
    _require_sources_of(caller, plan.touched_ids)
    checked = plan.fingerprint if caller.sources else None
    result = _audited(
        request,
        AuditAction.RESUME,
        [plan.target_id, body.current_session_id],
        lambda: core.resume_session(
            ref=ref,
            current_session_id=body.current_session_id,
            expected_fingerprint=checked,
        ),
        before={"ref": body.ref},
        after=lambda r: {"session_id": r.session_id, "switched_from": r.switched_from_session_id},
        result_ids=lambda r: [r.session_id],
    )
    return result  # the core's ResumeResult, read by the schema (ResumeOut)


@router.post("/sessions/{session_id}/branch", response={201: BranchOut})
def branch(request: HttpRequest, session_id: Identifier, body: BranchIn):
    """Start a branch carrying the active transcript up to ``at_message_id`` (default: all)."""
    _session(request, session_id)
    _refuse_a_title_in_the_trash(_caller(request), body.title)
    result = _audited(
        request,
        AuditAction.BRANCH,
        [session_id],
        lambda: core.branch_session(
            session_id=session_id, at_message_id=body.at_message_id, title=body.title
        ),
        before={"at_message_id": body.at_message_id},
        after=lambda r: {"new_session_id": r.new_session_id, "copied": r.copied_messages},
        result_ids=lambda r: [r.new_session_id],
    )
    return Status(
        201,
        BranchOut(
            new_session_id=result.new_session_id,
            parent_session_id=result.parent_session_id,
            copied_messages=result.copied_messages,
        ),
    )


def _rewrite(
    request: HttpRequest, session_id: str, action: str, run: Callable[[], Any]
) -> RewriteOut:
    _session(request, session_id)
    result = _audited(
        request,
        action,
        [session_id],
        run,
        after=lambda r: {"message_ids": list(r.message_ids)},
    )
    return RewriteOut.model_validate(result)


@router.post("/sessions/{session_id}/undo", response=RewriteOut)
def undo(request: HttpRequest, session_id: Identifier):
    """Undo the last turn (its messages become inactive; redo brings them back)."""
    return _rewrite(
        request,
        session_id,
        AuditAction.UNDO,
        lambda: core.undo_last_turn(session_id=session_id),
    )


@router.post("/sessions/{session_id}/retry", response=RewriteOut)
def retry(request: HttpRequest, session_id: Identifier):
    """Drop the last reply so the last user message is answered again."""
    return _rewrite(
        request,
        session_id,
        AuditAction.RETRY,
        lambda: core.retry_last_turn(session_id=session_id),
    )


@router.post("/sessions/{session_id}/redo", response=RewriteOut)
def redo(request: HttpRequest, session_id: Identifier):
    """Bring back the turn the last undo took."""
    return _rewrite(
        request, session_id, AuditAction.REDO, lambda: core.redo_turn(session_id=session_id)
    )


@router.put("/sessions/{session_id}/transcript", response=SaveOut)
def save_transcript(request: HttpRequest, session_id: Identifier, body: SaveIn):
    """Make the active transcript equal ``messages``; a save dropping stored messages is a 409
    unless ``rewrite`` (and even then they become inactive, never deleted)."""
    _session(request, session_id)
    messages = _messages(body.messages)
    result = _audited(
        request,
        AuditAction.SAVE_TRANSCRIPT,
        [session_id],
        lambda: core.save_transcript(
            session_id=session_id, messages=messages, rewrite=body.rewrite
        ),
        before={"messages": len(messages), "rewrite": body.rewrite},
        after=lambda r: {"kept": r.kept, "appended": r.appended, "deactivated": r.deactivated},
    )
    return result  # the core's SaveResult, read by the schema (SaveOut)


@router.post("/conversations/resolve", response=ResolveOut)
def resolve_conversation(request: HttpRequest, body: ResolveIn):
    """The session a /v1/responses request continues (by slug or previous response); a new
    conversation starts one."""
    caller = _caller(request)
    caller.require_source(body.source)
    _require_sources_of(
        caller,
        _where_resolving_leads(
            response_id=body.previous_response_id, conversation=body.conversation
        ),
    )
    target = _audited(
        request,
        AuditAction.RESOLVE_CONVERSATION,
        [],
        lambda: core.resolve_conversation(
            conversation=body.conversation,
            previous_response_id=body.previous_response_id,
            source=body.source,
            user_id=body.user_id,
            model=body.model,
        ),
        before={"conversation": body.conversation},
        after=lambda t: {"session_id": t.session_id, "resolved_by": t.resolved_by},
        result_ids=lambda t: [t.session_id],
    )
    return target  # the core's ConversationTarget, read by the schema (ResolveOut)
