"""A cancel answers once the batch in flight is counted (attack round 43: the cancel said
"cancelled, 416 sessions deleted" where the store had already lost 448, and a read a second
later said 448). A worker thread is held inside a batch, after its store commit, while the
cancel comes."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from sessions_admin.core import faults
from sessions_admin.core.errors import InvalidInput
from sessions_admin.ledger import actions, jobs
from sessions_admin.ledger.models import DeleteJob, TrashEntry, TrashSession
from sessions_admin.ledger.trash import job_operation
from tests.builders import old_sessions


def job_held_in_batch(*, nth: int):
    """A 9-session job (3 a batch) and how to run it in a thread: its ``nth`` batch is held
    after its store commit, before its counting, ``inside`` set, until ``release`` is."""
    job_id = jobs.create_bulk_delete_job(
        session_ids=old_sessions(9), include_live=False, actor="ada", reason="r"
    )
    inside, release = threading.Event(), threading.Event()

    def hold_the_batch() -> None:
        inside.set()
        release.wait(30)

    faults._actions.clear()
    faults._hits.clear()
    faults.run_at("job.after_batch_commit", hold_the_batch, nth=nth)

    def work() -> None:
        try:
            jobs.run_job(job_id=job_id, batch_sessions=3)
        finally:
            connections.close_all()

    return job_id, inside, release, work


def test_a_cancel_answers_with_the_batch_in_flight_counted():
    job_id, inside, release, work = job_held_in_batch(nth=1)
    answered: dict = {}

    def cancel() -> None:
        try:
            jobs.cancel_job(job_id=job_id)
            progress = jobs.job_progress(job_id=job_id)
            answered.update(state=progress.state, deleted=progress.deleted)
            answered["in_trash"] = TrashSession.objects.filter(
                entry__operation=job_operation(job_id)
            ).count()
        finally:
            connections.close_all()

    worker = threading.Thread(target=work)
    canceller = threading.Thread(target=cancel)
    try:
        worker.start()
        assert inside.wait(30)
        canceller.start()
        canceller.join(0.5)
        assert canceller.is_alive()  # it waits for the batch in flight ...
        # A second cancel meanwhile is refused, never "cancelled" with the counts of before
        # that batch (attack round 43: two cancels at once, one answered 0 deleted).
        with pytest.raises(jobs.JobNotRunning, match="already cancelled"):
            jobs.cancel_job(job_id=job_id)
        release.set()
        canceller.join(30)
        worker.join(30)
    finally:
        release.set()
        faults._actions.clear()
        faults._hits.clear()
    # ... and answers with it counted: what the store lost, as the trash holds it.
    assert answered == {"state": "cancelled", "deleted": 3, "in_trash": 3}
    job = DeleteJob.objects.get(pk=job_id)
    assert (job.state, job.done, job.lease_owner) == (DeleteJob.CANCELLED, 3, "")
    assert job.finished_at is not None


def test_a_cancel_the_batch_in_flight_outlasts_says_the_job_is_stopping(monkeypatch):
    """The worker stays inside its batch past the cancel's wait (attack round 43: another
    process held the store locked for longer than 10 s; the cancel answered "cancelled, 320
    deleted" where the store went on to lose 356, and said nothing of it). The job is
    cancelled and says it is stopping, keeps the worker's lease, refuses a restore of its trash
    entry meanwhile, and counts the batch once the worker is let go."""
    monkeypatch.setattr(jobs, "CANCEL_WAIT_SECONDS", 0.3)
    job_id, inside, release, work = job_held_in_batch(nth=2)

    worker = threading.Thread(target=work)
    try:
        worker.start()
        assert inside.wait(30)
        jobs.cancel_job(job_id=job_id)  # answers after its wait, the batch still held
        progress = jobs.job_progress(job_id=job_id)
        assert (progress.state, progress.stopping, progress.deleted) == ("cancelled", True, 3)
        entry = TrashEntry.objects.filter(operation=job_operation(job_id)).first()
        with pytest.raises(InvalidInput, match="is stopping"):
            actions.restore(actor="ada", entry_id=entry.pk, reason="undo")
        release.set()
        worker.join(30)
        assert not worker.is_alive()
    finally:
        release.set()
        faults._actions.clear()
        faults._hits.clear()
    progress = jobs.job_progress(job_id=job_id)
    in_trash = TrashSession.objects.filter(entry__operation=job_operation(job_id)).count()
    assert (progress.state, progress.stopping, progress.deleted, in_trash) == (
        "cancelled",
        False,
        6,
        6,
    )
    assert DeleteJob.objects.get(pk=job_id).lease_owner == ""
