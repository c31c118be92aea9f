"""What a load balancer and Prometheus call, without signing in (README "Observability").

``/healthz``: the process answers (no database, nothing else): a liveness probe, restart the
process when it fails. ``/readyz``: this process can serve now: the dashboard's database
answers and has every migration applied, and the store answers and is initialised
(``store.readiness``); 503 otherwise: take it out of rotation, do not restart it. Each costs a
query or two: migrations are read from disk only until they are once found applied (a process
never runs older code than its database). The body says which check failed, not why (the
reason, which can name hosts and files, goes to the log with the request's id). ``/metrics``:
Prometheus text, for the token or the networks ``console.metrics`` names.
"""

from __future__ import annotations

import logging

from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST

from sessions_admin.console import metrics
from sessions_admin.store.readiness import store_problems

logger = logging.getLogger(__name__)

DASHBOARD = "default"
# Set once this process found every migration applied.
_migrated = False


def _no_store(response: HttpResponse) -> HttpResponse:
    response["Cache-Control"] = "no-store"
    return response


@login_not_required
@require_safe
def healthz(request):
    return _no_store(HttpResponse("ok\n", content_type="text/plain; charset=utf-8"))


def _dashboard_problem() -> tuple[str, str] | None:
    """(check, why) of the dashboard database's failure, or None."""
    global _migrated
    connection = connections[DASHBOARD]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        if _migrated:
            return None
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as error:
        return "dashboard_database", f"{type(error).__name__}: {error}".strip()
    if pending:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in pending[:5])
        return "migrations", f"{len(pending)} not applied ({names}); run `manage.py migrate`"
    _migrated = True
    return None


@login_not_required
@require_safe
def readyz(request):
    checks = {"dashboard_database": "ok", "migrations": "ok", "store": "ok"}
    reasons = []
    problem = _dashboard_problem()
    if problem:
        check, why = problem
        checks[check] = "failed"
        if check == "dashboard_database":
            checks["migrations"] = "unknown"
        reasons.append(f"{check}: {why}")
    for why in store_problems():
        checks["store"] = "failed"
        reasons.append(f"store: {why}")
    ready = not reasons
    if not ready:
        logger.warning("not ready: %s", "; ".join(reasons))
    return _no_store(JsonResponse({"ready": ready, "checks": checks}, status=200 if ready else 503))


@login_not_required
@require_safe
def metrics_view(request):
    refusal = metrics.metrics_refusal(request)
    if refusal is not None:
        return _no_store(refusal)
    return _no_store(HttpResponse(metrics.exposition(), content_type=CONTENT_TYPE_LATEST))
