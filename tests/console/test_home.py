from __future__ import annotations

import pytest
from django.urls import reverse

from sessions_admin import core
from tests.console.conftest import PASSWORD


def test_it_redirects_anonymous_visitors_to_login(client):
    response = client.get(reverse("home"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_it_signs_in_with_a_password_and_shows_sessions(client, operator_factory):
    operator_factory("viewer", "vera")
    ref = core.create_session(source="telegram", title="<script>alert(1)</script>").session_id
    response = client.post(reverse("login"), {"username": "vera", "password": PASSWORD})
    assert response.status_code == 302
    page = client.get(reverse("home"))
    body = page.content.decode()
    assert ref in body
    assert "signed in as <strong>vera</strong> (viewer)" in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<script>alert(1)</script>" not in body


def test_a_wrong_password_is_refused(client, operator_factory):
    operator_factory("viewer", "vera")
    response = client.post(reverse("login"), {"username": "vera", "password": "nope"})
    assert response.status_code == 200
    assert "didn't match" in response.content.decode()
    assert client.get(reverse("home")).status_code == 302


@pytest.mark.parametrize("role", ["viewer", "support", "admin"])
def test_every_role_can_read(signed_in, role):
    assert signed_in(role).get(reverse("home")).status_code == 200


def test_an_operator_without_a_role_is_forbidden(signed_in):
    assert signed_in(None).get(reverse("home")).status_code == 403


def test_htmx_requests_get_only_the_rows(signed_in):
    ref = core.create_session(source="cli").session_id
    response = signed_in("viewer").get(reverse("home"), headers={"HX-Request": "true"})
    body = response.content.decode()
    assert ref in body
    assert "<html" not in body


def test_post_is_not_allowed(signed_in):
    assert signed_in("admin").post(reverse("home")).status_code == 405


def test_sign_out_needs_post(signed_in):
    client = signed_in("viewer")
    client.post(reverse("logout"))
    assert client.get(reverse("home")).status_code == 302
