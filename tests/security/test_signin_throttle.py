"""Sign-in throttling (django-axes, settings ``AXES_*``): repeated failures lock out the user
name and the client address for a while, whatever the password, without hashing it; real and
unknown names get the same answers; every failure is recorded and admins can read them."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from axes.models import AccessAttempt, AccessFailureLog
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from sessions_admin.signin.roles import assign_role
from tests.security.hashers import CountingHasher

PASSWORD = "correct horse battery staple"


@pytest.fixture
def limit(settings) -> int:
    return settings.AXES_FAILURE_LIMIT


@pytest.fixture
def alice():
    user = User.objects.create_user("alice", password=PASSWORD)
    assign_role(user, "viewer")
    return user


def _sign_in(username: str, password: str, *, address: str = "10.0.0.1", **headers):
    client = Client(REMOTE_ADDR=address, **headers)
    response = client.post(reverse("login"), {"username": username, "password": password})
    return client, response


def _signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def _page(response) -> str:
    """The page without its per-request CSRF tokens."""
    text = response.content.decode()
    text = re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", text)
    return re.sub(r'"X-CSRFToken": "[^"]*"', "", text)


def test_repeated_failures_lock_the_name_and_the_right_password_is_then_refused(alice, limit):
    for n in range(limit - 1):
        _, response = _sign_in("alice", f"wrong {n}", address=f"10.0.1.{n}")
        assert response.status_code == 200
        assert "didn't match" in response.content.decode()
    _, response = _sign_in("alice", "wrong again", address="10.0.1.200")
    assert response.status_code == 429
    assert "Too many failed sign-ins" in response.content.decode()

    # A fresh address, the right password: still refused until the cool-off ends.
    client, response = _sign_in("alice", PASSWORD, address="10.0.2.1")
    assert response.status_code == 429
    assert not _signed_in(client)
    assert client.get(reverse("home")).status_code == 302

    recorded = list(AccessFailureLog.objects.order_by("attempt_time", "id"))
    assert len(recorded) == limit  # the refused attempts during the lockout add nothing
    assert {f.username for f in recorded} == {"alice"}
    assert [f.ip_address for f in recorded] == [
        *(f"10.0.1.{n}" for n in range(limit - 1)),
        "10.0.1.200",
    ]
    assert all(f.attempt_time is not None for f in recorded)
    assert recorded[-1].locked_out and not recorded[0].locked_out


def test_repeated_failures_from_one_address_lock_every_name_there(alice, limit):
    for n in range(limit):
        _sign_in(f"guess-{n}", "wrong", address="198.51.100.9")
    client, response = _sign_in("alice", PASSWORD, address="198.51.100.9")
    assert response.status_code == 429
    assert not _signed_in(client)
    # Another address is not affected: alice signs in from there.
    client, response = _sign_in("alice", PASSWORD, address="198.51.100.10")
    assert response.status_code == 302
    assert _signed_in(client)


def test_real_and_unknown_names_get_the_same_answers(alice, limit):
    _, real = _sign_in("alice", "wrong", address="10.0.3.1")
    _, unknown = _sign_in("nobody-here", "wrong", address="10.0.3.2")
    assert real.status_code == unknown.status_code == 200
    assert _page(real).replace("alice", "NAME") == _page(unknown).replace("nobody-here", "NAME")

    for n in range(limit):
        _sign_in("alice", "wrong", address=f"10.0.4.{n}")
        _sign_in("nobody-here", "wrong", address=f"10.0.5.{n}")
    _, real = _sign_in("alice", PASSWORD, address="10.0.6.1")
    _, unknown = _sign_in("nobody-here", PASSWORD, address="10.0.6.2")
    assert real.status_code == unknown.status_code == 429
    assert real["Retry-After"] == unknown["Retry-After"]
    assert _page(real) == _page(unknown)
    assert "alice" not in _page(real)


def test_once_locked_out_no_attempt_costs_a_password_hash(alice, limit, settings):
    settings.PASSWORD_HASHERS = ["tests.security.hashers.CountingHasher"]
    alice.set_password(PASSWORD)
    alice.save()
    for n in range(limit):
        _sign_in(f"spray-{n}", "wrong", address="203.0.113.50")
    hashed = CountingHasher.calls
    for n in range(25):
        for name in ("alice", f"spray-{n}", f"other-{n}"):
            _, response = _sign_in(name, PASSWORD, address="203.0.113.50")
            assert response.status_code == 429
    assert CountingHasher.calls == hashed
    # The same request from an address in good standing does hash (and signs in).
    client, _ = _sign_in("alice", PASSWORD, address="203.0.113.51")
    assert _signed_in(client)
    assert CountingHasher.calls > hashed


def test_an_oversized_user_name_is_counted_and_locked_out_like_any_other(limit):
    # The sign-in form sets no length limit: the name is cut to what a real one can be.
    huge = "x" * 10_000
    for n in range(limit):
        _, response = _sign_in(huge, "wrong", address=f"10.0.9.{n}")
        assert response.status_code in (200, 429)
    _, response = _sign_in(huge, "wrong", address="10.0.10.1")
    assert response.status_code == 429
    assert set(AccessFailureLog.objects.values_list("username", flat=True)) == {"x" * 150}


def test_a_lockout_ends_after_the_cool_off(alice, limit, settings):
    for n in range(limit):
        _sign_in("alice", "wrong", address=f"10.0.7.{n}")
    assert _sign_in("alice", PASSWORD, address="10.0.8.1")[1].status_code == 429
    for attempt in AccessAttempt.objects.all():
        attempt.attempt_time -= settings.AXES_COOLOFF_TIME + timedelta(seconds=1)
        attempt.save()
    client, response = _sign_in("alice", PASSWORD, address="10.0.8.1")
    assert response.status_code == 302
    assert _signed_in(client)


def test_behind_a_proxy_failures_count_by_the_address_the_proxy_appended(alice, limit, settings):
    settings.SESSIONS_ADMIN_BEHIND_PROXY = True
    # The client writes what it likes before the proxy's entry; only the last one counts.
    for n in range(limit):
        _sign_in(
            f"guess-{n}",
            "wrong",
            address="127.0.0.1",
            HTTP_X_FORWARDED_FOR=f"10.9.9.{n}, 203.0.113.7",
        )
    client, response = _sign_in(
        "alice", PASSWORD, address="127.0.0.1", HTTP_X_FORWARDED_FOR="10.1.1.1, 203.0.113.7"
    )
    assert response.status_code == 429
    assert set(AccessFailureLog.objects.values_list("ip_address", flat=True)) == {"203.0.113.7"}
    # Another client behind the same proxy is not locked out.
    client, response = _sign_in(
        "alice", PASSWORD, address="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.8"
    )
    assert response.status_code == 302


def test_admins_read_failed_sign_ins_and_current_lockouts(alice, limit):
    for n in range(limit):
        _sign_in("mallory-guess", "wrong", address=f"192.0.2.{n}", HTTP_USER_AGENT="probe/1.0")
    url = reverse("signin_failures")
    for role in ("viewer", "support"):
        client = Client()
        user = User.objects.create_user(f"op-{role}")
        assign_role(user, role)
        client.force_login(user)
        assert client.get(url).status_code == 403
    assert Client().get(url).status_code == 302  # signed out: to the sign-in page

    admin = User.objects.create_user("op-admin")
    assign_role(admin, "admin")
    client = Client()
    client.force_login(admin)
    page = client.get(url)
    assert page.status_code == 200
    text = page.content.decode()
    assert text.count('class="signin-failure"') == limit
    assert "mallory-guess" in text and "192.0.2.0" in text and "probe/1.0" in text
    assert 'class="locked-name"' in text  # the name is locked out now
    assert "locked out" in text
    # Linked from the audit log, for admins only.
    assert url in client.get(reverse("audit_log")).content.decode()
    viewer = Client()
    viewer.force_login(User.objects.get(username="op-viewer"))
    assert url not in viewer.get(reverse("audit_log")).content.decode()


def test_hammering_a_locked_out_name_is_on_record_once_not_once_per_request(alice, limit):
    from sessions_admin.ledger.models import AuditEntry
    from sessions_admin.signin.audit import LOCKED_OUT

    def lockout_entries(address: str) -> int:
        return AuditEntry.objects.filter(
            action="sign_in", outcome="refused", detail=LOCKED_OUT, client_address=address
        ).count()

    for n in range(limit):
        _sign_in("alice", f"wrong {n}", address="198.51.100.7")
    for _ in range(30):
        _, response = _sign_in("alice", "still wrong", address="198.51.100.7")
        assert response.status_code == 429
    assert lockout_entries("198.51.100.7") == 1
    entry = AuditEntry.objects.get(detail=LOCKED_OUT)
    assert entry.before["username"] == "alice"
    _, response = _sign_in("alice", PASSWORD, address="198.51.100.8")  # the name is locked
    assert response.status_code == 429
    assert lockout_entries("198.51.100.8") == 1
