"""The store's disk fills while a large session is deleted in parts, and during a merge (issue 26).

SQLite only: the fault is real, a file-size limit (RLIMIT_FSIZE) on the child process
that runs the operation (tests/core/crash_child.py ``fill``), set at a chosen point.
After it: every message is in the store or the trash exactly once, the session is not
left half-deleted without a way out (its mark, the health panel's entry, and a finish
or an undo that gives the store back row for row), a merge is applied whole or not at
all, and the audit entry says what committed.
"""

from __future__ import annotations

import json

import pytest

from sessions_admin import core
from sessions_admin.core import being_deleted, db
from sessions_admin.demo.consistency import check_store
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditEntry, TrashEntry
from sessions_admin.store import health
from tests.builders import store_forked_conversation
from tests.core.test_crash import CHILD_TIMEOUT, MESSAGES_SQL, store_state
from tests.core.test_delete_in_parts import big_session
from tests.helpers import run_test_child


@pytest.fixture(autouse=True)
def _sqlite_only():
    if db.vendor() != "sqlite":
        pytest.skip("a file-size limit needs SQLite files")


def run_with_full_store(operation: str, arguments: dict, *, at: str):
    return run_test_child(
        "crash_child",
        operation,
        json.dumps(arguments),
        settings={"CRASH_CHILD_FULL_AT": at, "CRASH_CHILD_FULL_DATABASE": "store"},
        timeout=CHILD_TIMEOUT,
    )


def assert_each_message_once(before: dict) -> None:
    in_store = [row[0] for row in db.fetchall(MESSAGES_SQL)]
    in_trash = [
        m["id"]
        for entry in TrashEntry.objects.filter(state=TrashEntry.COMPLETE)
        for m in entry.payload["messages"]
    ]
    assert len(in_trash) == len(set(in_trash)), "a message is in the trash twice"
    assert not set(in_store) & set(in_trash), "a message is in the store and in the trash"
    assert sorted(in_store + in_trash) == sorted(row[0] for row in before["messages"])


def cascade(sid: str, reason: str) -> dict:
    plan = core.plan_cascade_delete(session_ids=[sid])
    return {
        "actor": "ada",
        "session_ids": [sid],
        "include_branches": False,
        "expected_fingerprint": plan.fingerprint,
        "reason": reason,
    }


def test_a_session_deleted_in_parts_on_a_full_store_can_be_finished_or_undone():
    sid = big_session(1200)
    other = big_session(3)
    before = store_state()

    child = run_with_full_store(
        "audited_cascade_delete", cascade(sid, "disk full"), at="delete.between_parts@1"
    )

    assert child.returncode == 1, (child.stdout, child.stderr)
    # The first part (500 messages) committed; the rest and the session row are in the store.
    assert_each_message_once(before)
    remaining = db.fetchone("SELECT COUNT(*) FROM messages WHERE session_id = %s", [sid])[0]
    assert remaining == 700
    trashed = TrashEntry.objects.filter(state=TrashEntry.COMPLETE)
    assert sum(entry.message_count for entry in trashed) == 500
    # Not left half-deleted without a way out: marked, and on the health panel.
    assert sid in being_deleted.marks_on([sid])
    assert health.count("being_deleted") == 1
    audit = AuditEntry.objects.get(action="cascade_delete")
    assert audit.outcome == AuditEntry.PARTIAL, (audit.outcome, audit.detail)
    assert audit.after["deleted_messages"] == 500
    assert audit.after["trash_operation"] == trashed.first().operation
    assert check_store() == []

    # Undo: restoring its entry gives the store back row for row, the mark gone.
    actions.restore(actor="ada", entry_id=trashed.first().pk)
    assert store_state() == before
    assert not being_deleted.marks_on([sid])
    assert health.count("being_deleted") == 0
    assert check_store() == []
    assert db.fetchone("SELECT COUNT(*) FROM messages WHERE session_id = %s", [other])[0] == 3


def test_a_session_deleted_in_parts_on_a_full_store_is_finished_by_deleting_it_again():
    sid = big_session(1200)
    before = store_state()

    child = run_with_full_store(
        "audited_cascade_delete", cascade(sid, "disk full"), at="delete.between_parts@1"
    )
    assert child.returncode == 1, (child.stdout, child.stderr)

    actions.cascade_delete(**cascade(sid, "finish"))
    assert db.fetchall("SELECT id FROM sessions WHERE id = %s", [sid]) == []
    assert_each_message_once(before)
    assert not being_deleted.marks_on([sid])
    assert health.count("being_deleted") == 0
    assert check_store() == []
    # Two operations now: the stopped delete's part, and the finish (the rest, the session row).
    audits = AuditEntry.objects.filter(action="cascade_delete").order_by("pk")
    stopped, finished = (audit.after["trash_entries"][0] for audit in audits)
    assert audits[0].outcome == AuditEntry.PARTIAL and audits[1].outcome == AuditEntry.OK
    # The session comes back whole from either operation: the part's brings the one holding
    # the session's row with it, never half of it in the store and the rest in the trash.
    result = actions.restore(actor="ada", entry_id=stopped)
    assert finished in result.trash_entry_ids
    assert store_state() == before
    assert TrashEntry.objects.get(pk=finished).state == TrashEntry.RESTORED
    assert not being_deleted.marks_on([sid])
    assert check_store() == []


def test_a_merge_on_a_full_store_is_not_applied_at_all_and_goes_through_after():
    # One transaction: the store being full shows at its first write that needs a new page
    # or at its commit. (The limit cannot be set in the middle of the transaction: SQLite
    # writes it into a log it has already rewound, below any limit set from its size.)
    ids = store_forked_conversation()
    plan = core.plan_merge(session_ids=ids)
    before = store_state()
    arguments = {
        "actor": "ada",
        "session_ids": ids,
        "target_id": None,
        "expected_fingerprint": plan.fingerprint,
        "reason": "disk full",
    }

    child = run_with_full_store("audited_merge", arguments, at="start")

    assert child.returncode == 1, (child.stdout, child.stderr)
    assert store_state() == before
    assert check_store() == []
    audit = AuditEntry.objects.get(action="merge")
    assert audit.outcome == AuditEntry.FAILED
    assert "could not be written" in audit.detail and "rolled back" in audit.detail
    # Nothing is left locked or half-written: the same confirmed plan goes through.
    result = actions.merge(**arguments)
    assert result.moved_messages == plan.moved_messages
    assert check_store() == []


def test_a_job_deleting_a_session_in_parts_on_a_full_store_finishes_it_in_its_operation(
    monkeypatch,
):
    from sessions_admin.ledger import jobs, worker
    from sessions_admin.ledger.models import DeleteJob
    from sessions_admin.ledger.trash import job_operation

    monkeypatch.setattr(worker, "ensure_worker_running", lambda: None)
    sid = big_session(1200)
    small = big_session(3)
    job_id = actions.start_bulk_delete(
        actor="ada", session_ids=[sid, small], include_live=False, reason="retention"
    )
    before = store_state()

    child = run_with_full_store(
        "run_job", {"job_id": job_id, "worker": "w"}, at="delete.between_parts@1"
    )

    assert child.returncode == 1, (child.stdout, child.stderr)
    job = DeleteJob.objects.get(pk=job_id)
    assert job.state == DeleteJob.FAILED
    assert job.error.startswith("The store"), job.error
    assert_each_message_once(before)
    assert sid in being_deleted.marks_on([sid])
    assert health.count("being_deleted") == 1
    assert check_store() == []

    actions.resume_bulk_delete(actor="ada", job_id=job_id)
    assert jobs.run_job(job_id=job_id, worker="w2").state == DeleteJob.DONE
    job = DeleteJob.objects.get(pk=job_id)
    entries = TrashEntry.objects.filter(operation=job_operation(job_id))
    assert (job.done, job.skipped) == (2, 0)
    assert job.deleted_messages == sum(e.message_count for e in entries) == 1203
    assert db.fetchall("SELECT id FROM sessions") == []
    assert_each_message_once(before)
    assert health.count("being_deleted") == 0
    # One operation: its restore gives the store back row for row.
    actions.restore(actor="ada", entry_id=entries.order_by("pk").first().pk)
    assert store_state() == before
    assert check_store() == []
