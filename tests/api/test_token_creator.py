"""A token an operator created stops working with that operator's account (deactivated or
deleted), from the next request; one the ``api_token`` command created is tied to no account."""

from __future__ import annotations

import hashlib
import io

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from sessions_admin.ledger.models import ApiToken
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.usefixtures("no_worker")


def _console_token(admin_client, name: str, scope: str = "admin") -> str:
    page = admin_client.post(
        "/api-tokens/create/", {"name": name, "scope": scope, "sources": "", "expires_days": ""}
    )
    assert page.status_code == 201
    secret = next(
        word
        for word in page.content.decode().replace("<", " ").replace(">", " ").split()
        if word.startswith("sa_")
    )
    assert (
        ApiToken.objects.get(name=name).secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    )
    return secret


def test_a_token_stops_when_its_creators_account_is_deactivated(admin_client):
    client = ApiClient(_console_token(admin_client, "ops-admin"))
    assert client.get("me").status == 200
    creator = User.objects.get(username="walking-admin")
    creator.is_active = False
    creator.save()
    answer = client.get("me")
    assert answer.status == 401, answer.body
    assert "walking-admin" in answer.body["detail"] and "deactivated" in answer.body["detail"]
    assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert client.post("holds", {"kind": "user", "subject": "u-1", "reason": "x"}).status == 401
    token = ApiToken.objects.get(name="ops-admin")
    assert token.revoked_at is None and token.state_at(token.created_at) == "creator inactive"
    # Reactivating the account is vouching for its tokens again.
    creator.is_active = True
    creator.save()
    assert client.get("me").status == 200


def test_a_token_stops_when_its_creators_account_is_deleted(admin_client):
    client = ApiClient(_console_token(admin_client, "ops-viewer", scope="viewer"))
    assert client.get("sessions").status == 200
    User.objects.get(username="walking-admin").delete()
    token = ApiToken.objects.get(name="ops-viewer")
    assert token.created_by is None and token.created_by_name == "walking-admin"
    answer = client.get("sessions")
    assert answer.status == 401, answer.body
    assert "walking-admin" in answer.body["detail"] and "deleted" in answer.body["detail"]


def test_a_token_the_command_created_is_tied_to_no_account(admin_client):
    out = io.StringIO()
    call_command(
        "api_token",
        "create",
        "--name",
        "cmd-runtime",
        "--scope",
        "runtime",
        stdout=out,
        stderr=io.StringIO(),
    )
    client = ApiClient(out.getvalue().strip())
    token = ApiToken.objects.get(name="cmd-runtime")
    assert token.created_by is None and not token.created_by_operator
    # Every operator account deactivated or deleted: the command's token still works.
    User.objects.update(is_active=False)
    assert client.get("me").status == 200
    User.objects.all().delete()
    answer = client.get("me")
    assert answer.status == 200 and answer.body["scope"] == "runtime"


@pytest.mark.parametrize("role", ["support", "viewer"])
def test_a_token_stops_when_its_creator_is_no_longer_an_admin(admin_client, role):
    """Only admins create tokens: an admin demoted to support or viewer no longer vouches for
    the admin token they created, which kept deleting for them (found by the attack round)."""
    from django.utils import timezone

    from sessions_admin.signin.roles import assign_role
    from sessions_admin.signin.tokens import token_state

    client = ApiClient(_console_token(admin_client, f"ops-{role}"))
    assert client.get("trash").status == 200
    creator = User.objects.get(username="walking-admin")
    assign_role(creator, role)
    for method, path, body in [
        ("GET", "me", None),
        ("GET", "trash", None),
        ("POST", "holds", {"kind": "user", "subject": "u-1", "reason": "x"}),
    ]:
        answer = client.call(method, path, body)
        assert answer.status == 401, (path, answer.body)
        assert "no longer an admin" in answer.body["detail"]
    token = ApiToken.objects.get(name=f"ops-{role}")
    assert token_state(token, timezone.now()) == "creator not an admin"
    listed = io.StringIO()
    call_command("api_token", "list", stdout=listed)
    assert f"ops-{role}\tadmin\tcreator not an admin" in listed.getvalue()
    # Made an admin again: vouching for its tokens again.
    assign_role(creator, "admin")
    assert client.get("trash").status == 200
