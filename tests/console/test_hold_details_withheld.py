"""A legal hold's subject and reason, and an erasure's reference, reach only the roles that open
their pages (signin.roles.withheld_from): a viewer sees that a session is under a legal hold,
and of a hold's audit entries who did what when to which session, on the session page, its
status fragment, the audit log, a session's history and the CSV export; support and admins see
everything, as before."""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from sessions_admin import core
from sessions_admin.ledger import actions
from sessions_admin.ledger.audit_log import EXPORT_COLUMNS
from sessions_admin.ledger.models import AuditAction, AuditEntry

USER = "zoe-7731"
SESSION_REASON = "subpoena 2026-17 from the Paris court"
USER_REASON = "fraud inquiry about zoe, case 88"
RELEASE_REASON = "court order lifted on appeal 2026-44"
REFERENCE = "DSR ticket from zoe@example.org"
WITHHELD = "details shown to support and admins"
SECRETS = (SESSION_REASON, USER_REASON, RELEASE_REASON, REFERENCE)


@pytest.fixture
def held(operator_factory):
    """A session under a hold on itself, a user under a released hold, and an erasure entry."""
    placer = operator_factory("support", username="op-placer")
    sid = core.create_session(source="telegram", user_id="someone").session_id
    theirs = core.create_session(source="telegram", user_id=USER).session_id
    hold = actions.place_hold(actor=placer, kind="session", subject=sid, reason=SESSION_REASON)
    user_hold = actions.place_hold(actor=placer, kind="user", subject=USER, reason=USER_REASON)
    actions.release_hold(actor=placer, hold_id=user_hold.id, reason=RELEASE_REASON)
    actions.record(
        actor=placer,
        action=AuditAction.ERASURE_REQUEST,
        session_ids=[],
        before={"erasure_request": 1, "subject_sha256": "ab" * 32},
        after={"sessions": 1, "messages": 2},
        reason=REFERENCE,
    )
    return {"sid": sid, "theirs": theirs, "hold": hold}


def _csv(client, query: str = "") -> str:
    response = client.get(reverse("audit_export") + query)
    assert response.status_code == 200
    return b"".join(response.streaming_content).decode()


def test_a_viewer_sees_that_a_session_is_held_but_not_the_hold(signed_in, held):
    client = signed_in("viewer")
    url = reverse("session_detail", args=[held["sid"]])
    page = client.get(url).content.decode()
    assert "Under legal hold" in page
    assert SESSION_REASON not in page
    assert f"legal hold #{held['hold'].id}" not in page
    assert reverse("holds") not in page
    status = client.get(url + "?part=status", HTTP_HX_REQUEST="true").content.decode()
    assert "Under legal hold" in status and SESSION_REASON not in status
    assert f"#{held['hold'].id}" not in status
    for part in ("meta", "actions", "lineage"):
        fragment = client.get(url + f"?part={part}", HTTP_HX_REQUEST="true").content.decode()
        assert not any(secret in fragment for secret in SECRETS), part
    # The user's session (its hold released) shows no hold at all.
    other = client.get(reverse("session_detail", args=[held["theirs"]])).content.decode()
    assert "legal hold" not in other.lower()
    listed = client.get(reverse("session_list")).content.decode()
    assert not any(secret in listed for secret in SECRETS)


def test_support_and_admins_see_the_hold_whole_and_only_admins_an_erasures_reference(
    signed_in, held
):
    for role in ("support", "admin"):
        client = signed_in(role)
        page = client.get(reverse("session_detail", args=[held["sid"]])).content.decode()
        assert f"on legal hold #{held['hold'].id}" in page and SESSION_REASON in page
        log = client.get(reverse("audit_log") + "?action=place_hold").content.decode()
        assert SESSION_REASON in log and USER_REASON in log and USER in log
        assert WITHHELD not in log
        released = client.get(reverse("audit_log") + "?action=release_hold").content.decode()
        assert RELEASE_REASON in released
        export = _csv(client)
        assert SESSION_REASON in export and USER_REASON in export and RELEASE_REASON in export
        # An erasure's reference: admins only, as its pages.
        assert (REFERENCE in export) == (role == "admin"), role
        erasure_log = client.get(reverse("audit_log") + "?action=erasure_request").content.decode()
        assert (REFERENCE in erasure_log) == (role == "admin"), role
        assert ("reference shown to admins" in erasure_log) == (role == "support"), role


def test_a_viewer_reads_who_placed_and_released_holds_but_not_on_whom_nor_why(signed_in, held):
    client = signed_in("viewer")
    for action in ("place_hold", "release_hold", "erasure_request", ""):
        log = client.get(reverse("audit_log") + f"?action={action}").content.decode()
        assert not any(secret in log for secret in SECRETS), action
        assert USER not in log, action
        if action:
            assert f'<span class="pill action">{action}</span>' in log
            assert "op-placer" in log
    log = client.get(reverse("audit_log") + "?action=place_hold").content.decode()
    assert WITHHELD in log
    # The session-hold entry still names its session (a linked session id), and its outcome.
    assert f'data-session="{held["sid"]}"' in log and '<span class="pill ok">ok</span>' in log
    history = client.get(
        reverse("session_history", args=[held["sid"]]), HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "place_hold" in history and WITHHELD in history
    assert SESSION_REASON not in history


def test_a_viewers_csv_export_withholds_the_same(signed_in, held):
    client = signed_in("viewer")
    export = _csv(client)
    assert not any(secret in export for secret in SECRETS)
    assert USER not in export
    rows = list(csv.DictReader(io.StringIO(export)))
    assert list(rows[0]) == EXPORT_COLUMNS
    holds_rows = [r for r in rows if r["action"] in ("place_hold", "release_hold")]
    assert len(holds_rows) == 3
    for row in holds_rows:
        assert row["actor"] == "op-placer" and row["outcome"] == "ok"
        assert WITHHELD in row["reason"] and not row["before"] and not row["after"]
    placed = [r for r in holds_rows if r["sessions"]]
    assert [r["sessions"] for r in placed] == [held["sid"]]
    (erasure,) = [r for r in rows if r["action"] == "erasure_request"]
    # Hashes and counts stay; the reference does not.
    assert "ab" * 32 in erasure["before"] and '"sessions": 1' in erasure["after"]
    assert "reference shown to admins" in erasure["reason"]


def test_a_viewer_reads_no_hold_reason_in_a_merge_preview_or_a_refused_merges_entry(
    client, operator_factory, held
):
    """Attack 42 (V): the merge preview's held list and a refused merge's audit detail quoted
    the hold ("legal hold #1 on user zed-41 (subpoena …)") to a viewer."""
    other = core.create_session(source="telegram", user_id="someone").session_id
    viewer_user, support_user = operator_factory("viewer"), operator_factory("support")
    client.force_login(viewer_user)
    viewer = client
    preview = viewer.get(
        f"/merge/preview/?ids={held['sid']}&ids={other}&target={other}"
    ).content.decode()
    client.force_login(support_user)
    support = client
    # Into the other session: the held one's messages would leave its hold, refused.
    plan = core.plan_merge(session_ids=[held["sid"], other], target_id=other)
    support.post(
        "/merge/",
        {
            "ids": [held["sid"], other],
            "target": other,
            "fingerprint": plan.fingerprint,
            "reason": "one person",
        },
    )
    refused = AuditEntry.objects.filter(action="merge").get()
    assert refused.outcome != "ok" and f"legal hold #{held['hold'].id}" in refused.detail
    client.force_login(viewer_user)
    for page in (preview, viewer.get("/audit/").content.decode(), _csv(viewer)):
        assert SESSION_REASON not in page
