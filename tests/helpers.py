"""Helpers for tests: the store's rows read directly, and processes on this test's databases
(a runtime's simulator, a real gunicorn)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db import connections

from sessions_admin import devtools
from sessions_admin.core import db
from sessions_admin.routers import responses_alias

REPO = Path(__file__).resolve().parents[1]


def rows(sql: str, params: list[Any] | None = None) -> list[tuple]:
    return db.fetchall(sql, params or [])


def one(sql: str, params: list[Any] | None = None) -> tuple | None:
    return db.fetchone(sql, params or [])


def session(session_id: str) -> dict | None:
    found = db.fetchdicts("SELECT * FROM sessions WHERE id = %s", [session_id])
    return found[0] if found else None


def messages(session_id: str, *, active_only: bool = False) -> list[dict]:
    sql = "SELECT * FROM messages WHERE session_id = %s"
    if active_only:
        sql += " AND active = 1"
    return db.fetchdicts(sql + " ORDER BY id", [session_id])


def conversation(name: str) -> tuple | None:
    return db.fetchone(
        "SELECT response_id, session_id FROM conversations WHERE name = %s",
        [name],
        alias=responses_alias(),
    )


def session_ids() -> set[str]:
    """Every session in the store."""
    return {r[0] for r in db.fetchall("SELECT id FROM sessions")}


def present(ids) -> set[str]:
    """Those of ``ids`` still in the store."""
    return {
        r[0]
        for r in db.fetchall(
            f"SELECT id FROM sessions WHERE id IN ({db.placeholders(ids)})", list(ids)
        )
    }


def parent_of(session_id: str) -> str | None:
    return db.fetchone("SELECT parent_session_id FROM sessions WHERE id = %s", [session_id])[0]


def parent_links() -> dict[str, str | None]:
    """Every session's parent, by id."""
    return dict(db.fetchall("SELECT id, parent_session_id FROM sessions ORDER BY id"))


def count(table: str) -> int:
    return int(db.fetchone(f"SELECT COUNT(*) FROM {table}")[0])


def counter_mismatches() -> list[tuple]:
    """Sessions whose message_count differs from their active rows."""
    return rows(
        "SELECT s.id, s.message_count, "
        "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id AND m.active = 1) "
        "FROM sessions s WHERE s.message_count <> "
        "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id AND m.active = 1)"
    )


def run_threads(target: Callable[[int], Any], n: int, *, timeout: float = 60) -> list[Any]:
    """Run ``target(i)`` in ``n`` threads started together; return results, re-raise errors."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait()
            results[i] = target(i)
        except BaseException as error:  # noqa: BLE001 - reported to the test below
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        assert not thread.is_alive(), "a worker thread did not finish in time"
    if errors:
        raise errors[0]
    return results


def database_url(alias: str) -> str:
    """The URL of the database this test process really uses for ``alias`` (the test database)."""
    config = connections[alias].settings_dict
    if config["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(config['NAME']).resolve()}"
    user = quote(config["USER"] or "")
    password = f":{quote(config['PASSWORD'])}" if config["PASSWORD"] else ""
    port = f":{config['PORT']}" if config["PORT"] else ""
    return f"postgres://{user}{password}@{config['HOST']}{port}/{quote(config['NAME'])}"


def child_env() -> dict[str, str]:
    """The environment of a child process (a runtime, a simulator) on this test's databases."""
    env = {**os.environ, "DATABASE_URL": database_url("default")}
    env["SESSIONS_ADMIN_STORE_URL"] = database_url("store")
    env["DJANGO_SETTINGS_MODULE"] = "sessions_admin.settings"
    env["PYTHONPATH"] = str(REPO)
    if "responses" in settings.DATABASES:
        env["SESSIONS_ADMIN_RESPONSES_URL"] = database_url("responses")
    return env


def file_bytes(path: Path) -> bytes:
    """A database file's bytes, read by a child process: a handle this process opened and
    closed on it would drop the locks its SQLite connections hold there (POSIX locks are the
    process's), and the next process to close its own connection would delete the -wal and
    -shm files from under them (tests/store/test_inspect_keeps_locks.py)."""
    return subprocess.run(["cat", str(path)], capture_output=True, check=True).stdout


def run_test_child(
    module: str, *args: str, settings: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """``python -m tests.core.<module> <args>`` (crash_child, audit_child) on this test's
    databases, its output captured; ``settings``: its environment over ``child_env`` (where it
    crashes, which database is full...), no crash point unless they name one. Nothing of ours
    may hold a SQLite read snapshot or a PostgreSQL lock the child waits on: closed first."""
    env = child_env()
    env.pop("SESSIONS_ADMIN_CRASH_AT", None)
    env.update(settings or {})
    connections.close_all()
    return subprocess.run(
        [sys.executable, "-m", f"tests.core.{module}", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_simulator(
    ledger: Path, *, seed: int, label: str, duration: float, chats: int, env: dict, extra=()
):
    """A ``manage.py simulate_runtime`` process (a runtime writing as a gateway would) on this
    test's databases, keeping its acknowledgements in ``ledger``."""

    return subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "simulate_runtime",
            "--chats",
            str(chats),
            "--duration",
            str(duration),
            "--think-time",
            "0.03",
            "--seed",
            str(seed),
            "--label",
            label,
            *extra,
            "--ledger",
            str(ledger),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def server_env(var_dir: Path, *, scheduler: bool = False, **settings: str) -> dict[str, str]:
    """The environment of a dashboard server on this test's databases (``child_env``): its var
    directory and home ``var_dir``, a secret key, the slug-history poller off and, unless
    ``scheduler``, the retention scheduler too; ``settings`` over that."""
    env = {k: v for k, v in child_env().items() if not k.startswith("PYTEST_")}
    env.update(
        SESSIONS_ADMIN_VAR_DIR=str(var_dir),
        SESSIONS_ADMIN_SECRET_KEY=secrets.token_urlsafe(50),
        SESSIONS_ADMIN_SLUG_HISTORY_SECONDS="0",
        HOME=str(var_dir),
    )
    if not scheduler:
        env["SESSIONS_ADMIN_RETENTION_CHECK_SECONDS"] = "0"
    env.update(settings)
    return env


def answers(url: str) -> bool:
    """``url`` answers 200 now."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


class Gunicorn:
    """The real gunicorn (``devtools.gunicorn_command``) on a free loopback port with ``env``,
    its output appended to ``log``; ready once ``ready`` (a path) answers 200. A test may stop
    and start it again, as a deployment restarts it."""

    def __init__(self, env: dict[str, str], log: Path, *, ready: str = "/api/v1/openapi.json"):
        self.env = env
        self.log = log
        self.ready = ready
        self.port = devtools.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def launch(self) -> None:
        """Start the process, not waiting for it (start several, then wait for each)."""
        with self.log.open("a") as output:
            self.process = subprocess.Popen(
                devtools.gunicorn_command(f"127.0.0.1:{self.port}"),
                cwd=REPO,
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, *, deadline: float) -> None:
        """Wait until it answers, failing with its log if it exits or ``deadline`` passes."""
        while not answers(self.base + self.ready):
            assert self.process is not None and self.process.poll() is None, self._log_tail()
            assert time.monotonic() < deadline, self._log_tail()
            time.sleep(0.2)

    def start(self, *, within: float = 90) -> None:
        self.launch()
        self.wait_ready(deadline=time.monotonic() + within)

    def stop(self) -> None:
        devtools.stop_process(self.process, timeout=30)

    def _log_tail(self) -> str:
        return self.log.read_text()[-3000:]


@contextlib.contextmanager
def serving(*servers: Gunicorn, within: float = 90) -> Iterator[None]:
    """``servers`` started together and ready (within ``within`` seconds), stopped after."""
    try:
        for server in servers:
            server.launch()
        deadline = time.monotonic() + within
        for server in servers:
            server.wait_ready(deadline=deadline)
        yield
    finally:
        for server in servers:
            server.stop()


def pg_ctl(data: str, *args: str) -> None:
    """``pg_ctl -D data <args> -w`` as the postgres user (PostgreSQL refuses to run as root)."""
    subprocess.run(
        ["runuser", "-u", "postgres", "--", "pg_ctl", "-D", data, *args, "-w"],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,  # the new server keeps its output: never a pipe we wait on
        stderr=subprocess.DEVNULL,
        timeout=120,
    )


def server_options(data: str) -> str:
    """The options this test run's PostgreSQL was started with (its port, its address), for a
    start after a stop (``pg_ctl restart`` reads them itself)."""
    opts = shlex.split(Path(data, "postmaster.opts").read_text())
    return " ".join(shlex.quote(option) for option in opts[1:] if option != data and option != "-D")


@contextlib.contextmanager
def postgres_stopped() -> Iterator[None]:
    """This test run's PostgreSQL stopped as a crash would (``-m immediate``: every connection
    cut), then started again as it was. This process's connection pools are closed first, so
    its own reads afterwards open new ones on the new server."""
    data = db.fetchone("SHOW data_directory")[0]
    options = server_options(data)
    db.release_connections()
    pg_ctl(data, "stop", "-m", "immediate")
    try:
        yield
    finally:
        pg_ctl(data, "start", "-o", options, "-l", "/dev/null")
