"""A store whose write lock the runtime holds: bounded retries, then StoreBusy, nothing changed."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
from django.db import connections

from sessions_admin import core
from sessions_admin.core import db as core_db
from tests.helpers import messages, session


def _hold_write_lock(session_id: str):
    """Another process (the runtime) holding the lock our write needs."""
    store = connections["store"]
    params = store.get_connection_params()
    if store.vendor == "sqlite":
        other = sqlite3.connect(params["database"], isolation_level=None, timeout=1)
        other.execute("BEGIN IMMEDIATE")
        return other
    other = psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"})
    other.execute("SELECT id FROM sessions WHERE id = %s FOR UPDATE", [session_id])
    return other


def test_a_held_lock_gives_store_busy_and_no_partial_change(short_waits):
    ref = core.create_session(source="telegram", session_key="tg:busy").session_id
    other = _hold_write_lock(ref)
    try:
        with pytest.raises(core.StoreBusy) as caught:
            core.append_message(session_id=ref, role="user", content="during lock")
        assert "try again" in str(caught.value)
    finally:
        other.rollback()
        other.close()
    assert messages(ref) == []
    assert session(ref)["message_count"] == 0
    # Once the runtime lets go, the same call goes through.
    core.append_message(session_id=ref, role="user", content="after lock")
    assert [m["content"] for m in messages(ref)] == ["after lock"]


# --- serialization failures, deadlocks, lock timeouts (PostgreSQL) and SQLite busy ------------


def _failure(kind: str) -> Exception:
    """What Django raises for each conflict: its error wrapping the driver's (as the cause)."""
    from django.db import OperationalError

    causes = {
        "serialization": psycopg.errors.SerializationFailure("could not serialize access"),
        "deadlock": psycopg.errors.DeadlockDetected("deadlock detected"),
        "lock_timeout": psycopg.errors.LockNotAvailable("canceling statement due to lock timeout"),
        "sqlite_locked": sqlite3.OperationalError("database is locked"),
        "sqlite_busy": sqlite3.OperationalError("database is busy"),
    }
    error = OperationalError(str(causes[kind]))
    error.__cause__ = causes[kind]
    return error


def _failing_first(monkeypatch, attempts: int, kind: str) -> list[int]:
    """Make append_message's counter update fail ``attempts`` times, after its insert ran."""
    from sessions_admin.core import lifecycle

    calls: list[int] = []
    real = lifecycle.insert_counted_messages

    def flaky(session_id, messages):
        inserted = real(session_id, messages)  # the rows and the counters' update ran
        calls.append(1)
        if len(calls) <= attempts:
            raise _failure(kind)
        return inserted

    monkeypatch.setattr(lifecycle, "insert_counted_messages", flaky)
    return calls


KINDS = ["serialization", "deadlock", "lock_timeout", "sqlite_locked", "sqlite_busy"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_conflict_is_retried_and_the_operation_applies_once(monkeypatch, kind):
    ref = core.create_session(source="cli").session_id
    calls = _failing_first(monkeypatch, 2, kind)
    core.append_message(session_id=ref, role="user", content="once")
    assert len(calls) == 3
    # The two failed attempts' inserts were rolled back: one message, counted once.
    assert [m["content"] for m in messages(ref)] == ["once"]
    assert session(ref)["message_count"] == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_conflict_that_persists_gives_store_busy_within_the_bound(monkeypatch, kind):
    monkeypatch.setattr(core_db, "RETRY_SECONDS", 0.3)
    ref = core.create_session(source="cli").session_id
    calls = _failing_first(monkeypatch, 10_000, kind)
    with pytest.raises(core.StoreBusy) as caught:
        core.append_message(session_id=ref, role="user", content="never")
    assert f"after {len(calls)} attempts" in str(caught.value)
    assert 1 < len(calls) < 10_000
    assert messages(ref) == []
    assert session(ref)["message_count"] == 0


def test_other_database_errors_are_not_retried(monkeypatch):
    from django.db import IntegrityError

    from sessions_admin.core import lifecycle

    calls: list[int] = []

    def broken(session_id, messages):
        calls.append(1)
        error = IntegrityError("duplicate key value violates unique constraint")
        error.__cause__ = psycopg.errors.UniqueViolation("duplicate key")
        raise error

    ref = core.create_session(source="cli").session_id
    monkeypatch.setattr(lifecycle, "insert_counted_messages", broken)
    with pytest.raises(IntegrityError):
        core.append_message(session_id=ref, role="user", content="x")
    assert len(calls) == 1
    assert messages(ref) == []


# --- an import the store interrupts ------------------------------------------------------------


def test_an_import_interrupted_by_a_busy_store_keeps_whole_sessions_and_finishes_on_a_rerun(
    monkeypatch,
):
    from sessions_admin.core import portability

    root = core.create_session(source="cli", started_at=1.0).session_id
    child = core.create_session(
        source="tool", parent_session_id=root, model_config={"_delegate_from": root}
    ).session_id
    grandchild = core.create_session(
        source="tool", parent_session_id=child, model_config={"_delegate_from": child}
    ).session_id
    for n, sid in enumerate([root, child, grandchild]):
        core.append_messages(
            session_id=sid,
            messages=[{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": "a"}],
        )
    # Children first in the file: the import writes parents first anyway.
    exported = "".join(portability.export_jsonl([grandchild, child, root]))
    plan = core.plan_cascade_delete(session_ids=[root])
    core.execute_cascade_delete(
        session_ids=[root], expected_fingerprint=plan.fingerprint, actor="t", reason="t"
    )
    monkeypatch.setattr(portability, "IMPORT_BATCH_SESSIONS", 1)
    real = portability.recompute_counters
    calls: list[str] = []

    def busy_on_the_second_session(session_id):
        calls.append(session_id)
        if len(calls) == 2:
            raise core.StoreBusy("_write_batch", 9)
        return real(session_id)

    monkeypatch.setattr(portability, "recompute_counters", busy_on_the_second_session)
    with pytest.raises(portability.ImportInterrupted) as caught:
        portability.import_sessions(sessions=portability.read_export(exported))
    assert caught.value.imported == (root,)
    assert "stopped after 1 of 3" in str(caught.value) and "skip_existing" in str(caught.value)
    assert [m["content"] for m in messages(root)] == ["q0", "a"]
    assert session(root)["message_count"] == 2
    assert session(child) is None and session(grandchild) is None

    monkeypatch.setattr(portability, "recompute_counters", real)
    # The first run's root is in the store now: linking to it is a graft the operator asks for.
    result = portability.import_sessions(
        sessions=portability.read_export(exported), skip_existing=True, graft=True
    )
    assert set(result.imported) == {child, grandchild} and result.skipped == (root,)
    assert result.detached == ()
    assert session(child)["parent_session_id"] == root
    assert session(grandchild)["parent_session_id"] == child
    assert [m["content"] for m in messages(grandchild)] == ["q2", "a"]


# --- a bulk-delete job on a busy store ----------------------------------------------------------


def test_a_bulk_delete_job_waits_out_a_busy_store_then_finishes(monkeypatch, short_waits):
    import threading

    from sessions_admin.core import db
    from sessions_admin.ledger import jobs
    from sessions_admin.ledger.models import DeleteJob, DeleteJobItem, TrashEntry

    ids = []
    for n in range(5):
        sid = core.create_session(source="cli", started_at=1000.0 + n).session_id
        core.append_message(session_id=sid, role="user", content=f"m{n}")
        core.end_session(session_id=sid, end_reason="user_exit")
        ids.append(sid)
    job_id = jobs.create_bulk_delete_job(
        session_ids=ids, include_live=False, actor="ada", reason="retention"
    )
    waited = threading.Event()
    real_sleep = jobs.time.sleep

    def sleep(seconds):
        waited.set()  # only the job's busy-store path sleeps
        real_sleep(min(seconds, 0.05))

    monkeypatch.setattr(jobs.time, "sleep", sleep)
    store = connections["store"]
    if store.vendor == "sqlite":
        runtime = sqlite3.connect(
            store.get_connection_params()["database"], isolation_level=None, timeout=1
        )
        runtime.execute("BEGIN IMMEDIATE")
    else:
        params = store.get_connection_params()
        runtime = psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"})
        runtime.execute("LOCK TABLE sessions, messages IN EXCLUSIVE MODE")
    outcome: list = []

    def work():
        try:
            if connections["store"].vendor == "sqlite":
                with connections["store"].cursor() as cursor:
                    cursor.execute("PRAGMA busy_timeout = 150")
            outcome.append(jobs.run_job(job_id=job_id, worker="w", batch_sessions=2))
        except BaseException as error:  # noqa: BLE001 - reported below
            outcome.append(error)
        finally:
            connections.close_all()

    thread = threading.Thread(target=work)
    thread.start()
    try:
        assert waited.wait(60), "the job never met the busy store"
        # While the runtime holds the lock: nothing deleted, nothing counted, no trash left over.
        assert db.fetchone(
            f"SELECT COUNT(*) FROM sessions WHERE id IN ({db.placeholders(ids)})", ids
        ) == (5,)
        assert DeleteJob.objects.get(pk=job_id).state == DeleteJob.RUNNING
        assert (
            not DeleteJobItem.objects.filter(job_id=job_id)
            .exclude(state=DeleteJobItem.PENDING)
            .exists()
        )
    finally:
        runtime.rollback()
        runtime.close()
        thread.join(60)
    assert not thread.is_alive()
    (progress,) = outcome
    assert not isinstance(progress, BaseException), progress
    assert (progress.state, progress.deleted, progress.skipped) == (DeleteJob.DONE, 5, 0)
    assert db.fetchone(
        f"SELECT COUNT(*) FROM sessions WHERE id IN ({db.placeholders(ids)})", ids
    ) == (0,)
    assert TrashEntry.objects.filter(state=TrashEntry.COMPLETE).count() == 3
    assert not TrashEntry.objects.exclude(state=TrashEntry.COMPLETE).exists()
