"""A trash purge killed after its commit is audited with what it dropped (issue 26, attack-f's
break: ``purge_trash --days 0`` SIGKILLed right after its commit left its entry ``pending``, its
``after`` empty, for good: nothing said which entries, sessions and messages went).

The purge writes on its pending audit entry what it drops (``ledger.trash.PURGING``: each
operation's entry numbers, the sessions and messages they held) in the transaction that drops
them; ``actions.settle_deletes_and_restores`` (the trash page, every restore, purge and delete,
``check_consistency``, the schedule) completes an entry left pending from that and from what of
it the trash still holds: at once when its process is dead, otherwise after
``STALE_PENDING_SECONDS``. Each fault is a real SIGKILL at a crash point, in the command an
operator runs and in the trash page's form.
"""

from __future__ import annotations

import signal
from datetime import timedelta

from django.contrib.auth.models import User
from django.db.models import Sum
from django.urls import reverse
from django.utils import timezone

from sessions_admin.demo.consistency import check_trash
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditEntry, TrashEntry, TrashSession
from sessions_admin.ledger.trash import PURGING
from sessions_admin.signin.roles import assign_role
from tests.builders import linked_conversation, old_sessions
from tests.core.test_delete_in_parts import run_crash_child
from tests.ledger.test_trash_settles import _cascade

COUNTS = ("purged_entries", "purged_sessions", "purged_messages")


def _trash_of_four_operations() -> dict:
    """Four trash operations (a linked conversation, two single sessions, one more restored
    since): what a purge of all of them drops, as the purge's form counts it."""
    ids = linked_conversation()
    singles = old_sessions(3, messages=5)
    for start in [ids["tip"], *singles]:
        _cascade(start)
    actions.restore(actor="ada", entry_id=TrashSession.objects.get(session_id=singles[2]).entry_id)
    held = (
        TrashEntry.objects.exclude(state=TrashEntry.RESTORED)
        .aggregate(sessions=Sum("session_count"), messages=Sum("message_count"))
        .values()
    )
    sessions, messages = held
    operations = set(TrashEntry.objects.values_list("operation", flat=True))
    assert len(operations) == 4 and sessions >= 5 and messages >= 10
    return {"purged_entries": 4, "purged_sessions": sessions, "purged_messages": messages}


def _purge_command(sessions: int, *, crash_at: str):
    """``manage.py purge_trash --days 0 --sessions N`` in a process of its own, killed at
    ``crash_at``."""
    return run_crash_child(
        "command",
        {"argv": ["purge_trash", "--days", "0", "--sessions", str(sessions)]},
        crash_at=crash_at,
    )


def _the_purge() -> AuditEntry:
    return AuditEntry.objects.exclude(outcome=AuditEntry.REFUSED).get(action="purge_trash")


def test_a_purge_command_killed_after_its_commit_is_completed_ok_with_what_it_dropped():
    expected = _trash_of_four_operations()
    trashed = sorted(TrashEntry.objects.values_list("pk", flat=True))

    child = _purge_command(expected["purged_sessions"], crash_at="purge.after_commit")

    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stdout, child.stderr)
    assert not TrashEntry.objects.exists()  # committed: every entry gone for good
    audit = _the_purge()
    assert audit.outcome == AuditEntry.PENDING
    plan = audit.before[PURGING]  # recorded with the commit: exactly what went
    assert sorted(pk for ids in plan["operations"].values() for pk in ids) == trashed
    assert {key: plan[key] for key in COUNTS} == expected

    actions.settle_deletes_and_restores()

    audit.refresh_from_db()
    # Its process is dead: completed at once, with the counts of what it dropped.
    assert audit.outcome == AuditEntry.OK
    assert {key: audit.after[key] for key in COUNTS} == expected
    assert "Completed later" in audit.detail
    assert check_trash() == []


def test_a_purge_killed_before_its_action_completes_the_entry_is_completed_ok_too():
    """Killed at the action's own point (the store operation returned, the entry not yet
    completed): the same outcome."""
    expected = _trash_of_four_operations()

    child = _purge_command(expected["purged_sessions"], crash_at="audit.after_store_commit")

    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stdout, child.stderr)
    assert not TrashEntry.objects.exists()
    actions.settle_deletes_and_restores()
    audit = _the_purge()
    assert audit.outcome == AuditEntry.OK
    assert {key: audit.after[key] for key in COUNTS} == expected


def test_a_purge_killed_before_its_commit_is_completed_failed_and_dropped_nothing():
    expected = _trash_of_four_operations()
    trashed = sorted(TrashEntry.objects.values_list("pk", flat=True))

    child = _purge_command(expected["purged_sessions"], crash_at="purge.before_commit")

    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stdout, child.stderr)
    assert sorted(TrashEntry.objects.values_list("pk", flat=True)) == trashed
    audit = _the_purge()
    assert audit.outcome == AuditEntry.PENDING
    assert PURGING not in audit.before  # rolled back with the purge

    actions.settle_deletes_and_restores()

    audit.refresh_from_db()
    assert audit.outcome == AuditEntry.FAILED
    assert audit.after == {}
    assert "nothing was purged" in audit.detail
    # Purged again, it is audited ok at once with the same counts.
    report = actions.purge(actor="ada", older_than_days=None, reason="disk space")
    assert report.purged == expected["purged_entries"]
    again = AuditEntry.objects.filter(action="purge_trash").latest("pk")
    assert again.outcome == AuditEntry.OK
    assert {key: again.after[key] for key in COUNTS} == expected
    assert not TrashEntry.objects.exists()


def test_a_pending_purge_of_a_process_not_known_dead_is_completed_after_the_stale_time():
    expected = _trash_of_four_operations()
    child = _purge_command(expected["purged_sessions"], crash_at="purge.after_commit")
    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stderr)
    audit = _the_purge()
    # A process on another machine is never thought dead from here.
    process = {**audit.before["process"], "host": "another-machine"}
    AuditEntry.objects.filter(pk=audit.pk).update(before={**audit.before, "process": process})

    actions.settle_deletes_and_restores()

    audit.refresh_from_db()
    assert audit.outcome == AuditEntry.PENDING
    AuditEntry.objects.filter(pk=audit.pk).update(
        created_at=timezone.now() - timedelta(seconds=actions.STALE_PENDING_SECONDS + 1)
    )
    actions.settle_deletes_and_restores()
    audit.refresh_from_db()
    assert audit.outcome == AuditEntry.OK
    assert {key: audit.after[key] for key in COUNTS} == expected


def test_the_trash_pages_purge_killed_after_its_commit_is_completed_when_the_page_shows(
    admin_client,
):
    expected = _trash_of_four_operations()
    user = User.objects.create_user("purging-admin")
    assign_role(user, "admin")

    child = run_crash_child(
        "page_post",
        {
            "username": "purging-admin",
            "path": reverse("trash_purge"),
            "data": {"scope": "all", "confirm_purge": "1", "reason": "disk space"},
        },
        crash_at="purge.after_commit",
    )

    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stdout, child.stderr)
    assert not TrashEntry.objects.exists()
    audit = _the_purge()
    assert (audit.outcome, audit.actor_name) == (AuditEntry.PENDING, "purging-admin")

    assert admin_client.get(reverse("trash")).status_code == 200

    audit.refresh_from_db()
    assert audit.outcome == AuditEntry.OK
    assert {key: audit.after[key] for key in COUNTS} == expected
