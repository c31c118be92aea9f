"""A trash entry shows what the trash really holds (issue 25, item 15).

A bulk delete job deletes a session larger than a batch in parts (``core.being_deleted``),
each part a trash entry of the job's operation. Cancelled between two parts, the job gives
the parts back to the store: the session is whole again, so the trash must no longer hold,
list or count any of it. Only what the store really lost stays in the trash.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connections
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import being_deleted, db
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import DeleteJob, TrashEntry, TrashSession
from sessions_admin.ledger.trash import LEDGER_TRASH, job_operation
from tests.helpers import child_env

REPO = Path(__file__).resolve().parents[2]


def ended_session(session_id: str, messages: int) -> str:
    core.create_session(source="telegram", session_id=session_id)
    core.append_messages(
        session_id=session_id,
        messages=[{"role": "user", "content": f"{session_id} {n}"} for n in range(messages)],
    )
    core.end_session(session_id=session_id, end_reason="user_exit")
    return session_id


def message_ids(session_id: str) -> list[int]:
    return [
        r[0]
        for r in db.fetchall(
            "SELECT id FROM messages WHERE session_id = %s ORDER BY id", [session_id]
        )
    ]


def job_paused_between_parts(job_id: int, folder: Path) -> subprocess.Popen:
    """A worker (another process) running the job, stopped after the first part of a session."""
    environment = {
        **child_env(),
        "SESSIONS_ADMIN_PAUSE_AT": "delete.between_parts",
        "SESSIONS_ADMIN_PAUSE_DIR": str(folder),
    }
    environment.pop("SESSIONS_ADMIN_CRASH_AT", None)
    connections.close_all()
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.core.crash_child",
            "run_job",
            json.dumps({"job_id": job_id, "batch_messages": 100}),
        ],
        cwd=REPO,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (folder / "delete.between_parts.reached").exists():
        if child.poll() is not None:
            pytest.fail(f"the worker ended before pausing: {child.stderr.read()}")
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return child


@pytest.fixture(autouse=True)
def _short_cancel_wait(monkeypatch):
    """The worker is paused inside a batch until the test releases it, after the cancel: the
    cancel's wait for its acknowledgement (``jobs.CANCEL_WAIT_SECONDS``, 10 s) always runs out.
    What these tests check comes after that wait, whatever its length: half a second will do."""
    monkeypatch.setattr(jobs, "CANCEL_WAIT_SECONDS", 0.5)


def test_a_job_cancelled_between_parts_leaves_only_what_the_store_lost_in_the_trash(
    tmp_path, admin_client
):
    small = ended_session("a-small", 3)  # the job's first batch: deleted whole
    large = ended_session("b-large", 300)  # then in parts of 100
    small_messages, large_messages = message_ids(small), message_ids(large)
    job_id = jobs.create_bulk_delete_job(
        session_ids=[small, large], include_live=False, actor="ada", reason="cleanup"
    )
    worker = job_paused_between_parts(job_id, tmp_path)
    assert message_ids(small) == []
    assert message_ids(large) == large_messages[100:]

    jobs.cancel_job(job_id=job_id)
    (tmp_path / "delete.between_parts.release").touch()
    _out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err

    # The store lost the small session only; the large one is whole and writable again.
    assert DeleteJob.objects.get(pk=job_id).state == DeleteJob.CANCELLED
    assert message_ids(large) == large_messages
    assert being_deleted.marks_on([large]) == {}
    operation = job_operation(job_id)
    entries = TrashEntry.objects.filter(operation=operation)
    assert sorted(
        TrashSession.objects.filter(entry__operation=operation).values_list("session_id", flat=True)
    ) == [small]
    held = [
        m["id"]
        for pk in entries.exclude(state=TrashEntry.RESTORED).values_list("pk", flat=True)
        for m in LEDGER_TRASH.contents(pk).rows["messages"]
    ]
    assert sorted(held) == small_messages
    assert sum(entries.values_list("message_count", flat=True)) == len(small_messages)
    # What the trash page shows of the operation: the same, and nothing of the large session.
    (row,) = admin_client.get(reverse("trash")).context["rows"]
    assert (row.total_sessions, row.total_messages) == (1, len(small_messages))
    assert (row.session_count, row.message_count) == (1, len(small_messages))
    assert row.part_sessions == ()
    assert row.state == TrashEntry.COMPLETE
    assert [s.session_id for s, _match in row.sessions] == [small]
    # A search of the trash for the large session finds nothing: none of it is there.
    assert admin_client.get(reverse("trash"), {"q": large}).context["rows"] == []
    # Restoring the operation brings back the small session, and only it.
    restored = core.restore_trash_entry(entry_id=row.restore_entry.pk, actor="ada")
    assert restored.restored_sessions == (small,)
    assert message_ids(small) == small_messages


def test_a_job_cancelled_between_the_parts_of_its_only_session_leaves_no_entry(
    tmp_path, admin_client
):
    large = ended_session("b-large", 250)
    before = message_ids(large)
    job_id = jobs.create_bulk_delete_job(
        session_ids=[large], include_live=False, actor="ada", reason="cleanup"
    )
    worker = job_paused_between_parts(job_id, tmp_path)

    jobs.cancel_job(job_id=job_id)
    (tmp_path / "delete.between_parts.release").touch()
    _out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err

    assert message_ids(large) == before
    # Nothing of the job is in the trash, so the trash shows no entry for it.
    assert not TrashEntry.objects.filter(operation=job_operation(job_id)).exists()
    assert not TrashSession.objects.exists()
    assert admin_client.get(reverse("trash")).context["rows"] == []
