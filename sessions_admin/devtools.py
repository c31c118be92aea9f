"""Developer tooling behind ``python3 -m sessions_admin``: demo server, test runs, a throwaway PostgreSQL.

Standard library only: it runs before (or right after) the project's
dependencies are installed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres_user(args: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root: run its tools as the postgres user.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return args


@contextlib.contextmanager
def temporary_postgres() -> Iterator[str]:
    """Start a private PostgreSQL on a free loopback port; yield a URL base (no database name)."""
    if not shutil.which("initdb") or not shutil.which("pg_ctl"):
        raise RuntimeError("PostgreSQL's initdb and pg_ctl are not on the PATH")
    workdir = Path(tempfile.mkdtemp(prefix="sessions_admin_pg_"))
    data = workdir / "data"
    data.mkdir()
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres", "postgres")
        shutil.chown(data, "postgres", "postgres")
    port = free_port()
    log = workdir / "server.log"
    subprocess.run(
        _as_postgres_user(
            ["initdb", "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    options = f"-h 127.0.0.1 -p {port} -k {workdir} -c fsync=off -c full_page_writes=off"
    subprocess.run(
        _as_postgres_user(
            ["pg_ctl", "-D", str(data), "-l", str(log), "-o", options, "-w", "start"]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    try:
        yield f"postgres://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run(
            _as_postgres_user(["pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        shutil.rmtree(workdir, ignore_errors=True)


def create_database(url_base: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{url_base}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')


def ensure_chromium() -> str | None:
    """Debian's chromium for the browser tests, installed where missing (root only)."""
    path = shutil.which("chromium")
    if path:
        return path
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        print("chromium is missing and cannot be installed here: browser tests will be skipped")
        return None
    print("Installing Debian's chromium for the browser tests...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    return shutil.which("chromium")


HERMES_VERSION = "0.19.0"
HERMES_VENV = BASE_DIR / "var" / f"hermes-agent-{HERMES_VERSION}"


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _hermes_works(python: Path) -> bool:
    probe = (
        "import importlib.metadata as m, hermes_state; "
        "from gateway.platforms.api_server import ResponseStore; "
        f"assert m.version('hermes-agent') == {HERMES_VERSION!r}"
    )
    return (
        python.exists()
        and subprocess.call(
            [str(python), "-c", probe], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        == 0
    )


def ensure_hermes() -> str | None:
    """A Python with hermes-agent (pinned) for the Hermes compatibility tests; its path.

    hermes-agent pins its own dependencies (packaging, pydantic, rich...), which
    conflict with ours, so it lives in a virtualenv of its own under var/; the
    tests drive it as the runtime process it is (tests/hermes/driver.py).
    """
    python = _venv_python(HERMES_VENV)
    if _hermes_works(python):
        return str(python)
    print(f"Installing hermes-agent {HERMES_VERSION} for the Hermes tests ({HERMES_VENV})...")
    try:
        shutil.rmtree(HERMES_VENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(HERMES_VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"hermes-agent=={HERMES_VERSION}"],
            check=True,
        )
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"hermes-agent could not be installed ({error}): the Hermes tests will be skipped")
        return None
    return str(python) if _hermes_works(python) else None


def _install_hermes_in_background(ready_file: Path) -> threading.Thread:
    """``ensure_hermes`` in a thread; the interpreter's path (empty: none) is then written to
    ``ready_file`` in one rename, which the Hermes tests wait for (tests/hermes/conftest.py,
    ``SESSIONS_ADMIN_HERMES_READY_FILE``): the install overlaps the suite's first minutes."""

    def install() -> None:
        try:
            python = ensure_hermes() or ""
        except Exception as error:  # noqa: BLE001 - said, and the Hermes tests say why they skip
            print(f"hermes-agent could not be installed ({error})", flush=True)
            python = ""
        partial = ready_file.with_suffix(".partial")
        partial.write_text(python)
        partial.replace(ready_file)

    thread = threading.Thread(target=install, name="hermes-install", daemon=True)
    thread.start()
    return thread


def run_tests(pytest_args: list[str]) -> int:
    """The whole suite on SQLite and, side by side, on a throwaway PostgreSQL.

    The two runs share no database, var directory or port, and much of each one's time is
    spent waiting on the processes, servers and browsers its tests start: side by side they
    take little more than the longer of the two (CI must stay under 30 minutes). The
    PostgreSQL run starts first (it needs neither the browser nor hermes-agent); hermes-agent
    installs while the SQLite run begins. The SQLite run prints as it goes; the PostgreSQL
    run's output follows it.
    """
    # The slowest tests of each run are listed at its end.
    pytest_args = ["--durations=25", *pytest_args]
    env = {**os.environ}
    env.pop("DATABASE_URL", None)
    env.pop("SESSIONS_ADMIN_STORE_URL", None)
    env.pop("SESSIONS_ADMIN_RESPONSES_URL", None)
    skip_postgres = bool(os.environ.get("SESSIONS_ADMIN_SKIP_POSTGRES"))
    with contextlib.ExitStack() as stack:
        postgres = None
        if not skip_postgres:
            base = stack.enter_context(temporary_postgres())
            create_database(base, "sessions_admin")
            create_database(base, "sessions_store")
            pg_env = {
                **env,
                "SESSIONS_ADMIN_VAR_DIR": stack.enter_context(tempfile.TemporaryDirectory()),
                "DATABASE_URL": f"{base}/sessions_admin",
                "SESSIONS_ADMIN_STORE_URL": f"{base}/sessions_store",
            }
            pg_log = stack.enter_context(tempfile.TemporaryFile(mode="w+"))
            # Browser tests exercise the pages, not the backend: once (on SQLite) is enough; so
            # are tests whose processes use SQLite files of their own whatever the pass.
            postgres = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-m",
                    "not browser and not own_sqlite",
                    *pytest_args,
                ],
                cwd=BASE_DIR,
                env=pg_env,
                stdout=pg_log,
                stderr=subprocess.STDOUT,
            )
        try:
            ensure_chromium()
            sqlite_env = {
                **env,
                "SESSIONS_ADMIN_VAR_DIR": stack.enter_context(
                    tempfile.TemporaryDirectory(prefix="sessions_admin_test_")
                ),
            }
            if not env.get("SESSIONS_ADMIN_HERMES_PYTHON"):
                ready = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "hermes"
                _install_hermes_in_background(ready)
                sqlite_env["SESSIONS_ADMIN_HERMES_READY_FILE"] = str(ready)
            print("== Test suite on SQLite ==", flush=True)
            sqlite_code = subprocess.call(
                [sys.executable, "-m", "pytest", *pytest_args], cwd=BASE_DIR, env=sqlite_env
            )
        except BaseException:
            if postgres is not None:
                postgres.kill()
                postgres.wait()
            raise
        if postgres is None:
            print("SESSIONS_ADMIN_SKIP_POSTGRES is set: PostgreSQL run skipped")
            return sqlite_code
        if postgres.poll() is None:
            print("== Waiting for the PostgreSQL run ==", flush=True)
        postgres_code = postgres.wait()
        print("== Test suite on PostgreSQL (dashboard and store) ==", flush=True)
        pg_log.seek(0)
        shutil.copyfileobj(pg_log, sys.stdout)
        sys.stdout.flush()
        print(f"== SQLite run: exit {sqlite_code}; PostgreSQL run: exit {postgres_code} ==")
        return sqlite_code or postgres_code


def manage(*args: str, env: dict | None = None) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=BASE_DIR, check=True, env=env)


TRUTHY = {"1", "true", "yes", "on"}


DEMO_SIMULATOR_ARGS = ("--chats", "5", "--duration", "0", "--think-time", "6", "--label", "demo")


def demo_simulator_enabled(env: dict) -> bool:
    """The demo's background runtime: on unless SESSIONS_ADMIN_DEMO_SIMULATOR=0 (or read-only)."""
    if env.get("SESSIONS_ADMIN_READ_ONLY", "").strip().lower() in TRUTHY:
        return False
    return env.get("SESSIONS_ADMIN_DEMO_SIMULATOR", "1").strip().lower() in TRUTHY


def start_demo_simulator(env: dict) -> subprocess.Popen:
    """A slow ``simulate_runtime`` writing in the background, so the console shows live activity."""
    return subprocess.Popen(
        [sys.executable, "manage.py", "simulate_runtime", *DEMO_SIMULATOR_ARGS],
        cwd=BASE_DIR,
        env=env,
    )


def stop_process(process: subprocess.Popen | None, *, timeout: float = 15) -> None:
    """SIGTERM (the simulator stops cleanly and prints its summary), then kill if it hangs."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def gunicorn_command(bind: str) -> list[str]:
    """The demo's server: workers, threads and timeouts come from sessions_admin/gunicorn_conf.py."""
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "sessions_admin.wsgi",
        "--bind",
        bind,
        "--config",
        "python:sessions_admin.gunicorn_conf",
        # No gunicorn access log: Django logs one line per request, with its request id and
        # operator (console/requestlog.py).
    ]


def demo_secret_key(env: dict) -> str:
    """The demo's own secret key: generated into <var>/secret_key on first use (mode 0600), then
    read back, so demo sign-ins survive restarts. The dashboard serves with no built-in key."""
    # Relative to BASE_DIR: the demo's commands and server run there (cwd=BASE_DIR).
    var_dir = BASE_DIR / (env.get("SESSIONS_ADMIN_VAR_DIR") or "var")
    var_dir.mkdir(parents=True, exist_ok=True)
    path = var_dir / "secret_key"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_text().strip()
        if key:
            return key
        raise SystemExit(
            f"{path} is empty: delete it and the demo will generate a new key."
        ) from None
    key = secrets.token_urlsafe(50)
    with os.fdopen(fd, "w") as file:
        file.write(key + "\n")
    return key


def run_demo(bind: str, *, simulator: bool = True) -> int:
    """Migrate, create the store, seed demo data and an operator on first run, serve with gunicorn.

    A slow runtime simulator writes in the background while the dashboard runs
    (``simulator=False`` or SESSIONS_ADMIN_DEMO_SIMULATOR=0 turns it off); it
    stops with the dashboard.
    """
    env = {**os.environ}
    if not env.get("SESSIONS_ADMIN_SECRET_KEY", "").strip():
        env["SESSIONS_ADMIN_SECRET_KEY"] = demo_secret_key(env)
    read_only = env.get("SESSIONS_ADMIN_READ_ONLY", "").strip().lower() in TRUTHY
    manage("migrate", "--noinput", "-v", "0", env=env)  # also runs the store check
    if not read_only:  # read-only attach: nothing is created or seeded in the store
        manage("init_store", env=env)
        manage("seed_demo", "--if-empty", env=env)
    manage("create_operator", "demo", "--role", "admin", "--if-missing", env=env)
    manage("collectstatic", "--noinput", "-v", "0", env=env)
    background = None
    if simulator and demo_simulator_enabled(env):
        background = start_demo_simulator(env)
        print("A simulated runtime (5 chats) writes to the store while the dashboard runs.")
    print(f"Dashboard: http://{bind}/  (Ctrl-C stops it)", flush=True)
    time.sleep(0.1)
    server = subprocess.Popen(gunicorn_command(bind), cwd=BASE_DIR, env=env)
    # SIGTERM to this process alone (a supervisor) stops the children too, as Ctrl-C does.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return server.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        stop_process(server)
        stop_process(background)
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
