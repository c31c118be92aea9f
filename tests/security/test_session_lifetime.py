"""Signed-in sessions end after an idle period and after an absolute lifetime
(SESSIONS_ADMIN_IDLE_MINUTES, SESSIONS_ADMIN_SESSION_MAX_HOURS; SessionLifetimeMiddleware).
The real test client signs in; the test moves the session's stored timestamps back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from sessions_admin.signin.middleware import LAST_SEEN_AT, SIGNED_IN_AT
from sessions_admin.signin.roles import assign_role

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "correct horse battery staple"


@pytest.fixture
def client_signed_in():
    user = User.objects.create_user("vera", password=PASSWORD)
    assign_role(user, "viewer")
    client = Client()
    response = client.post(reverse("login"), {"username": "vera", "password": PASSWORD})
    assert response.status_code == 302
    assert client.get(reverse("home")).status_code == 200
    return client


def _shift(client: Client, key: str, seconds: float) -> None:
    session = client.session
    session[key] -= seconds
    session.save()


def _is_signed_out(client: Client) -> bool:
    response = client.get(reverse("home"))
    return response.status_code == 302 and response["Location"].startswith(reverse("login"))


def test_an_idle_session_ends(client_signed_in, settings):
    _shift(client_signed_in, LAST_SEEN_AT, settings.SESSIONS_ADMIN_IDLE_SECONDS + 1)
    assert _is_signed_out(client_signed_in)
    # Signed out for good, not just for one request.
    assert "_auth_user_id" not in client_signed_in.session
    assert _is_signed_out(client_signed_in)


def test_a_session_in_use_stays_signed_in_and_its_idle_clock_restarts(client_signed_in, settings):
    idle = settings.SESSIONS_ADMIN_IDLE_SECONDS
    for _ in range(3):  # three times most of the idle period, with a request between each
        _shift(client_signed_in, LAST_SEEN_AT, idle - 5)
        assert client_signed_in.get(reverse("home")).status_code == 200
    session = client_signed_in.session
    assert session.get_expiry_age() <= idle


def test_a_busy_session_ends_at_its_absolute_lifetime(client_signed_in, settings):
    _shift(client_signed_in, SIGNED_IN_AT, settings.SESSIONS_ADMIN_SESSION_MAX_SECONDS - 30)
    assert client_signed_in.get(reverse("home")).status_code == 200
    _shift(client_signed_in, SIGNED_IN_AT, 31)
    assert _is_signed_out(client_signed_in)


def test_a_session_from_before_the_stamps_is_signed_out(client_signed_in):
    session = client_signed_in.session
    del session[SIGNED_IN_AT]
    session.save()
    assert _is_signed_out(client_signed_in)


def test_the_sign_in_page_says_why_after_an_expiry(client_signed_in, settings):
    _shift(client_signed_in, LAST_SEEN_AT, settings.SESSIONS_ADMIN_IDLE_SECONDS + 1)
    page = client_signed_in.get(reverse("home"), follow=True)
    assert "Your session was idle too long: sign in again." in page.content.decode()


@pytest.mark.own_db
def test_both_limits_come_from_the_environment(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONS_ADMIN_")}
    env["SESSIONS_ADMIN_VAR_DIR"] = str(tmp_path)
    script = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "print(json.dumps([s.SESSIONS_ADMIN_IDLE_SECONDS, s.SESSIONS_ADMIN_SESSION_MAX_SECONDS,"
        " s.SESSION_COOKIE_AGE]))"
    )

    def limits(**variables: str) -> list[int]:
        result = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env={**env, "DJANGO_SETTINGS_MODULE": "sessions_admin.settings", **variables},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    idle, lifetime, cookie = limits()
    assert 60 * 60 <= idle <= 8 * 60 * 60  # a few hours
    assert idle < lifetime == cookie <= 24 * 60 * 60
    assert limits(SESSIONS_ADMIN_IDLE_MINUTES="15", SESSIONS_ADMIN_SESSION_MAX_HOURS="2") == [
        900,
        7200,
        7200,
    ]
