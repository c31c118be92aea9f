"""A bulk delete job on SQLite defers the full-text indexes' automerge and merges in short
steps after its batches (core.deletion.fts_merges, issue 30): the setting is back to FTS5's
default when the job stops, even when a killed run left it off, and the indexes stay whole."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_admin.core import db, faults
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import DeleteJob
from tests.builders import old_sessions
from tests.core.test_crash import assert_killed, run_child
from tests.helpers import present

FTS = ("messages_fts", "messages_fts_trigram")
AUTOMERGE_DEFAULT = 4  # FTS5's own


@pytest.fixture(autouse=True)
def sqlite_only():
    if db.vendor() != "sqlite":
        pytest.skip("FTS5 is SQLite's: PostgreSQL has nothing to defer")


def automerge() -> dict[str, int]:
    """Each index's automerge setting (FTS5's default, 4, when never set)."""
    out = {}
    for fts in FTS:
        row = db.fetchone(f"SELECT v FROM {fts}_config WHERE k = 'automerge'")
        out[fts] = int(row[0]) if row else AUTOMERGE_DEFAULT
    return out


def indexes_whole() -> None:
    """Each index holds exactly the store's messages (FTS5's integrity-check raises if not)."""
    messages = db.fetchone("SELECT COUNT(*) FROM messages")[0]
    for fts in FTS:
        db.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('integrity-check', 1)")
        assert db.fetchone(f"SELECT COUNT(*) FROM {fts}")[0] == messages


def test_a_job_runs_with_automerge_off_and_sets_it_back():
    doomed = old_sessions(12, messages=40)
    kept = old_sessions(3, messages=5)
    job_id = jobs.create_bulk_delete_job(
        session_ids=doomed, include_live=True, actor="ada", reason="r"
    )
    during: list[dict[str, int]] = []
    faults.run_at("job.after_batch_commit", lambda: during.append(automerge()), nth=2)
    progress = jobs.run_job(job_id=job_id, batch_sessions=4, batch_messages=100)
    assert progress.state == "done" and progress.deleted == len(doomed)
    assert during == [{fts: 0 for fts in FTS}]
    assert automerge() == {fts: AUTOMERGE_DEFAULT for fts in FTS}
    assert present(doomed) == set() and present(kept) == set(kept)
    indexes_whole()


def test_a_job_killed_with_automerge_off_sets_it_back_when_it_resumes():
    doomed = old_sessions(9, messages=20)
    job_id = jobs.create_bulk_delete_job(
        session_ids=doomed, include_live=True, actor="ada", reason="r"
    )
    child = run_child(
        "run_job",
        {"job_id": job_id, "worker": "dead", "batch_sessions": 3},
        crash_at="job.after_batch_commit@2",
    )
    assert_killed(child)
    assert automerge() == {fts: 0 for fts in FTS}  # what the killed run left
    DeleteJob.objects.filter(pk=job_id).update(lease_expires_at=timezone.now() - timedelta(1))
    assert jobs.run_job(job_id=job_id, worker="next", batch_sessions=3).state == "done"
    assert automerge() == {fts: AUTOMERGE_DEFAULT for fts in FTS}
    assert present(doomed) == set()
    indexes_whole()
