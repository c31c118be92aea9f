"""A job's batch size, paced by how long its store transactions hold the write lock.

On SQLite a runtime's append waits for whatever transaction holds the one write lock. What a
batch costs under it is mostly the full-text work of its messages (per token, so per byte
more than per message) and its commit: 500 messages held it 25-130 ms on this 2-core machine
(bench/writes.py, issue 30). A fixed size is too small when messages are short (more commits,
more FTS5 segments, a slower job) and too large when they are long (the runtime waits). A
job's ``BatchPace`` measures each of its store transactions (the delete and its commit,
``observe_on_commit``, called by ``steps`` and ``parts``) and sizes the next batch to hold the lock about
``TARGET_LOCK_SECONDS``, between ``MIN_MESSAGES`` and ``MAX_MESSAGES``. On PostgreSQL an append
never waits for the delete's row locks; the pace then bounds each transaction's length the
same way.
"""

from __future__ import annotations

import math
import threading
import time

from django.db import transaction

from sessions_admin.routers import store_alias

TARGET_LOCK_SECONDS = 0.035
MIN_MESSAGES = 100
MAX_MESSAGES = 2000
# A batch this small says little about the cost per message (its fixed costs dominate).
MEASURED_FROM_MESSAGES = 50


class BatchPace:
    """The messages the next batch of a job may hold (``messages``), from what the last ones
    cost under the lock."""

    def __init__(self, messages: int):
        self.messages = messages
        self.stopped = False

    def observe(self, *, messages: int, seconds: float) -> None:
        if messages < MEASURED_FROM_MESSAGES or seconds <= 0:
            return
        wanted = TARGET_LOCK_SECONDS * messages / seconds
        # Halfway there (geometrically): one slow commit (a checkpoint, a busy machine) does
        # not halve the job's pace at once.
        paced = math.sqrt(self.messages * wanted)
        self.messages = round(min(MAX_MESSAGES, max(MIN_MESSAGES, paced)))

    def stop(self) -> None:
        self.stopped = True
        if getattr(_active, "pace", None) is self:
            _active.pace = None


_active = threading.local()


def pace_batches(messages: int) -> BatchPace:
    """For a job's run, until its ``stop()``: its store transactions are measured (``observe``)."""
    pace = BatchPace(messages)
    _active.pace = pace
    return pace


def now() -> float:
    return time.perf_counter()


def observe_on_commit(*, messages: int, since: float) -> None:
    """Called by a delete under the lock (``since``: when its transaction began): once the
    store commits, the time it held the lock is counted if a job paces its batches. Measured
    to the commit, not to the end of what runs after it (the trash entry marked complete in
    the dashboard's database, which holds no store lock)."""
    pace = getattr(_active, "pace", None)
    if pace is None:
        return
    transaction.on_commit(
        lambda: pace.observe(messages=messages, seconds=now() - since), using=store_alias()
    )
