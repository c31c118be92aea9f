"""API tokens from creation to revocation: the command, the console page, the audit log.

The secret is shown once and only its SHA-256 is stored; a token works until it is revoked;
creating and revoking are audited; bad input changes nothing.
"""

from __future__ import annotations

import hashlib
import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from sessions_admin.core.errors import InvalidInput
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import ApiToken, AuditAction, AuditEntry
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.usefixtures("no_worker")


def _command(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("api_token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_command_creates_lists_and_revokes_a_token():
    out, err = _command(
        "create",
        "--name",
        "tg-bot",
        "--scope",
        "runtime",
        "--source",
        "telegram",
        "--expires-days",
        "30",
    )
    secret = out.strip()
    assert secret.startswith("sa_") and len(secret) > 40
    token = ApiToken.objects.get(name="tg-bot")
    assert token.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in str(ApiToken.objects.values_list())  # only the hash is kept
    assert token.scope == "runtime" and token.sources == ["telegram"]
    assert token.expires_at is not None and token.revoked_at is None
    assert "shown only now" in err
    entry = AuditEntry.objects.get(action=AuditAction.API_TOKEN_CREATE)
    assert entry.after["name"] == "tg-bot" and entry.outcome == AuditEntry.OK
    assert secret not in str(entry.after)

    assert ApiClient(secret).get("me").status == 200
    listed, _ = _command("list")
    assert "tg-bot\truntime\tactive\ttelegram" in listed
    assert secret not in listed

    _command("revoke", "--name", "tg-bot")
    assert ApiToken.objects.get(name="tg-bot").revoked_at is not None
    assert AuditEntry.objects.filter(action=AuditAction.API_TOKEN_REVOKE).count() == 1
    assert ApiClient(secret).get("me").status == 401
    assert "tg-bot\truntime\trevoked" in _command("list")[0]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--name", "bad name", "--scope", "admin"], "name"),
        (["--name", "x\u200b", "--scope", "admin"], "name"),
        (["--name", "v", "--scope", "viewer", "--source", "telegram"], "Only a runtime token"),
        (["--name", "r", "--scope", "runtime", "--expires-days", "0"], "expiry"),
        (["--name", "r", "--scope", "runtime", "--source", "a\x00b"], "NUL"),
    ],
)
def test_the_command_refuses_bad_input_and_creates_nothing(args, words):
    with pytest.raises(CommandError, match=words):
        _command("create", *args)
    assert not ApiToken.objects.exists()
    assert not AuditEntry.objects.exists()


def test_names_stay_taken_after_revocation():
    actions.create_api_token(actor=None, name="once", scope="viewer")
    actions.revoke_api_token(actor=None, name="once")
    # Also in another case: the audit log's actor filter does not tell them apart (round 46).
    for taken in ("once", "ONCE", "Once"):
        with pytest.raises(InvalidInput, match="exists already"):
            actions.create_api_token(actor=None, name=taken, scope="viewer")
    with pytest.raises(InvalidInput, match="revoked already"):
        actions.revoke_api_token(actor=None, name="once")
    assert ApiToken.objects.count() == 1


def test_the_console_page_creates_a_token_showing_its_secret_once(admin_client):
    page = admin_client.post(
        "/api-tokens/create/",
        {"name": "ops-viewer", "scope": "viewer", "sources": "", "expires_days": "7"},
    )
    assert page.status_code == 201
    token = ApiToken.objects.get(name="ops-viewer")
    secret = next(
        word
        for word in page.content.decode().replace("<", " ").replace(">", " ").split()
        if word.startswith("sa_")
    )
    assert token.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert token.created_by_name == "walking-admin" and token.expires_at is not None
    assert ApiClient(secret).get("me").body["scope"] == "viewer"
    # The list shows the token, never its secret again.
    listing = admin_client.get("/api-tokens/")
    assert b"ops-viewer" in listing.content and secret.encode() not in listing.content


def test_the_console_page_refuses_bad_input_and_creates_nothing(admin_client):
    for fields in (
        {"name": "", "scope": "viewer"},
        {"name": "t", "scope": "root"},
        {"name": "t", "scope": "viewer", "sources": "telegram"},
        {"name": "t", "scope": "runtime", "expires_days": "1.5"},
        {"name": "t\x00", "scope": "runtime"},
        # Sources that name none: it made a token of every source (attack 40).
        {"name": "t", "scope": "runtime", "sources": ","},
        {"name": "t", "scope": "runtime", "sources": " , ,\t"},
    ):
        page = admin_client.post("/api-tokens/create/", fields)
        assert page.status_code == 400, fields
    assert not ApiToken.objects.exists()
    assert AuditEntry.objects.filter(outcome=AuditEntry.OK).count() == 0


def test_the_console_page_revokes_only_with_the_name_typed(admin_client, make_token):
    secret = make_token("runtime", name="to-revoke")
    admin_client.post("/api-tokens/revoke/", {"name": "to-revoke", "confirm": "to-revok"})
    assert ApiToken.objects.get(name="to-revoke").revoked_at is None
    assert ApiClient(secret).get("me").status == 200
    admin_client.post("/api-tokens/revoke/", {"name": "to-revoke", "confirm": "to-revoke"})
    assert ApiToken.objects.get(name="to-revoke").revoked_at is not None
    assert ApiClient(secret).get("me").status == 401
    entry = AuditEntry.objects.get(action=AuditAction.API_TOKEN_REVOKE, outcome=AuditEntry.OK)
    assert entry.actor_name == "walking-admin"
