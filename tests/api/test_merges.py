"""Merges over HTTP: preview, merge by fingerprint (the console's confirmation rule), unmerge.

Each test drives the API with a token and asserts on the store and the audit log afterwards.
"""

from __future__ import annotations

import json

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.ledger.models import AuditEntry, AuditSession
from tests.api.conftest import ApiClient
from tests.builders import forked_conversation, store_snapshot
from tests.helpers import messages, session

PARTS = ("sessions", "messages", "conversations", "merges")

pytestmark = pytest.mark.usefixtures("no_worker")


def two_customers() -> tuple[str, str]:
    """(a CLI session of nobody, ended; a Telegram chat of customer 4242, live)."""
    cli = core.create_session(source="cli", started_at=1000.0).session_id
    core.append_message(session_id=cli, role="user", content="deploy the staging branch")
    core.end_session(session_id=cli, end_reason="cli_close")
    chat = core.create_session(
        source="telegram", user_id="4242", session_key="tg:dm:4242", started_at=2000.0
    ).session_id
    core.append_message(session_id=chat, role="user", content="Where is my refund?")
    return cli, chat


def operator_entries():
    """The audit entries of merges and unmerges (not the tokens' creation)."""
    return AuditEntry.objects.filter(action__in=["merge", "unmerge"])


def preview(client: ApiClient, ids, target: str | None = None):
    query = "&".join(f"ids={sid}" for sid in ids) + (f"&target={target}" if target else "")
    return client.get(f"merges/preview?{query}")


@pytest.fixture
def support(make_token) -> ApiClient:
    return ApiClient(make_token("support", name="helpdesk"))


def test_the_preview_is_the_cores_plan_with_its_fingerprint(make_token):
    ids = forked_conversation()
    viewer = ApiClient(make_token("viewer"))
    answer = preview(viewer, ids)
    assert answer.status == 200, answer.body
    plan = core.plan_merge(session_ids=ids)
    assert answer.body["fingerprint"] == plan.fingerprint
    assert answer.body["target_id"] == ids[0]
    assert answer.body["absorbed_ids"] == ids[1:]
    assert answer.body["typed_count_required"] is None
    assert answer.body["is_api_conversation"] is True
    assert not operator_entries()


def test_a_merge_by_fingerprint_moves_the_rows_and_is_audited_as_the_token(support):
    ids = forked_conversation()
    message_ids = [r[0] for r in db.fetchall("SELECT id FROM messages ORDER BY id")]
    fingerprint = preview(support, ids).body["fingerprint"]
    answer = support.post(
        "merges", {"session_ids": ids, "fingerprint": fingerprint, "reason": "three cold starts"}
    )
    assert answer.status == 201, answer.body
    assert [m["id"] for m in messages(ids[0])] == message_ids
    for sid in ids[1:]:
        assert session(sid)["end_reason"] == "merged"
        assert messages(sid) == []
    merge_id, target = db.fetchone("SELECT id, target_session_id FROM sessions_admin_merges")
    assert answer.body["merge_id"] == merge_id and target == ids[0]
    # The merged history is what the slug's next turn reads (the preview's default).
    assert answer.body["rewritten_responses"]
    entry = operator_entries().get()
    assert (entry.action, entry.outcome, entry.actor_name) == ("merge", "ok", "api:helpdesk")
    assert entry.reason == "three cold starts"
    assert entry.after["merge_id"] == merge_id
    assert set(AuditSession.objects.values_list("session_id", flat=True)) == set(ids)


def test_a_typed_count_that_contradicts_the_plan_is_refused_even_when_none_is_asked(support):
    ids = forked_conversation()  # one customer: the plan asks no typed count
    fingerprint = preview(support, ids).body["fingerprint"]
    before = store_snapshot(*PARTS)
    body = {"session_ids": ids, "fingerprint": fingerprint, "reason": "cold starts"}
    answer = support.post("merges", {**body, "typed_count": 48})
    assert answer.status == 422, answer.body
    assert [e["field"] for e in answer.body["errors"]] == ["typed_count"]
    assert store_snapshot(*PARTS) == before
    assert support.post("merges", {**body, "typed_count": len(ids) - 1}).status == 201


def test_a_stale_fingerprint_is_plan_changed_and_changes_nothing(support):
    ids = forked_conversation()
    fingerprint = preview(support, ids).body["fingerprint"]
    core.append_message(session_id=ids[2], role="user", content="the runtime wrote again")
    before = store_snapshot(*PARTS)
    answer = support.post("merges", {"session_ids": ids, "fingerprint": fingerprint})
    assert answer.status == 409, answer.body
    assert answer.body["type"].endswith("/plan-changed")
    assert store_snapshot(*PARTS) == before
    entry = operator_entries().get()
    assert (entry.action, entry.outcome) == ("merge", "failed")
    assert entry.actor_name == "api:helpdesk"


@pytest.mark.parametrize(
    "extra, field",
    [({}, "typed_count"), ({"typed_count": 2}, "typed_count"), ({"typed_count": 1}, "reason")],
    ids=["no-count", "wrong-count", "no-reason"],
)
def test_different_customers_merge_only_with_the_typed_count_and_a_reason(support, extra, field):
    cli, chat = two_customers()
    plan = preview(support, [cli, chat]).body
    assert plan["typed_count_required"] == 1
    assert {d["label"] for d in plan["differences"]} == {"user", "source", "session key"}
    before = store_snapshot(*PARTS)
    answer = support.post(
        "merges", {"session_ids": [cli, chat], "fingerprint": plan["fingerprint"], **extra}
    )
    assert answer.status == 422, answer.body
    assert answer.body["errors"][0]["field"] == field
    assert answer.body["typed_count_required"] == 1
    assert "Nothing was merged." in answer.body["detail"]
    assert store_snapshot(*PARTS) == before
    entry = operator_entries().get()
    assert (entry.action, entry.outcome, entry.actor_name) == ("merge", "refused", "api:helpdesk")
    assert set(entry.before["differences"]["user"]) == {None, "4242"}


def test_different_customers_confirmed_merge_and_the_audit_keeps_what_differed(support):
    cli, chat = two_customers()
    plan = preview(support, [cli, chat]).body
    answer = support.post(
        "merges",
        {
            "session_ids": [cli, chat],
            "fingerprint": plan["fingerprint"],
            "typed_count": 1,
            "reason": "same person, CLI and Telegram",
        },
    )
    assert answer.status == 201, answer.body
    assert answer.body["target_id"] == chat
    assert session(cli)["end_reason"] == "merged"
    assert messages(chat)[0]["content"] == "deploy the staging branch"
    entry = operator_entries().get()
    assert entry.outcome == "ok"
    assert set(entry.before["confirmed_differences"]) == {"user", "source", "session key"}


def test_a_difference_that_appears_after_the_preview_needs_the_confirmation(support):
    """As in the console: the rule holds on the plan as it is now, before the fingerprint."""
    ids = forked_conversation()
    fingerprint = preview(support, ids).body["fingerprint"]
    db.execute("UPDATE sessions SET user_id = 'someone-else' WHERE id = %s", [ids[2]])
    before = store_snapshot(*PARTS)
    answer = support.post("merges", {"session_ids": ids, "fingerprint": fingerprint})
    assert answer.status == 422 and "users differ: type 2" in answer.body["detail"]
    assert store_snapshot(*PARTS) == before


def test_a_viewer_cannot_merge(make_token):
    ids = forked_conversation()
    viewer = ApiClient(make_token("viewer"))
    fingerprint = preview(viewer, ids).body["fingerprint"]
    before = store_snapshot(*PARTS)
    answer = viewer.post("merges", {"session_ids": ids, "fingerprint": fingerprint})
    assert answer.status == 403
    assert store_snapshot(*PARTS) == before


def test_unmerge_puts_the_exact_rows_back_and_is_audited(support):
    ids = forked_conversation()
    before = {sid: messages(sid) for sid in ids}
    fingerprint = preview(support, ids).body["fingerprint"]
    merge_id = support.post("merges", {"session_ids": ids, "fingerprint": fingerprint}).body[
        "merge_id"
    ]
    answer = support.post(f"merges/{merge_id}/undo", {"reason": "wrong customer"})
    assert answer.status == 200, answer.body
    assert answer.body["restored_ids"] == ids[1:]
    assert {sid: messages(sid) for sid in ids} == before
    assert db.fetchone("SELECT undone_at FROM sessions_admin_merges")[0] is not None
    entry = operator_entries().order_by("pk").last()
    assert (entry.action, entry.outcome, entry.actor_name) == ("unmerge", "ok", "api:helpdesk")
    assert entry.reason == "wrong customer"
    # Undone already: refused, nothing changes.
    snapshot = store_snapshot(*PARTS)
    again = support.post(f"merges/{merge_id}/undo", {})
    assert again.status == 422 and "already undone" in again.body["detail"]
    assert store_snapshot(*PARTS) == snapshot


def test_an_unknown_merge_is_not_found(support):
    answer = support.post("merges/999999/undo", {})
    assert answer.status == 404
    assert answer.body["type"].endswith("/not-found")
    assert answer.body["detail"] == "No merge 999999."


def test_a_parameter_given_twice_is_refused_unless_the_route_takes_a_list(make_token):
    """ninja kept the last of repeated values (``?active=junk&active=true`` answered as
    ``active=true``; schemathesis, full run): a scalar given twice is a 422 naming it, a list
    parameter (the preview's ``ids``) still takes every value."""
    viewer = ApiClient(make_token("viewer"))
    support = ApiClient(make_token("support"))
    twice = support.get("holds?active=junk&active=true")
    assert twice.status == 422, twice.body
    assert "active" in json.dumps(twice.body)
    assert support.get("holds?active=true").status == 200
    ids = forked_conversation()
    assert preview(viewer, ids).status == 200
    target_twice = preview(viewer, ids, target=f"{ids[0]}&target={ids[1]}")
    assert target_twice.status == 422, target_twice.body
