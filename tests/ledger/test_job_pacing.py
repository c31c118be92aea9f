"""A bulk delete job's batches are paced by the time its store transactions hold the write
lock (core.deletion.pacing, issue 30): larger when they are quick, smaller when they are not,
within bounds; every session is still deleted exactly once, into the trash."""

from __future__ import annotations

from sessions_admin.core.deletion import pacing
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import TrashEntry, TrashSession
from tests.builders import old_sessions
from tests.helpers import present

SESSIONS = 24
MESSAGES = 60
FIXED_BATCHES = 3  # batches of BATCH_MESSAGES (500): 8 sessions each


def _run(monkeypatch, *, target: float) -> tuple[list[str], int]:
    monkeypatch.setattr(pacing, "TARGET_LOCK_SECONDS", target)
    doomed = old_sessions(SESSIONS, messages=MESSAGES)
    job_id = jobs.create_bulk_delete_job(
        session_ids=doomed, include_live=True, actor="ada", reason="r"
    )
    progress = jobs.run_job(job_id=job_id)
    assert progress.state == "done" and progress.deleted == SESSIONS
    assert present(doomed) == set()
    trashed = TrashSession.objects.filter(entry__job_id=job_id).values_list("session_id", flat=True)
    assert sorted(trashed) == sorted(doomed)  # each once
    return doomed, TrashEntry.objects.filter(job_id=job_id).count()


def test_quick_transactions_make_the_next_batches_larger(monkeypatch):
    # Whatever this machine's speed, a batch takes far less than a minute: the pace grows.
    _doomed, batches = _run(monkeypatch, target=60.0)
    assert batches < FIXED_BATCHES


def test_slow_transactions_make_the_next_batches_smaller(monkeypatch):
    _doomed, batches = _run(monkeypatch, target=1e-9)
    assert batches > FIXED_BATCHES


def test_the_pace_moves_halfway_and_stays_within_its_bounds():
    pace = pacing.BatchPace(500)
    pace.observe(messages=500, seconds=pacing.TARGET_LOCK_SECONDS / 4)  # 4x too quick
    assert pace.messages == 1000  # halfway (geometrically) to 2,000
    pace.observe(messages=1000, seconds=pacing.TARGET_LOCK_SECONDS * 1e-3)
    assert pace.messages == pacing.MAX_MESSAGES
    pace.observe(messages=2000, seconds=1e3)
    assert pace.messages == pacing.MIN_MESSAGES
    pace.observe(messages=10, seconds=1e3)  # too small to say anything
    assert pace.messages == pacing.MIN_MESSAGES
