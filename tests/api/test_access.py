"""Who may call what, on every API route: no token, an expired and a revoked token, each scope.

ROUTES is the specification: for each (method, path) the one permission it needs. A route added
without an entry fails ``test_it_has_an_access_rule_for_every_route``. A refused call answers a
problem detail (401 without a valid token, 403 for a scope that does not allow it) and changes
nothing: the store, the responses and the ledger are compared before and after; a refused
changing call is audited as refused.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from sessions_admin.api.app import api
from sessions_admin.api.auth import RUNTIME, SIGNED_IN, SWITCHES
from sessions_admin.core import db, lineage
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import ApiToken, AuditEntry
from sessions_admin.routers import responses_alias
from sessions_admin.signin.roles import DELETE, OPERATE, VIEW, assign_role
from tests.api.conftest import API, ApiClient
from tests.console import urlmap

PUBLIC = "public"
# (method, path as the schema names it): the permission it needs.
ROUTES: dict[tuple[str, str], str] = {
    ("GET", "/openapi.json"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("GET", "/me"): SIGNED_IN,
    ("POST", "/runtime/sessions"): RUNTIME,
    ("GET", "/runtime/live"): RUNTIME,
    ("GET", "/runtime/sessions/{session_id}"): RUNTIME,
    ("GET", "/runtime/sessions/{session_id}/messages"): RUNTIME,
    ("POST", "/runtime/sessions/{session_id}/messages"): RUNTIME,
    ("POST", "/runtime/sessions/{session_id}/turns"): RUNTIME,
    ("POST", "/runtime/sessions/{session_id}/usage"): RUNTIME,
    ("POST", "/runtime/sessions/{session_id}/rotate"): RUNTIME,
    ("POST", "/runtime/reset"): RUNTIME,
    ("POST", "/runtime/resume"): RUNTIME,
    ("POST", "/runtime/sessions/{session_id}/branch"): RUNTIME,
    ("POST", "/runtime/sessions/{session_id}/undo"): RUNTIME,
    ("POST", "/runtime/sessions/{session_id}/retry"): RUNTIME,
    ("POST", "/runtime/sessions/{session_id}/redo"): RUNTIME,
    ("PUT", "/runtime/sessions/{session_id}/transcript"): RUNTIME,
    ("POST", "/runtime/conversations/resolve"): RUNTIME,
    ("GET", "/switches"): SWITCHES,
    ("GET", "/switches/stream"): SWITCHES,
    # merges and deletion (apiwrite)
    ("GET", "/merges/preview"): VIEW,
    ("POST", "/merges"): OPERATE,
    ("POST", "/merges/{merge_id}/undo"): OPERATE,
    ("GET", "/cascades/{session_id}"): DELETE,
    ("POST", "/cascades/{session_id}"): DELETE,
    ("POST", "/bulk-deletes/dry-run"): DELETE,
    ("POST", "/bulk-deletes"): DELETE,
    ("GET", "/jobs"): DELETE,
    ("GET", "/jobs/{job_id}"): DELETE,
    ("POST", "/jobs/{job_id}/cancel"): DELETE,
    ("GET", "/trash"): DELETE,
    ("POST", "/trash/{entry_id}/restore"): DELETE,
    # apiread: the operator's reads (api/sessions.py)
    ("GET", "/sessions"): VIEW,
    ("GET", "/sessions/search"): VIEW,
    ("GET", "/sessions/{session_id}"): VIEW,
    ("GET", "/sessions/{session_id}/transcript"): VIEW,
    ("GET", "/forks"): VIEW,
    ("GET", "/sessions/{session_id}/forks"): VIEW,
    ("GET", "/audit"): VIEW,
    ("GET", "/audit/export"): VIEW,
    # governance (api/governance.py): holds as support may, retention and erasure admins only
    ("GET", "/holds"): OPERATE,
    ("POST", "/holds"): OPERATE,
    ("POST", "/holds/{hold_id}/release"): OPERATE,
    ("GET", "/retention/policies"): DELETE,
    ("POST", "/retention/policies"): DELETE,
    ("GET", "/retention/policies/{policy_id}"): DELETE,
    ("DELETE", "/retention/policies/{policy_id}"): DELETE,
    ("GET", "/retention/policies/{policy_id}/preview"): DELETE,
    ("POST", "/retention/policies/{policy_id}/enable"): DELETE,
    ("POST", "/retention/policies/{policy_id}/disable"): DELETE,
    ("GET", "/retention/policies/{policy_id}/runs"): DELETE,
    ("POST", "/retention/policies/{policy_id}/runs"): DELETE,
    ("POST", "/erasure/preview"): DELETE,
    ("GET", "/erasure/requests"): DELETE,
    ("POST", "/erasure/requests"): DELETE,
    ("GET", "/erasure/requests/{request_id}"): DELETE,
    ("GET", "/erasure/requests/{request_id}/receipt"): DELETE,
}
# A plausible body per route (an allowed call may still be refused by the core: 409, 422).
BODIES: dict[tuple[str, str], dict] = {
    ("POST", "/runtime/sessions"): {"source": "cli", "session_key": "cli:seed"},
    ("POST", "/runtime/sessions/{session_id}/messages"): {
        "messages": [{"role": "user", "content": "from the access table"}]
    },
    ("POST", "/runtime/sessions/{session_id}/turns"): {"response_id": "resp-access"},
    ("POST", "/runtime/sessions/{session_id}/usage"): {"input_tokens": 3},
    ("POST", "/runtime/sessions/{session_id}/rotate"): {},
    ("POST", "/runtime/reset"): {"session_key": "cli:seed"},
    ("POST", "/runtime/resume"): {"ref": "{session_id}"},
    ("POST", "/runtime/sessions/{session_id}/branch"): {},
    ("PUT", "/runtime/sessions/{session_id}/transcript"): {"messages": []},
    ("POST", "/runtime/conversations/resolve"): {"conversation": "seed-slug", "source": "cli"},
    # merges and deletion (apiwrite)
    ("POST", "/merges"): {"session_ids": ["{session_id}", "x"], "fingerprint": "stale"},
    ("POST", "/cascades/{session_id}"): {"fingerprint": "stale", "reason": "access table"},
    ("POST", "/bulk-deletes/dry-run"): {"preset": "empty"},
    ("POST", "/bulk-deletes"): {"preset": "empty", "fingerprint": "stale", "reason": "access"},
    # governance
    ("POST", "/holds"): {"kind": "session", "subject": "{session_id}", "reason": "access table"},
    ("POST", "/holds/{hold_id}/release"): {"reason": "access table"},
    ("POST", "/retention/policies"): {"name": "access table", "older_than_days": 30},
    ("POST", "/retention/policies/{policy_id}/runs"): {"fingerprint": "x", "reason": "access"},
    ("POST", "/erasure/preview"): {"user_id": "u-access-table"},
    ("POST", "/erasure/requests"): {
        "user_id": "u-access-table",
        "reference": "ACCESS-1",
        "fingerprint": "x",
    },
}
QUERIES = {
    ("GET", "/runtime/live"): "?session_key=cli:seed",
    # merges and deletion (apiwrite)
    ("GET", "/merges/preview"): "?ids=a&ids=b",
    ("GET", "/sessions/search"): "?q=marmoset",
}
QUERIES[("GET", "/switches/stream")] = "?after=0&seconds=0"  # the log so far, then it ends
SCOPES = ("runtime", "viewer", "support", "admin")
SCOPE_HOLDS = {
    "runtime": {RUNTIME, SIGNED_IN},
    "viewer": {VIEW, SIGNED_IN},
    "support": {VIEW, OPERATE, SIGNED_IN},
    "admin": {VIEW, OPERATE, DELETE, SIGNED_IN},
}
for held in SCOPE_HOLDS.values():
    held.add(SWITCHES)  # runtime tokens and every operator scope read the switch log
SAFE = ("GET", "HEAD")

pytestmark = pytest.mark.usefixtures("no_worker")


def schema_routes() -> set[tuple[str, str]]:
    paths = api.get_openapi_schema(path_prefix="")["paths"]
    found = {(method.upper(), path) for path, ops in paths.items() for method in ops}
    return found | {("GET", "/openapi.json"), ("GET", "/docs")}


def _url(route: tuple[str, str], seeded) -> str:
    return API + route[1].format(**seeded.url_args) + QUERIES.get(route, "")


def _body(route: tuple[str, str], seeded) -> dict | None:
    body = BODIES.get(route)
    if body is None:
        return None if route[0] in SAFE else {}
    return json.loads(json.dumps(body).replace("{session_id}", seeded.tip))


def _call(client: ApiClient, route, seeded):
    return client.call(route[0], _url(route, seeded), _body(route, seeded))


@pytest.fixture
def refused_tokens(make_token) -> dict[str, str]:
    """An expired and a revoked token of the strongest scopes, as secrets."""
    expired = make_token("admin", name="expired-admin", expires_days=1)
    ApiToken.objects.filter(name="expired-admin").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    expired_runtime = make_token("runtime", name="expired-runtime", expires_days=1)
    ApiToken.objects.filter(name="expired-runtime").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    revoked = make_token("admin", name="revoked-admin")
    revoked_runtime = make_token("runtime", name="revoked-runtime")
    actions.revoke_api_token(actor=None, name="revoked-admin")
    actions.revoke_api_token(actor=None, name="revoked-runtime")
    return {
        "no token": None,
        "expired": expired,
        "expired runtime": expired_runtime,
        "revoked": revoked,
        "revoked runtime": revoked_runtime,
        "not a token": "sa_not-a-token",
    }


def test_it_has_an_access_rule_for_every_route():
    assert schema_routes() == set(ROUTES)


def test_every_problem_answer_is_declared_and_the_schema_is_valid():
    from openapi_spec_validator import validate

    schema = json.loads(json.dumps(api.get_openapi_schema(path_prefix="/api/v1")))
    validate(schema)
    for ops in schema["paths"].values():
        for op in ops.values():
            assert op["responses"]["4XX"]["content"]["application/problem+json"]


@pytest.mark.parametrize("route", sorted(ROUTES), ids=lambda r: f"{r[0]} {r[1]}")
def test_it_refuses_calls_without_a_valid_token(route, seeded, refused_tokens):
    if ROUTES[route] == PUBLIC:
        assert _call(ApiClient(), route, seeded).status == 200
        return
    for why, secret in refused_tokens.items():
        before = urlmap.state()
        refused_before = AuditEntry.objects.filter(outcome=AuditEntry.REFUSED).count()
        answer = _call(ApiClient(secret), route, seeded)
        assert answer.status == 401, (why, answer.status, answer.body)
        assert answer.body["type"].endswith("/unauthorized"), why
        assert answer.headers["Content-Type"] == "application/problem+json"
        assert answer.headers["WWW-Authenticate"] == "Bearer"
        assert urlmap.state() == before, why
        refused = AuditEntry.objects.filter(outcome=AuditEntry.REFUSED).count() - refused_before
        assert refused == (0 if route[0] in SAFE else 1), why


@pytest.mark.parametrize("route", sorted(ROUTES), ids=lambda r: f"{r[0]} {r[1]}")
def test_it_allows_each_scope_exactly_what_the_table_says(route, seeded, make_token):
    needed = ROUTES[route]
    for scope in SCOPES:
        client = ApiClient(make_token(scope))
        before = urlmap.state()
        answer = _call(client, route, seeded)
        if needed == PUBLIC or needed in SCOPE_HOLDS[scope]:
            assert answer.status not in (401, 403) and answer.status < 500, (
                scope,
                answer.status,
                answer.body,
            )
        else:
            assert answer.status == 403, (scope, answer.status, answer.body)
            assert answer.body["type"].endswith("/forbidden"), scope
            assert urlmap.state() == before, scope


@pytest.mark.parametrize("route", sorted(ROUTES), ids=lambda r: f"{r[0]} {r[1]}")
def test_a_signed_in_operator_has_exactly_their_roles_permissions(route, seeded):
    needed = ROUTES[route]
    for role in ("viewer", "support", "admin"):
        user = User.objects.create_user(f"api-{role}-{User.objects.count()}")
        assign_role(user, role)
        browser = Client(enforce_csrf_checks=True)
        browser.force_login(user)
        if route[0] not in SAFE:
            # Without its CSRF token a signed-in session is refused, whatever the role.
            before = urlmap.state()
            answer = _call(ApiClient(client=browser), route, seeded)
            assert answer.status == 403 and "CSRF" in answer.body["detail"], (role, answer.body)
            assert urlmap.state() == before
            browser.get("/")  # the page sets the CSRF cookie a browser script would read
            token = browser.cookies["csrftoken"].value
            answer = ApiClient(client=browser).call(
                route[0], _url(route, seeded), _body(route, seeded), **{"X-CSRFToken": token}
            )
        else:
            answer = _call(ApiClient(client=browser), route, seeded)
        if needed == PUBLIC or (needed != RUNTIME and needed in SCOPE_HOLDS[role]):
            assert answer.status not in (401, 403) and answer.status < 500, (role, answer.body)
        else:
            assert answer.status == 403, (role, answer.status, answer.body)


def test_me_names_the_token_or_the_operator(make_token, admin_client):
    secret = make_token("runtime", name="tg-runtime", sources=["telegram"])
    assert ApiClient(secret).get("me").body == {
        "name": "tg-runtime",
        "scope": "runtime",
        "via": "token",
        "sources": ["telegram"],
    }
    assert ApiClient(client=admin_client).get("me").body["via"] == "session"


def test_a_revoked_token_is_refused_from_its_next_request(make_token):
    secret = make_token("runtime", name="soon-revoked")
    client = ApiClient(secret)
    assert client.get("me").status == 200
    actions.revoke_api_token(actor=None, name="soon-revoked")
    answer = client.get("me")
    assert answer.status == 401 and "revoked" in answer.body["detail"]


def test_an_expiring_token_is_refused_once_it_expired(make_token):
    secret = make_token("viewer", name="soon-expired", expires_days=1)
    assert ApiClient(secret).get("me").status == 200
    ApiToken.objects.filter(name="soon-expired").update(expires_at=timezone.now())
    answer = ApiClient(secret).get("me")
    assert answer.status == 401 and "expired" in answer.body["detail"]


def test_last_used_is_written_at_most_once_a_minute(make_token):
    secret = make_token("viewer", name="busy-viewer")
    client = ApiClient(secret)
    client.get("me")
    first = ApiToken.objects.get(name="busy-viewer").last_used_at
    assert first is not None
    for _ in range(3):
        client.get("me")
    assert ApiToken.objects.get(name="busy-viewer").last_used_at == first
    ApiToken.objects.filter(name="busy-viewer").update(last_used_at=first - timedelta(minutes=2))
    client.get("me")
    assert ApiToken.objects.get(name="busy-viewer").last_used_at > first


def test_a_runtime_token_limited_to_sources_touches_no_other_source(make_token, seeded):
    """The seeded sessions are from "cli": a telegram-only token can neither read nor write."""
    limited = ApiClient(make_token("runtime", name="tg-only", sources=["telegram"]))
    before = urlmap.state()
    for route in sorted(ROUTES):
        if ROUTES[route] != RUNTIME or route == ("POST", "/runtime/sessions"):
            continue
        answer = _call(limited, route, seeded)
        assert answer.status == 403, (route, answer.status, answer.body)
    # Starting a session of another source is refused too; one of its own source is not.
    answer = limited.post("runtime/sessions", {"source": "cli", "session_key": "x"})
    assert answer.status == 403
    # Nor may a new session of its own source end another source's live session of a key.
    assert lineage.live_session_for_key("cli:seed") is not None
    answer = limited.post(
        "runtime/sessions", {"source": "telegram", "session_key": "cli:seed", "join_live": False}
    )
    assert answer.status == 403, answer.body
    # A slug whose session is of another source is not continued, whatever source is claimed.
    answer = limited.post(
        "runtime/conversations/resolve", {"conversation": "seed-slug", "source": "telegram"}
    )
    assert answer.status == 403, answer.body
    assert urlmap.state() == before
    answer = limited.post("runtime/sessions", {"source": "telegram", "session_key": "tg:1"})
    assert answer.status == 201
    assert answer.body["created"] is True


def test_requests_over_the_rate_are_throttled_with_retry_after(make_token, settings):
    settings.SESSIONS_ADMIN_API_RATE = "3/min"
    client = ApiClient(make_token("viewer", name="throttled-viewer"))
    other = ApiClient(make_token("viewer", name="other-viewer"))
    answers = [client.get("me") for _ in range(4)]
    assert [a.status for a in answers] == [200, 200, 200, 429]
    throttled = answers[-1]
    assert throttled.body["type"].endswith("/throttled")
    assert throttled.headers["Content-Type"] == "application/problem+json"
    assert 1 <= int(throttled.headers["Retry-After"]) <= 60
    # Per token: another token still gets through.
    assert other.get("me").status == 200


def test_a_limited_token_cannot_move_another_sources_conversation_or_response(make_token):
    """Recording a turn on its own session re-points a slug and a stored response: a token
    limited to telegram may not take an api_server conversation or response that way."""
    api = ApiClient(make_token("runtime", name="as-only", sources=["api_server"]))
    telegram = ApiClient(make_token("runtime", name="tg-only-turns", sources=["telegram"]))
    theirs = api.post("runtime/sessions", {"source": "api_server", "session_key": "as:1"})
    mine = telegram.post("runtime/sessions", {"source": "telegram", "session_key": "tg:1"})
    theirs_id, mine_id = theirs.body["session_id"], mine.body["session_id"]
    recorded = api.post(
        f"runtime/sessions/{theirs_id}/turns",
        {"response_id": "resp_acme_1", "conversation": "acme-support", "data": {"model": "m"}},
    )
    assert recorded.status == 201, recorded.body
    response_before = db.fetchall(
        "SELECT response_id, data FROM responses ORDER BY response_id", alias=responses_alias()
    )
    slugs_before = db.fetchall(
        "SELECT name, response_id, session_id FROM conversations ORDER BY name",
        alias=responses_alias(),
    )

    for body in (
        {"response_id": "resp_tg_1", "conversation": "acme-support"},
        {"response_id": "resp_acme_1"},
    ):
        answer = telegram.post(f"runtime/sessions/{mine_id}/turns", body)
        assert answer.status == 403, (body, answer.body)

    assert (
        db.fetchall(
            "SELECT response_id, data FROM responses ORDER BY response_id",
            alias=responses_alias(),
        )
        == response_before
    )
    assert (
        db.fetchall(
            "SELECT name, response_id, session_id FROM conversations ORDER BY name",
            alias=responses_alias(),
        )
        == slugs_before
    )
    # Its own conversation and responses are its to record.
    own = telegram.post(
        f"runtime/sessions/{mine_id}/turns", {"response_id": "resp_tg_2", "conversation": "tg-chat"}
    )
    assert own.status == 201, own.body
