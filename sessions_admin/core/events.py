"""Session-switch notifications: in-process listeners and a persisted event log.

Memory providers cache per-session state; when a runtime's session rotates
(new/reset, resume, branch, compression, merge) they must hear of it or they
keep writing into the old session (hermes-agent #6672). Every rotation the
core performs:

1. appends a row to ``sessions_admin_switch_events`` inside the operation's
   transaction, numbered ``seq`` 1, 2, 3... with no gaps, in commit order, so
   a runtime in another process can follow it with a cursor;
2. after the transaction commits, calls ``on_session_switch`` on every
   registered listener, each one isolated from the others.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from django.db import transaction

from sessions_admin.core import clock, db
from sessions_admin.routers import store_alias

logger = logging.getLogger(__name__)

SWITCH_REASONS = {"new", "reset", "resume", "branch", "compression", "merge", "unmerge"}
# Any constant works: it only has to be the same in every process.
_PG_EVENT_LOCK_KEY = 0x5E55A1


class SessionSwitchListener(Protocol):
    def on_session_switch(
        self,
        new_session_id: str,
        *,
        parent_session_id: str,
        reset: bool,
        reason: str,
        **kwargs: Any,
    ) -> None: ...


@dataclass(frozen=True)
class SwitchEvent:
    seq: int
    created_at: float
    new_session_id: str
    previous_session_id: str | None
    parent_session_id: str | None
    reset: bool
    reason: str
    session_key: str | None


_listeners: list[Any] = []
_listeners_lock = threading.Lock()


def register_listener(listener: Any) -> None:
    """Register an object with ``on_session_switch`` (or a plain callable of the same shape)."""
    with _listeners_lock:
        if listener not in _listeners:
            _listeners.append(listener)


def unregister_listener(listener: Any) -> None:
    with _listeners_lock:
        if listener in _listeners:
            _listeners.remove(listener)


def notify_listeners(
    new_session_id: str | None, *, parent_session_id: str | None, reset: bool, reason: str
) -> None:
    """Tell every listener; one that raises neither blocks the others nor the caller."""
    if not new_session_id:
        # Shutdown paths can pass an empty id: telling providers would corrupt their state.
        return
    with _listeners_lock:
        listeners = list(_listeners)
    for listener in listeners:
        hook = getattr(listener, "on_session_switch", listener)
        try:
            hook(
                new_session_id,
                parent_session_id=parent_session_id or "",
                reset=reset,
                reason=reason,
            )
        except Exception:
            logger.exception("session-switch listener %r failed; others still notified", listener)


def record_switch(
    *,
    new_session_id: str,
    previous_session_id: str | None,
    parent_session_id: str | None,
    reset: bool,
    reason: str,
    session_key: str | None,
) -> int:
    """Append the switch to the log (inside the caller's transaction) and schedule listeners.

    Returns the event's ``seq``.
    """
    if reason not in SWITCH_REASONS:
        raise ValueError(f"unknown switch reason {reason!r}")
    if db.vendor() == "postgresql":
        # Serialize numbering across transactions until commit, so seq has no
        # gaps and a reader never sees seq N+1 before N.
        db.execute("SELECT pg_advisory_xact_lock(%s)", [_PG_EVENT_LOCK_KEY])
    (last,) = db.fetchone("SELECT COALESCE(MAX(seq), 0) FROM sessions_admin_switch_events")
    seq = int(last) + 1
    db.execute(
        "INSERT INTO sessions_admin_switch_events (seq, created_at, new_session_id, "
        "previous_session_id, parent_session_id, reset, reason, session_key) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        [
            seq,
            clock.now(),
            new_session_id,
            previous_session_id,
            parent_session_id,
            1 if reset else 0,
            reason,
            session_key,
        ],
    )
    transaction.on_commit(
        lambda: notify_listeners(
            new_session_id, parent_session_id=parent_session_id, reset=reset, reason=reason
        ),
        using=store_alias(),
    )
    return seq


def record_new_sessions(sessions: list[tuple[str, str | None]], *, at: float) -> None:
    """The ``new`` events of many loaded sessions (session id, session_key), numbered in order.

    Loaded sessions are history, not a switch happening now: no listener is told.
    """
    if db.vendor() == "postgresql":
        db.execute("SELECT pg_advisory_xact_lock(%s)", [_PG_EVENT_LOCK_KEY])
    (last,) = db.fetchone("SELECT COALESCE(MAX(seq), 0) FROM sessions_admin_switch_events")
    with db.cursor() as c:
        c.executemany(
            "INSERT INTO sessions_admin_switch_events (seq, created_at, new_session_id, "
            "previous_session_id, parent_session_id, reset, reason, session_key) "
            "VALUES (%s, %s, %s, NULL, NULL, 1, 'new', %s)",
            [[int(last) + n, at, sid, key] for n, (sid, key) in enumerate(sessions, 1)],
        )


def read_switch_events(*, after_seq: int = 0, limit: int = 100) -> list[SwitchEvent]:
    """Events with ``seq > after_seq`` in order: a reader keeps the last seq as its cursor."""
    if limit < 1 or limit > 10_000:
        raise ValueError("limit must be between 1 and 10000")
    rows = db.fetchall(
        "SELECT seq, created_at, new_session_id, previous_session_id, parent_session_id, reset, "
        "reason, session_key FROM sessions_admin_switch_events WHERE seq > %s ORDER BY seq LIMIT %s",
        [int(after_seq), int(limit)],
    )
    return [
        SwitchEvent(
            seq=int(r[0]),
            created_at=r[1],
            new_session_id=r[2],
            previous_session_id=r[3],
            parent_session_id=r[4],
            reset=bool(r[5]),
            reason=r[6],
            session_key=r[7],
        )
        for r in rows
    ]
