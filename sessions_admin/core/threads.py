"""A process's background threads: each started by name, once, and again once it has ended.

A dashboard process keeps a few daemon threads (the delete-job worker, the slug history
poller, the retention schedule, the figure warmer) and asks for each again and again (a job
page asks for the worker on every poll): ``ensure_running`` starts one only when no thread of
that name is alive in this process. One that ended (its work done, or an escaped exception)
is started anew on the next ask, and so is one a forked child knows of only by its parent's
bookkeeping: a child runs only the thread that forked, the others are not alive there.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from django.db import connections

_lock = threading.Lock()
_threads: dict[str, threading.Thread] = {}


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held the lock at the fork: it never lets go here.
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def start(name: str, target: Callable[..., object], **kwargs: object) -> threading.Thread:
    """A new daemon thread ``name`` running ``target(**kwargs)``, started: one per call."""
    thread = threading.Thread(target=target, kwargs=kwargs, name=name, daemon=True)
    thread.start()
    return thread


def ensure_running(name: str, target: Callable[..., object], **kwargs: object) -> threading.Thread:
    """This process's thread ``name``: the one alive, or a new daemon thread running
    ``target(**kwargs)`` (``kwargs`` go to a new thread only)."""
    with _lock:
        thread = _threads.get(name)
        if thread is None or not thread.is_alive():
            thread = _threads[name] = start(name, target, **kwargs)
        return thread


def ensure_every(
    name: str, interval: float, loop: Callable[..., object], *, stop: threading.Event | None
) -> threading.Thread | None:
    """``ensure_running`` of ``loop(interval=..., stop=...)``, a loop that works every
    ``interval`` seconds until ``stop`` is set; None when ``interval`` is 0 or less (off)."""
    if interval <= 0:
        return None
    return ensure_running(name, loop, interval=interval, stop=stop or threading.Event())


def repeat(work: Callable[[], object], *, interval: float, stop: threading.Event) -> None:
    """``work()`` every ``interval`` seconds until ``stop`` is set; then the thread's database
    connections are closed (a loop that ends for good, or an exception ``work`` let out)."""
    try:
        while not stop.is_set():
            work()
            stop.wait(interval)
    finally:
        connections.close_all()


def started(name: str) -> threading.Thread | None:
    """The thread ``ensure_running`` last started as ``name`` (alive or ended), or None."""
    with _lock:
        return _threads.get(name)
