"""PostgreSQL connections come from a pool per process by default (SESSIONS_ADMIN_DB_POOL_SIZE),
or are kept per thread (SESSIONS_ADMIN_DB_CONN_MAX_AGE), or opened per request (pool size 0);
SQLite connections are always kept."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sessions_admin.dburl import SQLITE_CONN_MAX_AGE, parse_database_url
from tests.helpers import REPO, child_env

PRINT_DATABASES = (
    "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'sessions_admin.settings'; "
    "from django.conf import settings; "
    "print(*[(a, d.get('CONN_MAX_AGE'), d.get('CONN_HEALTH_CHECKS'), "
    "(d['OPTIONS'].get('pool') or {}).get('max_size')) "
    "for a, d in sorted(settings.DATABASES.items())], sep='\\n')"
)


def _settings_with(**env: str) -> subprocess.CompletedProcess:
    environment = {**child_env(), "SESSIONS_ADMIN_SECRET_KEY": "k" * 50, **env}
    environment.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "-c", PRINT_DATABASES],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
    )


def test_postgres_urls_pool_keep_or_open_connections_as_asked(tmp_path):
    fresh = parse_database_url("postgres://u@h/db", base_dir=tmp_path)
    assert fresh["CONN_MAX_AGE"] == 0 and "pool" not in fresh["OPTIONS"]
    kept = parse_database_url("postgres://u@h/db", base_dir=tmp_path, conn_max_age=60)
    assert kept["CONN_MAX_AGE"] == 60 and "pool" not in kept["OPTIONS"]
    # A kept connection the server dropped is checked before a request uses it.
    assert kept["CONN_HEALTH_CHECKS"] is True
    pooled = parse_database_url("postgres://u@h/db", base_dir=tmp_path, pool_size=7)
    assert pooled["OPTIONS"]["pool"]["max_size"] == 7
    assert pooled["CONN_MAX_AGE"] == 0  # Django's pool refuses persistent connections
    assert pooled["CONN_HEALTH_CHECKS"] is True
    # A failed try gives up before a request's wait ends (tests/test_db_pool_process.py).
    pool = pooled["OPTIONS"]["pool"]
    assert pool["reconnect_timeout"] < pool["timeout"]
    # Kept connections, when asked for, win over the pool (Django allows one or the other).
    both = parse_database_url("postgres://u@h/db", base_dir=tmp_path, conn_max_age=60, pool_size=7)
    assert both["CONN_MAX_AGE"] == 60 and "pool" not in both["OPTIONS"]


def test_the_setting_reaches_every_database():
    urls = {
        "DATABASE_URL": "postgres://u@db.internal/dash",
        "SESSIONS_ADMIN_STORE_URL": "postgres://u@db.internal/store",
        "SESSIONS_ADMIN_RESPONSES_URL": "postgres://u@db.internal/responses",
    }
    for env, expected in (
        # By default a pool per database of a worker's threads and four more.
        ({}, "0, True, 20"),
        ({"SESSIONS_ADMIN_THREADS": "8"}, "0, True, 12"),
        ({"SESSIONS_ADMIN_DB_POOL_SIZE": "5"}, "0, True, 5"),
        ({"SESSIONS_ADMIN_DB_POOL_SIZE": "0"}, "0, False, None"),
        ({"SESSIONS_ADMIN_DB_CONN_MAX_AGE": "120"}, "120, True, None"),
    ):
        result = _settings_with(**urls, **env)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.split("\n")
        for alias in ("default", "responses", "store"):
            assert f"('{alias}', {expected})" in lines, (env, lines)


@pytest.mark.parametrize("name", ["SESSIONS_ADMIN_DB_CONN_MAX_AGE", "SESSIONS_ADMIN_DB_POOL_SIZE"])
@pytest.mark.parametrize("value", ["-1", "forever", "1.5"])
def test_a_bad_value_stops_the_start_with_its_name(name, value):
    result = _settings_with(**{name: value})
    assert result.returncode != 0
    assert name in result.stderr


def test_sqlite_connections_are_kept_between_requests(tmp_path):
    # Reopening both SQLite files on every request cost more CPU than an API append itself.
    entry = parse_database_url(f"sqlite:///{tmp_path}/state.db", base_dir=tmp_path)
    assert entry["CONN_MAX_AGE"] == SQLITE_CONN_MAX_AGE > 0
    files = {
        "DATABASE_URL": f"sqlite:///{tmp_path}/dashboard.db",
        "SESSIONS_ADMIN_STORE_URL": f"sqlite:///{tmp_path}/state.db",
        "SESSIONS_ADMIN_RESPONSES_URL": "",
    }
    for env in (files, {**files, "SESSIONS_ADMIN_DB_CONN_MAX_AGE": "0"}):
        result = _settings_with(**env)
        assert result.returncode == 0, result.stderr
        for alias in ("default", "store"):
            assert f"('{alias}', {SQLITE_CONN_MAX_AGE}, None, None)" in result.stdout.split("\n")


@pytest.mark.django_db(databases=["default", "store"])
def test_postgres_connections_start_without_jit_or_parallel_workers():
    # The console's statements read pages through indexes: a JIT compile or a parallel worker
    # process started for one costs more than it saves (docs/benchmarks.md, load).
    from django.db import connections

    if connections["store"].vendor != "postgresql":
        pytest.skip("PostgreSQL's settings")
    for alias in ("default", "store"):
        with connections[alias].cursor() as cursor:
            cursor.execute("SHOW max_parallel_workers_per_gather")
            assert cursor.fetchone()[0] == "0"
            cursor.execute("SHOW jit")
            assert cursor.fetchone()[0] == "off"
