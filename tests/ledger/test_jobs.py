"""Bulk delete jobs: exact set, small batches, resumable, never twice, live kept."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import DeleteJob, DeleteJobItem, TrashEntry
from tests.builders import old_sessions
from tests.helpers import counter_mismatches, present, run_threads


def test_presets_select_exactly_their_sessions():
    old = old_sessions(3, sources=("cli", "telegram"), messages=3)
    empty = core.create_session(source="discord").session_id
    core.end_session(session_id=empty, end_reason="user_exit")
    core.create_session(source="discord")  # live and empty: only picked by id, never by "empty"
    db.execute("UPDATE sessions SET ended_at = 1 WHERE id = %s", [old[0]])
    assert core.preset_session_ids(preset="ended_older_than", days=30) == [old[0]]
    assert core.preset_session_ids(preset="empty") == [empty]
    assert set(core.preset_session_ids(preset="by_source", source="cli")) == {old[0], old[2]}
    with pytest.raises(core.InvalidInput):
        core.preset_session_ids(preset="everything")


def test_the_dry_run_counts_exactly_and_keeps_live_sessions():
    ids = old_sessions(4, sources=("cli", "telegram"), messages=3)
    live = core.create_session(source="cli").session_id
    delegate = core.create_session(
        source="tool", parent_session_id=ids[0], model_config={"_delegate_from": ids[0]}
    ).session_id
    core.end_session(session_id=delegate, end_reason="done")
    preview = core.preview_bulk_delete(session_ids=[*ids, live])
    assert set(preview.session_ids) == {*ids, delegate}
    assert preview.live_excluded == 1
    assert preview.message_count == 12
    assert len(preview.sample) == 5
    assert core.preview_bulk_delete(session_ids=[live], include_live=True).session_ids == (live,)


def test_a_job_deletes_in_batches_and_survives_an_interruption():
    ids = old_sessions(25, sources=("cli", "telegram"), messages=3)
    keep = core.create_session(source="cli").session_id
    job_id = jobs.create_bulk_delete_job(
        session_ids=ids, include_live=False, actor="ada", reason="retention"
    )
    # A worker dies after two batches: its lease is left behind.
    progress = jobs.run_job(job_id=job_id, worker="dead", batch_sessions=4, max_batches=2)
    assert progress.processed == 8 and progress.state == "running"
    # Another worker cannot take the job while the lease is valid ...
    assert jobs.run_job(job_id=job_id, worker="other").processed == 8
    # ... and resumes it once the lease expires.
    DeleteJob.objects.filter(pk=job_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    done = jobs.run_job(job_id=job_id, worker="other", batch_sessions=4)
    assert (done.state, done.processed, done.deleted, done.skipped) == ("done", 25, 25, 0)
    assert done.percent == 100 and done.deleted_messages == 75
    assert present(ids) == set()
    assert present([keep]) == {keep}
    assert TrashEntry.objects.filter(job_id=job_id).count() == 7
    # Running it again deletes nothing twice.
    again = jobs.run_job(job_id=job_id, worker="third")
    assert (again.deleted, again.state) == (25, "done")


def test_a_session_gone_before_its_batch_is_skipped_not_counted_twice():
    ids = old_sessions(3, sources=("cli", "telegram"), messages=3)
    job_id = jobs.create_bulk_delete_job(session_ids=ids, include_live=False, actor="a", reason="r")
    plan = core.plan_cascade_delete(session_ids=[ids[1]])
    core.execute_cascade_delete(
        session_ids=[ids[1]], expected_fingerprint=plan.fingerprint, actor="b", reason="r"
    )
    progress = jobs.run_job(job_id=job_id)
    assert (progress.deleted, progress.skipped) == (2, 1)
    assert DeleteJobItem.objects.filter(job_id=job_id, state=DeleteJobItem.SKIPPED).count() == 1


def test_a_session_resumed_after_the_job_started_is_not_deleted():
    ids = old_sessions(3, sources=("cli", "telegram"), messages=3)
    job_id = jobs.create_bulk_delete_job(session_ids=ids, include_live=False, actor="a", reason="r")
    core.resume_session(ref=ids[2])
    jobs.run_job(job_id=job_id)
    assert present(ids) == {ids[2]}


def test_a_job_needs_a_reason_and_something_to_delete():
    live = core.create_session(source="cli").session_id
    with pytest.raises(core.InvalidInput):
        jobs.create_bulk_delete_job(session_ids=[live], include_live=False, actor="a", reason="r")
    with pytest.raises(core.InvalidInput):
        jobs.create_bulk_delete_job(session_ids=[live], include_live=True, actor="a", reason=" ")
    assert DeleteJob.objects.count() == 0


def test_cancelling_stops_a_job():
    ids = old_sessions(6, sources=("cli", "telegram"), messages=3)
    job_id = jobs.create_bulk_delete_job(session_ids=ids, include_live=False, actor="a", reason="r")
    jobs.run_job(job_id=job_id, batch_sessions=2, max_batches=1)
    jobs.cancel_job(job_id=job_id)
    stopped_at = DeleteJob.objects.get(pk=job_id).finished_at
    assert stopped_at is not None  # the job page and the API say when it stopped
    progress = jobs.run_job(job_id=job_id, batch_sessions=2)
    assert progress.state == "cancelled" and progress.processed == 2
    assert len(present(ids)) == 4
    assert DeleteJob.objects.get(pk=job_id).finished_at == stopped_at


def test_concurrent_runtime_appends_lose_nothing_while_a_job_runs():
    doomed = old_sessions(40, sources=("cli", "telegram"), messages=2)
    survivor = core.create_session(source="telegram", session_key="tg:live").session_id
    job_id = jobs.create_bulk_delete_job(
        session_ids=doomed, include_live=False, actor="a", reason="r"
    )
    acknowledged: list[int] = []
    finished = threading.Event()

    def work(i: int):
        if i == 0:
            try:
                return jobs.run_job(job_id=job_id, batch_sessions=3)
            finally:
                finished.set()
        n = 0
        while not finished.is_set() or n < 20:
            acknowledged.extend(
                core.append_message(
                    session_id=survivor, role="user", content=f"live {n}"
                ).message_ids
            )
            n += 1
        return n

    results = run_threads(work, 2)
    assert results[0].state == "done"
    stored = [
        r[0]
        for r in db.fetchall(
            "SELECT id FROM messages WHERE session_id = %s ORDER BY id", [survivor]
        )
    ]
    assert stored == sorted(acknowledged)
    assert present(doomed) == set()
    assert counter_mismatches() == []


def test_a_selected_conversation_start_takes_its_continuations_along():
    root = core.create_session(source="cli", started_at=1.0).session_id
    core.append_message(session_id=root, role="user", content="one")
    tip = core.rotate_for_compression(session_id=root).new_session_id
    core.end_session(session_id=tip, end_reason="user_exit")
    preview = core.preview_bulk_delete(session_ids=[root])
    assert set(preview.session_ids) == {root, tip}
