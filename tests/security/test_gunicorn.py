"""The real gunicorn, started as the demo starts it (devtools.gunicorn_command, on a free
loopback port): pages keep answering while a few slow clients hang on, and the control
socket lives under the var directory, not in the user's home.

Bounded and self-stopping: every socket has a timeout, the slow clients stop with the test,
and the server is stopped (then killed if it hangs) when the module ends.
"""

from __future__ import annotations

import http.client
import os
import secrets
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import Gunicorn, serving

pytestmark = pytest.mark.own_db

ROOT = Path(__file__).resolve().parents[2]
STATIC_FILE = "/static/vendor/htmx-2.0.11.min.js"  # 50 kB: more than a stalled reader takes
SLOW_HEADER_CLIENTS = 4
UNREAD_RESPONSE_CLIENTS = 2


@dataclass(frozen=True)
class Server:
    port: int
    var_dir: Path
    home: Path
    log: Path


def _environment(tmp: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SESSIONS_ADMIN_", "DJANGO_", "PYTEST_", "XDG_RUNTIME_DIR"))
        and k not in ("DATABASE_URL", "WEB_CONCURRENCY", "GUNICORN_CMD_ARGS")
    }
    env.update(
        SESSIONS_ADMIN_VAR_DIR=str(tmp / "var"),
        DATABASE_URL=f"sqlite:///{tmp}/dashboard.db",
        SESSIONS_ADMIN_STORE_URL=f"sqlite:///{tmp}/state.db",
        SESSIONS_ADMIN_SECRET_KEY=secrets.token_urlsafe(50),
        SESSIONS_ADMIN_DEMO_SIMULATOR="0",
        DJANGO_SETTINGS_MODULE="sessions_admin.settings",
        HOME=str(tmp / "home"),
    )
    return env


def _get(port: int, path: str, *, timeout: float) -> tuple[int, float]:
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status, time.monotonic() - started
    finally:
        connection.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("gunicorn")
    (tmp / "home").mkdir()
    env = _environment(tmp)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=120,
    )
    gunicorn = Gunicorn(env, tmp / "gunicorn.log", ready="/login/")
    with serving(gunicorn, within=60):
        for _ in range(10):  # every worker has loaded and rendered the page once
            _get(gunicorn.port, "/login/", timeout=5)
        yield Server(port=gunicorn.port, var_dir=tmp / "var", home=tmp / "home", log=gunicorn.log)


def _slow_headers(port: int, stop: threading.Event, ready: threading.Barrier) -> None:
    """A request whose headers arrive one byte a second and never end."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        ready.wait(10)
        while not stop.wait(1.0):
            try:
                sock.sendall(b"a")
            except OSError:
                return  # the server gave up on us: fine


def _unread_response(port: int) -> socket.socket:
    """Pipelined requests for a large file whose responses are never read."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, as a slow reader
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    request = f"GET {STATIC_FILE} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    sock.sendall(request * 20)
    return sock


def test_pages_answer_within_a_second_while_slow_clients_hang_on(server):
    stop = threading.Event()
    ready = threading.Barrier(SLOW_HEADER_CLIENTS + 1)
    slow = [
        threading.Thread(target=_slow_headers, args=(server.port, stop, ready), daemon=True)
        for _ in range(SLOW_HEADER_CLIENTS)
    ]
    stalled: list[socket.socket] = []
    try:
        for thread in slow:
            thread.start()
        ready.wait(10)
        stalled = [_unread_response(server.port) for _ in range(UNREAD_RESPONSE_CLIENTS)]
        time.sleep(1.5)  # the slow clients now hold what they can hold
        timings = []
        for _ in range(10):
            status, seconds = _get(server.port, "/login/", timeout=3)
            assert status == 200
            timings.append(seconds)
        assert max(timings) < 1.0, timings
    finally:
        stop.set()
        for sock in stalled:
            sock.close()
        for thread in slow:
            thread.join(5)
    assert not any(thread.is_alive() for thread in slow)


def test_the_control_socket_is_under_the_var_directory_and_not_in_home(server):
    control = server.var_dir / "gunicorn.ctl"
    assert control.exists(), server.log.read_text()
    mode = control.stat().st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600
    assert not (server.home / ".gunicorn").exists()
    assert list(server.home.iterdir()) == []
