"""A purge stopped midway gives a session back whole, as a delete into the trash does.

A session larger than a batch is deleted in parts (``core.being_deleted``). A delete into the
trash gives the parts back from the trash when it must keep the session (a hold landed, the
session went live, its job was cancelled). A purge (a retention policy set to purge, an
erasure: ``deletion.NO_TRASH``) kept no copy, so such a stop left the session half destroyed
(a hold "won" on 500 of 8,000 messages) or, keeping nothing to give back, purged a reopened
session completely. Its parts are now kept in the store until the session row goes, and given
back by the same step. A job's counts are what the store lost (and, into the trash, what the
trash holds), whatever stopped it.
"""

from __future__ import annotations

import pytest
from django.db import connections

from sessions_admin import core
from sessions_admin.core import being_deleted, db, deletion, holds
from sessions_admin.core.schema import existing_tables
from sessions_admin.demo.consistency import check_store
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import DeleteJob, TrashEntry
from sessions_admin.ledger.trash import LEDGER_TRASH
from sessions_admin.routers import store_alias
from tests.core.test_delete_in_parts import (
    big_session,
    expire_lease,
    finish,
    message_count,
    pause_child,
    run_crash_child,
    session_rows,
)

PARTS_TABLE = "sessions_admin_deletion_parts"  # being_deleted.PARTS_TABLE


def kept_parts() -> int:
    """Messages a purge keeps in the store for a session it is deleting in parts."""
    if PARTS_TABLE not in existing_tables(store_alias()):
        return 0
    return db.fetchone(f"SELECT COUNT(*) FROM {PARTS_TABLE}")[0]


def store_messages() -> int:
    return db.fetchone("SELECT COUNT(*) FROM messages")[0]


def trashed_messages(job_id: int) -> int:
    return sum(
        TrashEntry.objects.filter(job_id=job_id)
        .exclude(state=TrashEntry.RESTORED)
        .values_list("message_count", flat=True)
    )


def test_a_hold_placed_between_parts_of_a_purge_gives_the_session_back_whole():
    sid = big_session(350)
    before = session_rows(sid)
    seen: list[int] = []

    def place_hold() -> None:
        seen.append(message_count(sid))
        if not holds.active_holds():
            holds.place_hold(kind=holds.SESSION, subject=sid, reason="litigation", actor="lee")

    with pytest.raises(holds.SessionsHeld):
        deletion.delete_batch(
            [sid],
            actor="retention",
            reason="purge",
            job_id=None,
            trash=deletion.NO_TRASH,
            part_messages=100,
            between_parts=place_hold,
        )

    assert seen == [250]  # a part had gone when the hold landed
    assert session_rows(sid) == before
    assert being_deleted.marks_on([sid]) == {}
    assert kept_parts() == 0
    assert not TrashEntry.objects.exists()  # a purge never writes the trash
    core.resume_session(ref=sid)  # writable again: no longer being deleted
    assert check_store() == []


def test_a_purge_finished_in_parts_keeps_no_copy_of_the_session():
    sid = big_session(350)
    other = big_session(3)
    kept_before = session_rows(other)
    seen: list[int] = []

    result = deletion.delete_batch(
        [sid],
        actor="retention",
        reason="purge",
        job_id=None,
        trash=deletion.NO_TRASH,
        part_messages=100,
        between_parts=lambda: seen.append(kept_parts()),
    )

    assert result[:2] == (1, 350)
    assert seen == [100, 200, 300]  # each part kept, in the store, until the session went
    assert session_rows(sid) == {"session": [], "messages": []}
    assert kept_parts() == 0
    assert being_deleted.marks_on([sid]) == {}
    assert not TrashEntry.objects.exists()
    assert session_rows(other) == kept_before
    assert check_store() == []


class GivenBackDuringLastStep:
    """The ledger's trash, where the copy of a delete's last step (the session row with what
    is left) lands just as a job's cancel, from another process, gives the session back: the
    moment between that copy and the store's lock."""

    def __init__(self, session_id: str):
        self.session_id = session_id

    def __getattr__(self, name: str):
        return getattr(LEDGER_TRASH, name)

    def open_entry(self, **kwargs) -> int:
        entry = LEDGER_TRASH.open_entry(**kwargs)
        if kwargs["rows"]["sessions"]:
            deletion.stop_deleting(session_ids=[self.session_id], trash=LEDGER_TRASH)
        return entry


def test_a_session_given_back_during_the_last_step_is_not_then_deleted_whole():
    """B4: the given-back session was deleted in one batch after the cancel, its messages
    counted twice (the parts given back, then all of them again)."""
    sid = big_session(250)
    before = session_rows(sid)

    with pytest.raises(deletion.DeleteGivenBack):
        deletion.delete_batch(
            [sid],
            actor="ada",
            reason="r",
            job_id=None,
            trash=GivenBackDuringLastStep(sid),
            operation="op-given-back",
            part_messages=100,
        )

    assert session_rows(sid) == before
    assert being_deleted.marks_on([sid]) == {}
    assert not TrashEntry.objects.filter(operation="op-given-back").exists()


@pytest.mark.parametrize("purge", [True, False], ids=["purge", "trash"])
def test_a_delete_in_parts_told_to_stop_between_parts_gives_the_session_back(purge):
    """What a job's worker does once its job was cancelled (its lease renewal says False), even
    if the cancel's own give-back ran before the worker started the session."""
    sid = big_session(350)
    before = session_rows(sid)

    with pytest.raises(deletion.DeleteGivenBack):
        deletion.delete_batch(
            [sid],
            actor="ada",
            reason="r",
            job_id=None,
            trash=deletion.NO_TRASH if purge else LEDGER_TRASH,
            operation="op-stopped",
            part_messages=100,
            between_parts=lambda: False,
        )

    assert session_rows(sid) == before
    assert being_deleted.marks_on([sid]) == {}
    assert kept_parts() == 0
    assert not TrashEntry.objects.filter(operation="op-stopped").exists()


def paused_job(tmp_path, *, purge: bool, sessions: list[str]) -> tuple[int, object]:
    job_id = jobs.create_bulk_delete_job(
        session_ids=sessions, include_live=False, actor="ada", reason="cleanup", purge=purge
    )
    child = pause_child("run_job", {"job_id": job_id, "batch_messages": 100}, tmp_path)
    return job_id, child


@pytest.mark.parametrize("purge", [True, False], ids=["purge", "trash"])
def test_a_hold_placed_while_a_job_deletes_a_session_in_parts_keeps_it_whole(tmp_path, purge):
    sid = big_session(350)
    before = session_rows(sid)
    job_id, child = paused_job(tmp_path, purge=purge, sessions=[sid])
    assert message_count(sid) == 250
    hold = holds.place_hold(kind=holds.SESSION, subject=sid, reason="litigation", actor="lee")
    connections.close_all()
    finish(child, tmp_path)

    job = DeleteJob.objects.get(pk=job_id)
    assert (job.state, job.done, job.skipped, job.deleted_messages) == (DeleteJob.DONE, 0, 1, 0)
    assert jobs.job_progress(job_id=job_id).skipped_text == f"1 skipped: {sid}, hold #{hold.id}"
    assert session_rows(sid) == before
    assert being_deleted.marks_on([sid]) == {}
    assert kept_parts() == 0
    assert trashed_messages(job_id) == 0
    assert check_store() == []


@pytest.mark.parametrize("purge", [True, False], ids=["purge", "trash"])
def test_a_session_reopened_while_a_job_deletes_it_in_parts_is_kept_whole(tmp_path, purge):
    sid = big_session(350)
    before = session_rows(sid)
    job_id, child = paused_job(tmp_path, purge=purge, sessions=[sid])
    # Hermes reopening the session with its own SQL (/resume), knowing nothing of the mark.
    db.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = %s", [sid])
    reopened = session_rows(sid)["session"]
    connections.close_all()
    finish(child, tmp_path)

    job = DeleteJob.objects.get(pk=job_id)
    assert (job.state, job.done, job.skipped, job.deleted_messages) == (DeleteJob.DONE, 0, 1, 0)
    assert session_rows(sid) == {"session": reopened, "messages": before["messages"]}
    assert being_deleted.marks_on([sid]) == {}
    assert kept_parts() == 0
    assert trashed_messages(job_id) == 0
    core.append_message(session_id=sid, role="user", content="the conversation goes on")
    assert check_store() == []


@pytest.mark.parametrize("purge", [True, False], ids=["purge", "trash"])
@pytest.mark.parametrize("messages", [350, 150], ids=["parts-to-go", "last-part-gone"])
def test_a_job_cancelled_while_deleting_a_session_in_parts_gives_it_back_and_counts_the_rest(
    tmp_path, purge, messages, monkeypatch
):
    """Cancelled with parts still to go, or after the last part (the session row's step next):
    the session comes back whole, and the job's counts are what the store lost."""
    # The worker stays paused inside its batch until after the cancel: the cancel's wait for
    # its acknowledgement (10 s) always runs out, and nothing checked here depends on how long.
    monkeypatch.setattr(jobs, "CANCEL_WAIT_SECONDS", 0.5)
    first = big_session(30)
    sid = big_session(messages)
    before = session_rows(sid)
    job_id, child = paused_job(tmp_path, purge=purge, sessions=[first, sid])
    total_before = 30 + messages
    assert message_count(first) == 0  # the small session went whole, first
    assert message_count(sid) == messages - 100

    jobs.cancel_job(job_id=job_id)
    connections.close_all()
    finish(child, tmp_path)

    job = DeleteJob.objects.get(pk=job_id)
    lost = total_before - store_messages()
    assert job.state == DeleteJob.CANCELLED
    assert session_rows(sid) == before
    assert being_deleted.marks_on([sid]) == {}
    assert kept_parts() == 0
    assert (job.done, job.deleted_messages, lost) == (1, 30, 30)
    assert trashed_messages(job_id) == (0 if purge else 30)
    core.resume_session(ref=sid)  # writable again: no longer being deleted
    assert check_store() == []


def purge_job_killed_after_first_part(sid: str) -> int:
    job_id = jobs.create_bulk_delete_job(
        session_ids=[sid], include_live=False, actor="ada", reason="cleanup", purge=True
    )
    child = run_crash_child(
        "run_job",
        {"job_id": job_id, "worker": "doomed", "batch_messages": 100},
        crash_at="delete.between_parts@1",
    )
    assert child.returncode == -9, child.stderr
    assert message_count(sid) == 250
    assert not TrashEntry.objects.exists()
    return job_id


def test_cancelling_a_purge_job_killed_between_parts_gives_the_session_back():
    sid = big_session(350)
    before = session_rows(sid)
    job_id = purge_job_killed_after_first_part(sid)

    jobs.cancel_job(job_id=job_id)

    assert session_rows(sid) == before
    assert being_deleted.marks_on([sid]) == {}
    assert kept_parts() == 0
    assert DeleteJob.objects.get(pk=job_id).state == DeleteJob.CANCELLED
    assert check_store() == []


def test_a_purge_job_killed_between_parts_is_finished_by_the_next_worker_leaving_no_copy():
    sid = big_session(350)
    other = big_session(3)
    kept_before = session_rows(other)
    job_id = purge_job_killed_after_first_part(sid)
    assert kept_parts() == 100  # the part that went, kept in the store (not in the trash)
    expire_lease(job_id)

    progress = jobs.run_job(job_id=job_id, worker="next", batch_messages=100)

    assert (progress.state, progress.deleted, progress.skipped) == (DeleteJob.DONE, 1, 0)
    # Every message the store lost is counted, the killed run's part too.
    assert DeleteJob.objects.get(pk=job_id).deleted_messages == 350
    assert session_rows(sid) == {"session": [], "messages": []}
    assert being_deleted.marks_on([sid]) == {}
    assert kept_parts() == 0
    assert not TrashEntry.objects.exists()
    assert session_rows(other) == kept_before
    assert check_store() == []
