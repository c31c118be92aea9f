"""Every page answers HEAD as GET without a body, and nothing signed-in may be cached.

Walks the URL resolver through tests/console's access table, so a new page is
covered as soon as it has its entry there.
"""

from __future__ import annotations

import re
import socket
from urllib.parse import urlparse

import pytest
from django.contrib.auth.models import User
from django.test import Client

from sessions_admin.signin.roles import assign_role
from tests.console import urlmap
from tests.console.test_access import ACCESS

GET_PAGES = sorted(name for name, (get, _post) in ACCESS.items() if get is not None)


pytestmark = pytest.mark.usefixtures("no_worker")


def _url(name: str, seeded) -> str:
    route = next(route for route in urlmap.routes() if route.name == name)
    return route.url(seeded.url_args)


@pytest.mark.parametrize("name", GET_PAGES)
def test_head_is_answered_as_get(name, seeded, admin_client):
    url = _url(name, seeded)
    got = admin_client.get(url)
    head = admin_client.head(url)
    assert head.status_code == got.status_code != 405, (head.status_code, got.status_code)
    for header in ("Content-Type", "Content-Disposition", "Location"):
        assert _same_second(head.get(header)) == _same_second(got.get(header)), header


def _same_second(value: str | None) -> str | None:
    """Export names carry the time they were made: GET and HEAD may straddle a second."""
    return value and re.sub(r"\d{8}-\d{6}", "<time>", value)


@pytest.mark.parametrize("name", GET_PAGES)
def test_signed_in_pages_are_never_stored(name, seeded, admin_client):
    for method in (admin_client.get, admin_client.head):
        response = method(_url(name, seeded))
        assert "no-store" in response.get("Cache-Control", ""), (method, response.status_code)


def test_signed_out_answers_are_not_stored_either(client):
    for url in ("/login/", "/sessions/"):
        assert "no-store" in client.get(url).get("Cache-Control", ""), url


def test_static_files_keep_their_own_caching(client):
    response = client.get("/static/js/selection.js")
    assert response.status_code == 200
    assert "no-store" not in response.get("Cache-Control", "")


def _raw(live_server, request: bytes) -> bytes:
    address = urlparse(live_server.url)
    with socket.create_connection((address.hostname, address.port), timeout=10) as conn:
        conn.sendall(request)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("path", ["/sessions/", "session_page", "export"])
def test_a_real_server_sends_no_body_for_head(path, live_server, seeded):
    client = Client()
    user = User.objects.create_user(f"head-{path}")
    assign_role(user, "viewer")
    client.force_login(user)
    cookie = client.cookies["sessionid"].value
    path = {
        "session_page": f"/sessions/{seeded.tip}/",
        "export": f"/sessions/{seeded.tip}/export/?scope=lineage",
    }.get(path, path)
    answer = _raw(
        live_server,
        f"HEAD {path} HTTP/1.1\r\nHost: localhost\r\nCookie: sessionid={cookie}\r\n"
        "Connection: close\r\n\r\n".encode(),
    )
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    assert body == b""
    assert b"no-store" in head
