"""The retention scheduler: starts due retention policy runs, in every dashboard process.

One daemon thread per dashboard worker (gunicorn's ``post_worker_init``) looks for due
policies every ``SESSIONS_ADMIN_RETENTION_CHECK_SECONDS`` (default 60; 0 turns it off)
and starts each through ``ledger.actions.start_due_policies``: a due run is claimed by
one process only (``retention.claim_due``), and becomes a bulk delete job that the job
worker runs like any other. ``manage.py run_jobs --schedule`` runs the same loop in a
process of its own; ``manage.py apply_retention`` runs one pass (for cron).
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import connections

from sessions_admin.core import threads
from sessions_admin.ledger import actions

logger = logging.getLogger(__name__)
DEFAULT_CHECK_SECONDS = 60.0
DEFAULT_INDEX_RETRY_SECONDS = 600.0
SCHEDULE_THREAD = "retention-schedule"


def check_interval() -> float:
    return float(getattr(settings, "SESSIONS_ADMIN_RETENTION_CHECK_SECONDS", DEFAULT_CHECK_SECONDS))


def index_merge_interval() -> float:
    return float(
        getattr(settings, "SESSIONS_ADMIN_ERASURE_INDEX_RETRY_SECONDS", DEFAULT_INDEX_RETRY_SECONDS)
    )


def run_schedule(*, interval: float, stop: threading.Event) -> None:
    """Start due retention runs every ``interval`` seconds until ``stop`` is set, and finish
    erasure requests whose worker died mid-erasure (a kill, a restart) or that nobody started.

    Every ``SESSIONS_ADMIN_ERASURE_INDEX_RETRY_SECONDS`` (default 600) it also retries the
    search index merge of erasures a busy runtime kept from finishing it (each try takes up
    to 30 s an index, in short steps that never hold the runtime's writers for long), then
    their file rewrite (SQLite: a VACUUM started only after a quiet second, waiting at most
    250 ms for the write lock; PostgreSQL: only with ``SESSIONS_ADMIN_ERASURE_REWRITE_AUTO``).
    """
    next_index_merge = 0.0

    def one_pass() -> None:
        nonlocal next_index_merge
        _logged("retention schedule check", actions.start_due_policies)
        try:
            actions.settle_deletes_and_restores()
        finally:
            connections.close_all()
        _logged("resuming interrupted erasures", actions.resume_interrupted_erasures)
        if time.monotonic() >= next_index_merge:
            next_index_merge = time.monotonic() + index_merge_interval()
            _logged("an erasure's search index merge", actions.finish_erasure_index_merges)
            _logged("an erasure's file rewrite", _rewrite_if_automatic)

    threads.repeat(one_pass, interval=interval, stop=stop)


def _logged(what: str, step) -> None:
    """One step of a pass: a failure is logged and the next pass tries again."""
    try:
        step()
    except Exception:
        logger.exception("%s failed", what)
    finally:
        connections.close_all()


def _rewrite_if_automatic() -> None:
    if actions.rewrites_automatically():
        actions.finish_erasure_rewrites(automatic=True)


def ensure_schedule_running(*, stop: threading.Event | None = None) -> threading.Thread | None:
    return threads.ensure_every(SCHEDULE_THREAD, check_interval(), run_schedule, stop=stop)
