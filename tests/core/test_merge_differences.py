"""The merge plan says whose sessions it joins: what differs, and how the target was chosen."""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.merge import MergeDifference, first_user_messages
from tests.builders import store_forked_conversation, store_snapshot


def customer(source: str, user: str | None, key: str | None, started: float, text: str) -> str:
    sid = core.create_session(
        source=source, user_id=user, session_key=key, started_at=started
    ).session_id
    core.append_message(session_id=sid, role="user", content=text)
    return sid


def test_one_customers_forks_have_no_differences_and_merge_into_the_oldest():
    ids = store_forked_conversation()
    plan = core.plan_merge(session_ids=list(reversed(ids)))
    assert plan.differences == () and not plan.differs
    assert (plan.target_id, plan.chosen_id, plan.target_rule) == (ids[0], ids[0], "oldest")
    assert [s.first_user_message for s in plan.sources] == ["q0", "q1", "q2"]
    assert {(s.user_id, s.source, s.session_key) for s in plan.sources} == {
        ("u1", "api_server", None)
    }


def test_sessions_of_different_customers_say_what_differs():
    cli = customer("cli", None, None, 1.0, "deploy  the\nbranch")
    chat = customer("telegram", "42", "agent:main:telegram:dm:42", 2.0, "refund?")
    plan = core.plan_merge(session_ids=[cli, chat], target_id=cli)
    assert plan.differences == (
        MergeDifference("user_id", "user", (None, "42")),
        MergeDifference("source", "source", ("cli", "telegram")),
        MergeDifference("session_key", "session key", (None, "agent:main:telegram:dm:42")),
    )
    assert plan.target_rule == "chosen"
    assert first_user_messages([cli, chat, "ghost"]) == {cli: "deploy the branch", chat: "refund?"}


def test_the_default_target_of_different_customers_is_the_live_one_then_the_latest_active():
    old_live = customer("telegram", "42", "agent:main:telegram:dm:42", 1.0, "live, oldest")
    ended = customer("cli", None, None, 2.0, "ended, newer")
    core.end_session(session_id=ended, end_reason="cli_close")
    plan = core.plan_merge(session_ids=[ended, old_live])
    assert (plan.target_id, plan.target_rule) == (old_live, "live")

    core.end_session(session_id=old_live, end_reason="session_reset")
    db.execute("UPDATE messages SET timestamp = 9e9 WHERE session_id = %s", [ended])
    plan = core.plan_merge(session_ids=[old_live, ended])
    assert (plan.target_id, plan.target_rule) == (ended, "latest activity")
    # merge_sessions uses the same rule
    result = core.merge_sessions(
        session_ids=[old_live, ended], expected_fingerprint=plan.fingerprint
    )
    assert result.target_id == ended


def test_a_difference_appearing_changes_the_fingerprint_so_a_stale_confirmation_fails():
    ids = store_forked_conversation()
    plan = core.plan_merge(session_ids=ids)
    db.execute("UPDATE sessions SET user_id = 'someone-else' WHERE id = %s", [ids[1]])
    again = core.plan_merge(session_ids=ids)
    assert [d.column for d in again.differences] == ["user_id"]
    assert again.fingerprint != plan.fingerprint
    before = store_snapshot()
    with pytest.raises(core.StoreError, match="changed since the merge was previewed"):
        core.merge_sessions(session_ids=ids, expected_fingerprint=plan.fingerprint)
    assert store_snapshot() == before
