"""A real gunicorn (two worker processes, JSON logs, a metrics token): request ids, log lines, metrics.

What an operator running the dashboard sees: each response carries ``X-Request-ID`` (the
caller's, or one made up), the log has one JSON line per request and per action naming that id
and the operator, a refused request is those lines and no traceback, a load balancer's probes
stay out of the INFO log, and ``/metrics`` sums the requests every worker answered
(prometheus-client's multiprocess mode under ``gunicorn_conf.py``).
"""

from __future__ import annotations

import http.cookiejar
import json
import re
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import User
from django.urls import reverse

from sessions_admin import core
from sessions_admin.signin.roles import assign_role
from tests.helpers import Gunicorn, server_env, serving

TOKEN = "process-metrics-" + secrets.token_urlsafe(24)
PASSWORD = "a long enough password 7"


def _get(opener, url: str, headers: dict | None = None, data: bytes | None = None):
    """(status, headers, body) of one request, a refusal included."""
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with opener.open(request, timeout=20) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


@pytest.fixture
def server(tmp_path) -> Iterator[tuple[str, Path]]:
    env = server_env(
        tmp_path,
        SESSIONS_ADMIN_LOG_FORMAT="json",
        SESSIONS_ADMIN_METRICS_TOKEN=TOKEN,
        WEB_CONCURRENCY="2",
        SESSIONS_ADMIN_THREADS="4",
    )
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # gunicorn_conf.py's own, under this var dir
    gunicorn = Gunicorn(env, tmp_path / "server.log", ready="/readyz")
    with serving(gunicorn):
        yield gunicorn.base, gunicorn.log


def _records(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def test_request_ids_log_lines_and_metrics_of_a_real_server(server):
    base, log = server
    plain = urllib.request.build_opener()
    # A load balancer's probes, its own request id echoed.
    probes = 12
    for n in range(probes):
        status, headers, _ = _get(plain, f"{base}/healthz", {"X-Request-ID": f"lb-probe-{n}"})
        assert (status, headers["X-Request-ID"]) == (200, f"lb-probe-{n}")
    # A header that is not a sane token is replaced, not echoed (nor logged).
    status, headers, _ = _get(plain, f"{base}/healthz", {"X-Request-ID": "bad id\u00e9 <x>"})
    assert re.fullmatch(r"[0-9a-f]{32}", headers["X-Request-ID"])

    # Hashed as the server checks it (the tests' own hasher is MD5, which it does not know).
    viewer = User.objects.create_user("vera-viewer", password=None)
    viewer.password = PBKDF2PasswordHasher().encode(PASSWORD, "probe-salt-1234", iterations=1000)
    viewer.save(update_fields=["password"])
    assign_role(viewer, "viewer")
    sid = core.create_session(source="cli", session_key="cli:probe-process").session_id
    core.append_messages(
        session_id=sid,
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    )
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    _get(browser, f"{base}/login/")
    csrf = next(cookie.value for cookie in jar if cookie.name == "csrftoken")
    form = urllib.parse.urlencode(
        {"username": "vera-viewer", "password": PASSWORD, "csrfmiddlewaretoken": csrf}
    ).encode()
    status, _, _ = _get(browser, f"{base}/login/", data=form)
    assert status == 200  # followed the redirect home

    status, headers, _ = _get(browser, f"{base}/sessions/")
    assert status == 200
    listed = headers["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", listed)
    # Expected refusals: a page of a stronger role, and an action.
    status, headers, _ = _get(browser, f"{base}/trash/", {"X-Request-ID": "refused-page-1"})
    assert (status, headers["X-Request-ID"]) == (403, "refused-page-1")
    csrf = next(cookie.value for cookie in jar if cookie.name == "csrftoken")
    status, headers, _ = _get(
        browser,
        base + reverse("session_undo", args=[sid]),
        {"X-CSRFToken": csrf, "X-Request-ID": "refused-undo-1"},
        data=urllib.parse.urlencode({"reason": "trying"}).encode(),
    )
    assert status == 403

    status, _, body = _get(plain, f"{base}/metrics", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200
    text = body.decode()
    healthz = sum(
        float(value)
        for value in re.findall(
            r'^sessions_admin_requests_total\{method="GET",status="200",view="healthz"\} (\S+)$',
            text,
            re.M,
        )
    )
    # Every worker's answers, summed; the readiness polls were another view.
    assert healthz == probes + 1
    assert (
        'sessions_admin_request_duration_seconds_bucket{le="0.01",method="GET",view="session_list"}'
        in text
    )
    assert "sessions_admin_jobs{" in text and "sessions_admin_figure_stale{" in text
    status, _, _ = _get(plain, f"{base}/metrics")
    assert status == 401

    time.sleep(0.5)  # the last lines reach the file
    text = log.read_text()
    assert "Traceback" not in text, text
    records = _records(log)
    requests = [r for r in records if r["logger"] == "sessions_admin.request"]
    (listing,) = [r for r in requests if r["request_id"] == listed]
    assert (listing["path"], listing["status"], listing["operator"]) == (
        "/sessions/",
        200,
        "vera-viewer",
    )
    assert listing["view"] == "session_list" and listing["duration_ms"] > 0
    # The refused page: one request line, one action line, nothing else of it.
    refused_page = [r for r in records if r["request_id"] == "refused-page-1"]
    assert sorted(r["logger"] for r in refused_page) == [
        "sessions_admin.action",
        "sessions_admin.request",
    ], refused_page
    for record in refused_page:
        assert record["operator"] == "vera-viewer" and "exception" not in record
    (action,) = [r for r in refused_page if r["logger"] == "sessions_admin.action"]
    assert action["outcome"] == "refused"
    refused_undo = [r for r in records if r["request_id"] == "refused-undo-1"]
    assert {r["logger"] for r in refused_undo} == {
        "sessions_admin.action",
        "sessions_admin.request",
    }
    assert all(r["level"] in ("INFO", "WARNING") for r in refused_undo)
    # Probes that answered well stay out of the INFO log.
    assert not [r for r in requests if r.get("path") == "/healthz"]
