"""The background workers of a dashboard process: delete jobs, and the slug history poller.

Delete jobs: one daemon thread per process, started when a job is created or its progress is
looked at (so a job interrupted by a restart resumes as soon as anyone checks on it); it exits
when no job is left. A waiting worker is woken when a job is created (``ledger/wake.py``) and
polls only as a fallback. Slug history (``core/slug_history.py``): one daemon thread per
dashboard worker, started with it (gunicorn's ``post_worker_init``), for as long as the process
lives. ``manage.py run_jobs`` and ``watch_slug_history`` run the same loops in processes of their
own; the intervals are settings (README, "Configuration").
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import connections

from sessions_admin.core import threads
from sessions_admin.core.slug_history import SlugHistoryPoller
from sessions_admin.ledger import jobs
from sessions_admin.ledger.wake import JobWaiter

logger = logging.getLogger(__name__)
# Longer than a job lease, so a job whose worker died is picked up before this one exits.
IDLE_EXIT_SECONDS = jobs.LEASE_SECONDS + 15
JOBS_THREAD = "delete-jobs"

DEFAULT_JOB_POLL_SECONDS = 5.0


def job_poll_interval() -> float:
    """Seconds between two looks for jobs when no wake comes (a lease left by a dead worker)."""
    return float(getattr(settings, "SESSIONS_ADMIN_JOB_POLL_SECONDS", DEFAULT_JOB_POLL_SECONDS))


def work_until_idle(
    *, idle_exit_seconds: float = IDLE_EXIT_SECONDS, poll_seconds: float | None = None
) -> None:
    poll_seconds = job_poll_interval() if poll_seconds is None else poll_seconds
    # Listening before the first look: a job created between a look and the wait wakes it.
    waiter = JobWaiter()
    logger.info("delete-job worker waiting (wake: %s)", waiter.channel)
    idle_since = time.monotonic()
    try:
        while True:
            try:
                runnable = jobs.runnable_job_ids()
            except Exception:
                # The dashboard's database went away (a restart): look again once it is back.
                logger.exception("delete-job worker: cannot look for jobs")
                connections.close_all()
                runnable = []
            if runnable:
                for job_id in runnable:
                    try:
                        jobs.run_job(job_id=job_id)
                    except Exception:
                        logger.exception("delete job %s failed", job_id)
                        connections.close_all()  # one a restart cut: the next job reconnects
                idle_since = time.monotonic()
                continue
            idle_left = idle_exit_seconds - (time.monotonic() - idle_since)
            if idle_left <= 0:
                break
            waiter.wait(min(poll_seconds, idle_left))
    finally:
        waiter.close()
        connections.close_all()


def ensure_worker_running() -> None:
    threads.ensure_running(JOBS_THREAD, work_until_idle)


# --- slug history -----------------------------------------------------------------------------

DEFAULT_SLUG_HISTORY_SECONDS = 2.0
SLUG_HISTORY_THREAD = "slug-history"


def slug_history_interval() -> float:
    """Seconds between two polls of the runtime's slugs; 0 or less: no polling."""
    return float(
        getattr(settings, "SESSIONS_ADMIN_SLUG_HISTORY_SECONDS", DEFAULT_SLUG_HISTORY_SECONDS)
    )


def poll_slug_history(*, interval: float, stop: threading.Event) -> None:
    """Record slug changes every ``interval`` seconds until ``stop`` is set."""
    poller = SlugHistoryPoller()

    def poll() -> None:
        try:
            poller.poll()
        except Exception:
            # A busy store or a file being replaced: the next poll tries again.
            logger.exception("slug history poll failed")

    threads.repeat(poll, interval=interval, stop=stop)


def ensure_slug_history_running(*, stop: threading.Event | None = None) -> threading.Thread | None:
    """Start this process's slug history poller unless it runs already or polling is off."""
    return threads.ensure_every(
        SLUG_HISTORY_THREAD, slug_history_interval(), poll_slug_history, stop=stop
    )
