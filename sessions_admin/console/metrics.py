"""Prometheus metrics for ``/metrics`` (prometheus-client; README "Observability").

Two kinds, kept apart on purpose:

* Counted as they happen, in the process they happen in: request latency and count by view
  (``RequestLogMiddleware`` times every request once), and the store's lock waits (every
  busy retry of ``core.db.store_operation``, through ``core.db.BUSY_OBSERVERS``). gunicorn
  runs several worker processes and a scrape reaches one of them, so under gunicorn these use
  prometheus-client's multiprocess mode: each process writes its values to files in
  ``PROMETHEUS_MULTIPROC_DIR`` (``gunicorn_conf.py`` sets it under the var directory and
  empties it when the server starts) and whichever worker answers sums every process's files.
  Per-process metrics would make each scrape show one random worker's counts, going back and
  forth between them. Without that variable (``runserver``, tests) they are this process's.
* Read when scraped, from what every process and host shares (``DashboardState``): bulk delete
  and retention jobs by state and their sessions (progress, failures) from the dashboard's
  database, erasures by state, retention policies, and the age of each store-wide figure in the
  shared cache (``store.cached.figure_states``). These are right whichever worker, or host,
  answers, and need no bookkeeping in the job worker's thread. A part whose database does not
  answer is left out and ``sessions_admin_metrics_part_up`` says which.

``/metrics`` answers only a caller with the bearer token ``SESSIONS_ADMIN_METRICS_TOKEN`` or
from an address in ``SESSIONS_ADMIN_METRICS_NETWORKS``; anyone else gets 401 (a token is set) or
403, never the sign-in page (``metrics_refusal``).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import time

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Count, Max, Q, Sum
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from sessions_admin.core import db as core_db
from sessions_admin.ledger.context import client_address
from sessions_admin.ledger.models import DeleteJob, ErasureRequest, RetentionPolicy
from sessions_admin.store import cached

logger = logging.getLogger(__name__)

# Decided with prometheus-client's own choice, at its import: values go to files only when
# the variable was set before then (gunicorn_conf.py sets it before any worker starts).
MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))

# This process's metrics; a scrape reads them (or, in multiprocess mode, every process's files).
OWN = CollectorRegistry()

REQUEST_SECONDS = Histogram(
    "sessions_admin_request_duration_seconds",
    "Time from receiving a request to its answer, by view (URL name) and method.",
    ["view", "method"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=OWN,
)
REQUESTS = Counter(
    "sessions_admin_requests",
    "Requests answered, by view (URL name), method and status code.",
    ["view", "method", "status"],
    registry=OWN,
)
STORE_BUSY_RETRIES = Counter(
    "sessions_admin_store_busy_retries",
    "Times a store operation found the store locked (busy) and waited to try again.",
    ["operation"],
    registry=OWN,
)
STORE_BUSY_WAIT = Counter(
    "sessions_admin_store_busy_wait_seconds",
    "Seconds store operations slept waiting for a busy store's lock.",
    ["operation"],
    registry=OWN,
)
STORE_BUSY_GAVE_UP = Counter(
    "sessions_admin_store_busy_gave_up",
    "Store operations that gave up on a busy store (StoreBusy: nothing changed).",
    ["operation"],
    registry=OWN,
)


def count_request(*, view: str, method: str, status: int, seconds: float) -> None:
    REQUEST_SECONDS.labels(view, method).observe(seconds)
    REQUESTS.labels(view, method, str(status)).inc()


def count_busy_wait(operation: str, pause: float | None) -> None:
    if pause is None:
        STORE_BUSY_GAVE_UP.labels(operation).inc()
    else:
        STORE_BUSY_RETRIES.labels(operation).inc()
        STORE_BUSY_WAIT.labels(operation).inc(pause)


def watch_store_busy() -> None:
    """Count this process's busy-store waits (once, however often it is called)."""
    if count_busy_wait not in core_db.BUSY_OBSERVERS:
        core_db.BUSY_OBSERVERS.append(count_busy_wait)


# --- read when scraped ----------------------------------------------------------------------

JOB_KINDS = {"bulk_delete": Q(policy__isnull=True), "retention": Q(policy__isnull=False)}
OPEN_JOB_STATES = (DeleteJob.PENDING, DeleteJob.RUNNING)


def _job_families() -> list[GaugeMetricFamily]:
    jobs = GaugeMetricFamily(
        "sessions_admin_jobs",
        "Delete jobs in the dashboard's database by kind (bulk delete, retention run) and state.",
        labels=["kind", "state"],
    )
    sessions = GaugeMetricFamily(
        "sessions_admin_job_sessions",
        "Sessions of delete jobs by kind and outcome: deleted and skipped so far (all jobs), "
        "remaining (pending and running jobs).",
        labels=["kind", "outcome"],
    )
    messages = GaugeMetricFamily(
        "sessions_admin_job_messages_deleted",
        "Messages deleted by delete jobs, by kind.",
        labels=["kind"],
    )
    for kind, which in JOB_KINDS.items():
        by_state = {
            row["state"]: row
            for row in DeleteJob.objects.filter(which)
            .values("state")
            .annotate(
                n=Count("id"),
                done_sum=Sum("done"),
                skipped_sum=Sum("skipped"),
                total_sum=Sum("total"),
                messages_sum=Sum("deleted_messages"),
            )
            .order_by()
        }
        states = [
            DeleteJob.PENDING,
            DeleteJob.RUNNING,
            DeleteJob.DONE,
            DeleteJob.FAILED,
            DeleteJob.CANCELLED,
        ]
        for state in [*states, *sorted(set(by_state) - set(states))]:
            jobs.add_metric([kind, state], by_state.get(state, {}).get("n", 0))
        rows = list(by_state.values())
        deleted = sum(row["done_sum"] or 0 for row in rows)
        skipped = sum(row["skipped_sum"] or 0 for row in rows)
        remaining = sum(
            max(0, (row["total_sum"] or 0) - (row["done_sum"] or 0) - (row["skipped_sum"] or 0))
            for state, row in by_state.items()
            if state in OPEN_JOB_STATES
        )
        sessions.add_metric([kind, "deleted"], deleted)
        sessions.add_metric([kind, "skipped"], skipped)
        sessions.add_metric([kind, "remaining"], remaining)
        messages.add_metric([kind], sum(row["messages_sum"] or 0 for row in rows))
    return [jobs, sessions, messages]


def _erasure_families() -> list[GaugeMetricFamily]:
    erasures = GaugeMetricFamily(
        "sessions_admin_erasures", "Erasure requests by state.", labels=["state"]
    )
    counted = dict(ErasureRequest.objects.values_list("state").annotate(n=Count("id")).order_by())
    states = [
        ErasureRequest.PENDING,
        ErasureRequest.RUNNING,
        ErasureRequest.DONE,
        ErasureRequest.FAILED,
    ]
    for state in [*states, *sorted(set(counted) - set(states))]:
        erasures.add_metric([state], counted.get(state, 0))
    finished = ErasureRequest.objects.filter(state=ErasureRequest.DONE).aggregate(
        last=Max("finished_at")
    )["last"]
    last = GaugeMetricFamily(
        "sessions_admin_erasure_last_done_timestamp_seconds",
        "When the last erasure finished (Unix time; 0: none yet).",
    )
    last.add_metric([], finished.timestamp() if finished else 0)
    return [erasures, last]


def _retention_families() -> list[GaugeMetricFamily]:
    now = time.time()
    policies = GaugeMetricFamily(
        "sessions_admin_retention_policies", "Retention policies by enabled.", labels=["enabled"]
    )
    overdue = GaugeMetricFamily(
        "sessions_admin_retention_policies_overdue",
        "Enabled retention policies whose next run is more than an hour late.",
    )
    last_run = GaugeMetricFamily(
        "sessions_admin_retention_last_run_timestamp_seconds",
        "When a retention policy last ran (Unix time; 0: never).",
    )
    rows = list(RetentionPolicy.objects.values_list("enabled", "next_run_at", "last_run_at"))
    policies.add_metric(["true"], sum(1 for enabled, _, _ in rows if enabled))
    policies.add_metric(["false"], sum(1 for enabled, _, _ in rows if not enabled))
    overdue.add_metric(
        [],
        sum(
            1
            for enabled, next_run, _ in rows
            if enabled and next_run is not None and next_run.timestamp() < now - 3600
        ),
    )
    runs = [last for _, _, last in rows if last is not None]
    last_run.add_metric([], max(runs).timestamp() if runs else 0)
    return [policies, overdue, last_run]


def _figure_families() -> list[GaugeMetricFamily]:
    age = GaugeMetricFamily(
        "sessions_admin_figure_age_seconds",
        "Age of each store-wide figure in the shared cache (since its computation started); "
        "absent while none is cached.",
        labels=["figure"],
    )
    stale = GaugeMetricFamily(
        "sessions_admin_figure_stale",
        "1 when the cached figure predates an operator's last change (recomputed before use).",
        labels=["figure"],
    )
    failing = GaugeMetricFamily(
        "sessions_admin_figure_failing",
        "1 when the figure's last background computation failed.",
        labels=["figure"],
    )
    for state in cached.figure_states():
        if state.age_seconds is not None:
            age.add_metric([state.name], state.age_seconds)
        stale.add_metric([state.name], int(state.stale))
        failing.add_metric([state.name], int(state.failing))
    return [age, stale, failing]


PARTS = {
    "jobs": _job_families,
    "erasures": _erasure_families,
    "retention": _retention_families,
    "figures": _figure_families,
}


class DashboardState:
    """The scrape-time metrics: each part read now, one failing part leaving the rest."""

    def collect(self):
        up = GaugeMetricFamily(
            "sessions_admin_metrics_part_up",
            "1 when this part of the metrics could be read for this scrape, else 0.",
            labels=["part"],
        )
        for part, read in PARTS.items():
            try:
                families = read()
            except (DatabaseError, OSError) as error:
                logger.warning("metrics: could not read %s: %s", part, error)
                up.add_metric([part], 0)
                continue
            up.add_metric([part], 1)
            yield from families
        yield up


def exposition() -> bytes:
    """The text a scrape gets: every process's counters (or this one's), then the state."""
    registry = CollectorRegistry()
    if MULTIPROCESS:
        MultiProcessCollector(registry)
    else:
        registry.register(OWN)
    registry.register(DashboardState())
    return generate_latest(registry)


# --- who may scrape ---------------------------------------------------------------------------


def _in_networks(address: str | None) -> bool:
    if not address:
        return False
    ip = ipaddress.ip_address(address)
    return any(ip in network for network in settings.SESSIONS_ADMIN_METRICS_NETWORKS)


def metrics_refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the caller may read the metrics; else the refusal (401 or 403, one line)."""
    if _in_networks(client_address(request)):
        return None
    token = settings.SESSIONS_ADMIN_METRICS_TOKEN
    if token:
        scheme, _, given = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), token.encode()
        ):
            return None
        response = HttpResponse(
            "The metrics need the bearer token (SESSIONS_ADMIN_METRICS_TOKEN).\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(
        "The metrics are not served to this address: set SESSIONS_ADMIN_METRICS_TOKEN or "
        "SESSIONS_ADMIN_METRICS_NETWORKS.\n",
        status=403,
        content_type="text/plain; charset=utf-8",
    )
