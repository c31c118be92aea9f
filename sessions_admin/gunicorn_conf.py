"""gunicorn settings for the dashboard: ``gunicorn -c python:sessions_admin.gunicorn_conf ...``.

Threaded workers (``gthread``, 2 x 16 here): a sync worker serves one connection at a time, so
two clients sending headers slowly held both of the demo's workers for the whole 30 s timeout;
a gthread worker parks an idle connection and keeps serving on its other threads. Many slow
clients can still exhaust the threads: in production put a buffering reverse proxy in front
(README "Running in production"). ``WEB_CONCURRENCY`` sets the workers,
``SESSIONS_ADMIN_THREADS`` the threads per worker; command-line options override both.
gunicorn 25.1+'s control socket lives in the var directory, not the user's shared home
(``gunicornc -s var/gunicorn.ctl``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _positive_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isascii() and value.isdigit() and int(value) > 0 else default


def _var_dir() -> Path:
    # As sessions_admin.settings computes it; gunicorn reads this file before Django is set up.
    default = Path(__file__).resolve().parent.parent / "var"
    return Path(os.environ.get("SESSIONS_ADMIN_VAR_DIR", default)).resolve()


worker_class = "gthread"
workers = _positive_int("WEB_CONCURRENCY", 2)
threads = _positive_int("SESSIONS_ADMIN_THREADS", 16)
# A worker whose main loop is silent this long is restarted; graceful stops wait this long
# for requests in flight; an idle kept-alive connection is closed after keepalive seconds.
timeout = 30
graceful_timeout = 20
keepalive = 5
# gunicorn's defaults, said out loud: request line, header count and header size.
limit_request_line = 4094
limit_request_fields = 100
limit_request_field_size = 8190
# Names gunicorn < 25.1 does not know are ignored.
control_socket = str(_var_dir() / "gunicorn.ctl")
control_socket_mode = 0o600


def _prepare_metrics_dir() -> None:
    """Prometheus metrics (README "Observability"): a scrape reaches one worker, so every
    worker writes its counters to files in this directory and the one answering /metrics sums
    them all (prometheus-client's multiprocess mode). Set in the master before Django (and so
    prometheus-client) is imported, so every worker inherits it; emptied as the server starts,
    its counters starting from zero."""
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(_var_dir() / "prometheus"))
    directory = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink(missing_ok=True)


def on_starting(server) -> None:
    _prepare_metrics_dir()
    # gunicorn runs no Django system checks: refuse a store we cannot use, in words, before serving.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sessions_admin.settings")
    import django

    django.setup()
    from sessions_admin.signin.checks import secret_key_problem
    from sessions_admin.store import attach

    missing_key = secret_key_problem()
    if missing_key:
        print(missing_key, file=sys.stderr)
        sys.exit(1)

    problems = attach.blocking_problems()
    if problems:
        print("The store cannot be used; nothing was written:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        sys.exit(1)

    # SESSIONS_ADMIN_CACHE_URL=db:// on a dashboard database migrated before it was set.
    from sessions_admin.ledger.apps import create_cache_table

    create_cache_table()
    # The workers are forked from this process: they must not share its connections or
    # inherit its PostgreSQL pools, whose threads do not run in them.
    from sessions_admin.core.db import release_connections

    release_connections()


def post_worker_init(worker) -> None:
    # A bulk delete interrupted by a restart resumes as soon as a worker is up.
    from sessions_admin.ledger.schedule import ensure_schedule_running
    from sessions_admin.ledger.worker import ensure_slug_history_running, ensure_worker_running

    ensure_worker_running()
    ensure_slug_history_running()  # from attach on, record slug history (docs/attach.md)
    ensure_schedule_running()  # enabled retention policies run when due

    # The store-wide figures (overview totals, fork groups, health counts, the list's fork
    # marks) are computed now and kept fresh, so no request waits for them (issue 16).
    from sessions_admin.console.figures import ensure_figures_warm

    ensure_figures_warm()
