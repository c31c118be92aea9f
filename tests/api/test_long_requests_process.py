"""Long-lived requests (the switch stream, the long poll) on a real gunicorn: a token revoked
or expired while one is open stops receiving, and a few of them cannot take every thread.

The server runs on this test's databases (``test_switches_process.Server``); the requests are
plain ``http.client`` from threads of this process, as a subscriber in another language makes
them.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_admin import core
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import ApiToken
from tests.api.test_switches_process import Server


@pytest.fixture
def server(tmp_path) -> Iterator[Server]:
    running = Server(tmp_path)
    running.env.update(
        SESSIONS_ADMIN_SWITCH_STREAM_SECONDS="12",
        SESSIONS_ADMIN_SWITCH_HEARTBEAT_SECONDS="5",
        SESSIONS_ADMIN_SWITCH_POLL_SECONDS="0.1",
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _token(name: str, scope: str = "viewer") -> str:
    return actions.create_api_token(actor=None, name=name, scope=scope).secret


def _end(name: str, how: str) -> None:
    if how == "revoked":
        actions.revoke_api_token(actor=None, name=name)
    else:
        past = timezone.now() - timedelta(seconds=1)
        ApiToken.objects.filter(name=name).update(expires_at=past)


class StreamReader(threading.Thread):
    """Reads one switch stream, each line with the time it came (monotonic)."""

    def __init__(self, server: Server, secret: str, query: str = ""):
        super().__init__(daemon=True)
        self.server, self.secret, self.query = server, secret, query
        self.status: int | None = None
        self.lines: list[tuple[float, str]] = []
        self.opened = threading.Event()
        self.ended_at: float | None = None

    def run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=60)
        try:
            connection.request(
                "GET",
                f"/api/v1/switches/stream{self.query}",
                headers={"Authorization": f"Bearer {self.secret}"},
            )
            response = connection.getresponse()
            self.status = response.status
            if response.status != 200:
                response.read()
                return
            while True:
                line = response.readline()
                if not line:
                    break
                self.lines.append((time.monotonic(), line.decode().rstrip("\n")))
                self.opened.set()
        finally:
            self.ended_at = time.monotonic()
            self.opened.set()
            connection.close()


def _get(server: Server, path: str, secret: str) -> tuple[int, dict, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {secret}"})
        response = connection.getresponse()
        body = response.read()
        return response.status, json.loads(body) if body else {}, dict(response.getheaders())
    finally:
        connection.close()


def _switch(n: int) -> None:
    """A switch every subscriber may see (a new session of a key)."""
    core.create_session(source="telegram", session_key=f"tg:revoke:{n}")


@pytest.mark.parametrize("how", ["revoked", "expired"])
def test_an_open_stream_ends_once_its_token_is_revoked_or_expired(server, how):
    secret = _token(f"stream-{how}")
    reader = StreamReader(server, secret, "?seconds=12")
    reader.start()
    assert reader.opened.wait(30) and reader.status == 200
    _switch(1)  # delivered: the token is valid
    time.sleep(1.0)
    _end(f"stream-{how}", how)
    ended = time.monotonic()
    time.sleep(0.5)
    _switch(2)
    reader.join(20)
    assert not reader.is_alive()
    delivered = [line for _at, line in reader.lines if line.startswith("data:")]
    assert len(delivered) == 1 and "tg:revoke:1" in delivered[0]
    assert not any(at > ended and line.startswith("data:") for at, line in reader.lines)
    # It ended soon after (not at its 12 s bound), saying why; reconnecting is refused.
    assert reader.ended_at - ended < 4, [(round(at - ended, 2), line) for at, line in reader.lines]
    assert any(line.startswith(": ended:") for _at, line in reader.lines)
    status, body, headers = _get(server, "/api/v1/switches/stream", secret)
    assert status == 401 and headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("how", ["revoked", "expired"])
def test_a_pending_long_poll_answers_401_once_its_token_is_revoked_or_expired(server, how):
    secret = _token(f"poll-{how}")
    status, page, _headers = _get(server, "/api/v1/switches", secret)
    assert status == 200
    answers = []
    poll = threading.Thread(
        target=lambda: answers.append(
            _get(server, f"/api/v1/switches?after={page['next_after']}&wait=8", secret)
        )
    )
    started = time.monotonic()
    poll.start()
    time.sleep(1.5)
    _end(f"poll-{how}", how)
    time.sleep(0.5)
    _switch(3)
    poll.join(20)
    status, body, headers = answers[0]
    assert status == 401, body
    assert body["type"].endswith("/unauthorized") and "events" not in body
    assert time.monotonic() - started < 6
