"""The background worker that runs delete jobs inside a dashboard process.

One daemon thread per process, started when a job is created or its progress
is looked at (so a job interrupted by a restart resumes as soon as anyone
checks on it); it exits when no job is left. ``manage.py run_jobs`` runs the
same loop in a process of its own.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import connections

from sessions_admin.core import jobs

logger = logging.getLogger(__name__)
# Longer than a job lease, so a job whose worker died is picked up before this one exits.
IDLE_EXIT_SECONDS = jobs.LEASE_SECONDS + 15

_lock = threading.Lock()
_thread: threading.Thread | None = None


def work_until_idle(*, idle_exit_seconds: float = IDLE_EXIT_SECONDS) -> None:
    idle_since = time.monotonic()
    try:
        while time.monotonic() - idle_since < idle_exit_seconds:
            runnable = jobs.runnable_job_ids()
            if not runnable:
                time.sleep(0.5)
                continue
            for job_id in runnable:
                try:
                    jobs.run_job(job_id=job_id)
                except Exception:
                    logger.exception("delete job %s failed", job_id)
            idle_since = time.monotonic()
    finally:
        connections.close_all()


def ensure_worker_running() -> None:
    global _thread
    with _lock:
        if _thread is not None and _thread.is_alive():
            return
        _thread = threading.Thread(target=work_until_idle, name="delete-jobs", daemon=True)
        _thread.start()
