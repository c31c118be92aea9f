"""Delete-job workers wake when a job is created (ledger/wake.py), in real processes.

Two ``manage.py run_jobs`` processes wait with a fallback poll far longer than the test:
the job they run can only have been found through the wake (NOTIFY on PostgreSQL, the
local sockets on SQLite), and exactly one of them runs it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from sessions_admin import devtools
from sessions_admin.core import db
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import DeleteJob, TrashSession
from tests.builders import old_sessions
from tests.helpers import REPO, child_env

NEVER_POLL = "3600"  # seconds: longer than the test, so only a wake can start the job
READY = "delete-job worker waiting (wake:"
WORKED_ON = "worked on by"


def _start_run_jobs(log: Path) -> subprocess.Popen:
    env = {**child_env(), "SESSIONS_ADMIN_JOB_POLL_SECONDS": NEVER_POLL}
    env.pop("PYTEST_CURRENT_TEST", None)
    with log.open("w") as output:
        return subprocess.Popen(
            [sys.executable, "manage.py", "run_jobs", "--idle-exit", "600"],
            cwd=REPO,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )


def _wait_for(condition, what: str, logs: list[Path], *, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}:\n" + "\n".join(p.read_text() for p in logs))
        time.sleep(0.1)


def test_two_waiting_run_jobs_processes_are_woken_and_run_a_new_job_once(tmp_path):
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    workers = [_start_run_jobs(log) for log in logs]
    try:
        _wait_for(
            lambda: all(READY in log.read_text() for log in logs),
            "the workers never started waiting",
            logs,
        )
        assert all("poll only" not in log.read_text() for log in logs)
        time.sleep(0.5)  # past their first look for jobs: they are waiting now
        selected = old_sessions(6, sources=("cli", "telegram"), messages=3)

        job_id = jobs.create_bulk_delete_job(
            session_ids=selected, include_live=False, actor="ada", reason="retention"
        )

        _wait_for(
            lambda: DeleteJob.objects.get(pk=job_id).state == DeleteJob.DONE,
            "the job did not run although both workers were waiting",
            logs,
        )
    finally:
        for process in workers:
            devtools.stop_process(process, timeout=20)
    job = DeleteJob.objects.get(pk=job_id)
    assert (job.done, job.skipped) == (6, 0)
    remaining = db.fetchall(
        f"SELECT id FROM sessions WHERE id IN ({db.placeholders(selected)})", selected
    )
    assert remaining == []
    assert sorted(TrashSession.objects.values_list("session_id", flat=True)) == sorted(selected)
    # One claim in all: the other worker woke too, found the job leased or done, and waited on.
    claims = [line for log in logs for line in log.read_text().splitlines() if WORKED_ON in line]
    assert len(claims) == 1, claims
