"""How many long-lived requests (switch streams, long polls that wait) one worker serves at once.

Each holds one of the worker's gunicorn threads for up to ``SESSIONS_ADMIN_SWITCH_STREAM_SECONDS``
(``switches``), and a thread held is a thread no other request gets: ten streams of one viewer
token once took every thread of a worker, and an admin's ``GET /me`` waited for them. So each
worker process counts the ones it serves, per caller (``SESSIONS_ADMIN_LONG_REQUESTS_PER_TOKEN``,
2 by default) and in all (``SESSIONS_ADMIN_LONG_REQUESTS_PER_WORKER``, a quarter of its
threads by default): one more is answered 429 with ``Retry-After`` at once, holding no thread.
Runtime tokens and operators (viewer, support, admin tokens and signed-in browsers) have a
pool each, of that size: the switch feed is what runtimes follow their sessions by, and a
viewer holding streams must not shut them out of it (nor a runtime the operators).
The counts live in the process (a slot is taken and given back by the thread that serves the
request), so nothing outlives a worker that is restarted.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator

from django.conf import settings

from sessions_admin.api.problems import Problem

# What a refused client waits before trying again: a stream or a long poll ends within the
# server's bound (15 s by default), usually sooner.
RETRY_AFTER_SECONDS = 5

_lock = threading.Lock()
# (pool, caller) -> its long-lived requests open in this process
_open: Counter[tuple[str, str]] = Counter()
RUNTIMES, OPERATORS = "runtimes", "operators"


def per_token() -> int:
    return max(1, int(getattr(settings, "SESSIONS_ADMIN_LONG_REQUESTS_PER_TOKEN", 2)))


def per_worker() -> int:
    return max(1, int(getattr(settings, "SESSIONS_ADMIN_LONG_REQUESTS_PER_WORKER", 4)))


def open_count() -> int:
    with _lock:
        return sum(_open.values())


class Slot:
    """One long-lived request's place; ``release`` gives it back (once, whoever calls it)."""

    def __init__(self, key: tuple[str, str]):
        self.key = key
        self._held = True

    def release(self) -> None:
        with _lock:
            if not self._held:
                return
            self._held = False
            _open[self.key] -= 1
            if _open[self.key] <= 0:
                del _open[self.key]


def take(caller: str, what: str, *, pool: str = OPERATORS) -> Slot:
    """A slot for one more long-lived request of ``caller`` in ``pool`` (``RUNTIMES`` for a
    runtime token), or the 429 problem to answer."""
    key = (pool, caller)
    with _lock:
        mine = _open[key]
        total = sum(n for (in_pool, _), n in _open.items() if in_pool == pool)
        if mine >= per_token():
            refusal = (
                f"This token already has {mine} {what} open (at most {per_token()} per token "
                "at once, SESSIONS_ADMIN_LONG_REQUESTS_PER_TOKEN): close one, or retry later."
            )
        elif total >= per_worker():
            refusal = (
                f"The server is serving its most long-lived requests of {pool} at once "
                f"({per_worker()}, SESSIONS_ADMIN_LONG_REQUESTS_PER_WORKER): retry later."
            )
        else:
            _open[key] += 1
            return Slot(key)
        if not _open[key]:
            del _open[key]
    raise Problem(
        429,
        "throttled",
        "Too many requests",
        refusal,
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


class HeldWhileStreaming:
    """A streaming body that gives its slot back when it ends, fails or is closed (the WSGI
    server closes it when the client goes away, started or not)."""

    def __init__(self, blocks: Iterable[bytes], slot: Slot):
        self._blocks = iter(blocks)
        self._slot = slot

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._blocks)
        except BaseException:
            self._slot.release()
            raise

    def close(self) -> None:
        try:
            close = getattr(self._blocks, "close", None)
            if close is not None:
                close()
        finally:
            self._slot.release()
