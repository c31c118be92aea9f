"""Production settings: ``check --deploy`` is clean with the documented environment, the demo
stays plain http, every response carries the security headers, and error pages leak nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client, override_settings
from django.urls import path, reverse

from sessions_admin.security import content_security_policy
from sessions_admin.urls import urlpatterns as console_urlpatterns

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_KEY = "k3Jx9-vQ2pLm8RtZ0wYc4NbH7sDf1GaE6uKo5iVe_TnXq-Wr2yBj8MzPh"
SECURITY_SETTINGS = [
    "DEBUG",
    "SESSION_COOKIE_SECURE",
    "SESSION_COOKIE_HTTPONLY",
    "CSRF_COOKIE_SECURE",
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD",
    "SECURE_PROXY_SSL_HEADER",
]


def _env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    """The environment of a fresh install in tmp_path, none of this run's settings inherited."""
    env = {
        k: v
        for k, v in os.environ.items()
        # DJANGO_* too: the browser tests set DJANGO_ALLOW_ASYNC_UNSAFE for this whole run;
        # PYTEST_* too: with PYTEST_VERSION the settings hand out a throwaway key.
        if not k.startswith(("SESSIONS_ADMIN_", "DJANGO_", "PYTEST_")) and k != "DATABASE_URL"
    }
    env.update(
        SESSIONS_ADMIN_VAR_DIR=str(tmp_path / "var"),
        DATABASE_URL=f"sqlite:///{tmp_path}/dashboard.db",
        SESSIONS_ADMIN_STORE_URL=f"sqlite:///{tmp_path}/state.db",
        DJANGO_SETTINGS_MODULE="sessions_admin.settings",
    )
    env.update(overrides)
    return env


def _production_env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    production = {
        "SESSIONS_ADMIN_SECRET_KEY": PRODUCTION_KEY,
        "SESSIONS_ADMIN_ALLOWED_HOSTS": "sessions.example.com",
        "SESSIONS_ADMIN_HTTPS": "1",
    }
    return _env(tmp_path, **{**production, **overrides})


def _check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _settings_under(env: dict[str, str]) -> dict:
    script = (
        "import json, django; django.setup(); from django.conf import settings; "
        f"print(json.dumps({{n: getattr(settings, n) for n in {SECURITY_SETTINGS!r}}}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(result.stdout)


@pytest.mark.own_db
@pytest.mark.own_sqlite
def test_check_deploy_is_clean_with_the_production_environment(tmp_path):
    result = _check_deploy(_production_env(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.own_db
@pytest.mark.own_sqlite
def test_check_deploy_is_clean_behind_a_tls_terminating_proxy(tmp_path):
    env = _production_env(tmp_path, SESSIONS_ADMIN_BEHIND_PROXY="1")
    result = _check_deploy(env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _settings_under(env)["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]


@pytest.mark.own_db
@pytest.mark.own_sqlite
@pytest.mark.parametrize(
    ("overrides", "warning"),
    [
        ({"SESSIONS_ADMIN_SECRET_KEY": ""}, "signin.E001"),  # no key at all
        ({"SESSIONS_ADMIN_SECRET_KEY": "short"}, "security.W009"),
        ({"SESSIONS_ADMIN_HTTPS": "0"}, "security.W012"),  # session cookie not Secure
        ({"SESSIONS_ADMIN_DEBUG": "1"}, "security.W018"),
    ],
)
def test_check_deploy_fails_on_an_insecure_setting(tmp_path, overrides, warning):
    result = _check_deploy(_production_env(tmp_path, **overrides))
    assert result.returncode != 0
    assert warning in result.stdout + result.stderr


@pytest.mark.own_db
@pytest.mark.own_sqlite
def test_the_demo_environment_stays_plain_http_without_debug(tmp_path):
    # What ``python -m sessions_admin demo`` runs with: nothing set.
    demo = _settings_under(_env(tmp_path))
    assert demo["DEBUG"] is False
    assert demo["SECURE_SSL_REDIRECT"] is False
    assert demo["SESSION_COOKIE_SECURE"] is False
    assert demo["CSRF_COOKIE_SECURE"] is False
    assert demo["SECURE_HSTS_SECONDS"] == 0
    assert demo["SESSION_COOKIE_HTTPONLY"] is True

    production = _settings_under(_production_env(tmp_path))
    assert production["SECURE_SSL_REDIRECT"] is True
    assert production["SECURE_HSTS_SECONDS"] >= 31536000


def test_every_response_carries_the_security_headers(client, operator_factory):
    for response in (
        client.get(reverse("login")),
        client.get("/no-such-page/"),
        client.get(reverse("home")),  # the redirect to the login page
    ):
        assert response["Content-Security-Policy"] == content_security_policy()
        assert response["X-Frame-Options"] == "DENY"
        assert response["X-Content-Type-Options"] == "nosniff"
        assert response["Referrer-Policy"] == "same-origin"

    client.force_login(operator_factory("viewer"))
    page = client.get(reverse("home"))
    assert page.status_code == 200
    policy = dict(
        directive.strip().split(" ", 1) for directive in page["Content-Security-Policy"].split(";")
    )
    assert policy["script-src"] == "'self'"
    assert policy["style-src"] == "'self'"
    assert policy["default-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    assert policy["object-src"] == "'none'"
    assert "unsafe" not in page["Content-Security-Policy"]


def test_production_redirects_to_https_sends_hsts_and_flags_cookies(tmp_path, operator_factory):
    production = _settings_under(_production_env(tmp_path))
    secure_settings = {name: value for name, value in production.items() if name != "DEBUG"}
    secure_settings["SECURE_PROXY_SSL_HEADER"] = None
    operator_factory("viewer", "alice")
    client = Client(enforce_csrf_checks=True)
    with override_settings(**secure_settings, ALLOWED_HOSTS=["testserver"]):
        plain = client.get(reverse("login"))
        assert plain.status_code == 301
        assert plain["Location"].startswith("https://testserver/")
        login = client.get(reverse("login"), secure=True)
        assert login["Strict-Transport-Security"] == (
            "max-age=31536000; includeSubDomains; preload"
        )
        token = login.cookies["csrftoken"]
        assert token["secure"]
        response = client.post(
            reverse("login"),
            {
                "username": "alice",
                "password": "correct horse battery staple",
                "csrfmiddlewaretoken": token.value,
            },
            secure=True,
            headers={"Referer": "https://testserver/login/"},
        )
    assert response.status_code == 302
    session_cookie = response.cookies["sessionid"]
    assert session_cookie["secure"]
    assert session_cookie["httponly"]


def _boom(request):
    raise RuntimeError("secret-internal-detail: /srv/state.db password=hunter2")


# This module is the URLconf of the error-page test: the console plus a view that fails.
urlpatterns = [*console_urlpatterns, path("boom/", _boom)]


def test_error_pages_are_our_plain_pages_and_leak_nothing(client, operator_factory, settings):
    settings.DEBUG = False
    settings.ROOT_URLCONF = __name__
    client.force_login(operator_factory("viewer"))
    missing = client.get("/no-such-page/")
    assert missing.status_code == 404
    text = missing.content.decode()
    assert "<h1>Not found</h1>" in text
    assert "Resolver404" not in text and "boom/" not in text and "URLconf" not in text

    missing_session = client.get(reverse("session_detail", args=["no-such-session"]))
    assert missing_session.status_code == 404
    assert "<h1>Not found</h1>" in missing_session.content.decode()

    forbidden = client.get(reverse("trash"))
    assert forbidden.status_code == 403
    assert "<h1>Not allowed</h1>" in forbidden.content.decode()
    assert "Your role does not allow this" in forbidden.content.decode()

    bad_host = client.get("/", headers={"Host": "evil.example"})
    assert bad_host.status_code == 400
    assert "<h1>Bad request</h1>" in bad_host.content.decode()
    assert "evil.example" not in bad_host.content.decode()

    client.raise_request_exception = False
    failed = client.get("/boom/")
    assert failed.status_code == 500
    text = failed.content.decode()
    assert "<h1>Server error</h1>" in text
    assert "secret-internal-detail" not in text and "hunter2" not in text
    assert "Traceback" not in text and "RuntimeError" not in text
    assert failed["Content-Security-Policy"] == content_security_policy()


def test_a_failed_csrf_check_shows_our_page_without_inline_styles(operator_factory):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator_factory("admin"))
    refused = client.post(reverse("trash_purge"), {"reason": "no token"})
    assert refused.status_code == 403
    text = refused.content.decode()
    assert "<h1>Request refused</h1>" in text and "CSRF" in text
    assert "<style" not in text and "style=" not in text


INLINE_CODE = re.compile(
    r"<style|\sstyle=|<script(?![^>]*\ssrc=)|\son[a-z]+=|hx-on|data-hx-on|hx-vars|js:|javascript:",
    re.IGNORECASE,
)


@pytest.mark.own_db
def test_templates_carry_no_inline_code_the_policy_would_block():
    # The browser tests load the pages; this catches a template or branch they do not reach.
    found = [
        f"{template.relative_to(ROOT)}:{n}: {line.strip()}"
        for template in sorted((ROOT / "templates").rglob("*.html"))
        for n, line in enumerate(template.read_text().splitlines(), 1)
        if INLINE_CODE.search(line)
    ]
    assert found == []
