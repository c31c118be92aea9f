"""gunicorn settings for the dashboard: ``gunicorn -c python:sessions_admin.gunicorn_conf ...``."""

from __future__ import annotations


def post_worker_init(worker) -> None:
    # A bulk delete interrupted by a restart resumes as soon as a worker is up.
    from sessions_admin.ledger.worker import ensure_worker_running

    ensure_worker_running()
