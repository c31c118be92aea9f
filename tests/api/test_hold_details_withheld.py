"""A legal hold's subject and reason, and an erasure's reference, reach over the API only the
scopes whose roles open their pages (signin.roles.withheld_from): a viewer token (or a signed-in
viewer) reads that a session is under a legal hold, and of a hold's audit entries who did what
when to which session, with the rest null and ``details_withheld``; support and admin tokens
read everything. Every answer still matches its published schema."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from sessions_admin import core
from sessions_admin.api.sessions import AuditPage, SessionDetail
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditAction
from sessions_admin.signin.roles import assign_role
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.usefixtures("no_worker")

USER = "zoe-5512"
SESSION_REASON = "subpoena 2026-17 from the Paris court"
USER_REASON = "fraud inquiry about zoe, case 88"
RELEASE_REASON = "court order lifted on appeal 2026-44"
REFERENCE = "DSR ticket from zoe@example.org"
SECRETS = (SESSION_REASON, USER_REASON, RELEASE_REASON, REFERENCE, USER)


@pytest.fixture
def held(make_token):
    support = ApiClient(make_token("support", name="support-desk"))
    sid = core.create_session(source="telegram", user_id="someone").session_id
    placed = support.post("holds", {"kind": "session", "subject": sid, "reason": SESSION_REASON})
    assert placed.status == 201, placed.body
    user_hold = support.post("holds", {"kind": "user", "subject": USER, "reason": USER_REASON})
    released = support.post(f"holds/{user_hold.body['id']}/release", {"reason": RELEASE_REASON})
    assert released.status == 200, released.body
    actions.record(
        actor="api:compliance",
        action=AuditAction.ERASURE_REQUEST,
        session_ids=[],
        before={"erasure_request": 1, "subject_sha256": "ab" * 32},
        after={"sessions": 1, "messages": 2},
        reason=REFERENCE,
    )
    return {"sid": sid, "hold_id": placed.body["id"], "support": support}


def _viewer_browser(db) -> ApiClient:
    user = User.objects.create_user("op-viewer", password="correct horse battery staple")
    assign_role(user, "viewer")
    browser = Client()
    browser.force_login(user)
    return ApiClient(client=browser)


def _audit(client: ApiClient, action: str = "") -> list[dict]:
    answer = client.get(f"audit?action={action}" if action else "audit")
    assert answer.status == 200, answer.body
    AuditPage.model_validate(answer.body)  # what the schema publishes
    return answer.body["entries"]


def test_a_viewer_reads_that_a_session_is_held_but_not_the_hold(make_token, held, db):
    for viewer in (ApiClient(make_token("viewer", name="reader")), _viewer_browser(db)):
        answer = viewer.get(f"sessions/{held['sid']}")
        assert answer.status == 200, answer.body
        SessionDetail.model_validate(answer.body)
        assert answer.body["hold"] == {
            "id": None,
            "kind": None,
            "subject": None,
            "reason": None,
            "details_withheld": True,
        }
        assert not any(secret in answer.headers.content.decode() for secret in SECRETS)
    whole = held["support"].get(f"sessions/{held['sid']}").body["hold"]
    assert whole == {
        "id": held["hold_id"],
        "kind": "session",
        "subject": held["sid"],
        "reason": SESSION_REASON,
        "details_withheld": False,
    }


def test_a_viewer_reads_hold_entries_without_their_details(make_token, held, db):
    for viewer in (ApiClient(make_token("viewer", name="reader")), _viewer_browser(db)):
        entries = _audit(viewer, "place_hold") + _audit(viewer, "release_hold")
        assert len(entries) == 3
        for entry in entries:
            assert entry["details_withheld"] is True
            assert entry["reason"] is None and entry["detail"] is None
            assert entry["before"] is None and entry["after"] is None
            assert entry["actor"] == "api:support-desk" and entry["outcome"] == "ok"
            assert not any(secret in str(entry) for secret in SECRETS)
        assert [e["session_ids"] for e in entries if e["session_ids"]] == [[held["sid"]]]
        (erasure,) = _audit(viewer, "erasure_request")
        assert erasure["details_withheld"] is True and erasure["reason"] is None
        assert erasure["before"]["subject_sha256"] == "ab" * 32
        assert erasure["after"] == {"sessions": 1, "messages": 2}
        everything = viewer.get("audit?limit=500").headers.content.decode()
        assert not any(secret in everything for secret in SECRETS)
        export = viewer.get("audit/export").body.decode()
        assert not any(secret in export for secret in SECRETS)
        assert "details shown to support and admins" in export


def test_support_reads_hold_entries_whole_and_only_admins_an_erasures_reference(make_token, held):
    support = held["support"]
    admin = ApiClient(make_token("admin", name="compliance"))
    for client in (support, admin):
        placed = _audit(client, "place_hold")
        assert {e["reason"] for e in placed} == {SESSION_REASON, USER_REASON}
        assert all(e["details_withheld"] is False for e in placed)
        assert {e["before"]["subject"] for e in placed} == {held["sid"], USER}
        (released,) = _audit(client, "release_hold")
        assert released["reason"] == RELEASE_REASON
        export = client.get("audit/export").body.decode()
        assert SESSION_REASON in export and RELEASE_REASON in export
    (erasure,) = _audit(support, "erasure_request")
    assert erasure["reason"] is None and erasure["details_withheld"] is True
    assert REFERENCE not in support.get("audit/export").body.decode()
    (erasure,) = _audit(admin, "erasure_request")
    assert erasure["reason"] == REFERENCE and erasure["details_withheld"] is False
    assert REFERENCE in admin.get("audit/export").body.decode()


def test_the_published_schema_describes_what_a_viewer_gets(make_token, held):
    """A viewer's answers validate against the OpenAPI document itself (the session read's
    hold is its own schema, not the holds list's, whose fields are never null)."""
    import jsonschema

    viewer = ApiClient(make_token("viewer", name="reader"))
    schema = viewer.get("openapi.json").body
    assert schema["openapi"].startswith("3.")
    components = schema["components"]["schemas"]

    def validate(body, name: str) -> None:
        jsonschema.validate(
            body,
            {"$ref": f"#/components/schemas/{name}", "components": {"schemas": components}},
        )

    validate(viewer.get(f"sessions/{held['sid']}").body, "SessionDetail")
    validate(viewer.get("audit").body, "AuditPage")
    validate(held["support"].get(f"sessions/{held['sid']}").body, "SessionDetail")
    hold = components["SessionDetail"]["properties"]["hold"]["anyOf"][0]["$ref"]
    assert "details_withheld" in components[hold.rsplit("/", 1)[1]]["properties"]
    assert "details_withheld" in components["AuditEntryOut"]["properties"]
