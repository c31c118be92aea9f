"""SQLite: a long delete merges the full-text indexes in short steps of its own, between its
batches, instead of inside their commits.

Deleting a message writes delete markers into ``messages_fts`` and ``messages_fts_trigram``;
FTS5 writes them as a new segment when the batch commits and, with its default ``automerge``
(4), merges segments level by level right there, under the write lock: a commit that cascades
into a large level held the runtime's appends for over a second (bench/writes.py, issue 30).
During a job, ``automerge`` is 0 and after each store commit of its deletes (a batch, a part
of a large session) one positive ``'merge'`` of ``MERGE_STEP_PAGES`` pages runs on each index,
its own store transaction: the same merges the default would do (a level with ``usermerge``,
4, segments), in bounded steps the runtime's writes can come between. When the job
stops, ``automerge`` is set back to FTS5's default (which Hermes never changes) and the merge
steps run until none has work left. A job killed meanwhile leaves ``automerge`` at 0: the next
job run sets it back when it stops, and FTS5's ``crisismerge`` (16 segments on a level) still
bounds the index meanwhile. PostgreSQL has no such index: nothing to do.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import connections

from sessions_admin.core.db import store_operation
from sessions_admin.core.schema import existing_tables
from sessions_admin.routers import store_alias

logger = logging.getLogger(__name__)

FTS_TABLES = ("messages_fts", "messages_fts_trigram")
AUTOMERGE_DEFAULT = 4  # FTS5's own default; Hermes's SessionDB never sets it
# Pages one merge step writes, in one store transaction of its own. One step of 200 pages per
# index after each commit kept up with a job's deletes and, beside main's merges in the commit,
# kept its rate with a lower append p99; four steps of 100 cost rate (docs/benchmarks.md).
MERGE_STEP_PAGES = 200
# Steps per index after each commit, at most.
STEPS_AFTER_BATCH = 1
# When the job stops: steps until no merge is left, within this many seconds.
FINAL_MERGE_SECONDS = 30.0


def _tables() -> tuple[str, ...]:
    if connections[store_alias()].vendor != "sqlite":
        return ()
    present = existing_tables(store_alias())
    return tuple(t for t in FTS_TABLES if t in present)


@store_operation
def _set_automerge(tables: tuple[str, ...], value: int) -> None:
    with connections[store_alias()].cursor() as cursor:
        for fts in tables:
            cursor.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('automerge', %s)", [value])


@store_operation
def _merge_step(fts: str, pages: int) -> bool:
    """One positive ``'merge'`` of ``pages`` pages on ``fts``; whether it did any work (FTS5
    changes fewer than two rows when there was nothing to merge)."""
    raw = connections[store_alias()].connection
    before = raw.total_changes
    with connections[store_alias()].cursor() as cursor:
        cursor.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('merge', %s)", [pages])
    return raw.total_changes - before >= 2


class DeferredMerges:
    """A job's deferral, from ``defer_merges()`` to ``stop()``: after each store commit of its
    deletes (a batch, a part of a large session), ``after_commit`` merges a little of each
    index, in this thread (the job's)."""

    def __init__(self, tables: tuple[str, ...]):
        self.tables = tables
        self.stopped = False

    def step(self, *, steps: int = STEPS_AFTER_BATCH) -> None:
        try:
            for fts in self.tables:
                for _ in range(steps):
                    if not _merge_step(fts, MERGE_STEP_PAGES):
                        break
        except Exception:
            # The delete before it committed; a merge left undone now is done by a later step.
            logger.warning("a full-text merge step failed; merging later", exc_info=True)

    def stop(self, *, seconds: float = FINAL_MERGE_SECONDS) -> None:
        """``automerge`` back to the default, then the merges left, in steps."""
        if self.stopped:
            return
        self.stopped = True
        if getattr(_active, "merges", None) is self:
            _active.merges = None
        if not self.tables:
            return
        try:
            _set_automerge(self.tables, AUTOMERGE_DEFAULT)
            deadline = time.monotonic() + seconds
            for fts in self.tables:
                while _merge_step(fts, MERGE_STEP_PAGES) and time.monotonic() < deadline:
                    pass
        except Exception:
            # The store failed (what stopped the job, likely): the job's next run sets it back.
            logger.exception("the full-text indexes' automerge could not be set back")


_active = threading.local()


def defer_merges() -> DeferredMerges:
    """For a job's run, until its ``stop()``: ``automerge`` 0, merges in steps after each of
    its store commits (``after_commit``)."""
    try:
        merges = DeferredMerges(_tables())
        if merges.tables:
            _set_automerge(merges.tables, 0)
    except Exception:
        # The store is busy or failing: the job runs with FTS5's own merges (and meets the
        # failure, if any, in its first batch, which records it).
        logger.warning("full-text merges not deferred for this job", exc_info=True)
        merges = DeferredMerges(())
    _active.merges = merges
    return merges


def after_commit() -> None:
    """Called by a delete after each store commit: a merge step if a deferral is active."""
    merges = getattr(_active, "merges", None)
    if merges is not None and merges.tables:
        merges.step()
