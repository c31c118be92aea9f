"""The server refuses, in words, a store it cannot use, and writes nothing to it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.own_db
def test_gunicorn_start_names_the_problem_with_a_non_sqlite_store(tmp_path):
    store = tmp_path / "state.db"
    store.write_bytes(b"this is not a database")
    env = {
        **os.environ,
        "SESSIONS_ADMIN_VAR_DIR": str(tmp_path / "var"),
        "SESSIONS_ADMIN_STORE_URL": f"sqlite:///{store}",
        "DJANGO_SETTINGS_MODULE": "sessions_admin.settings",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from sessions_admin import gunicorn_conf; gunicorn_conf.on_starting(None)",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "not a SQLite database" in result.stderr
    assert "Traceback" not in result.stderr
    assert store.read_bytes() == b"this is not a database"
