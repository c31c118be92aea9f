"""Two jobs of one previewed set run at once: each counts what its own trash holds (issue 26).

Two admins who confirmed the same bulk delete get two jobs, and two workers run them side by
side. Each batch is copied, then deleted under the store's lock; a batch whose sessions the
other job deleted meanwhile finds them gone under the lock and deletes nothing. Its items were
marked done all the same: each job said it deleted about all of the set while its trash held
a part of it (the last attack's break). Each test runs the jobs in real OS processes
(``tests/core/crash_child.py``), held where the race needs by a pause point, on SQLite and
PostgreSQL.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections
from django.urls import reverse

from sessions_admin.core import db
from sessions_admin.demo.consistency import check_store, check_trash
from sessions_admin.ledger import actions, jobs
from sessions_admin.ledger.models import DeleteJob, DeleteJobItem, TrashEntry
from tests.builders import old_sessions
from tests.core.test_crash import store_state
from tests.helpers import child_env

ROOT = Path(settings.BASE_DIR)


def _worker(
    job_id: int, *, pause_at: str = "", folder: Path | None = None, retry_seconds: str = ""
) -> subprocess.Popen:
    """``jobs.run_job`` in a process of its own, two sessions a batch (the set takes several)."""
    connections.close_all()
    env = child_env()
    if pause_at:
        env |= {"SESSIONS_ADMIN_PAUSE_AT": pause_at, "SESSIONS_ADMIN_PAUSE_DIR": str(folder)}
    if retry_seconds:
        env["CRASH_CHILD_RETRY_SECONDS"] = retry_seconds
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.core.crash_child",
            "run_job",
            json.dumps({"job_id": job_id, "batch_sessions": 2}),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(what, child: subprocess.Popen, words: str) -> None:
    deadline = time.monotonic() + 60
    while not what():
        if child.poll() is not None:
            pytest.fail(f"the worker ended before {words}: {child.stderr.read()}")
        assert time.monotonic() < deadline, f"never {words}"
        time.sleep(0.02)


def _trashed_sessions(job_id: int) -> set[str]:
    """The sessions whose rows the job's trash entries hold (not a part's messages only)."""
    return {
        sid
        for ids in TrashEntry.objects.filter(
            job_id=job_id, state=TrashEntry.COMPLETE, session_count__gt=0
        ).values_list("session_ids", flat=True)
        for sid in ids
    }


def _items(job_id: int, state: int) -> set[str]:
    return set(
        DeleteJobItem.objects.filter(job_id=job_id, state=state).values_list(
            "session_id", flat=True
        )
    )


def test_two_jobs_of_one_set_at_once_each_count_what_their_own_trash_holds(
    tmp_path, admin_client, no_worker
):
    ids = old_sessions(8, messages=3)
    before = store_state()
    confirmed = {"session_ids": ids, "include_live": False, "expected_ids": ids}
    first = jobs.create_bulk_delete_job(**confirmed, actor="ada", reason="first")
    second = jobs.create_bulk_delete_job(**confirmed, actor="bob", reason="second")

    # The first job's first batch is copied to its trash and holds the store's lock ...
    folder = tmp_path / "first"
    folder.mkdir()
    ada = _worker(first, pause_at="delete.after_trash_copy", folder=folder)
    _wait_for(
        (folder / "delete.after_trash_copy.reached").exists, ada, "its first batch was copied"
    )
    # ... while the second job copies the same batch (still in the store) and waits for it.
    # SQLite: before that, its start settles the trash and defers the full-text merges, two
    # store writes that find the store locked and give up (later calls do them): one attempt
    # each (a busy timeout, 5 s) rather than 10 s of attempts. Its delete's first attempt
    # still waits a whole busy timeout for the first job's lock, released at once below.
    bob = _worker(second, retry_seconds="1" if db.vendor() == "sqlite" else "")
    _wait_for(
        TrashEntry.objects.filter(job_id=second, state=TrashEntry.PENDING).exists,
        bob,
        "the second job copied its first batch",
    )
    (folder / "delete.after_trash_copy.release").touch()
    outcomes = [(child.wait(60), *child.communicate()) for child in (ada, bob)]
    assert [code for code, _out, _err in outcomes] == [0, 0], outcomes

    # Every session is deleted once, by one of the two jobs, and counted by that one only.
    ada_took, bob_took = _trashed_sessions(first), _trashed_sessions(second)
    assert ada_took | bob_took == set(ids) and not ada_took & bob_took
    assert len(ada_took) >= 2  # the first batch is the first job's
    for job_id, took, other in ((first, ada_took, bob_took), (second, bob_took, ada_took)):
        job = DeleteJob.objects.get(pk=job_id)
        assert job.state == DeleteJob.DONE
        assert job.done == len(took)
        assert _items(job_id, DeleteJobItem.DONE) == took
        assert _items(job_id, DeleteJobItem.SKIPPED) == other
        assert job.done + job.skipped == job.total == len(ids)
        assert job.deleted_messages == 3 * len(took)
        # The job's page names the job that deleted the rest.
        progress = jobs.job_progress(job_id=job_id)
        other_job = second if job_id == first else first
        if other:
            assert progress.taken == (jobs.TakenSkip(other_job, len(other)),)
            assert f"{len(other)} already deleted by job #{other_job}" in progress.skipped_text
            page = admin_client.get(reverse("job_detail", args=[job_id]))
            assert page.context["progress"].taken == progress.taken
            shown = html.unescape(page.content.decode())
            link = reverse("job_detail", args=[other_job])
            assert f'{len(other)} by <a href="{link}">job #{other_job}</a>' in shown
    assert DeleteJob.objects.get(pk=first).done + DeleteJob.objects.get(pk=second).done == len(ids)

    # Restoring both jobs' trash gives the store back row for row.
    for job_id in (first, second):
        entry = TrashEntry.objects.filter(job_id=job_id, state=TrashEntry.COMPLETE).first()
        if entry is not None:
            actions.restore(actor="ada", entry_id=entry.pk)
    assert store_state() == before
    assert check_store() == [] and check_trash() == []
