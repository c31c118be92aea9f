"""Long-lived requests (the switch stream, the long poll) on a real gunicorn: a token revoked
or expired while one is open stops receiving, and a few of them cannot take every thread.

The server runs on this test's databases (``tests.helpers.Gunicorn``); the requests are
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
from django.contrib.auth.models import User
from django.utils import timezone

from sessions_admin import core
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import ApiToken
from tests.helpers import Gunicorn, server_env, serving


def _serve(tmp_path, **settings: str) -> Iterator[Gunicorn]:
    env = server_env(
        tmp_path,
        SESSIONS_ADMIN_API_RATE="",
        SESSIONS_ADMIN_SWITCH_POLL_SECONDS="0.1",
        SESSIONS_ADMIN_SWITCH_HEARTBEAT_SECONDS="5",
        **settings,
    )
    running = Gunicorn(env, tmp_path / "server.log")
    with serving(running):
        yield running


@pytest.fixture
def server(tmp_path) -> Iterator[Gunicorn]:
    yield from _serve(tmp_path, SESSIONS_ADMIN_SWITCH_STREAM_SECONDS="12")


def _token(name: str, scope: str = "viewer", *, by=None) -> str:
    return actions.create_api_token(actor=by, name=name, scope=scope).secret


def _operator() -> User:
    from sessions_admin.signin.roles import assign_role

    operator = User.objects.create_user("token-maker")
    assign_role(operator, "admin")  # only an admin's tokens work
    return operator


def _end(name: str, how: str) -> None:
    if how == "revoked":
        actions.revoke_api_token(actor=None, name=name)
    elif how == "expired":
        past = timezone.now() - timedelta(seconds=1)
        ApiToken.objects.filter(name=name).update(expires_at=past)
    else:  # the operator who created it is deactivated: the token stops with their account
        User.objects.filter(username="token-maker").update(is_active=False)


class StreamReader(threading.Thread):
    """Reads one switch stream, each line with the time it came (monotonic)."""

    def __init__(self, server: Gunicorn, secret: str, query: str = ""):
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


def _get(server: Gunicorn, path: str, secret: str) -> tuple[int, dict, dict]:
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


@pytest.mark.parametrize("how", ["revoked", "expired", "creator deactivated"])
def test_an_open_stream_ends_once_its_token_is_revoked_or_expired(server, how):
    maker = _operator() if how == "creator deactivated" else None
    how = how.replace(" ", "-")
    secret = _token(f"stream-{how}", by=maker)
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


# --- long-lived requests cannot take every thread ---------------------------------------------


@pytest.fixture
def small_server(tmp_path) -> Iterator[Gunicorn]:
    """One worker of 8 threads, as the attack ran it (at most 2 long-lived requests per token,
    and 8 // 4 = 2 per worker by default: this test allows 3 in all)."""
    yield from _serve(
        tmp_path,
        WEB_CONCURRENCY="1",
        SESSIONS_ADMIN_THREADS="8",
        SESSIONS_ADMIN_LONG_REQUESTS_PER_WORKER="3",
        SESSIONS_ADMIN_SWITCH_STREAM_SECONDS="15",
    )


def _open_streams(server: Gunicorn, secret: str, count: int, query: str = "") -> list[StreamReader]:
    readers = [StreamReader(server, secret, query) for _ in range(count)]
    for reader in readers:
        reader.start()
    for reader in readers:
        assert reader.opened.wait(30)
    return readers


def _timed_get(server: Gunicorn, path: str, secret: str) -> tuple[int, dict, dict, float]:
    started = time.monotonic()
    status, body, headers = _get(server, path, secret)
    return status, body, headers, time.monotonic() - started


def test_one_token_holds_at_most_its_share_of_threads(small_server):
    viewer, admin = _token("many-streams"), _token("admin-me", "admin")
    readers = _open_streams(small_server, viewer, 10)
    statuses = sorted(reader.status for reader in readers)
    assert statuses == [200, 200] + [429] * 8, statuses
    # The refused ones were answered at once, not after a stream's length.
    for reader in (r for r in readers if r.status == 429):
        reader.join(2)
        assert not reader.is_alive()
    status, body, headers, took = _timed_get(small_server, "/api/v1/me", admin)
    assert status == 200 and took < 2, took
    status, body, headers, took = _timed_get(
        small_server, "/api/v1/switches?after=0&wait=10", viewer
    )
    assert status == 429 and took < 2
    assert body["type"].endswith("/throttled") and int(headers["Retry-After"]) >= 1
    # A poll that does not wait is no long-lived request.
    assert _get(small_server, "/api/v1/switches?after=0", viewer)[0] == 200
    # Everything is checked: the two open streams end now (their token revoked) rather than
    # holding the server's stop for the rest of their 15 s.
    actions.revoke_api_token(actor=None, name="many-streams")
    for reader in readers:
        reader.join(20)


def test_the_worker_keeps_most_threads_for_other_requests(small_server):
    first, second, third = (_token(f"share-{n}") for n in range(3))
    admin = _token("admin-share", "admin")
    held = _open_streams(small_server, first, 2, "?seconds=3")
    held += _open_streams(small_server, second, 1, "?seconds=3")
    assert [reader.status for reader in held] == [200, 200, 200]
    # The worker serves 3 at most (this test's setting): another token is refused too.
    assert _open_streams(small_server, third, 1)[0].status == 429
    status, _body, headers, took = _timed_get(
        small_server, "/api/v1/switches?after=0&wait=5", third
    )
    assert status == 429 and "Retry-After" in headers and took < 2
    assert _timed_get(small_server, "/api/v1/me", admin)[0] == 200
    # Streams that end give their place back.
    for reader in held:
        reader.join(20)
    again = _open_streams(small_server, third, 2, "?seconds=1")
    assert [reader.status for reader in again] == [200, 200]


def test_operators_holding_every_stream_never_shut_the_runtimes_out(small_server):
    # Attack round i: viewers filling the worker's cap got every runtime's stream a 429.
    viewers = [_token(f"viewer-{n}") for n in range(2)]
    held = _open_streams(small_server, viewers[0], 2, "?seconds=4")
    held += _open_streams(small_server, viewers[1], 1, "?seconds=4")
    assert [reader.status for reader in held] == [200, 200, 200]
    assert _open_streams(small_server, _token("viewer-more"), 1)[0].status == 429
    runtime = _token("gateway", "runtime")
    (stream,) = _open_streams(small_server, runtime, 1, "?seconds=1")
    assert stream.status == 200
    status, _body, _headers, took = _timed_get(
        small_server, "/api/v1/switches?after=0&wait=1", runtime
    )
    assert status == 200, status
    # Everything is checked: the viewers' streams end now (their tokens revoked) rather than at
    # their 4 s bound.
    for n in range(2):
        actions.revoke_api_token(actor=None, name=f"viewer-{n}")
    for reader in held:
        reader.join(20)
