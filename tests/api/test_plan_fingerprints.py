"""A confirmation carries the fingerprint of a plan the server showed, of everything the plan
deletes (attack round 43, helper-69's breaks):

- a bulk delete confirmed after the runtime wrote into one of its (ended) sessions deleted
  the new messages too: its digest held the session ids only;
- a bulk delete or a retention run could be confirmed with no dry run or preview ever made:
  the fingerprint was ``sha256`` of the sorted session ids, which any client can compute.

Fingerprints are now keyed with the store's own secret (``core.fingerprints``), one key per
kind of plan, and the bulk and retention ones hold the messages' count and highest id."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time

import pytest
from django.test import override_settings

from sessions_admin import core
from sessions_admin.core import db, fingerprints, transcript
from sessions_admin.core.fingerprints import PLAN_KEY_NAME, plan_fingerprint
from sessions_admin.core.schema import META_TABLE
from sessions_admin.ledger.models import DeleteJob, RetentionPolicy
from tests.api.conftest import ApiClient
from tests.api.test_deletion import PARTS, ended_sessions
from tests.builders import store_snapshot
from tests.helpers import child_env, session_ids
from tests.ledger.test_retention import old_session

pytestmark = pytest.mark.usefixtures("no_worker")


@pytest.fixture
def admin(make_token) -> ApiClient:
    return ApiClient(make_token("admin", name="ops-bot"))


def unkeyed(ids) -> str:
    """The fingerprint of a set of sessions as it was before round 43: computable by anyone."""
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:32]


def runtime_writes_into(session_id: str, *, timestamp: float | None = None) -> None:
    """A runtime holding an ended session's id writes into it with its own SQL (Hermes's
    ``append_message`` does not look at ``ended_at``)."""
    db.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (%s, 'user', %s, %s)",
        [session_id, "written after the dry run", time.time() if timestamp is None else timestamp],
    )
    db.execute("UPDATE sessions SET message_count = message_count + 1 WHERE id = %s", [session_id])


def test_a_bulk_delete_confirmed_after_the_runtime_wrote_into_its_sessions_is_refused(admin):
    picked = ended_sessions(2)
    dry = admin.post("bulk-deletes/dry-run", {"session_ids": picked}).body
    assert (dry["count"], dry["message_count"]) == (2, 4)
    runtime_writes_into(picked[0])
    before = store_snapshot(*PARTS)
    answer = admin.post(
        "bulk-deletes",
        {"session_ids": picked, "fingerprint": dry["fingerprint"], "reason": "tidy"},
    )
    assert answer.status == 409, answer.body
    assert answer.body["type"].endswith("/plan-changed")
    assert store_snapshot(*PARTS) == before and not DeleteJob.objects.exists()
    # The dry run made again shows the new message and is confirmed with its fingerprint.
    again = admin.post("bulk-deletes/dry-run", {"session_ids": picked}).body
    assert again["message_count"] == 5 and again["fingerprint"] != dry["fingerprint"]
    confirmed = admin.post(
        "bulk-deletes",
        {"session_ids": picked, "fingerprint": again["fingerprint"], "reason": "tidy"},
    )
    assert confirmed.status == 201, confirmed.body


def test_a_bulk_delete_with_no_dry_run_is_refused(admin):
    picked = ended_sessions(2)
    before = store_snapshot(*PARTS)
    current = core.preview_bulk_delete(session_ids=picked).digest
    for fingerprint in (unkeyed(picked), unkeyed([]), "x"):
        answer = admin.post(
            "bulk-deletes",
            {"session_ids": picked, "fingerprint": fingerprint, "reason": "no dry run"},
        )
        assert answer.status == 409, answer.body
        # The refusal never hands out the fingerprint to send back (attack round 43,
        # helper-70): that would confirm a set no dry run showed.
        assert current not in json.dumps(answer.body) and "fingerprint" not in answer.body
        assert "4 messages" in answer.body["detail"]
    assert store_snapshot(*PARTS) == before and not DeleteJob.objects.exists()


def test_a_retention_run_with_no_preview_or_a_stale_one_is_refused(admin):
    doomed = [old_session(title=f"chat {n}") for n in range(3)]
    policy = RetentionPolicy.objects.create(name="quiet", older_than_days=30, created_by="t")
    url = f"retention/policies/{policy.pk}"
    before = store_snapshot(*PARTS)
    answer = admin.post(f"{url}/runs", {"fingerprint": unkeyed(doomed), "reason": "q3"})
    assert answer.status == 409, answer.body
    preview = admin.get(f"{url}/preview").body
    assert preview["count"] == 3
    # Written into a listed session with a timestamp as old as the rest: still quiet, still
    # selected, but the run would take a message the preview did not count.
    runtime_writes_into(doomed[0], timestamp=time.time() - 100 * 86400)
    written = store_snapshot(*PARTS)
    answer = admin.post(f"{url}/runs", {"fingerprint": preview["fingerprint"], "reason": "q3"})
    assert answer.status == 409, answer.body
    assert store_snapshot(*PARTS) == written != before
    assert not DeleteJob.objects.exists()
    fresh = admin.get(f"{url}/preview").body["fingerprint"]
    assert admin.post(f"{url}/runs", {"fingerprint": fresh, "reason": "q3"}).status == 201


def test_a_retention_preview_confirms_a_run_of_its_own_policy_only(admin):
    """Attack round 45: policy A (to the trash) was previewed and deleted, policy B (a purge
    selecting the same sessions) created and never previewed; B's run confirmed with A's
    fingerprint purged the sessions. A preview's fingerprint names its policy, its mode and
    its rule."""
    doomed = [old_session(title=f"chat {n}") for n in range(3)]
    trash = RetentionPolicy.objects.create(name="quiet", older_than_days=30, created_by="t")
    shown = admin.get(f"retention/policies/{trash.pk}/preview").body
    assert shown["count"] == 3
    purge = RetentionPolicy.objects.create(
        name="quiet, purged", older_than_days=30, created_by="t", mode=RetentionPolicy.PURGE
    )
    same_rule = RetentionPolicy.objects.create(name="twin", older_than_days=30, created_by="t")
    before = store_snapshot(*PARTS)
    for other in (purge, same_rule):
        answer = admin.post(
            f"retention/policies/{other.pk}/runs",
            {"fingerprint": shown["fingerprint"], "reason": "q3", "confirm_purge": True},
        )
        assert answer.status == 409, answer.body
    # The policy's own preview, then its mode changed: refused too.
    RetentionPolicy.objects.filter(pk=trash.pk).update(mode=RetentionPolicy.PURGE)
    answer = admin.post(
        f"retention/policies/{trash.pk}/runs",
        {"fingerprint": shown["fingerprint"], "reason": "q3", "confirm_purge": True},
    )
    assert answer.status == 409, answer.body
    assert store_snapshot(*PARTS) == before and not DeleteJob.objects.exists()
    assert set(doomed) <= session_ids()
    RetentionPolicy.objects.filter(pk=trash.pk).update(mode=RetentionPolicy.TRASH)
    answer = admin.post(
        f"retention/policies/{trash.pk}/runs", {"fingerprint": shown["fingerprint"], "reason": "q3"}
    )
    assert answer.status == 201, answer.body


def test_a_preview_made_with_another_stores_key_confirms_nothing(admin):
    """Whatever the kind of plan: a fingerprint is only good on the store whose key made it."""
    root = ended_sessions(1)[0]
    picked = ended_sessions(2)
    cascade = admin.get(f"cascades/{root}").body["fingerprint"]
    bulk = admin.post("bulk-deletes/dry-run", {"session_ids": picked}).body["fingerprint"]
    db.execute(f"UPDATE {META_TABLE} SET value = %s WHERE name = %s", ["0" * 64, PLAN_KEY_NAME])
    before = store_snapshot(*PARTS)
    assert admin.post(f"cascades/{root}", {"fingerprint": cascade, "reason": "r"}).status == 409
    answer = admin.post("bulk-deletes", {"session_ids": picked, "fingerprint": bulk, "reason": "r"})
    assert answer.status == 409
    assert store_snapshot(*PARTS) == before and not DeleteJob.objects.exists()


def test_a_plan_made_in_another_process_with_another_secret_key_is_confirmed_here(admin):
    """The key is the store's (``sessions_admin_meta``), not each process's Django secret key: a
    preview made by a command or a runtime in another process confirms here."""
    root = ended_sessions(1)[0]
    made_here = core.plan_cascade_delete(session_ids=[root]).fingerprint
    env = child_env() | {"SESSIONS_ADMIN_SECRET_KEY": "another process's key " + "y" * 40}
    child = subprocess.run(
        [sys.executable, "-c", CHILD_PLAN, root],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert child.stdout.strip() == made_here
    answer = admin.post(f"cascades/{root}", {"fingerprint": child.stdout.strip(), "reason": "r"})
    assert answer.status == 200, answer.body
    assert root not in session_ids()


CHILD_PLAN = """
import sys, django
django.setup()
from sessions_admin import core
print(core.plan_cascade_delete(session_ids=[sys.argv[1]]).fingerprint)
"""


def test_each_kind_of_plan_has_its_own_key():
    payload = {"sessions": ["a", "b"]}
    assert plan_fingerprint("cascade", payload) != plan_fingerprint("bulk-delete", payload)
    assert plan_fingerprint("cascade", payload) == plan_fingerprint("cascade", dict(payload))
    with override_settings(SECRET_KEY="k" * 50):  # the store's key, not the process's
        assert plan_fingerprint("cascade", payload) == plan_fingerprint("cascade", payload)
        same = plan_fingerprint("cascade", payload)
    assert same == plan_fingerprint("cascade", payload)
    assert len(plan_fingerprint("rewrite", payload, length=64)) == 64
    # An undo is keyed the same way (as are merges, resumes and stray moves).
    sid = core.create_session(source="cli").session_id
    core.append_messages(
        session_id=sid,
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    )
    plan = transcript.plan_rewrite(session_id=sid, action="undo")
    assert (
        plan.message_ids
        and plan.fingerprint
        != hashlib.sha256(json.dumps([sid, "undo", list(plan.message_ids)]).encode()).hexdigest()
    )


def test_a_confirmations_fingerprint_is_compared_in_constant_time(admin, monkeypatch):
    """Every confirmation compares through ``hmac.compare_digest`` (how long a refusal takes
    says nothing of how much of a guess was right); odd values are refused, never a 500."""
    compared: list[tuple[bytes, bytes]] = []
    real = fingerprints.hmac.compare_digest

    def recording(a, b):
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(fingerprints.hmac, "compare_digest", recording)
    root = ended_sessions(1)[0]
    picked = ended_sessions(2)
    cascade = admin.get(f"cascades/{root}").body["fingerprint"]
    bulk = admin.post("bulk-deletes/dry-run", {"session_ids": picked}).body["fingerprint"]
    before = store_snapshot(*PARTS)
    near = cascade[:-1] + ("1" if cascade.endswith("0") else "0")  # one character off
    for guess in (near, "\ud800" + cascade[1:], "é" * 32, ""):
        answer = admin.post(f"cascades/{root}", {"fingerprint": guess, "reason": "r"})
        assert answer.status in (409, 422), (guess, answer.body)
    answer = admin.post(
        "bulk-deletes", {"session_ids": picked, "fingerprint": bulk[::-1], "reason": "r"}
    )
    assert answer.status == 409
    assert store_snapshot(*PARTS) == before and not DeleteJob.objects.exists()
    assert (bulk[::-1].encode(), bulk.encode()) in compared
    assert (near.encode(), cascade.encode()) in compared
    assert admin.post(f"cascades/{root}", {"fingerprint": cascade, "reason": "r"}).status == 200
    assert (cascade.encode(), cascade.encode()) in compared


def test_matches_wants_two_strings_and_a_fingerprint_to_match():
    assert fingerprints.matches("ab12", "ab12")
    assert not fingerprints.matches("ab12", "ab13")
    assert not fingerprints.matches(None, "ab12")
    assert not fingerprints.matches(["ab12"], "ab12")
    assert not fingerprints.matches("", "")  # no plan has an empty fingerprint
    assert not fingerprints.matches("\ud800", "ab12")
