"""A retention policy runs on its schedule in the job worker while runtimes write.

``manage.py run_jobs --schedule`` (the worker of a deployment without gunicorn's
threads) checks every second; two ``simulate_runtime`` processes write new
conversations meanwhile. The due run deletes exactly the old, quiet, whole
conversations: nothing live, held, needed by an undoable merge, or part of a
conversation still going; and every write the runtimes were told succeeded is still
there (the simulators' ledgers check out). Runs on both backends.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from sessions_admin import core
from sessions_admin.core import db, holds
from sessions_admin.core.clock import use_clock
from sessions_admin.demo.consistency import check_acks, check_store
from sessions_admin.ledger.models import DeleteJob, RetentionPolicy
from tests.helpers import child_env, session_ids, start_simulator
from tests.ledger.test_retention import DAY, old_session

ROOT = Path(settings.BASE_DIR)
SIMULATE_SECONDS = 8


def test_a_scheduled_policy_runs_in_the_worker_while_runtimes_write(tmp_path):
    doomed = [old_session(source="telegram") for _ in range(4)]
    doomed_root = old_session()
    doomed += [
        doomed_root,
        old_session(
            parent=doomed_root, source="tool", model_config={"_delegate_from": doomed_root}
        ),
    ]
    held = old_session(user_id="u-held")
    holds.place_hold(kind="user", subject="u-held", reason="litigation", actor="ada")
    live = old_session(end=None)
    going_root = old_session(end=None)
    at = time.time() - 80 * DAY
    with use_clock(lambda: at):
        going_tip = core.rotate_for_compression(session_id=going_root, summary="s").new_session_id
    target, husk = old_session(), old_session()
    plan = core.plan_merge(session_ids=[target, husk])
    core.merge_sessions(session_ids=[target, husk], expected_fingerprint=plan.fingerprint)
    db.execute("UPDATE sessions SET ended_at = %s WHERE id = %s", [time.time() - 90 * DAY, husk])
    kept = {held, live, going_root, going_tip, husk, target}

    env = child_env()
    env["SESSIONS_ADMIN_RETENTION_CHECK_SECONDS"] = "1"
    ledgers = [tmp_path / f"runtime-{n}.jsonl" for n in range(2)]
    runtimes = [
        start_simulator(ledger, seed=n, label=f"r{n}", duration=SIMULATE_SECONDS, chats=5, env=env)
        for n, ledger in enumerate(ledgers)
    ]
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "run_jobs", "--schedule"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(2)  # the runtimes are writing
        policy = RetentionPolicy.objects.create(
            name="quiet chats",
            older_than_days=30,
            created_by="admin",
            enabled=True,
            every_hours=24,
            next_run_at=timezone.now(),
        )
        deadline = time.monotonic() + 60
        job = None
        while time.monotonic() < deadline:
            job = DeleteJob.objects.filter(policy=policy).first()
            if job is not None and job.state in (DeleteJob.DONE, DeleteJob.FAILED):
                break
            time.sleep(0.2)
        outputs = [p.communicate(timeout=60) for p in runtimes]
    finally:
        for process in runtimes:
            if process.poll() is None:
                process.kill()
        worker.kill()
        worker_out, worker_err = worker.communicate(timeout=30)
    assert job is not None, f"no run started:\n{worker_out}\n{worker_err}"
    job.refresh_from_db()
    assert job.state == DeleteJob.DONE, (job.state, job.error, worker_err)
    assert job.done == len(doomed) and job.purge is False
    # One run only, and the next one is a period away.
    assert DeleteJob.objects.filter(policy=policy).count() == 1
    policy.refresh_from_db()
    assert policy.next_run_at > timezone.now() + timedelta(hours=23)

    remaining = session_ids()
    assert not remaining & set(doomed)
    assert kept <= remaining
    for process, (out, err) in zip(runtimes, outputs, strict=True):
        assert process.returncode == 0, f"simulator failed:\n{out}\n{err}"
        assert "0 unexpected errors" in out, out
    assert check_acks(ledgers) == []
    assert check_store() == []
