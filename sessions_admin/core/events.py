"""Session-switch notifications: in-process listeners and a persisted event log.

Memory providers cache per-session state; when a runtime's session rotates (new/reset, resume,
branch, compression, merge) they must hear of it or they keep writing into the old session
(hermes-agent #6672). Every rotation appends a row to ``sessions_admin_switch_events`` inside
its transaction, numbered ``seq`` with no gaps in commit order (a runtime in another process
follows it with a cursor; ``origin`` lets a follower skip its own process's switches, see
``core.follower``), then, after commit, hands the switch to every registered listener
(isolated from one another and from the caller: ``register_listener``).

An erasure never deletes a row of the log (a gap a cursor could not tell from a lost event):
it turns the person's events into tombstones that keep ``seq``, time and reason, name no
session (``new_session_id`` ``""``) and have the ``history`` origin, so no follower tells a
listener about them."""

from __future__ import annotations

import _thread
import inspect
import itertools
import logging
import os
import queue
import secrets
import signal
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings
from django.db import connections, transaction

from sessions_admin.core import clock, db
from sessions_admin.routers import store_alias

logger = logging.getLogger(__name__)

SWITCH_REASONS = {
    "new",
    "reset",
    "resume",
    "branch",
    "compression",
    "merge",
    "unmerge",
    "continuation",
}
# Any constant works: it only has to be the same in every process.
_PG_EVENT_LOCK_KEY = 0x5E55A1

# How long one listener call may run before it is logged as late (seconds).
LISTENER_TIMEOUT = 2.0
# How long the caller waits after commit for the listeners to have been told (seconds).
LISTENER_GRACE = 0.2
# Switches queued for one listener beyond this are dropped (logged): a listener
# hung for good must not grow the process's memory without bound.
LISTENER_QUEUE_LIMIT = 10_000
# The origin of the ``new`` events of loaded sessions: history, told to nobody.
HISTORY_ORIGIN = "history"


class SessionSwitchListener(Protocol):
    """What a listener implements; see the module docstring for when and how it is called.

    Declare the keyword arguments you use and add ``**kwargs`` so that fields
    added later reach you without breaking you.
    """

    def on_session_switch(
        self,
        new_session_id: str,
        *,
        parent_session_id: str,
        reset: bool,
        reason: str,
        session_key: str | None,
        previous_session_id: str | None,
        source: str | None,
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
    # The new session's source, and the token of the process that made the switch
    # (``HISTORY_ORIGIN`` for loaded sessions; None for events logged before origins).
    source: str | None = None
    origin: str | None = None


@dataclass(frozen=True)
class _Switch:
    """One switch as listeners are told of it."""

    new_session_id: str
    parent_session_id: str | None
    reset: bool
    reason: str
    session_key: str | None
    previous_session_id: str | None
    source: str | None

    def keyword_arguments(self) -> dict[str, Any]:
        return {
            "parent_session_id": self.parent_session_id or "",
            "reset": self.reset,
            "reason": self.reason,
            "session_key": self.session_key,
            "previous_session_id": self.previous_session_id,
            "source": self.source,
        }

    def __str__(self) -> str:
        return f"{self.reason} -> {self.new_session_id} (key {self.session_key})"


# --------------------------------------------------------------------------- origin

_origin: tuple[int, str] | None = None


def process_origin() -> str:
    """This process's token in the event log (a forked child gets a token of its own)."""
    global _origin
    pid = os.getpid()
    if _origin is None or _origin[0] != pid:
        _origin = (pid, f"{socket.gethostname()}:{pid}:{secrets.token_hex(6)}")
    return _origin[1]


# --------------------------------------------------------------------------- settings


def _seconds(name: str, default: float) -> float:
    value = getattr(settings, name, None)
    if value is None:
        value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        logger.warning("%s=%r is not a number of seconds; using %s", name, value, default)
        return default
    return max(0.0, seconds)


def listener_timeout() -> float:
    return _seconds("SESSIONS_ADMIN_LISTENER_TIMEOUT", LISTENER_TIMEOUT)


def listener_grace() -> float:
    return _seconds("SESSIONS_ADMIN_LISTENER_GRACE", LISTENER_GRACE)


# --------------------------------------------------------------------------- dispatch


class _Pending:
    """Counts the deliveries of one switch still running; ``done`` is set when none is."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._lock = threading.Lock()
        self.done = threading.Event()
        if count == 0:
            self.done.set()

    def finish(self) -> None:
        with self._lock:
            self._count -= 1
            if self._count <= 0:
                self.done.set()


_STOP = object()
_dispatcher_threads: set[int] = set()  # idents: a listener's own call waits for nobody
_dispatcher_numbers = itertools.count(1)


def _accepted_keywords(hook: Any) -> frozenset[str] | None:
    """The keyword arguments ``hook`` accepts; None when it takes ``**kwargs`` (or cannot be read)."""
    try:
        parameters = list(inspect.signature(hook).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    positional = [
        p
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    # The first positional parameter receives the new session id, not a keyword.
    first = positional[0] if positional else None
    keywordable = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in parameters if p.kind in keywordable and p is not first)


def _interrupt_main_thread() -> None:
    """Ctrl-C for the main thread, also while it blocks (a sleep, a read).

    ``_thread.interrupt_main`` only sets Python's flag: a main thread blocked in a system
    call sees it when the call returns, possibly much later. A real SIGINT sent to the main
    thread interrupts the call, then Python's handler raises ``KeyboardInterrupt`` there.
    Only when SIGINT has a Python handler: with SIG_DFL it would kill the process, and a
    process that ignores SIGINT is left alone (interrupt_main does the same for both).
    """
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler) and hasattr(signal, "pthread_kill"):
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
    else:
        _thread.interrupt_main()


class _Dispatcher:
    """One listener's daemon thread: calls it with each queued switch, in order."""

    def __init__(self, listener: Any) -> None:
        self.listener = listener
        self.hook = getattr(listener, "on_session_switch", listener)
        self.keywords = _accepted_keywords(self.hook)
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.stopped = False
        # The call in progress, for the watchdog: (switch, started, deadline, reported late).
        self.current: list[Any] | None = None
        self.thread = threading.Thread(
            target=self._run,
            name=f"sessions-admin-listener-{next(_dispatcher_numbers)}",
            daemon=True,
        )
        self.thread.start()

    def enqueue(self, switch: _Switch, pending: _Pending) -> None:
        if self.queue.qsize() >= LISTENER_QUEUE_LIMIT:
            logger.warning(
                "session-switch listener %r has %d switches waiting; dropping %s",
                self.listener,
                self.queue.qsize(),
                switch,
            )
            pending.finish()
            return
        self.queue.put((switch, pending))

    def idle(self) -> bool:
        """Nothing queued and no call running (a snapshot: the thread may start one next)."""
        return self.current is None and self.queue.empty()

    def stop(self) -> None:
        """No further call; switches not yet delivered are dropped. Does not wait for a hung call."""
        self.stopped = True
        self.queue.put(_STOP)

    def _run(self) -> None:
        _dispatcher_threads.add(threading.get_ident())
        try:
            while True:
                item = self.queue.get()
                if item is _STOP:
                    return
                switch, pending = item
                try:
                    if not self.stopped:
                        self._call(switch)
                finally:
                    pending.finish()
        finally:
            _dispatcher_threads.discard(threading.get_ident())

    def _call(self, switch: _Switch) -> None:
        arguments = switch.keyword_arguments()
        if self.keywords is not None:
            arguments = {k: v for k, v in arguments.items() if k in self.keywords}
        started = time.monotonic()
        _watchdog.begin(self, switch, started, started + listener_timeout())
        try:
            self.hook(switch.new_session_id, **arguments)
        except KeyboardInterrupt:
            logger.warning("session-switch listener %r raised KeyboardInterrupt", self.listener)
            _interrupt_main_thread()
        except BaseException:  # noqa: BLE001 - SystemExit, GeneratorExit too: isolated
            logger.exception(
                "session-switch listener %r failed on %s; others still notified",
                self.listener,
                switch,
            )
        finally:
            if _watchdog.end(self):
                logger.warning(
                    "session-switch listener %r finished %s late, after %.1f s",
                    self.listener,
                    switch,
                    time.monotonic() - started,
                )
            # The listener may have used the database: its connection belongs to this thread.
            for connection in connections.all(initialized_only=True):
                connection.close()


class _Watchdog:
    """One daemon thread that logs every listener call running past its deadline, once."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._running: set[_Dispatcher] = set()
        self._thread: threading.Thread | None = None

    def begin(self, dispatcher: _Dispatcher, switch: _Switch, started: float, deadline: float):
        with self._condition:
            dispatcher.current = [switch, started, deadline, False]
            self._running.add(dispatcher)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="sessions-admin-listener-watchdog", daemon=True
                )
                self._thread.start()
            self._condition.notify()

    def end(self, dispatcher: _Dispatcher) -> bool:
        """The call is over; True if it had been reported late."""
        with self._condition:
            current, dispatcher.current = dispatcher.current, None
            self._running.discard(dispatcher)
        return bool(current and current[3])

    def _run(self) -> None:
        with self._condition:
            while True:
                now = time.monotonic()
                next_deadline = None
                for dispatcher in list(self._running):
                    switch, started, deadline, reported = dispatcher.current
                    if reported:
                        continue
                    if deadline <= now:
                        dispatcher.current[3] = True
                        logger.warning(
                            "session-switch listener %r is late: still running %s after %.1f s; "
                            "not waited for",
                            dispatcher.listener,
                            switch,
                            now - started,
                        )
                    elif next_deadline is None or deadline < next_deadline:
                        next_deadline = deadline
                self._condition.wait(None if next_deadline is None else next_deadline - now)


_watchdog = _Watchdog()

_listeners: list[Any] = []
_dispatchers: list[_Dispatcher] = []
_listeners_lock = threading.Lock()


def register_listener(listener: Any) -> None:
    """Register an object with ``on_session_switch`` (or a plain callable of the same shape):
    ``(new_session_id, *, parent_session_id ("" if none), reset, reason (SWITCH_REASONS),
    session_key, previous_session_id, source)``; a listener that accepts fewer keywords gets
    only those (an older signature keeps working).

    Each listener has its own daemon thread and FIFO queue: it sees switches in order, and a
    slow or hung one delays only itself. The caller waits at most ``LISTENER_GRACE`` after
    commit; a listener still running after ``LISTENER_TIMEOUT`` is logged as late (both
    settable as ``SESSIONS_ADMIN_LISTENER_*``, a Django setting or environment variable).
    What a listener raises is logged and goes no further, except ``KeyboardInterrupt``, passed
    to the main thread. A listener's database work runs on its thread's own connection."""
    with _listeners_lock:
        if listener not in _listeners:
            _listeners.append(listener)
        _sync_dispatchers()


def unregister_listener(listener: Any) -> None:
    """Stop telling ``listener``: its thread ends, switches not yet delivered to it are dropped."""
    with _listeners_lock:
        if listener in _listeners:
            _listeners.remove(listener)
        _sync_dispatchers()


def _sync_dispatchers() -> list[_Dispatcher]:
    """One dispatcher per registered listener, in registration order (hold ``_listeners_lock``).

    ``_listeners`` is the registry; a listener removed from it by any road
    (the test suite clears it) loses its dispatcher here.
    """
    kept = []
    for dispatcher in _dispatchers:
        if any(dispatcher.listener is listener for listener in _listeners):
            kept.append(dispatcher)
        else:
            dispatcher.stop()
    by_listener = {id(d.listener): d for d in kept}
    _dispatchers[:] = [by_listener.get(id(lis)) or _Dispatcher(lis) for lis in _listeners]
    return list(_dispatchers)


def _enqueue(switch: _Switch) -> _Pending:
    """Queue ``switch`` for every listener; the returned count covers the idle ones only.

    A listener still busy with an earlier switch (hung, or slow) gets this one queued
    behind it, but the caller does not wait for it: otherwise one hung listener would
    cost every later operation the whole grace period.
    """
    with _listeners_lock:
        dispatchers = _sync_dispatchers()
    idle = [d for d in dispatchers if d.idle()]
    pending = _Pending(len(idle))
    unwaited = _Pending(len(dispatchers) - len(idle))
    for dispatcher in dispatchers:
        dispatcher.enqueue(switch, pending if dispatcher in idle else unwaited)
    return pending


def _wait_all(pendings: list[_Pending], wait: float) -> bool:
    """Wait at most ``wait`` s in all for every delivery; True if all are done."""
    if threading.get_ident() in _dispatcher_threads:
        # A listener's own operation: waiting could only wait for itself.
        return all(p.done.is_set() for p in pendings)
    deadline = time.monotonic() + wait
    return all(p.done.wait(max(0.0, deadline - time.monotonic())) for p in pendings)


def announce_logged_events(batch: list[SwitchEvent], *, wait: float) -> bool:
    """Tell this process's listeners of switches read from the log, in order (the follower's road).

    Waits at most ``wait`` s in all; True if every listener was told of every one.
    """
    pendings = [
        _enqueue(
            _Switch(
                new_session_id=event.new_session_id,
                parent_session_id=event.parent_session_id,
                reset=event.reset,
                reason=event.reason,
                session_key=event.session_key,
                previous_session_id=event.previous_session_id,
                source=event.source,
            )
        )
        for event in batch
    ]
    return _wait_all(pendings, wait)


def notify_listeners(
    new_session_id: str | None,
    *,
    parent_session_id: str | None,
    reset: bool,
    reason: str,
    session_key: str | None = None,
    previous_session_id: str | None = None,
    source: str | None = None,
) -> None:
    """Tell every listener off the caller's path; wait only the grace period for them."""
    if not new_session_id:
        # Shutdown paths can pass an empty id: telling providers would corrupt their state.
        return
    switch = _Switch(
        new_session_id=new_session_id,
        parent_session_id=parent_session_id,
        reset=reset,
        reason=reason,
        session_key=session_key,
        previous_session_id=previous_session_id,
        source=source,
    )
    _wait_all([_enqueue(switch)], listener_grace())


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

    The new session's row must already be written: its ``source`` goes into the
    log and to the listeners. Returns the event's ``seq``.
    """
    if reason not in SWITCH_REASONS:
        raise ValueError(f"unknown switch reason {reason!r}")
    if db.vendor() == "postgresql":
        # Serialize numbering across transactions until commit, so seq has no
        # gaps and a reader never sees seq N+1 before N.
        db.execute("SELECT pg_advisory_xact_lock(%s)", [_PG_EVENT_LOCK_KEY])
    (last,) = db.fetchone("SELECT COALESCE(MAX(seq), 0) FROM sessions_admin_switch_events")
    seq = int(last) + 1
    row = db.fetchone("SELECT source FROM sessions WHERE id = %s", [new_session_id])
    source = row[0] if row else None
    db.execute(
        "INSERT INTO sessions_admin_switch_events (seq, created_at, new_session_id, "
        "previous_session_id, parent_session_id, reset, reason, session_key, source, origin) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        [
            seq,
            clock.now(),
            new_session_id,
            previous_session_id,
            parent_session_id,
            1 if reset else 0,
            reason,
            session_key,
            source,
            process_origin(),
        ],
    )
    transaction.on_commit(
        lambda: notify_listeners(
            new_session_id,
            parent_session_id=parent_session_id,
            reset=reset,
            reason=reason,
            session_key=session_key,
            previous_session_id=previous_session_id,
            source=source,
        ),
        using=store_alias(),
    )
    return seq


def record_new_sessions(sessions: list[tuple[str, str | None]], *, at: float) -> None:
    """The ``new`` events of many loaded sessions (session id, session_key), numbered in order.

    Loaded sessions are history, not a switch happening now: no listener is told,
    in this process or (``HISTORY_ORIGIN``) by another process's follower.
    """
    if db.vendor() == "postgresql":
        db.execute("SELECT pg_advisory_xact_lock(%s)", [_PG_EVENT_LOCK_KEY])
    (last,) = db.fetchone("SELECT COALESCE(MAX(seq), 0) FROM sessions_admin_switch_events")
    with db.cursor() as c:
        c.executemany(
            "INSERT INTO sessions_admin_switch_events (seq, created_at, new_session_id, "
            "previous_session_id, parent_session_id, reset, reason, session_key, source, origin) "
            "VALUES (%s, %s, %s, NULL, NULL, 1, 'new', %s, "
            "(SELECT source FROM sessions WHERE id = %s), %s)",
            [
                [int(last) + n, at, sid, key, sid, HISTORY_ORIGIN]
                for n, (sid, key) in enumerate(sessions, 1)
            ],
        )


def newest_switch_seq() -> int:
    """The highest ``seq`` the log has issued (0: none yet): a cursor past it is no cursor.

    The log is numbered ``MAX(seq) + 1`` under a lock (``record_switch``), with no sequence
    or AUTOINCREMENT counter beside it, and no row is ever deleted (an erasure leaves
    tombstones that keep their ``seq``): its largest ``seq`` is the high-water mark. Were
    the newest row removed anyway (a store restored from an older backup), its number would
    be issued again, so a cursor past ``MAX(seq)`` would miss that next switch: it is
    right that it is refused then too."""
    (last,) = db.fetchone("SELECT COALESCE(MAX(seq), 0) FROM sessions_admin_switch_events")
    return int(last)


def read_switch_events(*, after_seq: int = 0, limit: int = 100) -> list[SwitchEvent]:
    """Events with ``seq > after_seq`` in order: a reader keeps the last seq as its cursor."""
    if limit < 1 or limit > 10_000:
        raise ValueError("limit must be between 1 and 10000")
    rows = db.fetchall(
        "SELECT seq, created_at, new_session_id, previous_session_id, parent_session_id, reset, "
        "reason, session_key, source, origin FROM sessions_admin_switch_events "
        "WHERE seq > %s ORDER BY seq LIMIT %s",
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
            source=r[8],
            origin=r[9],
        )
        for r in rows
    ]
