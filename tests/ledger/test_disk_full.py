"""A database that cannot be written in the middle of a delete (issue 26, item 2 and "Also").

SQLite: the fault is real. The operation runs in a child process
(tests/core/crash_child.py) whose file-size limit (RLIMIT_FSIZE, SIGXFSZ
ignored) stops the store, or the dashboard's database, from growing at a
chosen point of a cascade (``faults.run_at``): its next commit fails with
"disk I/O error" as on a full disk. PostgreSQL: a trigger makes the store's
delete of one batch fail with ``disk_full`` (SQLSTATE 53100), as PostgreSQL
does when it cannot extend a file.

After it: every message is in the store or in the trash exactly once, the
audit entry says exactly what committed (``partial``, never "failed" when
batches committed) and names its trash operation, the rest can be finished
or the whole undone, and what the operator reads says which database failed.
"""

from __future__ import annotations

import json
import resource
import signal
from contextlib import contextmanager

import pytest
from django.db import OperationalError

from sessions_admin import core
from sessions_admin.core import db, deletion, faults
from sessions_admin.demo.consistency import check_store
from sessions_admin.ledger import actions, jobs, trash, worker
from sessions_admin.ledger.models import AuditEntry, DeleteJob, TrashEntry, TrashSession
from sessions_admin.ledger.trash import job_operation
from tests.builders import cascade_lineage, old_sessions
from tests.core.crash_child import fill
from tests.core.test_crash import (
    CHILD_TIMEOUT,
    assert_each_session_in_store_or_trash,
    store_state,
)
from tests.helpers import run_test_child

# The third of the plan's four one-session batches is the one that fails.
FAILING_BATCH = 3


def run_full_child(
    arguments: dict, *, database: str, at: str, operation: str = "audited_cascade_delete"
):
    """``actions.cascade_delete`` (or another of crash_child's operations) in a child whose
    ``database`` cannot grow from ``at`` on."""
    full = {"CRASH_CHILD_FULL_AT": at, "CRASH_CHILD_FULL_DATABASE": database}
    return run_test_child(
        "crash_child",
        operation,
        json.dumps(arguments),
        settings={"CRASH_CHILD_BATCH_SESSIONS": "1", **full},
        timeout=CHILD_TIMEOUT,
    )


def fail_store_delete_of(session_id: str) -> None:
    """PostgreSQL: deleting ``session_id``'s messages fails as a full disk does."""
    assert "'" not in session_id
    db.execute(
        "CREATE OR REPLACE FUNCTION test_disk_full() RETURNS trigger AS $$ BEGIN "
        f"IF OLD.session_id = '{session_id}' THEN "
        "RAISE EXCEPTION 'could not extend file: No space left on device' "
        "USING ERRCODE = 'disk_full'; END IF; RETURN OLD; END $$ LANGUAGE plpgsql"
    )
    db.execute(
        "CREATE TRIGGER test_disk_full BEFORE DELETE ON messages "
        "FOR EACH ROW EXECUTE FUNCTION test_disk_full()"
    )


@pytest.fixture
def lineage_with_messages():
    ids = cascade_lineage()
    grand = ids[2]
    # More messages in the plan's sessions, so a batch's trash entry holds some.
    for sid in (grand,):
        core.append_messages(
            session_id=sid, messages=[{"role": "user", "content": f"{sid} {k}"} for k in range(3)]
        )
    yield ids
    if db.vendor() == "postgresql":
        db.execute("DROP TRIGGER IF EXISTS test_disk_full ON messages")


@contextmanager
def store_full_from_batch(plan: core.DeletePlan, batch: int):
    """In this process: a cascade in one-session batches finds the store full at ``batch``.

    SQLite: the file-size limit from ``batch``'s start (lifted on the way out); PostgreSQL:
    the disk_full trigger on that batch's session.
    """
    kwdefaults = deletion.delete_in_batches.__kwdefaults__
    saved = kwdefaults["batch_sessions"]
    kwdefaults["batch_sessions"] = 1
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.getsignal(signal.SIGXFSZ)
    if db.vendor() == "sqlite":
        faults.run_at("cascade.between_batches", lambda: fill("store"), nth=batch - 1)
    else:
        fail_store_delete_of(plan.session_ids[batch - 1])
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, handler)
        faults._actions.clear()
        faults._hits.clear()
        kwdefaults["batch_sessions"] = saved
        if db.vendor() == "postgresql":
            db.execute("DROP TRIGGER IF EXISTS test_disk_full ON messages")


def cascade_with_full_store(root: str, plan: core.DeletePlan) -> str:
    """Run the cascade of ``root`` with the store full from its third batch on; the error's words."""
    arguments = {
        "actor": "ada",
        "session_ids": [root],
        "include_branches": False,
        "expected_fingerprint": plan.fingerprint,
        "reason": "disk full test",
    }
    if db.vendor() == "sqlite":  # in a process of its own, as the dashboard's would be
        child = run_full_child(
            arguments, database="store", at=f"cascade.between_batches@{FAILING_BATCH - 1}"
        )
        assert child.returncode == 1, (child.returncode, child.stdout, child.stderr)
        assert "DeletePartlyApplied" in child.stderr, child.stderr
        return child.stderr.strip().splitlines()[-1]
    with (
        store_full_from_batch(plan, FAILING_BATCH),
        pytest.raises(core.DeletePartlyApplied) as raised,
    ):
        actions.cascade_delete(**arguments)
    return str(raised.value)


def test_a_cascade_stopped_by_a_full_store_is_audited_as_partial_with_its_trash(
    lineage_with_messages,
):
    root = lineage_with_messages[0]
    plan = core.plan_cascade_delete(session_ids=[root])
    assert len(plan.session_ids) == 4
    before = store_state()

    words = cascade_with_full_store(root, plan)

    # Two batches committed and stay deleted; the rest is untouched; nothing is doubled.
    assert_each_session_in_store_or_trash(before, plan.session_ids)
    assert check_store() == []
    gone = [
        sid
        for sid in plan.session_ids
        if not db.fetchone("SELECT 1 FROM sessions WHERE id = %s", [sid])
    ]
    assert gone == list(plan.session_ids[: FAILING_BATCH - 1])
    trashed = TrashEntry.objects.exclude(state=TrashEntry.RESTORED)
    assert sorted(TrashSession.objects.values_list("session_id", flat=True)) == sorted(gone)
    operation = {entry.operation for entry in trashed}
    assert len(operation) == 1

    entry = AuditEntry.objects.get(action="cascade_delete")
    assert entry.outcome == AuditEntry.PARTIAL
    assert entry.after["deleted_sessions"] == len(gone) == trashed.count()
    assert entry.after["deleted_messages"] == sum(e.message_count for e in trashed)
    assert entry.after["trash_operation"] == operation.pop()
    assert sorted(entry.after["trash_entries"]) == sorted(e.pk for e in trashed)
    assert "store" in entry.detail and "rolled back" not in entry.detail
    assert f"#{min(e.pk for e in trashed)}" in entry.detail
    assert "store" in words and "2 batches were deleted" in words

    # Finish it: the same session's cascade deletes what is left, each session once.
    again = core.plan_cascade_delete(session_ids=[root])
    assert set(again.session_ids) == set(plan.session_ids) - set(gone)
    actions.cascade_delete(
        actor="ada",
        session_ids=[root],
        include_branches=False,
        expected_fingerprint=again.fingerprint,
        reason="finish",
    )
    assert sorted(TrashSession.objects.values_list("session_id", flat=True)) == sorted(
        plan.session_ids
    )
    assert check_store() == []


def test_undoing_a_partly_applied_cascade_gives_the_store_back(lineage_with_messages):
    root = lineage_with_messages[0]
    plan = core.plan_cascade_delete(session_ids=[root])
    before = store_state()

    cascade_with_full_store(root, plan)

    entry = AuditEntry.objects.get(action="cascade_delete")
    actions.restore(actor="ada", entry_id=entry.after["trash_entries"][0])
    assert store_state() == before
    assert check_store() == []


def test_a_cascade_stopped_by_a_full_dashboard_database_names_it(lineage_with_messages):
    if db.vendor() != "sqlite":
        pytest.skip("a file-size limit needs SQLite files")
    root = lineage_with_messages[0]
    plan = core.plan_cascade_delete(session_ids=[root])
    before = store_state()

    child = run_full_child(
        {
            "actor": "ada",
            "session_ids": [root],
            "include_branches": False,
            "expected_fingerprint": plan.fingerprint,
            "reason": "disk full test",
        },
        database="default",
        at=f"cascade.between_batches@{FAILING_BATCH - 1}",
    )

    assert child.returncode == 1, (child.stdout, child.stderr)
    words = child.stderr.strip().splitlines()[-1]
    assert "dashboard database could not be written" in words and "2 batches" in words
    # The trash copy of the third batch never got written, so the store kept its sessions.
    assert_each_session_in_store_or_trash(before, plan.session_ids)
    trash.stale_pending_trash()
    assert sorted(TrashSession.objects.values_list("session_id", flat=True)) == sorted(
        plan.session_ids[: FAILING_BATCH - 1]
    )
    assert check_store() == []


def test_a_dashboard_database_that_cannot_be_written_changes_nothing(lineage_with_messages):
    if db.vendor() != "sqlite":
        pytest.skip("a file-size limit needs SQLite files")
    root = lineage_with_messages[0]
    plan = core.plan_cascade_delete(session_ids=[root])
    before = store_state()

    child = run_full_child(
        {
            "actor": "ada",
            "session_ids": [root],
            "include_branches": False,
            "expected_fingerprint": plan.fingerprint,
            "reason": "disk full test",
        },
        database="default",
        at="start",
    )

    assert child.returncode == 1, (child.stdout, child.stderr)
    assert "DashboardNotWritten" in child.stderr, child.stderr
    assert "nothing was changed" in child.stderr.strip().splitlines()[-1]
    assert store_state() == before
    assert not TrashEntry.objects.exists()
    assert not AuditEntry.objects.exists()


# --- bulk-delete job ---------------------------------------------------------------------------


@pytest.fixture
def dashboard_fails_after_second_batch():
    """The dashboard's database refuses a write right after the job's second store commit, as
    a full disk or a PostgreSQL restart does (the write that marks the batch's items)."""

    def refuse() -> None:
        raise OperationalError("database or disk is full")

    faults.run_at("job.after_batch_commit", refuse, nth=2)
    yield
    faults._actions.clear()
    faults._hits.clear()


def test_a_job_stopped_after_a_store_commit_counts_what_the_trash_holds_and_can_be_finished(
    dashboard_fails_after_second_batch, monkeypatch
):
    monkeypatch.setattr(worker, "ensure_worker_running", lambda: None)  # run_job runs it here
    selected = old_sessions(9)
    job_id = jobs.create_bulk_delete_job(
        session_ids=selected, include_live=False, actor="ada", reason="retention"
    )
    before = store_state()

    with pytest.raises(OperationalError):
        jobs.run_job(job_id=job_id, worker="w", batch_sessions=3)

    job = DeleteJob.objects.get(pk=job_id)
    trashed = TrashSession.objects.filter(entry__operation=job_operation(job_id))
    assert trashed.count() == 6  # two batches committed in the store
    assert job.state == DeleteJob.FAILED
    assert job.done == trashed.count()
    assert job.deleted_messages == sum(
        e.message_count for e in TrashEntry.objects.filter(operation=job_operation(job_id))
    )
    assert job.error.startswith("The dashboard database could not be written")
    assert_each_session_in_store_or_trash(before, selected)

    # Finish it: the job takes up its pending items; each session is deleted once.
    actions.resume_bulk_delete(actor="ada", job_id=job_id)
    assert jobs.run_job(job_id=job_id, worker="w2", batch_sessions=3).state == DeleteJob.DONE
    job = DeleteJob.objects.get(pk=job_id)
    assert sorted(trashed.values_list("session_id", flat=True)) == sorted(selected)
    assert (job.done, job.skipped) == (len(selected), 0)
    assert_each_session_in_store_or_trash(before, selected)
    assert check_store() == []


def test_a_job_stopped_by_a_full_store_counts_its_trash_and_finishes(monkeypatch):
    if db.vendor() != "sqlite":
        pytest.skip("a file-size limit needs SQLite files")
    monkeypatch.setattr(worker, "ensure_worker_running", lambda: None)
    selected = old_sessions(9)
    job_id = jobs.create_bulk_delete_job(
        session_ids=selected, include_live=False, actor="ada", reason="retention"
    )
    before = store_state()
    child = run_test_child(
        "crash_child",
        "run_job",
        json.dumps({"job_id": job_id, "worker": "w", "batch_sessions": 3}),
        settings={
            "CRASH_CHILD_FULL_AT": "job.after_batch_commit@2",
            "CRASH_CHILD_FULL_DATABASE": "store",
        },
        timeout=CHILD_TIMEOUT,
    )

    assert child.returncode == 1, (child.stdout, child.stderr)
    job = DeleteJob.objects.get(pk=job_id)
    trashed = TrashSession.objects.filter(entry__operation=job_operation(job_id))
    assert job.state == DeleteJob.FAILED
    assert trashed.count() == job.done == 6
    assert job.error.startswith("The store could not be written")
    assert_each_session_in_store_or_trash(before, selected)
    assert check_store() == []

    actions.resume_bulk_delete(actor="ada", job_id=job_id)
    assert jobs.run_job(job_id=job_id, worker="w2", batch_sessions=3).state == DeleteJob.DONE
    assert sorted(trashed.values_list("session_id", flat=True)) == sorted(selected)
    assert DeleteJob.objects.get(pk=job_id).done == len(selected)
    assert check_store() == []


def test_a_cascade_entry_left_pending_by_a_full_dashboard_database_is_completed_from_its_trash(
    lineage_with_messages,
):
    if db.vendor() != "sqlite":
        pytest.skip("a file-size limit needs SQLite files")
    root = lineage_with_messages[0]
    plan = core.plan_cascade_delete(session_ids=[root])
    arguments = {
        "actor": "ada",
        "session_ids": [root],
        "include_branches": False,
        "expected_fingerprint": plan.fingerprint,
        "reason": "disk full test",
    }
    child = run_full_child(
        arguments, database="default", at=f"cascade.between_batches@{FAILING_BATCH - 1}"
    )
    assert child.returncode == 1, (child.stdout, child.stderr)
    stuck = AuditEntry.objects.get(action="cascade_delete")
    assert stuck.outcome == AuditEntry.PENDING  # its outcome could not be written
    # Young, but its process has exited: completed from its trash at once, not ten minutes
    # later (attack 40: a restore of its trash was refused meanwhile, "once it has").
    assert actions.complete_stale_deletes() == [stuck.pk]

    # The operator deletes the rest.
    again = core.plan_cascade_delete(session_ids=[root])
    actions.cascade_delete(**{**arguments, "expected_fingerprint": again.fingerprint})

    stuck.refresh_from_db()
    operation = stuck.before["trash_operation"]
    trashed = TrashEntry.objects.filter(operation=operation)
    assert stuck.outcome == AuditEntry.PARTIAL, stuck.detail
    assert stuck.after["trash_operation"] == operation
    assert sorted(stuck.after["trash_entries"]) == sorted(e.pk for e in trashed)
    assert stuck.after["deleted_sessions"] == FAILING_BATCH - 1 == trashed.count()
    assert stuck.after["deleted_messages"] == sum(e.message_count for e in trashed)
    assert f"#{min(e.pk for e in trashed)}" in stuck.detail
    assert not AuditEntry.objects.filter(outcome=AuditEntry.PENDING).exists()
    assert sorted(TrashSession.objects.values_list("session_id", flat=True)) == sorted(
        plan.session_ids
    )
    assert check_store() == []
