"""PostgreSQL restarted (``pg_ctl restart -m immediate``) while a bulk delete job runs (issue 26).

The job runs in a child process (tests/core/crash_child.py) held at a point of its
second batch (``SESSIONS_ADMIN_PAUSE_AT``): with the store's delete not yet committed,
or committed with the job's items not yet marked. The server is restarted under it
as a crash would (every connection cut, open transactions rolled back), then the
child goes on and its next statement finds its connections gone.

After it: the job failed with what it committed counted (not left ``running`` until
its lease ends), every message is in the store or in the trash exactly once, the
job can be finished, restoring its trash operation gives the store back row for row,
and ``check_consistency`` is clean. SQLite has no server to restart: skipped there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connections

from sessions_admin.core import db
from sessions_admin.demo.consistency import check_store
from sessions_admin.ledger import actions, jobs, worker
from sessions_admin.ledger.models import AuditEntry, DeleteJob, TrashEntry
from sessions_admin.ledger.trash import job_operation
from tests.builders import old_sessions
from tests.core.test_crash import MESSAGES_SQL, REPO, store_state
from tests.helpers import child_env, pg_ctl, server_options


@pytest.fixture(autouse=True)
def _postgres_only():
    if db.vendor() != "postgresql":
        pytest.skip("a server restart needs PostgreSQL")


def restart_postgres() -> None:
    """``pg_ctl restart -m immediate`` on this test run's server: every connection is cut."""
    data = db.fetchone("SHOW data_directory")[0]
    # This process's pools go too: a pool whose connections the restart cut reconnects with a
    # growing backoff, and the test's own read right after the server is back could wait past
    # the pool's timeout (PoolTimeout). The next read opens a new pool on the new server.
    db.release_connections()
    pg_ctl(data, "restart", "-m", "immediate")


def job_paused_at(
    point: str,
    arguments: dict,
    folder: Path,
    *,
    operation: str = "run_job",
    env: dict | None = None,
):
    """A child working on a job, stopped at ``point`` (``name@N``) with its transaction open."""
    name = point.partition("@")[0]
    environment = {
        **child_env(),
        "SESSIONS_ADMIN_PAUSE_AT": point,
        "SESSIONS_ADMIN_PAUSE_DIR": str(folder),
        **(env or {}),
    }
    environment.pop("SESSIONS_ADMIN_CRASH_AT", None)
    connections.close_all()
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.core.crash_child", operation, json.dumps(arguments)],
        cwd=REPO,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (folder / f"{name}.reached").exists():
        if child.poll() is not None:
            pytest.fail(f"the child ended before pausing: {child.stderr.read()}")
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return child


def release(child, folder: Path, point: str) -> tuple[int, str]:
    (folder / f"{point.partition('@')[0]}.release").touch()
    _, err = child.communicate(timeout=120)
    return child.returncode, err


def assert_each_message_once(before: dict) -> None:
    """Every message of ``before`` is in the store or in the trash's live entries, once."""
    in_store = {row[0] for row in db.fetchall(MESSAGES_SQL)}
    in_trash: list = []
    for entry in TrashEntry.objects.filter(state=TrashEntry.COMPLETE):
        in_trash += [m["id"] for m in entry.payload["messages"]]
    assert len(in_trash) == len(set(in_trash)), "a message is in the trash twice"
    assert not in_store & set(in_trash), "a message is in the store and in the trash"
    assert in_store | set(in_trash) == {row[0] for row in before["messages"]}


@pytest.mark.parametrize(
    "point",
    [
        "delete.before_commit@2",  # the store's delete in flight: the restart rolls it back
        "job.after_batch_commit@2",  # committed in the store, the job's items not yet marked
    ],
)
def test_a_job_cut_by_a_postgres_restart_fails_counted_and_finishes(point, tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "ensure_worker_running", lambda: None)  # run_job runs it here
    selected = old_sessions(9)
    job_id = actions.start_bulk_delete(
        actor="ada", session_ids=selected, include_live=False, reason="retention"
    )
    before = store_state()
    child = job_paused_at(point, {"job_id": job_id, "worker": "w", "batch_sessions": 3}, tmp_path)
    restart_postgres()
    code, err = release(child, tmp_path, point)
    connections.close_all()  # this process's connections went with the restart too

    assert code == 1, err
    job = DeleteJob.objects.get(pk=job_id)
    operation = job_operation(job_id)
    trashed = TrashEntry.objects.filter(operation=operation, state=TrashEntry.COMPLETE)
    trashed_ids = [sid for entry in trashed for sid in entry.session_ids]
    committed = 6 if point.startswith("job.") else 3
    # Failed at once (not running until its lease ends), counting what the store committed.
    assert job.state == DeleteJob.FAILED, job.error
    assert (job.lease_owner, job.lease_expires_at) == ("", None)
    assert len(trashed_ids) == job.done == committed
    server = "The store's" if point.startswith("delete.") else "The dashboard database's"
    assert job.error.startswith(f"{server} server closed the connection: it restarted"), job.error
    assert job.deleted_messages == sum(entry.message_count for entry in trashed)
    assert not set(trashed_ids) & {r[0] for r in db.fetchall("SELECT id FROM sessions")}
    assert_each_message_once(before)
    assert check_store() == []

    actions.resume_bulk_delete(actor="ada", job_id=job_id)
    assert jobs.run_job(job_id=job_id, worker="w2", batch_sessions=3).state == DeleteJob.DONE
    job = DeleteJob.objects.get(pk=job_id)
    trashed_ids = [sid for entry in trashed.all() for sid in entry.session_ids]
    assert sorted(trashed_ids) == sorted(selected)
    assert (job.done, job.skipped) == (len(selected), 0)
    assert job.deleted_messages == sum(entry.message_count for entry in trashed.all())
    assert_each_message_once(before)
    assert db.fetchall("SELECT id FROM sessions") == []
    assert check_store() == []
    audit = AuditEntry.objects.get(action="bulk_delete")
    assert audit.outcome == AuditEntry.OK
    assert audit.after == {"job": job_id}

    actions.restore(actor="ada", entry_id=trashed.order_by("pk").first().pk)
    assert store_state() == before
    assert not TrashEntry.objects.exclude(state=TrashEntry.RESTORED).filter(operation=operation)
    assert check_store() == []


def test_the_worker_goes_on_to_its_next_job_after_a_postgres_restart(tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "ensure_worker_running", lambda: None)  # the child is the worker
    first = old_sessions(3)
    second = old_sessions(3)
    cut = actions.start_bulk_delete(actor="ada", session_ids=first, include_live=False, reason="r")
    after = actions.start_bulk_delete(
        actor="ada", session_ids=second, include_live=False, reason="r"
    )
    before = store_state()
    point = "delete.before_commit@1"
    child = job_paused_at(point, {"idle_exit": 1.0}, tmp_path, operation="run_jobs")
    restart_postgres()
    code, err = release(child, tmp_path, point)
    connections.close_all()

    assert code == 0, err
    assert DeleteJob.objects.get(pk=cut).state == DeleteJob.FAILED
    assert DeleteJob.objects.get(pk=after).state == DeleteJob.DONE
    assert sorted(r[0] for r in db.fetchall("SELECT id FROM sessions")) == sorted(first)
    assert_each_message_once(before)
    actions.resume_bulk_delete(actor="ada", job_id=cut)
    assert jobs.run_job(job_id=cut, worker="w2").state == DeleteJob.DONE
    assert db.fetchall("SELECT id FROM sessions") == []
    assert_each_message_once(before)
    assert check_store() == []


def test_a_cascade_cut_by_a_postgres_restart_is_audited_with_what_committed(tmp_path):
    from sessions_admin import core
    from tests.builders import cascade_lineage

    root = cascade_lineage()[0]
    plan = core.plan_cascade_delete(session_ids=[root])
    before = store_state()
    point = "cascade.between_batches@1"
    arguments = {
        "actor": "ada",
        "session_ids": [root],
        "include_branches": False,
        "expected_fingerprint": plan.fingerprint,
        "reason": "restart test",
    }
    env_batches = {"CRASH_CHILD_BATCH_SESSIONS": "1"}
    child = job_paused_at(
        point, arguments, tmp_path, operation="audited_cascade_delete", env=env_batches
    )
    restart_postgres()
    code, err = release(child, tmp_path, point)
    connections.close_all()

    assert code == 1, err
    trashed = TrashEntry.objects.filter(state=TrashEntry.COMPLETE)
    assert trashed.count() == 1  # the first batch committed before the restart
    audit = AuditEntry.objects.get(action="cascade_delete")
    assert audit.outcome == AuditEntry.PARTIAL, (audit.outcome, audit.detail)
    assert audit.after["deleted_sessions"] == 1
    assert audit.after["trash_entries"] == [trashed.get().pk]
    assert_each_message_once(before)
    assert check_store() == []
    actions.restore(actor="ada", entry_id=trashed.get().pk)
    assert store_state() == before


def test_a_job_cut_by_a_postgres_restart_between_a_sessions_parts_finishes_it(
    tmp_path, monkeypatch
):
    from sessions_admin.core import being_deleted
    from sessions_admin.store import health
    from tests.core.test_delete_in_parts import big_session

    monkeypatch.setattr(worker, "ensure_worker_running", lambda: None)
    sid = big_session(1200)
    job_id = actions.start_bulk_delete(
        actor="ada", session_ids=[sid], include_live=False, reason="retention"
    )
    before = store_state()
    point = "delete.between_parts@1"
    child = job_paused_at(point, {"job_id": job_id, "worker": "w"}, tmp_path)
    restart_postgres()
    code, err = release(child, tmp_path, point)
    connections.close_all()

    assert code == 1, err
    job = DeleteJob.objects.get(pk=job_id)
    entries = TrashEntry.objects.filter(operation=job_operation(job_id), state=TrashEntry.COMPLETE)
    assert job.state == DeleteJob.FAILED, job.error
    assert job.deleted_messages == sum(e.message_count for e in entries) == 500
    assert sid in being_deleted.marks_on([sid])
    assert health.count("being_deleted") == 1
    assert_each_message_once(before)
    assert check_store() == []

    actions.resume_bulk_delete(actor="ada", job_id=job_id)
    assert jobs.run_job(job_id=job_id, worker="w2").state == DeleteJob.DONE
    job = DeleteJob.objects.get(pk=job_id)
    assert (job.done, job.deleted_messages) == (1, 1200)
    assert health.count("being_deleted") == 0
    assert_each_message_once(before)
    actions.restore(actor="ada", entry_id=entries.order_by("pk").first().pk)
    assert store_state() == before
    assert check_store() == []


def test_a_cascade_whose_server_is_down_a_few_seconds_is_audited_once_it_is_back(tmp_path):
    from sessions_admin import core
    from tests.builders import cascade_lineage

    root = cascade_lineage()[0]
    plan = core.plan_cascade_delete(session_ids=[root])
    before = store_state()
    point = "cascade.between_batches@1"
    arguments = {
        "actor": "ada",
        "session_ids": [root],
        "include_branches": False,
        "expected_fingerprint": plan.fingerprint,
        "reason": "server down",
    }
    child = job_paused_at(
        point,
        arguments,
        tmp_path,
        operation="audited_cascade_delete",
        env={"CRASH_CHILD_BATCH_SESSIONS": "1"},
    )
    data = db.fetchone("SHOW data_directory")[0]
    options = server_options(data)
    connections.close_all()
    pg_ctl(data, "stop", "-m", "immediate")
    try:
        (tmp_path / f"{point.partition('@')[0]}.release").touch()
        time.sleep(3)  # the child fails its next batch and tries to record it: no server yet
    finally:
        pg_ctl(data, "start", "-o", options, "-l", "/dev/null")
    _, err = child.communicate(timeout=120)
    connections.close_all()

    assert child.returncode == 1, err
    audit = AuditEntry.objects.get(action="cascade_delete")
    # Recorded on a new connection once the server was back, not left pending.
    assert audit.outcome == AuditEntry.PARTIAL, (audit.outcome, audit.detail, err[-2000:])
    trashed = TrashEntry.objects.filter(state=TrashEntry.COMPLETE)
    assert audit.after["trash_entries"] == [entry.pk for entry in trashed.order_by("pk")]
    assert_each_message_once(before)
    assert check_store() == []


def test_an_erasure_cut_by_a_postgres_restart_fails_in_words_and_finishes(tmp_path, monkeypatch):
    from sessions_admin.core.erasure import Subject
    from sessions_admin.ledger import erasure
    from sessions_admin.ledger.models import ErasureRequest
    from tests.ledger import test_erasure_resume as resume

    monkeypatch.setattr(actions.erasure, "start_erasures", lambda: None)
    resume.subject_with_history()
    subject = Subject(user_id=resume.USER, chat_ids=(resume.CHAT,), session_keys=(resume.KEY,))
    full = erasure.plan(subject)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-RESTART-1",
        expected_fingerprint=full.fingerprint,
        start=False,
    )
    point = "erasure.between_batches@1"
    child = job_paused_at(
        point,
        {"request_id": request.pk},
        tmp_path,
        operation="run_erasure",
        env={
            "CRASH_CHILD_BATCH_SESSIONS": str(resume.BATCH_SESSIONS),
            "CRASH_CHILD_BATCH_MESSAGES": str(resume.BATCH_MESSAGES),
        },
    )
    restart_postgres()
    code, err = release(child, tmp_path, point)
    connections.close_all()

    assert code == 1, err
    request.refresh_from_db()
    # Failed at once, in words, not left running until its lease ends.
    assert request.state == ErasureRequest.FAILED, (request.state, request.error)
    assert "server closed the connection" in request.error
    assert "OperationalError" not in request.error
    killed = AuditEntry.objects.get(action="erasure")
    assert killed.outcome in (AuditEntry.PARTIAL, AuditEntry.FAILED), killed.detail
    assert "Unexpected error" not in killed.detail

    actions.run_erasure(request_id=request.pk)
    request.refresh_from_db()
    assert request.state == ErasureRequest.DONE, request.error
    assert check_store() == []


def test_a_job_whose_server_is_down_a_few_seconds_fails_counted_once_it_is_back(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(worker, "ensure_worker_running", lambda: None)
    selected = old_sessions(6, sources=("cli", "telegram"), messages=3)
    before = store_state()
    job_id = jobs.create_bulk_delete_job(
        session_ids=selected, include_live=False, actor="ada", reason="server down"
    )
    point = "job.after_batch_commit@1"
    child = job_paused_at(point, {"job_id": job_id, "worker": "w", "batch_sessions": 2}, tmp_path)
    data = db.fetchone("SHOW data_directory")[0]
    options = server_options(data)
    connections.close_all()
    pg_ctl(data, "stop", "-m", "immediate")
    try:
        (tmp_path / f"{point.partition('@')[0]}.release").touch()
        time.sleep(3)  # the child's next write fails: no server yet
    finally:
        pg_ctl(data, "start", "-o", options, "-l", "/dev/null")
    _, err = child.communicate(timeout=120)
    connections.close_all()

    assert child.returncode == 1, err
    job = DeleteJob.objects.get(pk=job_id)
    # Failed with what committed counted, once the server was back: not left running.
    assert job.state == DeleteJob.FAILED, (job.state, job.error)
    assert "closed the connection" in job.error
    trashed = TrashEntry.objects.filter(operation=job_operation(job_id), state=TrashEntry.COMPLETE)
    assert job.done == sum(trashed.values_list("session_count", flat=True)) == 2
    assert_each_message_once(before)
    actions.resume_bulk_delete(actor="ada", job_id=job_id)
    assert jobs.run_job(job_id=job_id, worker="w2", batch_sessions=2).state == DeleteJob.DONE
    assert check_store() == []
