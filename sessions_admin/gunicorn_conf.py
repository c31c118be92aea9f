"""gunicorn settings for the dashboard: ``gunicorn -c python:sessions_admin.gunicorn_conf ...``."""

from __future__ import annotations

import os
import sys


def on_starting(server) -> None:
    # gunicorn runs no Django system checks: refuse a store we cannot use, in words, before serving.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sessions_admin.settings")
    import django

    django.setup()
    from sessions_admin.store import attach

    problems = attach.blocking_problems()
    if problems:
        print("The store cannot be used; nothing was written:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        sys.exit(1)


def post_worker_init(worker) -> None:
    # A bulk delete interrupted by a restart resumes as soon as a worker is up.
    from sessions_admin.ledger.worker import ensure_slug_history_running, ensure_worker_running

    ensure_worker_running()
    ensure_slug_history_running()  # from attach on, record slug history (docs/attach.md)
