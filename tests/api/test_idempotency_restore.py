"""An append's idempotency key survives a delete and its restore (attack 40).

A cascade delete dropped the keys of its sessions' appends and the restore did not bring them
back: a runtime retrying an append after the session came back stored the message a second
time. The trash now keeps the keys with the rows; a restore puts them back, and an erasure
that cuts a person's sessions out of a shared trash entry cuts their keys out with them.
"""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.erasure import Subject
from sessions_admin.ledger import actions, erasure
from sessions_admin.ledger.models import TrashEntry
from tests.api.test_runtime import _append, _messages
from tests.builders import (
    cascade_into_trash,
    erasures_run_inline,  # noqa: F401 - an autouse fixture
)


@pytest.fixture
def live(runtime) -> str:
    answer = runtime.post("runtime/sessions", {"source": "telegram", "session_key": "tg:42"})
    return answer.body["session_id"]


def test_a_retry_after_a_delete_and_its_restore_is_replayed_not_stored_again(runtime, live):
    first = _append(runtime, live, "only once", key="k-restore")
    assert first.status == 201
    entry_id = cascade_into_trash(live)
    assert db.fetchall("SELECT key FROM sessions_admin_idempotency") == []
    actions.restore(actor=None, entry_id=entry_id)
    retry = _append(runtime, live, "only once", key="k-restore")
    assert retry.status == 201, retry.body
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.body == first.body
    assert _messages(live) == [("user", "only once")]
    assert db.fetchall("SELECT key, session_id FROM sessions_admin_idempotency") == [
        ("k-restore", live)
    ]


def test_a_key_used_again_while_the_session_was_in_the_trash_keeps_its_new_request(runtime, live):
    _append(runtime, live, "before", key="k-twice")
    entry_id = cascade_into_trash(live)
    other = runtime.post("runtime/sessions", {"source": "telegram", "session_key": "tg:43"})
    assert _append(runtime, other.body["session_id"], "after", key="k-twice").status == 201
    actions.restore(actor=None, entry_id=entry_id)
    assert db.fetchall("SELECT session_id FROM sessions_admin_idempotency") == [
        (other.body["session_id"],)
    ]
    assert _messages(live) == [("user", "before")]


def test_an_erasure_cuts_the_persons_keys_out_of_a_shared_trash_entry(runtime):
    ids = {}
    for user in ("u-ann-77", "u-bo-77"):
        answer = runtime.post(
            "runtime/sessions",
            {"source": "telegram", "session_key": f"tg:{user}", "user_id": user},
        )
        ids[user] = answer.body["session_id"]
        assert _append(runtime, ids[user], f"{user} said", key=f"k-{user}").status == 201
        core.end_session(session_id=ids[user], end_reason="user_exit")
    plan = core.plan_cascade_delete(session_ids=list(ids.values()))
    actions.cascade_delete(
        actor=None,
        session_ids=list(ids.values()),
        include_branches=False,
        expected_fingerprint=plan.fingerprint,
        reason="ticket 6",
    )
    (entry,) = TrashEntry.objects.all()
    assert len(entry.payload["idempotency"]) == 2
    subject = Subject(user_id="u-ann-77")
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-6",
        expected_fingerprint=erasure.plan(subject).fingerprint,
    )
    actions.run_erasure(request_id=request.pk)
    entry.refresh_from_db()
    assert [row["key"] for row in entry.payload["idempotency"]] == ["k-u-bo-77"]
    actions.restore(actor=None, entry_id=entry.pk)
    assert db.fetchall("SELECT key, session_id FROM sessions_admin_idempotency") == [
        ("k-u-bo-77", ids["u-bo-77"])
    ]


def test_an_erasure_hashes_the_persons_idempotency_keys_in_the_audit_log(runtime):
    """The API's append entries kept the person's keys verbatim after their erasure (attack
    round 41); another person's keys stay readable."""
    from sessions_admin.ledger.models import AuditEntry

    ids = {}
    for user, key in (("u-ann-78", "order-77731:msg-1"), ("u-bo-78", "order-88842:msg-1")):
        answer = runtime.post(
            "runtime/sessions",
            {"source": "telegram", "session_key": f"tg:{user}", "user_id": user},
        )
        ids[user] = answer.body["session_id"]
        assert _append(runtime, ids[user], f"{user} said", key=key).status == 201
        core.end_session(session_id=ids[user], end_reason="user_exit")
    subject = Subject(user_id="u-ann-78")
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-7",
        expected_fingerprint=erasure.plan(subject).fingerprint,
    )
    actions.run_erasure(request_id=request.pk)
    keys = sorted(
        str(entry.before.get("idempotency_key"))
        for entry in AuditEntry.objects.filter(action="append")
    )
    assert keys[0].startswith("[erased:") and keys[1] == "order-88842:msg-1"
    assert "order-77731" not in str(list(AuditEntry.objects.values_list("before", "after")))
