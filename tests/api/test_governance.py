"""Holds, retention and erasure over the API (api/governance.py): the console's rules and
doors through another door. Every test reads the store and the dashboard database after the
call: a hold stored or released, a policy created disabled, enabled, deleted, a run's job and
what it deleted (never a held session), an erasure request queued, run and receipted exactly
as the console's; each change audited with the token as actor, each refusal too."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import holds
from sessions_admin.ledger import actions, erasure, jobs
from sessions_admin.ledger.models import AuditEntry, DeleteJob, ErasureRequest, RetentionPolicy
from tests.api.conftest import ApiClient
from tests.builders import (
    erasures_run_inline,  # noqa: F401 - an autouse fixture
    store_snapshot,
)
from tests.helpers import session_ids
from tests.ledger.test_retention import old_session

pytestmark = pytest.mark.usefixtures("no_worker")

USER = "u-api-erasure-4417"


@pytest.fixture
def support(make_token) -> ApiClient:
    return ApiClient(make_token("support", name="support-desk"))


@pytest.fixture
def admin(make_token) -> ApiClient:
    return ApiClient(make_token("admin", name="compliance"))


def _entries(action: str, outcome: str = AuditEntry.OK) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=action, outcome=outcome).order_by("pk"))


# --- holds -------------------------------------------------------------------------------------


def test_a_hold_placed_over_the_api_is_stored_audited_and_stops_a_delete(support, admin):
    kept = old_session()
    answer = support.post("holds", {"kind": "session", "subject": kept, "reason": "litigation 12"})
    assert answer.status == 201, answer.body
    stored = holds.get_hold(hold_id=answer.body["id"])
    assert stored.active and stored.subject == kept and stored.reason == "litigation 12"
    assert stored.placed_by == "api:support-desk"
    entry = _entries("place_hold")[-1]
    assert entry.actor_name == "api:support-desk" and entry.session_ids == [kept]
    assert [h["id"] for h in support.get("holds").body] == [stored.id]

    # A cascade delete of the held session is refused by the core, whatever the door.
    plan = core.plan_cascade_delete(session_ids=[kept])
    with pytest.raises(holds.SessionsHeld):
        core.execute_cascade_delete(
            session_ids=[kept], expected_fingerprint=plan.fingerprint, actor="t", reason="t"
        )
    assert kept in session_ids()


def test_a_bad_hold_is_refused_audited_and_stores_nothing(support):
    before = store_snapshot("sessions")
    for body, status in (
        ({"kind": "chat", "subject": "x", "reason": "r"}, 422),
        ({"kind": "session", "subject": "no-such-session", "reason": "r"}, 404),
        ({"kind": "session", "subject": "x", "reason": "  "}, 422),
        ({"kind": "user", "subject": " u-padded", "reason": "r"}, 422),
    ):
        answer = support.post("holds", body)
        assert answer.status == status, (body, answer.body)
    assert holds.recent_holds() == []
    assert store_snapshot("sessions") == before
    assert not _entries("place_hold")
    # Every refusal is audited under the console's action, a body the schema refuses (the
    # unknown kind) too.
    assert (
        len(_entries("place_hold", AuditEntry.REFUSED))
        + len(_entries("place_hold", AuditEntry.FAILED))
        == 4
    )


def test_releasing_a_hold_needs_a_reason_and_lets_deletes_through_again(support):
    kept = old_session()
    hold = holds.place_hold(kind="session", subject=kept, reason="case", actor="ada")
    assert support.post(f"holds/{hold.id}/release", {"reason": ""}).status == 422
    assert holds.get_hold(hold_id=hold.id).active
    assert support.post("holds/999999/release", {"reason": "done"}).status == 404
    # A number no database column holds is refused before any query (was a 500).
    assert support.post(f"holds/{2**67}/release", {"reason": "done"}).status == 422

    answer = support.post(f"holds/{hold.id}/release", {"reason": "case closed"})
    assert answer.status == 200 and answer.body["active"] is False
    released = holds.get_hold(hold_id=hold.id)
    assert not released.active and released.release_reason == "case closed"
    assert released.released_by == "api:support-desk"
    assert _entries("release_hold")[-1].actor_name == "api:support-desk"

    again = support.post(f"holds/{hold.id}/release", {"reason": "twice"})
    assert again.status == 422 and "already released" in again.body["detail"]
    assert _entries("release_hold", AuditEntry.REFUSED) or _entries(
        "release_hold", AuditEntry.FAILED
    )
    assert support.get("holds?active=false").body[0]["id"] == hold.id
    assert support.get("holds?active=true").body == []


# --- retention ---------------------------------------------------------------------------------


POLICY = {"name": "old chats", "older_than_days": 30, "reason": "data policy v2"}


def test_a_policy_is_created_disabled_and_a_bad_one_stores_nothing(admin):
    for days in (0, -1, 36501, "30", None):
        answer = admin.post("retention/policies", {**POLICY, "older_than_days": days})
        assert answer.status == 422, (days, answer.body)
        assert answer.body["errors"][0]["field"] == "older_than_days"
    assert admin.post("retention/policies", {**POLICY, "every_hours": 0.01}).status == 422
    assert not RetentionPolicy.objects.exists()

    doomed = old_session()
    answer = admin.post("retention/policies", POLICY)
    assert answer.status == 201, answer.body
    policy = RetentionPolicy.objects.get()
    assert policy.pk == answer.body["id"] and not policy.enabled and policy.next_run_at is None
    assert policy.created_by == "api:compliance" and policy.older_than_days == 30
    assert answer.body["would_delete"] == 1
    entry = _entries("retention_policy_create")[-1]
    assert entry.actor_name == "api:compliance" and entry.reason == "data policy v2"
    assert doomed in session_ids()  # creating deletes nothing


def test_enabling_a_purging_policy_needs_its_confirmation_then_disable_and_delete(admin):
    policy = RetentionPolicy.objects.create(
        name="purge", older_than_days=30, mode="purge", created_by="t"
    )
    url = f"retention/policies/{policy.pk}"
    refused = admin.post(f"{url}/enable", {})
    assert refused.status == 422 and refused.body["errors"][0]["field"] == "confirm_purge"
    policy.refresh_from_db()
    assert not policy.enabled
    assert _entries("retention_policy_enable", AuditEntry.REFUSED)

    answer = admin.post(f"{url}/enable", {"confirm_purge": True, "reason": "approved"})
    assert answer.status == 200 and answer.body["enabled"] is True
    policy.refresh_from_db()
    assert policy.enabled and policy.next_run_at is not None
    assert _entries("retention_policy_enable")[-1].actor_name == "api:compliance"

    assert admin.post(f"{url}/disable", {}).status == 200
    policy.refresh_from_db()
    assert not policy.enabled and policy.next_run_at is None

    job = jobs.create_bulk_delete_job(
        session_ids=[old_session()], include_live=False, actor="t", reason="t"
    )
    DeleteJob.objects.filter(pk=job).update(policy=policy)
    assert admin.call("DELETE", f"{url}?reason=superseded").status == 204
    assert not RetentionPolicy.objects.filter(pk=policy.pk).exists()
    assert DeleteJob.objects.filter(pk=job).exists()  # its past runs stay
    assert _entries("retention_policy_delete")[-1].reason == "superseded"
    assert admin.call("DELETE", url).status == 404


def test_a_run_deletes_exactly_the_preview_never_a_held_session(admin):
    doomed = [old_session(title=f"chat {n}") for n in range(20)]
    held = old_session(user_id="u-held")
    hold = holds.place_hold(kind="user", subject="u-held", reason="case 9", actor="ada")
    policy = RetentionPolicy.objects.create(name="quiet", older_than_days=30, created_by="t")
    url = f"retention/policies/{policy.pk}"

    preview = admin.get(f"{url}/preview").body
    assert preview["count"] == 20 and {s["id"] for s in preview["sessions"]} == set(doomed)
    assert [(h["session_id"], h["hold_id"]) for h in preview["held"]] == [(held, hold.id)]
    assert preview["typed_confirmation"]["sessions"] == 20
    fingerprint = preview["fingerprint"]

    for body, status in (
        ({"fingerprint": fingerprint, "reason": "q3"}, 422),  # 20 sessions: the number typed
        ({"fingerprint": fingerprint, "reason": "q3", "typed_count": 19}, 422),
        ({"fingerprint": fingerprint, "reason": " ", "typed_count": 20}, 422),
        ({"fingerprint": "0" * 32, "reason": "q3", "typed_count": 20}, 409),
    ):
        answer = admin.post(f"{url}/runs", body)
        assert answer.status == status, (body, answer.body)
        assert not DeleteJob.objects.exists(), body
    assert answer.body["type"].endswith("/plan-changed")
    assert len(AuditEntry.objects.filter(action="retention_run").exclude(outcome="ok")) == 4

    answer = admin.post(
        f"{url}/runs", {"fingerprint": fingerprint, "reason": "q3", "typed_count": 20}
    )
    assert answer.status == 201, answer.body
    job = DeleteJob.objects.get(policy=policy)
    assert answer.body["job"]["id"] == job.pk and job.total == 20 and not job.purge
    entry = _entries("retention_run")[-1]
    assert entry.actor_name == "api:compliance" and set(entry.session_ids) == set(doomed)
    jobs.run_job(job_id=job.pk)
    assert not set(doomed) & session_ids()
    assert held in session_ids()

    runs = admin.get(f"{url}/runs").body
    assert [(r["id"], r["state"], r["done"]) for r in runs] == [(job.pk, "done", 20)]
    listed = admin.get("retention/policies").body
    assert listed[0]["runs"][0]["id"] == job.pk and listed[0]["held_left_out"] == 1


def test_a_run_refuses_a_selection_that_changed_and_a_purge_unconfirmed(admin):
    shown = old_session()
    policy = RetentionPolicy.objects.create(
        name="purge", older_than_days=30, mode="purge", created_by="t"
    )
    url = f"retention/policies/{policy.pk}"
    fingerprint = admin.get(f"{url}/preview").body["fingerprint"]
    refused = admin.post(f"{url}/runs", {"fingerprint": fingerprint, "reason": "r"})
    assert refused.status == 422 and refused.body["errors"][0]["field"] == "confirm_purge"
    late = old_session()
    changed = admin.post(
        f"{url}/runs", {"fingerprint": fingerprint, "reason": "r", "confirm_purge": True}
    )
    assert changed.status == 409 and changed.body["type"].endswith("/plan-changed")
    assert not DeleteJob.objects.exists() and {shown, late} <= session_ids()

    fingerprint = admin.get(f"{url}/preview").body["fingerprint"]
    answer = admin.post(
        f"{url}/runs", {"fingerprint": fingerprint, "reason": "r", "confirm_purge": True}
    )
    assert answer.status == 201 and answer.body["job"]["purge"] is True
    jobs.run_job(job_id=answer.body["job"]["id"])
    assert not {shown, late} & session_ids()


# --- erasure -----------------------------------------------------------------------------------


def _their_sessions(user_id: str = USER) -> list[str]:
    ids = []
    for n in range(2):
        sid = core.create_session(source="telegram", user_id=user_id).session_id
        core.append_message(session_id=sid, role="user", content=f"hello {n}")
        ids.append(sid)
    core.create_session(source="telegram", user_id="someone-else")
    return ids


def _no_subject_in_the_audit(user_id: str = USER) -> None:
    for entry in AuditEntry.objects.all():
        text = f"{entry.before} {entry.after} {entry.session_ids} {entry.reason} {entry.detail}"
        assert user_id not in text, (entry.action, entry.outcome)


def test_an_erasure_over_the_api_is_previewed_queued_run_and_receipted(admin, admin_client):
    ids = _their_sessions()
    before = store_snapshot()
    plan = admin.post("erasure/preview", {"user_id": USER})
    assert plan.status == 200 and plan.body["session_count"] == 2
    assert set(plan.body["session_ids"]) == set(ids)
    assert store_snapshot() == before  # a preview changes nothing

    body = {"user_id": USER, "fingerprint": plan.body["fingerprint"]}
    refused = admin.post("erasure/requests", {**body, "reference": ""})
    assert refused.status == 422 and refused.body["errors"][0]["field"] == "reference"
    assert not ErasureRequest.objects.exists()

    answer = admin.post("erasure/requests", {**body, "reference": "DSR-7"})
    assert answer.status == 201, answer.body
    queued = ErasureRequest.objects.get()
    assert answer.body["id"] == queued.pk and queued.created_by == "api:compliance"
    assert queued.state == ErasureRequest.PENDING
    assert _entries("erasure_request")[-1].actor_name == "api:compliance"
    actions.run_erasure(request_id=queued.pk)
    assert core.lineage.existing_session_ids(ids) == set()

    detail = admin.get(f"erasure/requests/{queued.pk}").body
    queued.refresh_from_db()
    assert detail["state"] == "done" and detail["receipt"] == queued.receipt
    receipt = detail["receipt"]
    assert receipt["reference"] == "DSR-7" and receipt["erased"]["sessions"] == 2
    assert receipt["session_ids_sha256"] == sorted(erasure.hash_of(queued.salt, s) for s in ids)
    # The receipt file is the console's download, byte for byte, and verifies as issued.
    file = admin.get(f"erasure/requests/{queued.pk}/receipt")
    console = admin_client.get(reverse("erasure_receipt", args=[queued.pk]))
    assert file.headers.content == console.content
    assert erasure.verify_receipt(console.content).valid
    assert [r["id"] for r in admin.get("erasure/requests").body] == [queued.pk]
    _no_subject_in_the_audit()


def test_the_api_and_the_console_leave_the_same_receipt(admin, admin_client):
    """One person erased through each door: the receipts say the same things."""
    receipts = []
    for user, door in (("u-console-3391", "console"), ("u-api-3391", "api")):
        _their_sessions(user)
        if door == "console":
            page = admin_client.post(reverse("erasure_preview"), {"user_id": user}).content
            fingerprint = erasure.plan(erasure.Subject(user_id=user)).fingerprint
            assert fingerprint.encode() in page
            admin_client.post(
                reverse("erasure_confirm"),
                {"user_id": user, "fingerprint": fingerprint, "reference": "DSR-9"},
            )
        else:
            fingerprint = admin.post("erasure/preview", {"user_id": user}).body["fingerprint"]
            admin.post(
                "erasure/requests",
                {"user_id": user, "fingerprint": fingerprint, "reference": "DSR-9"},
            )
        queued = ErasureRequest.objects.order_by("-pk").first()
        actions.run_erasure(request_id=queued.pk)
        queued.refresh_from_db()
        receipts.append(queued.receipt)
    console, api = receipts
    assert set(console) == set(api)
    for key in ("erased", "kept", "reference"):
        assert json.dumps(console.get(key), sort_keys=True) == json.dumps(
            api.get(key), sort_keys=True
        ), key
    assert len(console["session_ids_sha256"]) == len(api["session_ids_sha256"]) == 2


def test_a_held_subject_or_a_changed_store_erases_nothing_and_names_no_one(admin):
    ids = _their_sessions()
    hold = holds.place_hold(kind="session", subject=ids[0], reason="case", actor="ada")
    plan = admin.post("erasure/preview", {"user_id": USER}).body
    assert plan["held"] and f"#{hold.id}" in plan["held"][0]
    held = admin.post(
        "erasure/requests",
        {"user_id": USER, "fingerprint": plan["fingerprint"], "reference": "DSR-1"},
    )
    assert held.status == 409 and held.body["type"].endswith("/held")
    holds.release_hold(hold_id=hold.id, reason="closed", actor="ada")

    fingerprint = admin.post("erasure/preview", {"user_id": USER}).body["fingerprint"]
    core.create_session(source="telegram", user_id=USER)  # a new one since the preview
    changed = admin.post(
        "erasure/requests", {"user_id": USER, "fingerprint": fingerprint, "reference": "DSR-2"}
    )
    assert changed.status == 409 and changed.body["type"].endswith("/plan-changed")
    padded = admin.post("erasure/preview", {"user_id": f"{USER} "})
    assert padded.status == 422
    assert not ErasureRequest.objects.exists()
    assert core.lineage.existing_session_ids(ids) == set(ids)
    refusals = AuditEntry.objects.filter(action="erasure_request").exclude(outcome="ok")
    assert refusals.count() == 3
    _no_subject_in_the_audit()


def test_a_large_erasure_needs_the_typed_count(admin):
    for _ in range(20):
        core.create_session(source="telegram", user_id=USER)
    plan = admin.post("erasure/preview", {"user_id": USER}).body
    assert plan["typed_confirmation"]["sessions"] == 20
    body = {"user_id": USER, "fingerprint": plan["fingerprint"], "reference": "DSR-3"}
    refused = admin.post("erasure/requests", body)
    assert refused.status == 422 and refused.body["errors"][0]["field"] == "typed_count"
    assert not ErasureRequest.objects.exists()
    assert admin.post("erasure/requests", {**body, "typed_count": 20}).status == 201
    assert ErasureRequest.objects.count() == 1


def test_an_erasure_leaves_no_slug_or_response_id_of_the_subject_in_the_audit(admin, runtime):
    """A runtime's resolve and turn entries name the slug and the response id (attack round
    38, K): after the erasure they are hashes; another person's slug stays readable."""
    slug, other_slug = "alice-support-conv-9921", "bob-support-conv-9921"
    ids = {}
    for name, user in ((slug, USER), (other_slug, "someone-else")):
        target = runtime.post(
            "runtime/conversations/resolve",
            {"conversation": name, "source": "api_server", "user_id": user},
        )
        assert target.status == 200, target.body
        ids[name] = target.body["session_id"]
        turn = runtime.post(
            f"runtime/sessions/{ids[name]}/turns",
            {"response_id": f"resp-{name}", "conversation": name},
        )
        assert turn.status == 201, turn.body
    audit_text = " ".join(f"{e.before} {e.after}" for e in AuditEntry.objects.all())
    assert slug in audit_text and f"resp-{slug}" in audit_text
    plan = admin.post("erasure/preview", {"user_id": USER})
    queued = admin.post(
        "erasure/requests",
        {"user_id": USER, "fingerprint": plan.body["fingerprint"], "reference": "DSR-K"},
    )
    assert queued.status == 201, queued.body
    actions.run_erasure(request_id=queued.body["id"])
    assert core.lineage.existing_session_ids([ids[slug]]) == set()
    audit_text = " ".join(f"{e.before} {e.after} {e.detail}" for e in AuditEntry.objects.all())
    assert slug not in audit_text and f"resp-{slug}" not in audit_text
    assert other_slug in audit_text and f"resp-{other_slug}" in audit_text
    _no_subject_in_the_audit()
