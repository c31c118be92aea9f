"""Retention against an adversary (issue 25, items 9-12): a policy never splits a
conversation over any link, a bad policy is refused wherever it comes from (the core,
the ledger's door, a stored row), a run names the holds that kept sessions, and a
scheduled run is audited as the policy. Both backends; every check reads the databases.
"""

from __future__ import annotations

import io
import json
import math
import time
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from sessions_admin import core
from sessions_admin.core import db, holds
from sessions_admin.core import retention as rules
from sessions_admin.core.clock import use_clock
from sessions_admin.core.retention import RetentionRule, select_sessions
from sessions_admin.ledger import actions, jobs, retention
from sessions_admin.ledger.models import AuditEntry, DeleteJob, RetentionPolicy
from tests.builders import api_turn
from tests.helpers import parent_of, session_ids
from tests.ledger.test_retention import DAY, old_session

pytestmark = pytest.mark.usefixtures("no_worker")


def _policy(days: float = 1, **fields) -> RetentionPolicy:
    return RetentionPolicy.objects.create(
        name="quiet", older_than_days=days, created_by="t", **fields
    )


def _run_all(policy: RetentionPolicy) -> int | None:
    job_id = actions.run_retention_policy(actor=None, policy_id=policy.pk, reason="cleanup")
    if job_id is not None:
        jobs.run_job(job_id=job_id)
    return job_id


# --- item 10: a conversation goes whole or stays whole ------------------------------------


@pytest.mark.parametrize("continuation", ["live", "ended an hour ago"])
def test_an_api_conversation_continued_in_a_recent_session_is_kept_whole(continuation):
    now = time.time()
    old = api_turn("support-42", "resp-1", now - 100 * DAY, end=True)
    tip = api_turn("support-42", "resp-2", now - 3600, end=continuation != "live")
    # The core continued the ended conversation in a new session linked to the old one.
    assert tip != old and parent_of(tip) == old
    lonely = old_session(days=100)
    policy = _policy(days=1)

    assert set(retention.selected_ids(policy)) == {lonely}
    _run_all(policy)

    assert old in session_ids() and tip in session_ids() and lonely not in session_ids()
    assert parent_of(tip) == old  # still one conversation


def test_an_api_conversation_the_runtime_split_without_a_link_is_kept_whole():
    """A Hermes cold start: the slug's second session has no parent link; the stored
    responses naming the slug are what ties the two."""
    now = time.time()
    old = old_session(days=100, source="api_server")
    db.execute(
        "INSERT INTO responses (response_id, data, accessed_at) VALUES (%s, %s, 1)",
        ["r-old", f'{{"session_id": "{old}", "conversation": "sidekick"}}'],
    )
    with use_clock(lambda: now - 3600):
        fork = core.create_session(source="api_server").session_id
        core.append_messages(session_id=fork, messages=[{"role": "user", "content": "again"}])
    core.record_turn(response_id="r-new", session_id=fork, conversation="sidekick")
    assert parent_of(fork) is None
    policy = _policy(days=1)

    assert retention.selected_ids(policy) == []
    assert _run_all(policy) is None
    assert {old, fork} <= session_ids()


def test_a_merge_keeps_its_husk_its_target_and_what_hangs_off_them_together():
    parent = old_session(days=100, source="api_server")
    # The husk continued the parent's API conversation, then was merged into the target.
    husk = old_session(days=99, parent=parent, model_config={"_continued_from": parent})
    target = old_session(days=98)
    plan = core.plan_merge(session_ids=[target, husk], target_id=target)
    core.merge_sessions(
        session_ids=[target, husk], target_id=target, expected_fingerprint=plan.fingerprint
    )
    db.execute(
        "UPDATE sessions SET ended_at = %s WHERE id IN (%s, %s)",
        [time.time() - 97 * DAY, target, husk],
    )
    unrelated = old_session(days=100)
    policy = _policy(days=30)

    assert set(retention.selected_ids(policy)) == {unrelated}
    _run_all(policy)

    assert {parent, husk, target} <= session_ids() and unrelated not in session_ids()
    assert parent_of(husk) == parent
    merge = db.fetchone(
        "SELECT target_session_id, undone_at FROM sessions_admin_merges WHERE target_session_id = %s",
        [target],
    )
    assert merge == (target, None)


def test_a_conversation_with_one_session_that_matches_no_filter_stays_whole():
    root = old_session(days=100, source="telegram")
    branch = old_session(
        days=100, source="telegram", parent=root, model_config={"_branched_from": root}
    )
    delegate = old_session(
        days=100, source="tool", parent=root, model_config={"_delegate_from": root}
    )
    alone = old_session(days=100, source="telegram")

    assert select_sessions(RetentionRule(older_than_days=30, source="telegram")) == [alone]
    assert set(select_sessions(RetentionRule(older_than_days=30))) == {
        root,
        branch,
        delegate,
        alone,
    }


# --- item 11: a bad policy is refused everywhere -----------------------------------------

BAD_DAYS = [
    0,
    0.0,
    -1,
    -0.5,
    float("nan"),
    float("inf"),
    float("-inf"),
    1e400,  # inf, as JSON's 1e400 reads
    10**400,  # too large for a float
    36_501,
    1e9,
    True,
    False,
    "abc",
    "30",
    None,
]


@pytest.mark.parametrize("days", BAD_DAYS, ids=repr)
def test_a_bad_number_of_days_is_refused_by_the_core_and_the_door(days):
    sessions = {old_session(days=0.001), old_session(days=100)}
    with pytest.raises(core.InvalidInput, match="between 1 and 36500 days"):
        RetentionRule(older_than_days=days).check()
    with pytest.raises(core.InvalidInput, match="between 1 and 36500 days"):
        rules.plan_retention(RetentionRule(older_than_days=days))
    with pytest.raises(core.InvalidInput, match="between 1 and 36500 days"):
        actions.create_retention_policy(
            actor=None, name="bad", older_than_days=days, every_hours=24, mode="trash"
        )
    assert not RetentionPolicy.objects.exists()
    assert not AuditEntry.objects.filter(action="retention_policy_create").exists()
    assert session_ids() == sessions


@pytest.mark.parametrize("hours", [True, float("nan"), "24", 0, -1, float("inf")], ids=repr)
def test_a_bad_period_is_refused(hours):
    with pytest.raises(core.InvalidInput, match="Run every"):
        actions.create_retention_policy(
            actor=None, name="bad", older_than_days=30, every_hours=hours, mode="trash"
        )
    assert not RetentionPolicy.objects.exists()


def _store_days(policy: RetentionPolicy, value) -> None:
    """Write a value into a stored policy the way a hand edit or an older version would."""
    table = RetentionPolicy._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET older_than_days = %s WHERE id = %s", [value, policy.pk])


STORED_BAD = [0, -1, float("inf"), 1e6, "nan", "abc"]


@pytest.mark.parametrize("value", STORED_BAD, ids=repr)
def test_a_stored_policy_with_bad_days_never_runs(value):
    if value == "abc" and connection.vendor == "postgresql":
        pytest.skip("a double precision column cannot hold text")
    if value == "nan":
        if connection.vendor != "postgresql":
            pytest.skip("SQLite stores a NaN as NULL")
        value = float("nan")
    fresh = old_session(days=0.01)  # ended 15 minutes ago
    old = old_session(days=100)
    policy = _policy(days=30, enabled=True, next_run_at=timezone.now() - timedelta(minutes=1))
    _store_days(policy, value)
    policy.refresh_from_db()
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(policy.older_than_days)

    with pytest.raises(core.InvalidInput, match=f"policy #{policy.pk} cannot run"):
        actions.run_retention_policy(actor=None, policy_id=policy.pk, reason="try")
    refused = AuditEntry.objects.get(action="retention_run")
    assert refused.outcome == "failed" and "cannot run" in refused.detail
    with pytest.raises(CommandError, match=f"policy #{policy.pk}"):
        call_command("apply_retention", stdout=io.StringIO(), stderr=io.StringIO())
    with pytest.raises(core.InvalidInput, match="cannot run"):
        retention.dry_run(policy)
    # The scheduler disables it once instead of running it (or failing every minute).
    assert actions.start_due_policies() == []
    policy.refresh_from_db()
    assert policy.enabled is False and policy.next_run_at is None
    with pytest.raises(core.InvalidInput, match="cannot run"):
        actions.set_retention_policy_enabled(actor=None, policy_id=policy.pk, enabled=True)

    assert not DeleteJob.objects.exists()
    assert session_ids() == {fresh, old}


# --- items 9 and 12: runs name the holds; a scheduled run is the policy's ---------------


def test_dry_runs_and_runs_name_every_held_session_and_its_hold():
    held = old_session(days=100, user_id="u-held")
    root = old_session(days=100)
    delegate = old_session(
        days=100,
        source="tool",
        parent=root,
        user_id="u-held",
        model_config={"_delegate_from": root},
    )
    doomed = [old_session(days=100, title=f"chat {n}") for n in range(3)]
    hold = holds.place_hold(kind="user", subject="u-held", reason="case 7", actor="ada")
    policy = _policy(days=30, enabled=True)

    plan = rules.plan_retention(retention.rule_of(policy))
    assert set(plan.session_ids) == set(doomed)
    assert {(skip.session_id, skip.hold_id) for skip in plan.held} == {
        (held, hold.id),
        (root, hold.id),
        (delegate, hold.id),
    }

    out = io.StringIO()
    call_command("apply_retention", "--dry-run", stdout=out)
    text = out.getvalue()
    for sid in doomed:
        assert f"delete {sid}" in text
    for sid in (held, root, delegate):
        assert f"kept {sid}" in text
    assert text.count(f"hold #{hold.id}") >= 3
    assert session_ids() >= {held, root, delegate, *doomed}

    out = io.StringIO()
    call_command("apply_retention", stdout=out)
    for sid in (held, root, delegate):
        assert f"kept {sid}" in out.getvalue()
    entry = AuditEntry.objects.get(action="retention_run")
    assert entry.outcome == "ok"
    assert entry.before["kept_for_holds_count"] == 3
    named = " ".join(entry.before["kept_for_holds"])
    for sid in (held, root, delegate):
        assert sid in named
    assert f"hold #{hold.id}" in named
    assert {held, root, delegate} <= session_ids() and not set(doomed) & session_ids()


def test_a_scheduled_run_is_audited_with_the_policy_as_its_actor():
    gone = old_session(days=100)
    policy = _policy(
        days=30, enabled=True, next_run_at=timezone.now() - timedelta(minutes=1), every_hours=12
    )
    policy.name = "Quiet chats"
    policy.save()

    [job_id] = actions.start_due_policies()
    entry = AuditEntry.objects.get(action="retention_run")
    assert entry.actor_name == f"retention policy #{policy.pk} Quiet chats"
    assert entry.actor_id is None and entry.outcome == "ok"
    job = DeleteJob.objects.get(pk=job_id)
    assert job.created_by == entry.actor_name and job.policy_id == policy.pk
    jobs.run_job(job_id=job_id)
    assert gone not in session_ids()


def test_a_run_refuses_a_plan_that_changed_since_its_preview():
    old_session(days=100)
    policy = _policy(days=30)
    shown = retention.dry_run(policy)
    late = old_session(days=100)  # it matches too, but was not shown
    with pytest.raises(core.PlanChanged):
        actions.run_retention_policy(
            actor=None, policy_id=policy.pk, reason="r", expected_fingerprint=shown.fingerprint
        )
    assert not DeleteJob.objects.exists() and late in session_ids()
    entry = AuditEntry.objects.get(action="retention_run")
    assert entry.outcome == "failed"


def test_a_run_needs_a_reason():
    old = old_session(days=100)
    policy = _policy(days=30)
    for reason in ("", "   ", "a\x00b"):
        with pytest.raises(core.InvalidInput):
            actions.run_retention_policy(actor=None, policy_id=policy.pk, reason=reason)
    assert not DeleteJob.objects.exists() and old in session_ids()


@pytest.mark.parametrize("shape", ["flat", "wrapped"])
def test_an_api_conversation_chained_only_by_previous_response_id_is_kept_whole(shape):
    """No slug, no parent link: the live session's stored response names the old session's
    response as its ``previous_response_id``, at the top of the data (a flat response, as
    the demo's seeder and other runtimes store it) or under ``response`` (Hermes's)."""
    old = old_session(days=100, source="b1src")
    live = old_session(days=1, source="b1src", end=None)

    def data(session_id: str, previous: str | None) -> str:
        body = {"object": "response", "previous_response_id": previous, "conversation": None}
        payload = {"response": body} if shape == "wrapped" else body
        return json.dumps({**payload, "session_id": session_id})

    for response_id, session_id, previous in (("resp-a", old, None), ("resp-b", live, "resp-a")):
        db.execute(
            "INSERT INTO responses (response_id, data, accessed_at) VALUES (%s, %s, 1)",
            [response_id, data(session_id, previous)],
        )
    lonely = old_session(days=100, source="b1src")
    policy = _policy(days=1, source="b1src")

    assert retention.selected_ids(policy) == [lonely]
    _run_all(policy)
    assert {old, live} <= session_ids() and lonely not in session_ids()


def test_a_continuation_marked_only_by_continued_from_keeps_its_conversation_whole():
    """``_continued_from`` names the session a conversation went on from, even where the
    runtime left ``parent_session_id`` empty: the two are one conversation."""
    old = old_session(days=100)
    live = old_session(days=1, end=None, model_config={"_continued_from": old})
    assert parent_of(live) is None
    lonely = old_session(days=100)
    policy = _policy(days=1)

    assert retention.selected_ids(policy) == [lonely]
    _run_all(policy)
    assert {old, live} <= session_ids() and lonely not in session_ids()
