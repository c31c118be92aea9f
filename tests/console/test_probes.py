"""/healthz, /readyz and /metrics: what a load balancer and Prometheus get, signed out.

Each readiness failure is a real one: the dashboard's database or the store pointed at a
server or file that is not there, a migration recorded as not applied, a table ``init_store``
adds taken away. Metrics are read as Prometheus would, after real work (a bulk delete job, a
store held locked by another connection, a figure computed).
"""

from __future__ import annotations

import ipaddress
import re
import sqlite3
import threading
import time
from contextlib import contextmanager

import psycopg
import pytest
from django.db import connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.test import Client
from django.test.utils import CaptureQueriesContext

from sessions_admin import core
from sessions_admin.core import db as core_db
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import DeleteJob
from sessions_admin.routers import store_alias
from sessions_admin.security import content_security_policy
from sessions_admin.store import cached
from tests.builders import old_sessions
from tests.helpers import session_ids

TOKEN = "metrics-token-" + "x" * 20

pytestmark = pytest.mark.usefixtures("no_worker")


@contextmanager
def _pointed_away(alias: str):
    """The alias's server or file is not there (a stopped PostgreSQL, a missing disk)."""
    connection = connections[alias]
    _closed_for_good(connection)
    saved = dict(connection.settings_dict)
    if connection.vendor == "sqlite":
        connection.settings_dict["NAME"] = "/nonexistent-sessions-admin-dir/gone/state.db"
    else:
        from sessions_admin.devtools import free_port

        connection.settings_dict.update(HOST="127.0.0.1", PORT=str(free_port()))
    try:
        yield
    finally:
        _closed_for_good(connection)
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


def _closed_for_good(connection) -> None:
    """Closed, and its pool too: a pool keeps the server it was made for (PostgreSQL)."""
    connection.close()
    if getattr(connection, "pool", None) is not None:
        connection.close_pool()


@contextmanager
def _table_taken_away(table: str):
    """A store where ``init_store`` has not added ``table`` yet."""
    quote = connections[store_alias()].ops.quote_name
    core_db.execute(f"ALTER TABLE {quote(table)} RENAME TO {quote(table + '_away')}")
    try:
        yield
    finally:
        core_db.execute(f"ALTER TABLE {quote(table + '_away')} RENAME TO {quote(table)}")


def _ready(client: Client) -> tuple[int, dict]:
    response = client.get("/readyz")
    assert response["Content-Type"].startswith("application/json")
    return response.status_code, response.json()


def test_healthz_answers_signed_out_without_touching_a_database():
    client = Client()
    with (
        CaptureQueriesContext(connections["default"]) as dashboard,
        CaptureQueriesContext(connections[store_alias()]) as store,
    ):
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.content == b"ok\n"
    assert "no-store" in response["Cache-Control"]
    assert (len(dashboard), len(store)) == (0, 0)


def test_healthz_answers_while_both_databases_are_down():
    with _pointed_away("default"), _pointed_away(store_alias()):
        assert Client().get("/healthz").status_code == 200


def test_readyz_is_200_when_the_databases_answer_and_the_store_is_initialised():
    status, body = _ready(Client())
    assert (status, body) == (
        200,
        {"ready": True, "checks": {"dashboard_database": "ok", "migrations": "ok", "store": "ok"}},
    )


def test_readyz_is_503_while_the_dashboard_database_is_down():
    with _pointed_away("default"):
        status, body = _ready(Client())
    assert status == 503
    assert body["checks"]["dashboard_database"] == "failed"
    assert body["checks"]["store"] == "ok"
    # Back up: ready again, without a restart.
    assert _ready(Client())[0] == 200


def test_readyz_is_503_while_the_store_is_down_and_names_no_host_or_file():
    with _pointed_away(store_alias()):
        response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {
        "dashboard_database": "ok",
        "migrations": "ok",
        "store": "failed",
    }
    assert b"nonexistent" not in response.content and b"127.0.0.1" not in response.content


def test_readyz_is_503_while_the_store_is_not_initialised():
    with _table_taken_away("sessions_admin_idempotency"):
        status, body = _ready(Client())
    assert (status, body["checks"]["store"]) == (503, "failed")
    assert _ready(Client())[0] == 200


def test_readyz_is_503_while_a_migration_is_not_applied(monkeypatch):
    # Found applied once, a process does not look again: this test is a process that has not.
    monkeypatch.setattr("sessions_admin.console.views.probes._migrated", False)
    recorded = MigrationRecorder(connections["default"]).migration_qs
    leaf = next(
        name
        for app, name in MigrationLoader(connections["default"]).graph.leaf_nodes()
        if app == "ledger"
    )
    last = recorded.get(app="ledger", name=leaf)
    saved = {"id": last.id, "app": last.app, "name": last.name, "applied": last.applied}
    last.delete()  # as a deploy of newer code finds the database before `migrate`
    try:
        status, body = _ready(Client())
    finally:
        recorded.create(**saved)
    assert (status, body["checks"]["migrations"]) == (503, "failed")
    assert _ready(Client())[0] == 200


def test_probes_refuse_other_methods_and_answer_head():
    client = Client()
    for url in ("/healthz", "/readyz", "/metrics"):
        assert client.post(url).status_code == 405, url
    head = client.head("/readyz")
    assert (head.status_code, head.content) == (200, b"")


def test_probes_carry_the_security_headers_and_are_not_redirected_to_https(settings):
    settings.SECURE_SSL_REDIRECT = True  # SESSIONS_ADMIN_HTTPS=1, probed on the plain port
    client = Client()
    assert client.get("/sessions/").status_code == 301
    for url, status in (("/healthz", 200), ("/readyz", 200), ("/metrics", 403)):
        response = client.get(url)
        assert response.status_code == status, url
        assert response["Content-Security-Policy"] == content_security_policy(), url
        assert response["X-Content-Type-Options"] == "nosniff", url
        assert "no-store" in response["Cache-Control"], url


# --- /metrics: who may read it ----------------------------------------------------------------


def test_metrics_are_refused_without_a_configured_token_or_network(admin_client):
    for client in (Client(), admin_client):
        response = client.get("/metrics")
        assert response.status_code == 403
        assert "Location" not in response  # never the sign-in page
        assert b"sessions_admin_" not in response.content


def test_metrics_need_the_bearer_token_when_one_is_set(settings):
    settings.SESSIONS_ADMIN_METRICS_TOKEN = TOKEN
    client = Client()
    for header in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong"}, {"HTTP_AUTHORIZATION": TOKEN}):
        response = client.get("/metrics", **header)
        assert response.status_code == 401, header
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert b"sessions_admin_" not in response.content
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")


def test_metrics_are_served_to_a_listed_network_only(settings):
    settings.SESSIONS_ADMIN_METRICS_NETWORKS = [ipaddress.ip_network("10.0.0.0/8")]
    assert Client(REMOTE_ADDR="10.1.2.3").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="192.0.2.7").get("/metrics").status_code == 403


# --- /metrics: what it says -------------------------------------------------------------------


def _scrape(settings) -> dict[str, float]:
    settings.SESSIONS_ADMIN_METRICS_TOKEN = TOKEN
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    samples = {}
    for line in response.content.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


NAMES = (
    "sessions_admin_request_duration_seconds_bucket",
    "sessions_admin_requests_total",
    "sessions_admin_jobs",
    "sessions_admin_job_sessions",
    "sessions_admin_erasures",
    "sessions_admin_retention_policies",
    "sessions_admin_figure_stale",
    "sessions_admin_metrics_part_up",
)


def test_metrics_name_every_family(settings):
    Client().get("/healthz")
    samples = _scrape(settings)
    for name in NAMES:
        assert any(re.match(rf"{name}(\{{|$)", sample) for sample in samples), name
    assert samples['sessions_admin_metrics_part_up{part="jobs"}'] == 1


def test_metrics_count_a_bulk_delete_job_as_it_runs(settings):
    before = _scrape(settings)
    deleted = 'sessions_admin_job_sessions{kind="bulk_delete",outcome="deleted"}'
    remaining = 'sessions_admin_job_sessions{kind="bulk_delete",outcome="remaining"}'
    ids = old_sessions(7)
    job_id = jobs.create_bulk_delete_job(
        session_ids=ids, include_live=False, actor="metrics", reason="metrics test"
    )
    jobs.run_job(job_id=job_id, worker="w", batch_sessions=3, max_batches=1)
    midway = _scrape(settings)
    assert midway[deleted] - before[deleted] == 3
    assert midway[remaining] - before[remaining] == 4
    assert midway['sessions_admin_jobs{kind="bulk_delete",state="running"}'] == 1
    jobs.run_job(job_id=job_id, worker="w", batch_sessions=3)
    assert DeleteJob.objects.get(pk=job_id).state == DeleteJob.DONE
    assert not set(ids) & session_ids()
    after = _scrape(settings)
    assert after[deleted] - before[deleted] == 7
    assert after[remaining] - before[remaining] == 0
    assert after['sessions_admin_jobs{kind="bulk_delete",state="done"}'] == 1
    assert after['sessions_admin_jobs{kind="bulk_delete",state="failed"}'] == 0


def test_metrics_time_each_view(settings, admin_client):
    count = 'sessions_admin_request_duration_seconds_count{method="GET",view="session_list"}'
    before = _scrape(settings).get(count, 0)
    assert admin_client.get("/sessions/").status_code == 200
    assert _scrape(settings)[count] == before + 1


def test_metrics_say_how_old_each_figure_is(settings, admin_client):
    assert admin_client.get("/").status_code == 200  # computes the overview's figures
    computed = time.time()
    samples = _scrape(settings)
    age = samples['sessions_admin_figure_age_seconds{figure="overview:totals"}']
    assert 0 <= age <= time.time() - computed + 60
    cached.forget_all()  # an operator's change: the figures are gone until recomputed
    samples = _scrape(settings)
    assert 'sessions_admin_figure_age_seconds{figure="overview:totals"}' not in samples


def _hold_store_lock(session_id: str):
    """Another process (the runtime) holding the lock a write needs."""
    store = connections[store_alias()]
    params = store.get_connection_params()
    if store.vendor == "sqlite":
        other = sqlite3.connect(
            params["database"], isolation_level=None, timeout=1, check_same_thread=False
        )
        other.execute("BEGIN IMMEDIATE")
        return other
    other = psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"})
    other.execute("SELECT id FROM sessions WHERE id = %s FOR UPDATE", [session_id])
    return other


def test_metrics_count_the_waits_for_a_busy_store(settings, short_waits):
    sid = core.create_session(source="cli", session_key="cli:busy-metrics").session_id
    retries = 'sessions_admin_store_busy_retries_total{operation="append_messages"}'
    waited = 'sessions_admin_store_busy_wait_seconds_total{operation="append_messages"}'
    before = _scrape(settings)
    other = _hold_store_lock(sid)
    released = threading.Timer(0.3, lambda: (other.rollback(), other.close()))
    released.start()
    try:
        core.append_message(session_id=sid, role="user", content="after the wait")
    finally:
        released.join()
    after = _scrape(settings)
    assert after[retries] > before.get(retries, 0)
    assert after[waited] > before.get(waited, 0)
