"""Waking the delete-job workers the moment a job is created, instead of at their next poll.

The channel follows the dashboard's database, where the jobs live. PostgreSQL: LISTEN/NOTIFY on
one channel, sent inside the job's transaction so it is delivered on commit only, to workers on
any host. SQLite (so every worker is on this host): each waiting worker binds its own Unix
datagram socket under ``VAR_DIR/job-wake/``; the creator sends each a byte after its commit and
removes dead workers' sockets. A wake only says "look now": workers still poll
(``SESSIONS_ADMIN_JOB_POLL_SECONDS``) for what no wake announces (an expired lease, a wake lost
with a killed sender), and the lease's conditional UPDATE (``jobs._claim``) still decides who runs
a job, so workers woken together run it once. Operators: README, "Several web hosts".
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import socket
import threading
from pathlib import Path

from django.conf import settings
from django.db import connections, transaction

logger = logging.getLogger(__name__)

CHANNEL = "sessions_admin_jobs"
# Without a wake channel (a socket path too long for AF_UNIX, a refused LISTEN) a worker
# looks this often, as every worker did before they could be woken.
UNWOKEN_POLL_SECONDS = 0.5


def _on_postgresql() -> bool:
    return connections["default"].vendor == "postgresql"


def socket_dir() -> Path:
    return Path(settings.VAR_DIR) / "job-wake"


def announce_job() -> None:
    """Wake every waiting worker once the current transaction on ``default`` commits."""
    if _on_postgresql():
        with connections["default"].cursor() as c:
            c.execute(f"NOTIFY {CHANNEL}")  # queued by PostgreSQL until the commit
    else:
        transaction.on_commit(_wake_local_workers, using="default")


def _wake_local_workers() -> None:
    directory = socket_dir()
    if not directory.is_dir():
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        for path in directory.glob("*.sock"):
            try:
                sender.sendto(b"j", str(path))
            except (ConnectionRefusedError, FileNotFoundError):
                # Its worker died without removing it: nobody will read it again.
                with contextlib.suppress(OSError):
                    path.unlink()
            except OSError as error:
                # A full buffer means that worker has wakes pending already.
                if error.errno not in (errno.EAGAIN, errno.ENOBUFS):
                    logger.warning("could not wake the job worker at %s: %s", path, error)


class JobWaiter:
    """One worker's end of the wake channel; open it before the first look for jobs, so a
    job created between that look and the wait still wakes it."""

    def __init__(self) -> None:
        self._listener = None  # a psycopg connection of its own, in autocommit
        self._listens = False  # on PostgreSQL: a cut listener is opened again
        self._socket: socket.socket | None = None
        self._path: Path | None = None
        self.channel = "poll only"
        try:
            if _on_postgresql():
                self._listen()
            else:
                self._bind()
        except Exception:
            # Without a wake channel the worker still finds jobs by polling.
            logger.exception("delete-job worker: no wake channel, polling only")
            self.close()
            self.channel = "poll only"

    def _listen(self) -> None:
        import psycopg

        params = dict(connections["default"].get_connection_params())
        for django_only in ("cursor_factory", "context", "prepare_threshold"):
            params.pop(django_only, None)
        self._listens = True
        self._listener = psycopg.connect(autocommit=True, **params)
        self._listener.execute(f"LISTEN {CHANNEL}")
        self.channel = f"PostgreSQL LISTEN {CHANNEL}"

    def _listen_again(self) -> bool:
        try:
            self._listen()
        except Exception as error:
            self._listener = None
            logger.warning("delete-job worker: cannot listen yet (%s), polling meanwhile", error)
            return False
        return True

    def _bind(self) -> None:
        directory = socket_dir()
        directory.mkdir(parents=True, exist_ok=True)
        self._path = directory / f"{os.getpid()}-{threading.get_native_id()}.sock"
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()  # left by a dead process whose id this one reuses
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(str(self._path))
        self.channel = f"socket {self._path}"

    def wait(self, timeout: float) -> bool:
        """Block until a wake arrives or ``timeout`` seconds pass; True when woken."""
        if self._listens and self._listener is None and not self._listen_again():
            threading.Event().wait(min(timeout, UNWOKEN_POLL_SECONDS))
            return True  # the server is back or not: a look for jobs tells
        if self._listener is not None:
            try:
                # Notices arriving together come out together; a later one only costs one
                # more look.
                return any(True for _ in self._listener.notifies(timeout=timeout, stop_after=1))
            except Exception:
                # The server closed the connection (a restart): a wake sent meanwhile is
                # lost, so this counts as one, and the worker listens again on a new one.
                logger.warning("delete-job worker: its wake channel was cut, listening again")
                with contextlib.suppress(Exception):
                    self._listener.close()
                self._listener = None
                self._listen_again()
                return True
        if self._socket is not None:
            readable, _, _ = select.select([self._socket], [], [], timeout)
            if not readable:
                return False
            self._socket.setblocking(False)
            try:
                while True:
                    self._socket.recv(16)
            except BlockingIOError:
                pass
            finally:
                self._socket.setblocking(True)
            return True
        threading.Event().wait(min(timeout, UNWOKEN_POLL_SECONDS))
        return False

    def close(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(Exception):
                self._listener.close()
            self._listener = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()
            self._path = None
