"""No serving with a secret key everyone knows: outside the demo and the tests, a missing
SESSIONS_ADMIN_SECRET_KEY stops the server with a clear message; the demo keeps a generated
key of its own under var/."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sessions_admin import devtools
from sessions_admin.ledger.models import AuditEntry, ErasureRequest
from sessions_admin.signin.checks import MISSING_SECRET_KEY

# Every process here runs on SQLite files of its own (``_production_env``), whatever the pass.
pytestmark = pytest.mark.own_sqlite
ROOT = Path(__file__).resolve().parents[2]
FIRST_LINE = MISSING_SECRET_KEY.splitlines()[0]


def _production_env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    """A fresh production install: nothing of this test run inherited (pytest's own
    PYTEST_VERSION included), HTTPS on, and no secret key."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SESSIONS_ADMIN_", "DJANGO_", "PYTEST_")) and k != "DATABASE_URL"
    }
    env.update(
        SESSIONS_ADMIN_VAR_DIR=str(tmp_path / "var"),
        DATABASE_URL=f"sqlite:///{tmp_path}/dashboard.db",
        SESSIONS_ADMIN_STORE_URL=f"sqlite:///{tmp_path}/state.db",
        SESSIONS_ADMIN_ALLOWED_HOSTS="sessions.example.com",
        SESSIONS_ADMIN_HTTPS="1",
        DJANGO_SETTINGS_MODULE="sessions_admin.settings",
        HOME=str(tmp_path / "home"),
    )
    env.update(overrides)
    return env


def _run(args: list[str], env: dict[str, str], timeout: float = 120):
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.own_db
def test_check_deploy_fails_without_a_secret_key_and_says_why(tmp_path):
    result = _run([sys.executable, "manage.py", "check", "--deploy"], _production_env(tmp_path))
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "signin.E001" in output
    assert FIRST_LINE in output


@pytest.mark.own_db
def test_gunicorn_refuses_to_start_without_a_secret_key(tmp_path):
    env = _production_env(tmp_path)
    command = devtools.gunicorn_command(f"127.0.0.1:{devtools.free_port()}")
    result = _run(command, env, timeout=60)
    assert result.returncode != 0
    assert FIRST_LINE in result.stderr
    assert "Traceback" not in result.stderr
    assert "Listening at" not in result.stderr


@pytest.mark.own_db
def test_the_wsgi_module_refuses_to_load_without_a_secret_key(tmp_path):
    # Any other WSGI server (or gunicorn without our config) imports this module.
    result = _run([sys.executable, "-c", "import sessions_admin.wsgi"], _production_env(tmp_path))
    assert result.returncode != 0
    assert FIRST_LINE in result.stderr


@pytest.mark.own_db
def test_commands_that_sign_nothing_still_run_without_a_key(tmp_path):
    # Runtimes use the store core with these settings, and attaching runs migrate/init_store.
    env = _production_env(tmp_path)
    for command in (["migrate", "--noinput", "-v", "0"], ["init_store"]):
        result = _run([sys.executable, "manage.py", *command], env)
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_demo_generates_its_key_once_and_keeps_it_private(tmp_path):
    env = {"SESSIONS_ADMIN_VAR_DIR": str(tmp_path / "var")}
    key = devtools.demo_secret_key(env)
    path = tmp_path / "var" / "secret_key"
    assert len(key) >= 50
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert devtools.demo_secret_key(env) == key  # the same key on every start
    other = {"SESSIONS_ADMIN_VAR_DIR": str(tmp_path / "elsewhere")}
    assert devtools.demo_secret_key(other) != key


@pytest.mark.own_db
def test_the_demo_environment_serves_with_its_own_key(tmp_path):
    # What ``python3 -m sessions_admin demo`` hands its server when no variable is set.
    env = _production_env(tmp_path)
    for name in ("SESSIONS_ADMIN_HTTPS", "SESSIONS_ADMIN_ALLOWED_HOSTS"):
        env.pop(name)
    env["SESSIONS_ADMIN_SECRET_KEY"] = devtools.demo_secret_key(env)
    result = _run(
        [
            sys.executable,
            "-c",
            "import sessions_admin.wsgi; from django.conf import settings; "
            "print(len(settings.SECRET_KEY))",
        ],
        env,
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 50


@pytest.mark.own_db
def test_commands_beside_the_demo_use_its_key_from_the_var_directory(tmp_path):
    # A receipt signed by the demo's server verifies with ``manage.py verify_receipt`` run on the
    # same var directory with no variable set (the README's demo, then its commands).
    env = _production_env(tmp_path)
    demo_key = devtools.demo_secret_key(env)
    script = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.SECRET_KEY)"
    )
    result = _run([sys.executable, "-c", script], env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == demo_key
    # The server loads with it too, and a key set in the environment still wins.
    assert _run([sys.executable, "-c", "import sessions_admin.wsgi"], env).returncode == 0
    result = _run([sys.executable, "-c", script], {**env, "SESSIONS_ADMIN_SECRET_KEY": "k" * 60})
    assert result.stdout.strip() == "k" * 60


@pytest.mark.own_db
def test_commands_that_sign_say_so_without_a_key_and_change_nothing(tmp_path):
    env = _production_env(tmp_path)
    assert (
        _run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], env).returncode == 0
    )
    receipt = tmp_path / "receipt.json"
    receipt.write_text("{}")
    for command in (
        ["verify_receipt", str(receipt)],
        ["erase_subject", "--user", "someone", "--reference", "T-1", "--yes"],
    ):
        result = _run([sys.executable, "manage.py", *command], env)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        assert "SESSIONS_ADMIN_SECRET_KEY" in result.stderr
    with sqlite3.connect(tmp_path / "dashboard.db") as dashboard:
        counts = [
            dashboard.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            for table in (ErasureRequest._meta.db_table, AuditEntry._meta.db_table)
        ]
    assert counts == [0, 0]
