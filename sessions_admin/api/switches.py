"""Session switches for runtimes in other languages: the switch log over HTTP.

``core.events`` numbers every switch ``seq`` with no gap, in commit order, in the store's
``sessions_admin_switch_events``; the subscriber keeps the last ``seq`` it handled as its
cursor, so it gets every switch once and in order across reconnects and server restarts
(the server keeps nothing per subscriber). Two doors read it: long polling
(``GET /switches?after=&wait=``, a JSON page and the next cursor) and Server-Sent Events
(``GET /switches/stream``, ``id:`` = seq, resumed from ``Last-Event-ID``).

Delivered as the Python follower (``core.follower``) tells its listeners: the ``new`` events
of loaded history and the tombstones an erasure leaves (both of origin ``history``) are never
delivered, but the cursor moves past them (an SSE block with only ``id:``). A runtime token
limited to sources sees only switches into sessions of those sources, and no other source's
session id in them (``_named_for``). Who may read: runtime
tokens and every operator scope (a switch names session ids and keys, which a viewer sees in
the console anyway).

A stream holds one of gunicorn's worker threads (``gunicorn_conf``: gthread workers), so it
ends after ``SESSIONS_ADMIN_SWITCH_STREAM_SECONDS`` (15 by default, under gunicorn's
``graceful_timeout`` of 20 s: a restart lets open streams end rather than cutting them); a
long poll waits at most as long. The client then reconnects with ``Last-Event-ID``
(``EventSource`` does so by itself, after the ``retry:`` the stream announces). Heartbeats
(SSE comments) every ``SESSIONS_ADMIN_SWITCH_HEARTBEAT_SECONDS`` keep proxies from closing a
quiet stream and let the server notice a subscriber that left.

Both were authenticated once, when they began: each asks ``auth.no_longer_valid`` again before
each delivery and heartbeat (and at least every ``RECHECK_SECONDS``), so a token revoked or
expired meanwhile ends its stream, and its pending long poll answers 401.

Both doors read the cursor with ``parse_cursor``, one syntax for ``after`` and
``Last-Event-ID``: 1 to ``CURSOR_DIGITS_MAX`` ASCII digits, nothing else (no sign, space,
underscore, point or other script's digit, which ``int()`` would take). A cursor past the
newest ``seq`` the log has issued (``events.newest_switch_seq``) is refused too, naming that
seq: accepted, it would silently skip every switch up to it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from typing import Annotated

from django.conf import settings
from django.http import HttpRequest, StreamingHttpResponse
from ninja import Field, Header, Query, Router, Schema
from pydantic import WithJsonSchema

from sessions_admin.api import long_requests
from sessions_admin.api.auth import RUNTIME, SWITCHES, Caller, api_auth, no_longer_valid
from sessions_admin.api.problems import Problem, invalid_input
from sessions_admin.core import db, events

logger = logging.getLogger(__name__)
router = Router(tags=["switches"], auth=api_auth(SWITCHES))

# A cursor: ASCII digits only (``[0-9]``, not ``\d``, which takes other scripts' digits).
CURSOR_DIGITS_MAX = 18  # below 2**63: any such number fits the log's BIGINT
CURSOR_PATTERN = f"^[0-9]{{1,{CURSOR_DIGITS_MAX}}}$"
_CURSOR = re.compile(f"[0-9]{{1,{CURSOR_DIGITS_MAX}}}")
# Published with its pattern, but checked by ``parse_cursor`` (one 422 for both doors).
Cursor = Annotated[str, WithJsonSchema({"type": "string", "pattern": CURSOR_PATTERN})]
CURSOR_RULE = (
    "A cursor (after, Last-Event-ID) is the seq of the last switch handled: "
    f"1 to {CURSOR_DIGITS_MAX} ASCII digits (0: the whole log), nothing else."
)
PAGE_MAX = 1000
# Defaults of the settings (or environment variables) of the same names, in seconds.
STREAM_SECONDS = 15.0
HEARTBEAT_SECONDS = 10.0
POLL_SECONDS = 0.5
# What EventSource waits before reconnecting (milliseconds), announced on each stream.
RETRY_MS = 1000
SCAN = 500  # log rows read per query
# How often an open stream asks whether its token is still valid while it delivers nothing.
RECHECK_SECONDS = 1.0


def _seconds(name: str, default: float) -> float:
    value = getattr(settings, name, None)
    if value is None:
        value = os.environ.get(name, "")
    try:
        seconds = float(value) if value != "" else default
    except (TypeError, ValueError):
        logger.warning("%s=%r is not a number of seconds; using %s", name, value, default)
        return default
    return max(0.0, seconds)


def stream_seconds() -> float:
    return _seconds("SESSIONS_ADMIN_SWITCH_STREAM_SECONDS", STREAM_SECONDS)


def heartbeat_seconds() -> float:
    return max(0.1, _seconds("SESSIONS_ADMIN_SWITCH_HEARTBEAT_SECONDS", HEARTBEAT_SECONDS))


def poll_seconds() -> float:
    return max(0.05, _seconds("SESSIONS_ADMIN_SWITCH_POLL_SECONDS", POLL_SECONDS))


# --- schemas -----------------------------------------------------------------------------------


class SwitchEventOut(Schema):
    """One switch, with the fields of ``core.SwitchEvent`` (what the Python listeners get)."""

    seq: int = Field(description="Its number in the log: the cursor after it.")
    created_at: float
    new_session_id: str
    previous_session_id: str | None
    parent_session_id: str | None
    reset: bool
    reason: str = Field(description="new, reset, resume, branch, compression, merge, ...")
    session_key: str | None
    source: str | None
    origin: str | None = Field(description="The process that made the switch.")


class SwitchPage(Schema):
    events: list[SwitchEventOut]
    next_after: int = Field(
        description="Pass as `after` next time: past every event read, delivered or not."
    )


# One event of the stream, as an SSE parser hands it over (blocks without `data:` are not events).
SSE_EVENT_SCHEMA = {
    "type": "object",
    "properties": {
        "event": {"type": "string", "enum": ["switch"]},
        "id": {"type": "string", "pattern": "^[0-9]+$", "description": "The switch's seq."},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": "#/components/schemas/SwitchEventOut"},
        },
        "retry": {"type": "integer"},
    },
    "required": ["event", "id", "data"],
}


# --- reading the log ---------------------------------------------------------------------------


def _delivered(caller: Caller, event: events.SwitchEvent) -> bool:
    """What the Python follower tells a listener, within what the caller may see."""
    if event.origin == events.HISTORY_ORIGIN or not event.new_session_id:
        return False
    return caller.may_touch_source(event.source)


def _named_for(caller: Caller, found: list[events.SwitchEvent]) -> list[events.SwitchEvent]:
    """The events as the caller may read them: a token limited to sources is never told the
    id of a session of another source (a merge into its session names the absorbed one as
    previous and parent), nor of one no longer in the store, whose source nobody can check."""
    if not caller.sources or not found:
        return found
    named = {sid for e in found for sid in (e.previous_session_id, e.parent_session_id) if sid}
    mine = {
        sid
        for sid, source in db.fetchall_in(
            "SELECT id, source FROM sessions WHERE id IN ({marks})", named
        )
        if caller.may_touch_source(source)
    }
    return [
        replace(
            e,
            previous_session_id=e.previous_session_id if e.previous_session_id in mine else None,
            parent_session_id=e.parent_session_id if e.parent_session_id in mine else None,
        )
        for e in found
    ]


def _read(caller: Caller, after: int, limit: int) -> tuple[list[events.SwitchEvent], int]:
    """Up to ``limit`` deliverable events after ``after`` (one scan of the log), and the
    cursor past everything scanned: skipped events are not read again."""
    batch = events.read_switch_events(after_seq=after, limit=max(limit, SCAN))
    found: list[events.SwitchEvent] = []
    cursor = after
    for event in batch:
        if len(found) == limit:
            break
        if _delivered(caller, event):
            found.append(event)
        cursor = event.seq
    return _named_for(caller, found), cursor


def parse_cursor(value: str | None, field: str) -> int | None:
    """The cursor a door was given (``None``: none), for both doors alike: 1 to
    ``CURSOR_DIGITS_MAX`` ASCII digits, else 422 ``invalid-input`` (an empty value too)."""
    if value is None:
        return None
    if not _CURSOR.fullmatch(value):
        raise invalid_input(CURSOR_RULE, [{"field": field, "message": "not a sequence number"}])
    return int(value)


def _start(cursor: int | None, field: str) -> int:
    """Where a door starts reading: after ``cursor``, or (``None``) from now on. A cursor past
    the newest seq ever issued is refused, naming that seq (the client restarts from it)."""
    # Numbering is serialized until commit (core.events), so everything up to the current
    # end is committed: starting after it misses nothing committed later.
    newest = events.newest_switch_seq()
    if cursor is None:
        return newest
    if cursor > newest:
        problem = invalid_input(
            f"The cursor {cursor} is past the end of the switch log: the newest seq is "
            f"{newest}. Resume from {newest} (or from 0, the whole log).",
            [{"field": field, "message": f"past the newest seq, {newest}"}],
        )
        problem.extensions["newest_seq"] = newest
        raise problem
    return cursor


AFTER = Query(
    None,
    description=f"The last seq handled: 1 to {CURSOR_DIGITS_MAX} ASCII digits (0: the whole "
    "log), at most the newest seq (past it: 422 naming it); omitted: from now on.",
    example="42",
)


@router.get("", response=SwitchPage)
def switches(
    request: HttpRequest,
    after: Cursor | None = AFTER,
    wait: float = Query(
        0,
        ge=0,
        le=300,
        description="Seconds to wait for a first event (at most the server's bound, 15 s "
        "by default); 0 answers at once.",
    ),
    limit: int = Query(100, ge=1, le=PAGE_MAX),
):
    """Long polling: the switches after ``after``, in order; when there are none yet, waits up
    to ``wait`` seconds for the first. Call again with ``next_after``."""
    cursor = _start(parse_cursor(after, "after"), "after")
    waits = _bounded(wait)
    # Only a poll that may wait holds a thread long: it takes a slot (429 when none is free).
    slot = _slot(request) if waits else None
    try:
        deadline = time.monotonic() + waits
        while True:
            found, cursor = _read(request.auth, cursor, limit)
            if found or time.monotonic() >= deadline:
                break
            time.sleep(min(poll_seconds(), max(0.0, deadline - time.monotonic())))
            # Asked after each wait, so before anything it delivers: a token revoked or
            # expired while it waited gets the 401 its next request would.
            refusal = no_longer_valid(request)
            if refusal is not None:
                raise refusal
    finally:
        if slot is not None:
            slot.release()
    return SwitchPage(events=[asdict(e) for e in found], next_after=cursor)


@router.get(
    "/stream",
    openapi_extra={
        "responses": {
            200: {
                "description": "Server-Sent Events: `id:` the seq, `data:` one switch as JSON "
                "(SwitchEventOut); a block with only `id:` moves the cursor past events not "
                "delivered; `:` comments are heartbeats. Ends after the server's bound: "
                "reconnect with `Last-Event-ID`.",
                "content": {"text/event-stream": {"schema": SSE_EVENT_SCHEMA}},
            }
        }
    },
)
def switch_stream(
    request: HttpRequest,
    after: Cursor | None = AFTER,
    last_event_id: Cursor | None = Header(
        None,
        alias="Last-Event-ID",
        description="Resume after this seq (wins over `after`); the same syntax as `after`.",
    ),
    seconds: float | None = Query(
        None,
        ge=0,
        le=3600,
        description="End the stream after this long (at most the server's bound, 15 s by "
        "default); 0 sends what is in the log and ends.",
    ),
):
    """Server-Sent Events: every switch after the cursor, in order, as it happens (``id:`` is
    its seq). Resumes after ``Last-Event-ID`` (or ``after``; neither: from now on)."""
    # Both are read (a malformed one is refused even when the other wins); the one used is
    # held to the end of the log.
    resumed = parse_cursor(last_event_id, "Last-Event-ID")
    given = parse_cursor(after, "after")
    if resumed is not None:
        cursor = _start(resumed, "Last-Event-ID")
    else:
        cursor = _start(given, "after")
    slot = _slot(request)
    blocks = _stream(request.auth, cursor, _bounded(seconds), lambda: no_longer_valid(request))
    response = StreamingHttpResponse(
        long_requests.HeldWhileStreaming(blocks, slot),
        content_type="text/event-stream; charset=utf-8",
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a buffering proxy would hold events back
    return response


def _slot(request: HttpRequest) -> long_requests.Slot:
    """A long-lived request's slot, from the runtimes' pool for a runtime token."""
    caller = request.auth
    pool = long_requests.RUNTIMES if caller.has(RUNTIME) else long_requests.OPERATORS
    return long_requests.take(str(caller), "long polls and streams", pool=pool)


def _bounded(seconds: float | None) -> float:
    bound = stream_seconds()
    return bound if seconds is None else min(seconds, bound)


def _stream(
    caller: Caller, cursor: int, seconds: float, refusal: Callable[[], Problem | None]
) -> Iterator[bytes]:
    """The stream's blocks; ``refusal`` (what a new request of the caller would get now) is
    asked before each delivery and heartbeat, and at least every ``RECHECK_SECONDS``: once
    the token is revoked or expired the stream ends, and the client's reconnection gets 401."""
    started = time.monotonic()
    ends = started + seconds
    beat = heartbeat_seconds()
    next_beat = started + beat
    next_check = started + RECHECK_SECONDS
    # The cursor first: a client that connected without one knows where it stands.
    yield f"retry: {RETRY_MS}\nid: {cursor}\n\n".encode()
    try:
        while True:
            found, scanned = _read(caller, cursor, SCAN)
            now = time.monotonic()
            if scanned != cursor or now >= next_beat or now >= next_check:
                refused = refusal()
                if refused is not None:
                    logger.info("switch stream of %s ended: %s", caller.name, refused.detail)
                    yield f": ended: {' '.join(refused.detail.split())}\n\n".encode()
                    return
                next_check = now + RECHECK_SECONDS
            for event in found:
                data = json.dumps(asdict(event), separators=(",", ":"))
                yield f"id: {event.seq}\nevent: switch\ndata: {data}\n\n".encode()
            if scanned != cursor:
                if not found or found[-1].seq != scanned:
                    yield f"id: {scanned}\n\n".encode()
                cursor = scanned
                next_beat = time.monotonic() + beat
                continue  # a backlog is read at once, without waiting
            now = time.monotonic()
            if now >= ends:
                return
            if now >= next_beat:
                yield b": heartbeat\n\n"
                next_beat = now + beat
            time.sleep(max(0.0, min(poll_seconds(), ends - now, next_beat - now)))
    except Exception:
        # Ending the stream is the only answer left once it started: the client resumes
        # from the last id it received, so nothing is lost.
        logger.exception("switch stream stopped at seq %s", cursor)
