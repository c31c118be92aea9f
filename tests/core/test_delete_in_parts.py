"""A session larger than a delete batch goes in parts, behind a state the core respects.

Deleting a 20,000-message session in one store transaction held the write lock for seconds
while every runtime append waited. Such a session is now deleted a batch of messages at a time
(``core.deletion.parts``), each part copied to the trash and deleted in a short
transaction of its own, and between those transactions it is marked being deleted
(``core.being_deleted``): the core refuses writes to it, a restore puts the parts back, a job
killed midway finishes it, and a delete that must keep it (it went live, a hold landed, the
job was cancelled) gives the parts back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connections
from django.utils import timezone

from sessions_admin import core
from sessions_admin.core import being_deleted, db, deletion, holds
from sessions_admin.demo.consistency import check_store
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import DeleteJob, TrashEntry
from sessions_admin.ledger.trash import LEDGER_TRASH, job_operation
from tests.helpers import child_env, run_test_child

REPO = Path(__file__).resolve().parents[2]
MESSAGES_SQL = "SELECT m.id, m.session_id, m.* FROM messages m"


def big_session(messages: int, *, ended: bool = True, key: str | None = None) -> str:
    sid = core.create_session(source="telegram", session_key=key).session_id
    core.append_messages(
        session_id=sid,
        messages=[
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} of {sid}"}
            for i in range(messages)
        ],
    )
    if ended:
        core.end_session(session_id=sid, end_reason="user_exit")
    return sid


def session_rows(sid: str) -> dict:
    return {
        "session": db.fetchall("SELECT s.id, s.* FROM sessions s WHERE s.id = %s", [sid]),
        "messages": db.fetchall(MESSAGES_SQL + " WHERE m.session_id = %s ORDER BY m.id", [sid]),
    }


def message_count(sid: str) -> int:
    return db.fetchone("SELECT COUNT(*) FROM messages WHERE session_id = %s", [sid])[0]


def trashed_message_ids(operation: str, *, of: str | None = None) -> list[int]:
    """The ids of the messages ``operation``'s trash entries hold (``of``: that session's)."""
    ids: list[int] = []
    for pk in (
        TrashEntry.objects.filter(operation=operation)
        .exclude(state=TrashEntry.RESTORED)
        .values_list("pk", flat=True)
    ):
        ids += [
            m["id"]
            for m in LEDGER_TRASH.contents(pk).rows["messages"]
            if of is None or m["session_id"] == of
        ]
    return sorted(ids)


def assert_consistent() -> None:
    assert check_store() == []


def test_a_large_session_goes_in_parts_each_a_short_transaction_of_its_own():
    sid = big_session(350)
    other = big_session(3)
    before = session_rows(sid)
    seen: list[tuple] = []

    def between_parts() -> None:
        # No store transaction is open here: what a runtime sees between two parts.
        with pytest.raises(core.SessionBeingDeleted):
            core.resume_session(ref=sid)
        with pytest.raises(core.SessionBeingDeleted):
            core.merge_sessions(session_ids=[other, sid], target_id=sid)
        with pytest.raises(core.SessionBeingDeleted):
            core.branch_session(session_id=sid)
        seen.append((message_count(sid), set(being_deleted.marks_on([sid, other]))))

    result = deletion.delete_batch(
        [sid],
        actor="ada",
        reason="too big",
        job_id=None,
        operation="op-parts",
        part_messages=100,
        between_parts=between_parts,
    )

    assert result[:2] == (1, 350)
    # Three parts of 100 (the oldest first), then the row with the last 50.
    assert seen == [(250, {sid}), (150, {sid}), (50, {sid})]
    assert session_rows(sid) == {"session": [], "messages": []}
    assert being_deleted.marks_on([sid]) == {}
    entries = TrashEntry.objects.filter(operation="op-parts").order_by("pk")
    assert [(e.session_count, e.message_count, e.state) for e in entries] == [
        (0, 100, TrashEntry.COMPLETE),
        (0, 100, TrashEntry.COMPLETE),
        (0, 100, TrashEntry.COMPLETE),
        (1, 50, TrashEntry.COMPLETE),
    ]
    assert trashed_message_ids("op-parts") == [m[0] for m in before["messages"]]
    assert session_rows(other)["session"]  # untouched

    restored = core.restore_trash_entry(entry_id=entries[1].pk, actor="ada")
    assert restored.restored_messages == 350
    assert session_rows(sid) == before
    assert_consistent()


def test_a_live_session_being_deleted_refuses_appends_until_it_is_gone():
    sid = big_session(250, ended=False)
    refused: list[str] = []

    def between_parts() -> None:
        with pytest.raises(core.SessionBeingDeleted) as caught:
            core.append_message(session_id=sid, role="user", content="late")
        refused.append(caught.value.session_id)

    deletion.delete_batch(
        [sid], actor="ada", reason="r", job_id=None, part_messages=100, between_parts=between_parts
    )
    assert refused == [sid, sid]
    assert session_rows(sid) == {"session": [], "messages": []}


def pause_child(operation: str, arguments: dict, folder: Path, *, env: dict | None = None):
    """A child (tests/core/crash_child.py) stopped at its first delete.between_parts."""
    environment = {
        **child_env(),
        "SESSIONS_ADMIN_PAUSE_AT": "delete.between_parts",
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
    while not (folder / "delete.between_parts.reached").exists():
        if child.poll() is not None:
            pytest.fail(f"the child ended before pausing: {child.stderr.read()}")
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return child


def finish(child, folder: Path) -> str:
    (folder / "delete.between_parts.release").touch()
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    return out


def runtime_process(commands: list[dict]) -> list[dict]:
    """Another OS process calling the core, as a Python runtime does."""
    connections.close_all()
    done = subprocess.run(
        [sys.executable, "-m", "tests.core.race_child", json.dumps(commands)],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_another_process_is_refused_between_parts_and_a_raw_runtime_write_is_kept(tmp_path):
    sid = big_session(260, ended=False, key="agent:main:telegram:dm:7")
    other = big_session(2, ended=False)
    before = session_rows(sid)
    plan = core.plan_cascade_delete(session_ids=[sid])
    child = pause_child(
        "cascade_delete",
        {
            "session_ids": [sid],
            "expected_fingerprint": plan.fingerprint,
            "actor": "ada",
            "reason": "parts",
        },
        tmp_path,
        env={"CRASH_CHILD_BATCH_MESSAGES": "100"},
    )
    answers = runtime_process(
        [
            {"op": "append_message", "kwargs": {"session_id": sid, "role": "user", "content": "x"}},
            {"op": "resume_session", "kwargs": {"ref": sid}},
            {"op": "merge_sessions", "kwargs": {"session_ids": [sid, other], "target_id": other}},
            {"op": "undo_last_turn", "kwargs": {"session_id": sid}},
        ]
    )
    assert [a.get("error") for a in answers] == ["SessionBeingDeleted"] * 4
    assert message_count(sid) == 160  # the first part went; nothing was added
    # A runtime that does not use the core (Hermes writing with its own SQL) still lands ...
    db.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (%s, 'user', %s, %s)",
        [sid, "written by a runtime beside the delete", time.time()],
    )
    db.execute("UPDATE sessions SET message_count = message_count + 1 WHERE id = %s", [sid])
    raw_id = db.fetchone("SELECT MAX(id) FROM messages WHERE session_id = %s", [sid])[0]
    connections.close_all()
    result = json.loads(finish(child, tmp_path))

    # ... and goes to the trash with the rest: nothing is lost.
    assert (result["deleted_sessions"], result["deleted_messages"]) == (1, 261)
    assert session_rows(sid) == {"session": [], "messages": []}
    operation = result["operation"]
    assert trashed_message_ids(operation) == sorted([*(m[0] for m in before["messages"]), raw_id])
    core.restore_trash_entry(entry_id=result["trash_entry_ids"][0], actor="ada")
    assert message_count(sid) == 261
    assert being_deleted.marks_on([sid]) == {}
    core.append_message(session_id=sid, role="user", content="writable again")
    assert_consistent()


def run_crash_child(operation: str, arguments: dict, *, crash_at: str, env: dict | None = None):
    settings = {"SESSIONS_ADMIN_CRASH_AT": crash_at, **(env or {})}
    return run_test_child("crash_child", operation, json.dumps(arguments), settings=settings)


def cascade_killed_after_first_part(sid: str):
    """A cascade delete of ``sid`` in parts of 100, its process killed after the first part."""
    plan = core.plan_cascade_delete(session_ids=[sid])
    return run_crash_child(
        "cascade_delete",
        {
            "session_ids": [sid],
            "expected_fingerprint": plan.fingerprint,
            "actor": "a",
            "reason": "r",
        },
        crash_at="delete.between_parts@1",
        env={"CRASH_CHILD_BATCH_MESSAGES": "100"},
    )


def expire_lease(job_id: int) -> None:
    DeleteJob.objects.filter(pk=job_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )


@pytest.mark.parametrize(
    "crash_at",
    [
        "delete.between_parts@2",  # two parts committed and marked
        "delete.after_commit@2",  # the second part committed, its entry still pending
        "delete.after_trash_copy@2",  # the second part copied, its delete never committed
    ],
)
def test_a_job_killed_between_parts_is_finished_by_the_next_worker(crash_at):
    sid = big_session(450)
    small = big_session(3)
    before = session_rows(sid)
    kept = session_rows(small)
    job_id = jobs.create_bulk_delete_job(
        session_ids=[sid], include_live=False, actor="ada", reason="cleanup"
    )

    child = run_crash_child(
        "run_job", {"job_id": job_id, "worker": "doomed", "batch_messages": 100}, crash_at=crash_at
    )

    assert child.returncode == -9, child.stderr
    assert_consistent()
    # Every message is in the store or the trash, once; the session is marked being deleted.
    left = [m[0] for m in session_rows(sid)["messages"]]
    trashed = trashed_message_ids(job_operation(job_id))
    if crash_at.startswith("delete.after_trash_copy"):
        # The dead part's pending copy names rows still in the store: dropped by the next part.
        pending = TrashEntry.objects.get(job_id=job_id, state=TrashEntry.PENDING)
        trashed = sorted(
            set(trashed) - {m["id"] for m in LEDGER_TRASH.contents(pending.pk).rows["messages"]}
        )
    assert sorted(left + trashed) == [m[0] for m in before["messages"]]
    assert len(left) < 450
    assert set(being_deleted.marks_on([sid])) == {sid}
    with pytest.raises(core.SessionBeingDeleted):
        core.resume_session(ref=sid)

    expire_lease(job_id)
    progress = jobs.run_job(job_id=job_id, worker="next", batch_messages=100)

    assert progress.state == DeleteJob.DONE
    assert (progress.deleted, progress.skipped) == (1, 0)
    assert session_rows(sid) == {"session": [], "messages": []}
    assert being_deleted.marks_on([sid]) == {}
    assert not TrashEntry.objects.filter(state=TrashEntry.PENDING).exists()
    # Each message is in the trash exactly once, and the restore gives the session back whole.
    assert trashed_message_ids(job_operation(job_id)) == [m[0] for m in before["messages"]]
    assert session_rows(small) == kept
    entry = TrashEntry.objects.filter(job_id=job_id).first()
    core.restore_trash_entry(entry_id=entry.pk, actor="ada")
    assert session_rows(sid) == before
    assert_consistent()


def test_a_cascade_killed_between_parts_leaves_a_marked_session_that_a_restore_gives_back():
    sid = big_session(300, ended=False)
    before = session_rows(sid)
    child = cascade_killed_after_first_part(sid)

    assert child.returncode == -9, child.stderr
    assert message_count(sid) == 200
    mark = being_deleted.marks_on([sid])[sid]
    with pytest.raises(core.SessionBeingDeleted):
        core.append_message(session_id=sid, role="user", content="refused")
    part = TrashEntry.objects.get(operation=mark.operation)
    assert (part.session_count, part.message_count, part.state) == (0, 100, TrashEntry.COMPLETE)

    core.restore_trash_entry(entry_id=part.pk, actor="ada")

    assert session_rows(sid) == before
    assert being_deleted.marks_on([sid]) == {}
    core.append_message(session_id=sid, role="user", content="writable again")
    assert_consistent()


def test_a_cascade_run_again_after_a_crash_between_parts_finishes_the_session():
    sid = big_session(300)
    before = session_rows(sid)
    cascade_killed_after_first_part(sid)
    first = being_deleted.marks_on([sid])[sid].operation

    again = core.plan_cascade_delete(session_ids=[sid])
    result = core.execute_cascade_delete(
        session_ids=[sid], expected_fingerprint=again.fingerprint, actor="a", reason="again"
    )

    assert result.deleted_sessions == 1
    assert session_rows(sid) == {"session": [], "messages": []}
    assert being_deleted.marks_on([sid]) == {}
    # The first run's part stays in its own operation; restoring the second brings it back
    # with the session's row: the session is never back with part of its messages missing.
    restored = core.restore_trash_entry(entry_id=result.trash_entry_ids[0], actor="a")
    assert session_rows(sid) == before
    first_part = TrashEntry.objects.filter(operation=first).first()
    assert first_part.pk in restored.trash_entry_ids
    assert TrashEntry.objects.get(pk=first_part.pk).state == TrashEntry.RESTORED


def test_restoring_parts_whose_session_row_went_with_another_delete_brings_that_one_too():
    sid = big_session(300)
    before = session_rows(sid)
    cascade_killed_after_first_part(sid)
    first = TrashEntry.objects.get(operation=being_deleted.marks_on([sid])[sid].operation)
    again = core.plan_cascade_delete(session_ids=[sid])
    second = core.execute_cascade_delete(
        session_ids=[sid], expected_fingerprint=again.fingerprint, actor="a", reason="again"
    )
    restored = core.restore_trash_entry(entry_id=first.pk, actor="a")
    assert set(second.trash_entry_ids) <= set(restored.trash_entry_ids)
    assert session_rows(sid) == before  # never half a session


def test_a_session_reopened_between_parts_is_given_back_whole_and_skipped(tmp_path):
    sid = big_session(350)
    before = session_rows(sid)
    job_id = jobs.create_bulk_delete_job(
        session_ids=[sid], include_live=False, actor="ada", reason="cleanup"
    )
    child = pause_child("run_job", {"job_id": job_id, "batch_messages": 100}, tmp_path)
    assert message_count(sid) == 250
    # Hermes reopening the session with its own SQL (/resume), which knows nothing of the mark.
    db.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = %s", [sid])
    reopened = session_rows(sid)
    connections.close_all()
    finish(child, tmp_path)

    job = DeleteJob.objects.get(pk=job_id)
    assert (job.state, job.done, job.skipped) == (DeleteJob.DONE, 0, 1)
    assert being_deleted.marks_on([sid]) == {}
    assert session_rows(sid)["messages"] == before["messages"]
    assert session_rows(sid)["session"] == reopened["session"]
    assert not TrashEntry.objects.filter(job_id=job_id).exclude(state=TrashEntry.RESTORED).exists()
    core.append_message(session_id=sid, role="user", content="the conversation goes on")
    assert_consistent()


def test_a_hold_placed_between_parts_gives_the_session_back():
    sid = big_session(250)
    before = session_rows(sid)

    def place_hold() -> None:
        if not holds.active_holds():
            holds.place_hold(kind=holds.SESSION, subject=sid, reason="litigation", actor="lee")

    with pytest.raises(holds.SessionsHeld):
        deletion.delete_batch(
            [sid],
            actor="ada",
            reason="r",
            job_id=None,
            operation="op-held",
            part_messages=100,
            between_parts=place_hold,
        )
    assert session_rows(sid) == before
    assert being_deleted.marks_on([sid]) == {}
    # The parts are back in the store: their trash entries are gone (tests/ledger/test_trash_truth.py).
    assert not TrashEntry.objects.filter(operation="op-held").exists()


def test_cancelling_a_job_gives_back_the_session_it_left_in_parts():
    sid = big_session(300)
    before = session_rows(sid)
    job_id = jobs.create_bulk_delete_job(
        session_ids=[sid], include_live=False, actor="ada", reason="cleanup"
    )
    run_crash_child(
        "run_job",
        {"job_id": job_id, "worker": "doomed", "batch_messages": 100},
        crash_at="delete.between_parts@1",
    )
    assert message_count(sid) == 200

    jobs.cancel_job(job_id=job_id)

    assert session_rows(sid) == before
    assert being_deleted.marks_on([sid]) == {}
    assert DeleteJob.objects.get(pk=job_id).state == DeleteJob.CANCELLED


def test_a_store_attached_by_an_older_version_works_and_a_delete_in_parts_creates_the_table():
    from sessions_admin.core.schema import existing_tables
    from sessions_admin.routers import store_alias
    from sessions_admin.store import health

    db.execute("DROP TABLE sessions_admin_deletions")
    being_deleted._present_in.clear()  # as a process started on such a store finds it
    being_deleted._missing_until.clear()
    try:
        sid = big_session(250, ended=False)  # appends, the health checks: as before
        core.append_message(session_id=sid, role="user", content="one more")
        assert health.count("counter_mismatch") == 0
        assert check_store() == []

        deleted = deletion.delete_batch(
            [sid], actor="ada", reason="r", job_id=None, part_messages=100
        )

        assert deleted[:2] == (1, 251)
        assert "sessions_admin_deletions" in existing_tables(store_alias())
        assert session_rows(sid) == {"session": [], "messages": []}
    finally:
        being_deleted.ensure_table()


def test_a_purge_keeps_the_parts_of_a_held_session_a_killed_delete_left():
    from sessions_admin.ledger.trash import purge_trash

    sid = big_session(300)
    cascade_killed_after_first_part(sid)
    operation = being_deleted.marks_on([sid])[sid].operation
    holds.place_hold(kind=holds.SESSION, subject=sid, reason="litigation", actor="lee")

    purge_trash()

    assert TrashEntry.objects.filter(operation=operation, state=TrashEntry.COMPLETE).count() == 1
