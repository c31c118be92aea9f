"""The real gunicorn on PostgreSQL reuses its connections (a pool per worker, by default) and
its workers, forked from a master that checked the store, each open their own pool: a worker
that inherited the master's would wait forever for a connection."""

from __future__ import annotations

import concurrent.futures
import time
import urllib.error
import urllib.request

import psycopg
import pytest
from django.db import connections

from tests.helpers import Gunicorn, database_url, postgres_stopped, server_env, serving

pytestmark = pytest.mark.django_db(databases=["default", "store"], transaction=True)

REQUESTS = 60


def _ready(url: str) -> int:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status


def _connections_opened(database: str) -> int:
    with psycopg.connect(database_url("store"), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return conn.execute(
            "SELECT sessions FROM pg_stat_database WHERE datname = %s", [database]
        ).fetchone()[0]


def test_every_worker_serves_the_databases_on_connections_it_reuses(tmp_path):
    if connections["store"].vendor != "postgresql":
        pytest.skip("connection pools are PostgreSQL's: SQLite files are always kept open")
    store = connections["store"].settings_dict["NAME"]
    connections.close_all()
    server = Gunicorn(server_env(tmp_path, WEB_CONCURRENCY="2"), tmp_path / "server.log")
    with serving(server):
        # Every worker serves a request that reads both databases (readyz), many at once.
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            warm = list(pool.map(_ready, [server.base + "/readyz"] * 16))
        assert warm == [200] * 16
        before = _connections_opened(store)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(_ready, [server.base + "/readyz"] * REQUESTS))
        opened = _connections_opened(store) - before
    assert statuses == [200] * REQUESTS
    # A connection per request would open REQUESTS; pooled ones are reused (a few may be
    # opened as the pools grow to the number of requests served at once).
    assert opened < REQUESTS // 4, opened


def _status(url: str) -> int:
    try:
        return _ready(url)
    except urllib.error.HTTPError as error:
        return error.code


def test_a_worker_serves_the_first_request_once_postgresql_is_back(tmp_path):
    """psycopg's pool retried a connection it could not open for five minutes, doubling the
    wait between tries (1, 2, 4, 8 ... s): after PostgreSQL was down for 15 s, a worker went
    on answering 503 for about as long again once the server was back. Each try now gives up
    after a few seconds and the next request starts a new one at once, so the first request
    after the server's return is served."""
    if connections["store"].vendor != "postgresql":
        pytest.skip("connection pools are PostgreSQL's")
    connections.close_all()
    server = Gunicorn(server_env(tmp_path, WEB_CONCURRENCY="1"), tmp_path / "server.log")
    with serving(server):
        assert _status(server.base + "/readyz") == 200
        with postgres_stopped():
            # Long enough for the pool's old backoff to grow past the request's wait (5 s).
            down_until = time.monotonic() + 15
            while time.monotonic() < down_until:
                assert _status(server.base + "/readyz") == 503
        assert _status(server.base + "/readyz") == 200
        assert _status(server.base + "/readyz") == 200
