"""SESSIONS_ADMIN_DB_CONN_MAX_AGE: PostgreSQL connections kept between requests, off by default;
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
    "print(*[(a, d.get('CONN_MAX_AGE'), d.get('CONN_HEALTH_CHECKS')) "
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


def test_postgres_urls_keep_connections_only_when_asked(tmp_path):
    assert parse_database_url("postgres://u@h/db", base_dir=tmp_path)["CONN_MAX_AGE"] == 0
    kept = parse_database_url("postgres://u@h/db", base_dir=tmp_path, conn_max_age=60)
    assert kept["CONN_MAX_AGE"] == 60
    # A kept connection the server dropped is checked before a request uses it.
    assert kept["CONN_HEALTH_CHECKS"] is True


def test_the_setting_reaches_every_database():
    urls = {
        "DATABASE_URL": "postgres://u@db.internal/dash",
        "SESSIONS_ADMIN_STORE_URL": "postgres://u@db.internal/store",
        "SESSIONS_ADMIN_RESPONSES_URL": "postgres://u@db.internal/responses",
    }
    default = _settings_with(**urls)
    assert default.returncode == 0, default.stderr
    assert "('store', 0, False)" in default.stdout
    kept = _settings_with(SESSIONS_ADMIN_DB_CONN_MAX_AGE="120", **urls)
    assert kept.returncode == 0, kept.stderr
    lines = kept.stdout.split("\n")
    for alias in ("default", "responses", "store"):
        assert f"('{alias}', 120, True)" in lines


@pytest.mark.parametrize("value", ["-1", "forever", "1.5"])
def test_a_bad_value_stops_the_start_with_its_name(value):
    result = _settings_with(SESSIONS_ADMIN_DB_CONN_MAX_AGE=value)
    assert result.returncode != 0
    assert "SESSIONS_ADMIN_DB_CONN_MAX_AGE" in result.stderr


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
            assert f"('{alias}', {SQLITE_CONN_MAX_AGE}, None)" in result.stdout.split("\n")
