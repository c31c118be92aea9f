"""Refused attempts are in the audit log: who, what, from where (address, user agent), why.

Each refusal is made over HTTP as a client would make it, from a distinct
address and user agent, and the audit log is read back afterwards. The log
stays append-only: no URL changes or removes an entry, whatever the role.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from sessions_admin import core
from sessions_admin.ledger.models import AuditEntry, TrashEntry
from sessions_admin.signin.roles import assign_role
from tests.console import urlmap

ADDRESS = "203.0.113.7"
AGENT = "probe/1.0 (refusal test)"
PASSWORD = "correct horse battery staple"


def _client(role: str | None, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf, REMOTE_ADDR=ADDRESS, HTTP_USER_AGENT=AGENT)
    if role:
        user = User.objects.create_user(f"refused-{role}", password=PASSWORD)
        assign_role(user, role)
        client.force_login(user)
    return client


def _refusal(action: str) -> AuditEntry:
    """The one refusal recorded for ``action``, with the client it came from."""
    entry = AuditEntry.objects.get(action=action, outcome=AuditEntry.REFUSED)
    assert (entry.client_address, entry.user_agent) == (ADDRESS, AGENT)
    return entry


def _ended_pair() -> list[str]:
    ids = []
    for n in range(2):
        sid = core.create_session(source="api_server", started_at=1000.0 + n).session_id
        core.append_message(session_id=sid, role="user", content=f"fork {n}")
        core.end_session(session_id=sid, end_reason="user_exit")
        ids.append(sid)
    return ids


def test_a_viewers_403_on_an_action_is_recorded():
    ids = _ended_pair()
    response = _client("viewer").post(
        reverse("merge_execute"), {"ids": ids, "fingerprint": "x", "reason": "try"}
    )
    assert response.status_code == 403
    entry = _refusal("merge_execute")
    assert entry.actor_name == "refused-viewer"
    assert "does not allow" in entry.detail
    assert entry.before == {"method": "POST", "path": reverse("merge_execute")}


def test_a_viewers_403_on_a_session_action_names_the_session():
    sid = core.create_session(source="cli").session_id
    assert _client("viewer").post(reverse("session_undo", args=[sid])).status_code == 403
    assert _refusal("session_undo").session_ids == [sid]


def test_a_merge_without_its_preview_fingerprint_is_recorded():
    ids = _ended_pair()
    response = _client("support").post(reverse("merge_execute"), {"ids": ids, "reason": "r"})
    assert response.status_code == 200 and b"fingerprint" in response.content
    entry = _refusal("merge")
    assert set(entry.session_ids) == set(ids) and "fingerprint" in entry.detail


def test_a_forged_merge_fingerprint_is_recorded_once():
    ids = _ended_pair()
    response = _client("support").post(
        reverse("merge_execute"), {"ids": ids, "fingerprint": "forged", "reason": "r"}
    )
    assert response.status_code == 200
    # The core refused it inside the audited action: one entry, not two, with the client.
    entries = AuditEntry.objects.filter(action="merge")
    assert entries.count() == 1
    entry = entries.get()
    assert entry.outcome == AuditEntry.FAILED
    assert (entry.client_address, entry.user_agent) == (ADDRESS, AGENT)


def test_a_forged_cascade_fingerprint_and_a_missing_reason_are_recorded():
    sid = core.create_session(source="cli").session_id
    core.end_session(session_id=sid, end_reason="user_exit")
    client = _client("admin")
    url = reverse("cascade_delete_confirm", args=[sid])
    assert client.post(url, {"fingerprint": "forged", "reason": "r"}).status_code == 200
    assert "store changed since the plan" in _refusal("cascade_delete").detail
    AuditEntry.objects.all().delete()
    plan = core.plan_cascade_delete(session_ids=[sid])
    assert client.post(url, {"fingerprint": plan.fingerprint, "reason": " "}).status_code == 200
    assert "Give a reason" in _refusal("cascade_delete").detail
    assert core.lineage.session_row(sid) is not None


def test_a_forged_bulk_digest_is_recorded():
    for n in range(3):
        sid = core.create_session(source="cron", started_at=1000.0 + n).session_id
        core.end_session(session_id=sid, end_reason="user_exit")
    response = _client("admin").post(
        reverse("bulk_delete_start"),
        {"preset": "by_source", "source": "cron", "reason": "r", "digest": "0" * 32},
    )
    assert response.status_code == 200
    entry = _refusal("bulk_delete")
    assert "changed since the dry run" in entry.detail and len(entry.session_ids) == 3
    assert entry.before["digest"] == "0" * 32


def test_unknown_merge_and_trash_ids_are_recorded():
    client = _client("admin")
    assert client.post(reverse("merge_undo", args=[987654])).status_code == 404
    assert _refusal("unmerge").before["merge_id"] == 987654
    assert not TrashEntry.objects.filter(pk=876543).exists()
    assert client.post(reverse("trash_restore", args=[876543])).status_code == 404
    assert "876543" in _refusal("restore").detail
    assert client.post(reverse("stray_move_undo", args=[765432])).status_code == 404
    assert _refusal("return_stray_messages").before["entry"] == 765432


def test_a_csrf_failure_is_recorded():
    sid = core.create_session(source="cli").session_id
    response = _client("support", csrf=True).post(reverse("session_undo", args=[sid]))
    assert response.status_code == 403
    entry = _refusal("session_undo")
    assert "CSRF" in entry.detail and entry.actor_name == "refused-support"


@pytest.mark.parametrize("name", ["refused-viewer", "nobody-by-this-name"])
def test_a_failed_sign_in_is_recorded_the_same_for_real_and_unknown_names(name):
    User.objects.create_user("refused-viewer", password=PASSWORD)
    client = _client(None)
    response = client.post(reverse("login"), {"username": name, "password": "wrong"})
    assert response.status_code in (200, 429)
    entry = _refusal("sign_in")
    assert entry.actor_name == "anonymous" and entry.before["username"] == name
    assert entry.detail == "wrong user name or password"
    assert "wrong" not in str(entry.before)  # never the password


def test_every_audit_entry_names_its_client():
    sid = core.create_session(source="cli", session_key="cli:audit-client").session_id
    core.append_messages(
        session_id=sid,
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    )
    response = _client("support").post(reverse("session_undo", args=[sid]), {"reason": "oops"})
    assert response.status_code in (200, 302, 303)
    entry = AuditEntry.objects.get(action="undo")
    assert entry.outcome == AuditEntry.OK
    assert (entry.client_address, entry.user_agent) == (ADDRESS, AGENT)


def test_the_audit_log_is_append_only_for_every_role():
    seeded = urlmap.seed()
    AuditEntry.objects.create(actor_name="seed", action="merge", outcome=AuditEntry.OK)
    before = list(AuditEntry.objects.order_by("pk").values_list("pk", "action", "outcome"))
    # No URL of the console is about changing or removing an audit entry.
    for route in urlmap.routes():
        assert "audit" not in route.name or route.name in {
            "audit_log",
            "audit_export",
            "session_history",
            "signin_failures",
        }, route.name
    audit_urls = [
        reverse("audit_log"),
        reverse("audit_export"),
        reverse("session_history", args=[seeded.tip]),
    ]
    for role in ("viewer", "support", "admin"):
        client = _client(role)
        for url in audit_urls:
            for method in ("post", "put", "patch", "delete"):
                status = getattr(client, method)(url).status_code
                assert status == 405, (role, method, url, status)
        assert client.get(reverse("audit_log")).status_code == 200
    after = AuditEntry.objects.exclude(outcome=AuditEntry.REFUSED).order_by("pk")
    assert list(after.values_list("pk", "action", "outcome")) == before
