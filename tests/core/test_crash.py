"""kill -9 in the middle of a merge, a cascade delete and a bulk-delete job.

Each operation runs in a child process (tests/core/crash_child.py) on this
test run's databases, with ``SESSIONS_ADMIN_CRASH_AT`` naming the point where
it dies by SIGKILL (sessions_admin/core/faults.py). The test then looks at
what the store and the dashboard's database were left holding: a merge
happened entirely or not at all, every delete batch is atomic (each session
fully in the store or fully in the trash, never both, never neither), and an
interrupted job resumes once its lease expires and finishes, deleting each
selected session exactly once and nothing else.
"""

from __future__ import annotations

import json
import signal
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.demo.consistency import check_store
from sessions_admin.ledger import jobs, trash
from sessions_admin.ledger.models import DeleteJob, DeleteJobItem, TrashEntry, TrashSession
from sessions_admin.routers import responses_alias
from tests.builders import cascade_lineage, old_sessions, store_forked_conversation
from tests.helpers import run_test_child

REPO = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT = 60
# Rows start with the id (and a message's session) whatever the store's column order.
SESSIONS_SQL = "SELECT s.id, s.* FROM sessions s"
MESSAGES_SQL = "SELECT m.id, m.session_id, m.* FROM messages m"


def run_child(operation: str, arguments: dict, *, crash_at: str | None, batch_sessions=None):
    """Run the operation in a child process; return it once it exited."""
    settings = {}
    if crash_at:
        settings["SESSIONS_ADMIN_CRASH_AT"] = crash_at
    if batch_sessions:
        settings["CRASH_CHILD_BATCH_SESSIONS"] = str(batch_sessions)
    return run_test_child(
        "crash_child", operation, json.dumps(arguments), settings=settings, timeout=CHILD_TIMEOUT
    )


def assert_killed(child) -> None:
    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stdout, child.stderr)


def store_state() -> dict:
    return {
        "sessions": db.fetchall(SESSIONS_SQL + " ORDER BY s.id"),
        "messages": db.fetchall(MESSAGES_SQL + " ORDER BY m.id"),
        "conversations": db.fetchall(
            "SELECT * FROM conversations ORDER BY name", alias=responses_alias()
        ),
        "responses": db.fetchall(
            "SELECT * FROM responses ORDER BY response_id", alias=responses_alias()
        ),
        "merges": db.fetchall("SELECT * FROM sessions_admin_merges ORDER BY id"),
        "switch_events": db.fetchall("SELECT * FROM sessions_admin_switch_events ORDER BY seq"),
    }


def assert_store_consistent() -> None:
    """The store's own invariants (counters, search index, links, conversations, event log)."""
    assert check_store() == []


def assert_each_session_in_store_or_trash(before: dict, ids) -> None:
    """Each of ``ids`` is either untouched in the store or, with all its messages, in the trash."""
    sessions_before = {r[0]: r for r in before["sessions"]}
    present = {r[0]: r for r in db.fetchall(SESSIONS_SQL)}
    trashed: dict[str, list[TrashEntry]] = {}
    for entry in TrashEntry.objects.exclude(state=TrashEntry.RESTORED):
        for row in entry.payload["sessions"]:
            trashed.setdefault(row["id"], []).append(entry)
    for sid in ids:
        messages_before = [m for m in before["messages"] if m[1] == sid]
        if sid in present:
            assert present[sid] == sessions_before[sid]
            assert db.fetchall(MESSAGES_SQL + " WHERE m.session_id = %s ORDER BY m.id", [sid]) == (
                messages_before
            )
            continue
        committed = trashed.get(sid, [])
        assert len(committed) == 1, f"{sid} is gone but in {len(committed)} trash entries"
        kept = [m["id"] for m in committed[0].payload["messages"] if m["session_id"] == sid]
        assert kept == [m[0] for m in messages_before], f"{sid}'s messages are not all in the trash"


# --- merge -------------------------------------------------------------------------------------


@pytest.mark.parametrize("crash_at", ["merge.after_move", "merge.before_commit"])
def test_a_merge_killed_midway_changed_nothing(crash_at):
    ids = store_forked_conversation()
    plan = core.plan_merge(session_ids=ids)
    before = store_state()

    child = run_child(
        "merge",
        {"session_ids": ids, "expected_fingerprint": plan.fingerprint},
        crash_at=crash_at,
    )

    assert_killed(child)
    assert store_state() == before
    assert_store_consistent()
    # Nothing is left locked or half-written: the same confirmed plan still goes through.
    result = core.merge_sessions(session_ids=ids, expected_fingerprint=plan.fingerprint)
    assert result.moved_messages == plan.moved_messages
    assert_store_consistent()


def test_a_merge_in_a_child_that_is_not_killed_happens_entirely():
    """The harness itself: the same child without a crash point merges everything."""
    ids = store_forked_conversation()
    plan = core.plan_merge(session_ids=ids)
    message_ids = [r[0] for r in db.fetchall("SELECT id FROM messages ORDER BY id")]

    child = run_child(
        "merge", {"session_ids": ids, "expected_fingerprint": plan.fingerprint}, crash_at=None
    )

    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout)["moved_messages"] == plan.moved_messages
    assert [r[0] for r in db.fetchall("SELECT id FROM messages ORDER BY id")] == message_ids
    assert {r[0] for r in db.fetchall("SELECT DISTINCT session_id FROM messages")} <= {ids[0]}
    assert_store_consistent()


# --- cascade delete ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "crash_at",
    [
        "delete.after_trash_copy",  # the first batch: copied into the trash, not deleted
        "delete.before_commit@2",  # the second batch: deleted, not committed
        "delete.after_commit",  # the first batch committed, its trash entry still pending
        "cascade.between_batches@2",  # two batches committed, two to go
    ],
)
def test_a_cascade_delete_killed_midway_leaves_whole_batches(crash_at):
    root, delegate, grand, tip, branch, child_session, other = cascade_lineage()
    plan = core.plan_cascade_delete(session_ids=[root])
    assert len(plan.session_ids) == 4
    before = store_state()

    child = run_child(
        "cascade_delete",
        {
            "session_ids": [root],
            "expected_fingerprint": plan.fingerprint,
            "actor": "ada",
            "reason": "crash test",
        },
        crash_at=crash_at,
        batch_sessions=1,
    )

    assert_killed(child)
    assert_store_consistent()
    assert_each_session_in_store_or_trash(before, plan.session_ids)
    # What the delete never meant to touch is untouched (the kept children lose their parent
    # only together with it).
    for sid in (other, branch, child_session):
        assert db.fetchone("SELECT id FROM sessions WHERE id = %s", [sid]) is not None

    # The operator deletes what is left: each session ends up in exactly one trash entry.
    left = [
        sid
        for sid in plan.session_ids
        if db.fetchone("SELECT 1 FROM sessions WHERE id = %s", [sid])
    ]
    if left:
        again = core.plan_cascade_delete(session_ids=left)
        core.execute_cascade_delete(
            session_ids=left,
            expected_fingerprint=again.fingerprint,
            actor="ada",
            reason="crash test, again",
        )
    trash.stale_pending_trash()
    assert_store_consistent()
    assert not TrashEntry.objects.filter(state=TrashEntry.PENDING).exists()
    assert sorted(TrashSession.objects.values_list("session_id", flat=True)) == sorted(
        plan.session_ids
    )
    assert_each_session_in_store_or_trash(before, plan.session_ids)


# --- bulk-delete job ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "crash_at",
    [
        "delete.after_trash_copy@2",  # mid-batch: the second batch copied into the trash only
        "delete.before_commit@2",  # mid-batch: the second batch deleted, not committed
        "delete.after_commit@2",  # the second batch committed, its trash entry pending
        "job.after_batch_commit@2",  # the second batch committed, its items not marked done
        "job.before_done",  # every batch done, the job not marked done
    ],
)
def test_a_bulk_delete_job_killed_midway_resumes_and_deletes_each_session_once(crash_at):
    selected = old_sessions(10)
    delegate = core.create_session(
        source="tool", parent_session_id=selected[0], model_config={"_delegate_from": selected[0]}
    ).session_id
    core.end_session(session_id=delegate, end_reason="done")
    unselected = old_sessions(2)
    live = core.create_session(source="cli").session_id
    job_id = jobs.create_bulk_delete_job(
        session_ids=[*selected, live], include_live=False, actor="ada", reason="retention"
    )
    to_go = [*selected, delegate]
    assert DeleteJob.objects.get(pk=job_id).total == len(to_go)
    before = store_state()
    untouched = [*unselected, live]

    child = run_child(
        "run_job",
        {"job_id": job_id, "worker": "doomed", "batch_sessions": 3},
        crash_at=crash_at,
    )

    assert_killed(child)
    assert_store_consistent()
    assert_each_session_in_store_or_trash(before, to_go)
    job = DeleteJob.objects.get(pk=job_id)
    assert (job.state, job.lease_owner) == (DeleteJob.RUNNING, "doomed")

    # The dead worker's lease still holds: no one else takes the job yet ...
    assert jobs.run_job(job_id=job_id, worker="next").state == DeleteJob.RUNNING
    assert job_id not in jobs.runnable_job_ids()
    assert DeleteJob.objects.get(pk=job_id).lease_owner == "doomed"
    # ... until it expires (as if LEASE_SECONDS had passed), and the next worker finishes it.
    DeleteJob.objects.filter(pk=job_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert job_id in jobs.runnable_job_ids()
    progress = jobs.run_job(job_id=job_id, worker="next", batch_sessions=3)

    assert progress.state == DeleteJob.DONE
    assert_store_consistent()
    assert (
        db.fetchall(f"SELECT id FROM sessions WHERE id IN ({db.placeholders(to_go)})", to_go) == []
    )
    assert_each_session_in_store_or_trash(before, to_go)
    # Each selected session was deleted once, and counted once, as deleted (not skipped).
    assert sorted(TrashSession.objects.values_list("session_id", flat=True)) == sorted(to_go)
    assert not TrashEntry.objects.filter(state=TrashEntry.PENDING).exists()
    assert (progress.total, progress.processed, progress.deleted, progress.skipped) == (
        len(to_go),
        len(to_go),
        len(to_go),
        0,
    )
    assert progress.deleted_messages == sum(1 for m in before["messages"] if m[1] in set(to_go))
    assert set(DeleteJobItem.objects.filter(job_id=job_id).values_list("state", flat=True)) == {
        DeleteJobItem.DONE
    }
    # Nothing outside the selection was touched.
    after = store_state()
    for sid in untouched:
        assert [r for r in after["sessions"] if r[0] == sid] == [
            r for r in before["sessions"] if r[0] == sid
        ]
        assert [m for m in after["messages"] if m[1] == sid] == [
            m for m in before["messages"] if m[1] == sid
        ]


def test_manage_py_run_jobs_resumes_a_job_whose_worker_was_killed():
    selected = old_sessions(7)
    job_id = jobs.create_bulk_delete_job(
        session_ids=selected, include_live=False, actor="ada", reason="retention"
    )
    child = run_child(
        "run_job",
        {"job_id": job_id, "worker": "doomed", "batch_sessions": 2},
        crash_at="job.after_batch_commit@2",
    )
    assert_killed(child)
    DeleteJob.objects.filter(pk=job_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )

    resumed = run_child("run_jobs", {"idle_exit": 0.5}, crash_at=None)

    assert resumed.returncode == 0, resumed.stderr
    assert "No delete job left to run." in resumed.stdout
    progress = jobs.job_progress(job_id=job_id)
    assert (progress.state, progress.deleted, progress.skipped) == (DeleteJob.DONE, 7, 0)
    assert (
        db.fetchall(f"SELECT id FROM sessions WHERE id IN ({db.placeholders(selected)})", selected)
        == []
    )
    assert sorted(TrashSession.objects.values_list("session_id", flat=True)) == sorted(selected)
    assert_store_consistent()


# --- trash restore -----------------------------------------------------------------------------


def test_a_restore_killed_before_its_commit_leaves_the_entry_restorable():
    root, delegate, grand, tip, branch, child_session, other = cascade_lineage()
    plan = core.plan_cascade_delete(session_ids=[root])
    before = store_state()
    deleted = core.execute_cascade_delete(
        session_ids=[root], expected_fingerprint=plan.fingerprint, actor="ada", reason="r"
    )
    (entry_id,) = deleted.trash_entry_ids
    after_delete = store_state()

    child = run_child(
        "restore", {"entry_id": entry_id, "actor": "ada"}, crash_at="restore.before_commit"
    )

    assert_killed(child)
    assert store_state() == after_delete
    assert_store_consistent()
    # Not marked restored: the rows it holds are still only in the trash, so it stays restorable.
    assert TrashEntry.objects.get(pk=entry_id).state == TrashEntry.COMPLETE
    restored = core.restore_trash_entry(entry_id=entry_id, actor="ada")
    assert set(restored.restored_sessions) == set(plan.session_ids)
    assert TrashEntry.objects.get(pk=entry_id).state == TrashEntry.RESTORED
    assert store_state()["messages"] == before["messages"]
    assert_store_consistent()
