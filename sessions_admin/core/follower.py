"""Follow the switch-event log: switches made by other processes reach this process's listeners.

A switch made in this process is told to its listeners on commit (``core.events``); one made
elsewhere (the console, another runtime process) is only in the log. A runtime calls
``start_switch_follower(name=...)`` once: a daemon thread polls the log on its own connection
and hands other processes' events to this process's listeners in ``seq`` order (not its own,
already told, nor the ``new`` events of loaded history).

The cursor is saved under ``name`` after each batch is handed over, so a restart resumes
right after it: nothing replayed, nothing lost; a crash between the two tells that batch again
(at least once). A new name starts at the end of the log unless ``from_seq`` says otherwise
(a saved cursor wins). A name belongs to one process: two live followers would both deliver."""

from __future__ import annotations

import logging
import threading

from django.db import connections

from sessions_admin.core import clock, db, events
from sessions_admin.core.errors import InvalidInput

logger = logging.getLogger(__name__)

# Events read per query; a longer backlog is read again at once, without waiting an interval.
BATCH = 500


class SwitchFollower:
    """A running follower: ``last_seq`` is where it is, ``stop()`` ends it."""

    def __init__(self, *, name: str, interval: float, from_seq: int | None) -> None:
        self.name = name
        self.interval = interval
        self.last_seq: int | None = None
        self._from_seq = from_seq
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"sessions-admin-follower-{name}", daemon=True
        )

    def __repr__(self) -> str:
        return f"<SwitchFollower {self.name!r} at seq {self.last_seq}>"

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, *, timeout: float = 10.0) -> None:
        """Stop polling and wait (at most ``timeout`` s) for the thread to close its connection."""
        self._stopping.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _start(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._start_error is not None:
            raise self._start_error

    def _run(self) -> None:
        try:
            try:
                self.last_seq = _open_cursor(name=self.name, from_seq=self._from_seq)
            except BaseException as error:  # noqa: BLE001 - handed to the starting caller
                self._start_error = error
                return
            finally:
                self._ready.set()
            more = False
            while not self._stopping.wait(0 if more else self.interval):
                try:
                    more = self._poll()
                except Exception:
                    more = False
                    logger.exception("switch follower %r failed to read the log; retrying", self)
                    _close_connections()  # a broken connection is reopened on the next poll
        finally:
            _close_connections()

    def _poll(self) -> bool:
        """Hand over the events after the cursor; True if a full batch was read (more may wait)."""
        batch = events.read_switch_events(after_seq=self.last_seq, limit=BATCH)
        if not batch:
            return False
        if self._stopping.is_set():
            return False  # the cursor stays before what was not handed over
        own = events.process_origin()
        foreign = [e for e in batch if e.origin not in (own, events.HISTORY_ORIGIN)]
        if foreign:
            # Off any caller's path: wait for the listeners up to their bound, so the cursor
            # is saved once they have been told (a hung one is not waited for beyond it).
            events.announce_logged_events(foreign, wait=events.listener_timeout())
        self.last_seq = batch[-1].seq
        _save_cursor(name=self.name, last_seq=self.last_seq)
        return len(batch) == BATCH


def start_switch_follower(
    *, name: str, interval: float = 1.0, from_seq: int | None = None
) -> SwitchFollower:
    """Start following the log under ``name``; returns once the cursor is known.

    ``interval``: seconds between polls. ``from_seq``: where a name without a
    saved cursor starts (``0`` for the whole log); None: the current end.
    Raises ``InvalidInput`` for a bad argument, ``ReadOnlyStore`` in read-only mode.
    """
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise InvalidInput("A switch follower needs a name (at most 200 characters).")
    if isinstance(interval, bool) or not isinstance(interval, int | float) or not interval > 0:
        raise InvalidInput("interval must be a positive number of seconds.")
    if interval > 3600:
        raise InvalidInput("interval must be at most 3600 seconds.")
    if from_seq is not None and (
        isinstance(from_seq, bool) or not isinstance(from_seq, int) or from_seq < 0
    ):
        raise InvalidInput("from_seq must be a sequence number, 0 or more.")
    follower = SwitchFollower(name=name, interval=float(interval), from_seq=from_seq)
    follower._start()
    return follower


@db.store_operation
def _open_cursor(*, name: str, from_seq: int | None) -> int:
    row = db.fetchone(
        "SELECT last_seq FROM sessions_admin_switch_cursors WHERE name = %s" + db.for_update(),
        [name],
    )
    if row is not None:
        return int(row[0])
    if from_seq is None:
        # Every event numbered up to here is committed (numbering is serialized until
        # commit), so starting after it misses nothing committed later.
        (start,) = db.fetchone("SELECT COALESCE(MAX(seq), 0) FROM sessions_admin_switch_events")
    else:
        start = from_seq
    _write_cursor(name, int(start))
    return int(start)


@db.store_operation
def _save_cursor(*, name: str, last_seq: int) -> None:
    _write_cursor(name, last_seq)


def _write_cursor(name: str, last_seq: int) -> None:
    db.execute(
        "INSERT INTO sessions_admin_switch_cursors (name, last_seq, updated_at) "
        "VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE SET "
        "last_seq = excluded.last_seq, updated_at = excluded.updated_at",
        [name, int(last_seq), clock.now()],
    )


def _close_connections() -> None:
    """Django connections are per thread: close the ones this thread opened."""
    for connection in connections.all(initialized_only=True):
        connection.close()
