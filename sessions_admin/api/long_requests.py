"""How many long-lived requests (switch streams, long polls that wait) one worker serves at once.

Each holds one of the worker's gunicorn threads for up to ``SESSIONS_ADMIN_SWITCH_STREAM_SECONDS``
(``switches``), and a thread held is a thread no other request gets: ten streams of one viewer
token once took every thread of a worker, and an admin's ``GET /me`` waited for them. So each
worker process counts the ones it serves, per caller (``SESSIONS_ADMIN_LONG_REQUESTS_PER_TOKEN``,
2 by default) and in all (``SESSIONS_ADMIN_LONG_REQUESTS_PER_WORKER``, a quarter of its
threads by default): one more is answered 429 with ``Retry-After`` at once, holding no thread.
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
_open: Counter[str] = Counter()  # caller -> its long-lived requests open in this process


def per_token() -> int:
    return max(1, int(getattr(settings, "SESSIONS_ADMIN_LONG_REQUESTS_PER_TOKEN", 2)))


def per_worker() -> int:
    return max(1, int(getattr(settings, "SESSIONS_ADMIN_LONG_REQUESTS_PER_WORKER", 4)))


def open_count() -> int:
    with _lock:
        return sum(_open.values())


class Slot:
    """One long-lived request's place; ``release`` gives it back (once, whoever calls it)."""

    def __init__(self, caller: str):
        self.caller = caller
        self._held = True

    def release(self) -> None:
        with _lock:
            if not self._held:
                return
            self._held = False
            _open[self.caller] -= 1
            if _open[self.caller] <= 0:
                del _open[self.caller]


def take(caller: str, what: str) -> Slot:
    """A slot for one more long-lived request of ``caller``, or the 429 problem to answer."""
    with _lock:
        mine, total = _open[caller], sum(_open.values())
        if mine >= per_token():
            refusal = (
                f"This token already has {mine} {what} open (at most {per_token()} per token "
                "at once, SESSIONS_ADMIN_LONG_REQUESTS_PER_TOKEN): close one, or retry later."
            )
        elif total >= per_worker():
            refusal = (
                f"The server is serving its most long-lived requests at once ({per_worker()}, "
                "SESSIONS_ADMIN_LONG_REQUESTS_PER_WORKER): retry later."
            )
        else:
            _open[caller] += 1
            return Slot(caller)
        if not _open[caller]:
            del _open[caller]
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
