"""Retention policies: what a rule selects, how a run deletes it, and who starts a due run.

Run on both backends. The scheduled run beside live runtime processes is
``test_a_scheduled_policy_runs_in_the_worker_while_runtimes_write``.
"""

from __future__ import annotations

import io
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from sessions_admin import core
from sessions_admin.core import db, holds
from sessions_admin.core.clock import use_clock
from sessions_admin.core.retention import RetentionRule, select_sessions
from sessions_admin.ledger import actions, jobs, retention
from sessions_admin.ledger.models import AuditEntry, DeleteJob, RetentionPolicy, TrashEntry
from tests.helpers import session_ids

DAY = 86400.0
# Runs are started here and their jobs run by the test: no background worker thread.
pytestmark = pytest.mark.usefixtures("no_worker")


def old_session(
    *,
    days: float = 100,
    source: str = "telegram",
    user_id: str | None = None,
    title: str | None = None,
    messages: int = 2,
    end: str | None = "user_exit",
    parent: str | None = None,
    model_config: dict | None = None,
) -> str:
    """A session that started, was written and (unless ``end`` is None) ended ``days`` ago."""
    at = time.time() - days * DAY
    with use_clock(lambda: at):
        sid = core.create_session(
            source=source,
            user_id=user_id,
            title=title,
            started_at=at,
            parent_session_id=parent,
            model_config=model_config,
        ).session_id
        if messages:
            core.append_messages(
                session_id=sid,
                messages=[
                    {
                        "role": "user" if n % 2 == 0 else "assistant",
                        "content": f"m{n}",
                        "timestamp": at,
                    }
                    for n in range(messages)
                ],
            )
        if end:
            core.end_session(session_id=sid, end_reason=end)
    return sid


def test_a_rule_selects_quiet_ended_sessions_by_source_status_reason_and_title():
    old = old_session()
    recent = old_session(days=5)
    live = old_session(end=None)
    empty = old_session(messages=0, source="cron")
    other_source = old_session(source="discord", title="Named")
    exited = old_session(end="agent_close")
    # Old but written to yesterday: not quiet.
    revived = old_session()
    db.execute(
        "UPDATE messages SET timestamp = %s WHERE id = (SELECT MAX(id) FROM messages WHERE "
        "session_id = %s)",
        [time.time() - DAY, revived],
    )

    def picked(**rule) -> set[str]:
        return set(select_sessions(RetentionRule(older_than_days=30, **rule)))

    assert picked() == {old, empty, other_source, exited}
    assert live not in picked() and recent not in picked()
    assert picked(source="telegram") == {old, exited}
    assert picked(status="empty") == {empty}
    assert picked(end_reason="agent_close") == {exited}
    assert picked(title="with") == {other_source}
    assert picked(title="without") == {old, empty, exited}
    assert set(select_sessions(RetentionRule(older_than_days=3))) >= {recent}
    with pytest.raises(core.InvalidInput):
        select_sessions(RetentionRule(older_than_days=-1))


def test_conversations_go_whole_or_not_at_all():
    # An old first segment whose conversation goes on in a live segment stays.
    root = old_session(end=None)
    at = time.time() - 90 * DAY
    with use_clock(lambda: at):
        tip = core.rotate_for_compression(session_id=root, summary="s").new_session_id
    # A whole old conversation with a delegate goes whole.
    done_root = old_session()
    delegate = old_session(
        parent=done_root, source="tool", model_config={"_delegate_from": done_root}
    )
    # A delegate of a parent that stays (recent) stays too.
    recent_parent = old_session(days=2)
    lonely = old_session(
        parent=recent_parent, source="tool", model_config={"_delegate_from": recent_parent}
    )
    # An old branch of a recent conversation stays with it (every link kind holds it).
    branch = old_session(parent=recent_parent, model_config={"_branched_from": recent_parent})

    chosen = set(select_sessions(RetentionRule(older_than_days=30)))

    assert chosen == {done_root, delegate}
    assert not chosen & {root, tip, lonely, recent_parent, branch}


def test_a_policy_never_selects_held_sessions_or_what_an_unmerge_needs():
    held = old_session(user_id="u-held")
    husk_target = old_session()
    husk = old_session()
    plain = old_session()
    plan = core.plan_merge(session_ids=[husk_target, husk])
    core.merge_sessions(session_ids=[husk_target, husk], expected_fingerprint=plan.fingerprint)
    holds.place_hold(kind="user", subject="u-held", reason="case", actor="ada")
    db.execute(
        "UPDATE sessions SET ended_at = %s WHERE id IN (%s, %s)",
        [time.time() - 99 * DAY, husk_target, husk],
    )
    policy = RetentionPolicy.objects.create(name="p", older_than_days=30, created_by="t")
    chosen = set(retention.selected_ids(policy))
    assert held not in chosen and husk not in chosen and husk_target not in chosen
    assert plain in chosen


@pytest.mark.parametrize("mode", ["trash", "purge"])
def test_a_run_deletes_exactly_the_selection_through_the_trash_or_not(mode):
    gone = [old_session() for _ in range(3)]
    kept = [old_session(days=3), old_session(end=None)]
    policy = RetentionPolicy.objects.create(
        name="old chats", older_than_days=30, mode=mode, created_by="t"
    )
    job_id = actions.run_retention_policy(actor=None, policy_id=policy.pk, reason="cleanup")
    progress = jobs.run_job(job_id=job_id)
    assert progress.state == "done" and progress.deleted == 3
    assert session_ids() == set(kept)
    job = DeleteJob.objects.get(pk=job_id)
    assert job.policy_id == policy.pk and job.purge == (mode == "purge")
    trashed = set(sid for e in TrashEntry.objects.all() for sid in e.session_ids)
    assert trashed == (set(gone) if mode == "trash" else set())
    entry = AuditEntry.objects.get(action="retention_run")
    assert entry.outcome == "ok" and set(entry.session_ids) == set(gone)
    assert entry.after == {"job": job_id}
    # Nothing left to do: the next run starts no job.
    assert actions.run_retention_policy(actor=None, policy_id=policy.pk, reason="cleanup") is None


def test_a_due_run_is_started_once_however_many_schedulers_look():
    old_session()
    policy = RetentionPolicy.objects.create(
        name="p",
        older_than_days=30,
        created_by="t",
        enabled=True,
        next_run_at=timezone.now() - timedelta(minutes=1),
        every_hours=12,
    )
    first = actions.start_due_policies()
    second = actions.start_due_policies()
    assert len(first) == 1 and second == []
    assert retention.claim_due(policy.pk) is False
    policy.refresh_from_db()
    assert policy.next_run_at > timezone.now() + timedelta(hours=11)
    # Disabled: never due.
    actions.set_retention_policy_enabled(actor=None, policy_id=policy.pk, enabled=False)
    RetentionPolicy.objects.filter(pk=policy.pk).update(next_run_at=timezone.now())
    assert actions.start_due_policies() == []


def test_a_new_policy_is_disabled_and_checked():
    with pytest.raises(core.InvalidInput, match="between 1 and"):
        actions.create_retention_policy(
            actor=None, name="bad", older_than_days=-3, every_hours=24, mode="trash"
        )
    with pytest.raises(core.InvalidInput, match="every"):
        actions.create_retention_policy(
            actor=None, name="bad", older_than_days=3, every_hours=0, mode="trash"
        )
    # A source or end reason that names no session is refused, not kept as a policy that
    # never applies (attack round 41: a source " " was accepted).
    for field, value, words in (
        ("source", " ", "blank"),
        ("source", "telegram ", "spaces"),
        ("end_reason", "user_exit\u200b", "invisible"),
    ):
        with pytest.raises(core.InvalidInput, match=words):
            actions.create_retention_policy(
                actor=None,
                name="bad",
                older_than_days=3,
                every_hours=24,
                mode="trash",
                **{field: value},
            )
    assert not RetentionPolicy.objects.filter(name="bad").exists()
    policy = actions.create_retention_policy(
        actor=None, name="ok", older_than_days=3, every_hours=24, mode="purge"
    )
    assert policy.enabled is False and policy.next_run_at is None
    enabled = actions.set_retention_policy_enabled(actor=None, policy_id=policy.pk, enabled=True)
    assert enabled.next_run_at > timezone.now() + timedelta(hours=23)


def test_apply_retention_counts_with_dry_run_and_runs_a_pass_without_it():
    gone = old_session()
    stays = old_session(days=1)
    RetentionPolicy.objects.create(name="p", older_than_days=30, created_by="t", enabled=True)
    RetentionPolicy.objects.create(name="off", older_than_days=0, created_by="t", enabled=False)
    out = io.StringIO()
    call_command("apply_retention", "--dry-run", stdout=out)
    assert "would delete 1 sessions" in out.getvalue()
    assert session_ids() == {gone, stays}
    out = io.StringIO()
    call_command("apply_retention", stdout=out)
    assert "1 sessions and 2 messages deleted" in out.getvalue()
    assert session_ids() == {stays}


def test_apply_retention_says_so_when_no_policy_is_enabled():
    # A cron line that prints nothing looks like one that works.
    for args in ((), ("--dry-run",)):
        out = io.StringIO()
        call_command("apply_retention", *args, stdout=out)
        assert "No retention policy is enabled" in out.getvalue()
