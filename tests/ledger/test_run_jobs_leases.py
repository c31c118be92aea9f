"""``run_jobs`` does not say "no job left" while another worker's lease holds one (attack round
43: a killed ``apply_retention``'s job sat running, and a new ``run_jobs`` said there was none)."""

from __future__ import annotations

import io
from datetime import timedelta

from django.core.management import call_command
from django.utils import timezone

from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import DeleteJob
from tests.builders import old_sessions


def run_jobs() -> str:
    out = io.StringIO()
    call_command("run_jobs", "--idle-exit", "0.2", "--poll", "0.1", stdout=out)
    return out.getvalue()


def test_a_job_held_by_a_dead_workers_lease_is_named_not_called_gone():
    job_id = jobs.create_bulk_delete_job(
        session_ids=old_sessions(2), include_live=False, actor="ada", reason="r"
    )
    DeleteJob.objects.filter(pk=job_id).update(
        state=DeleteJob.RUNNING,
        lease_owner="killed-worker",
        lease_expires_at=timezone.now() + timedelta(seconds=30),
    )
    said = run_jobs()
    assert "No delete job left to run here now" in said and f"#{job_id} until" in said
    assert DeleteJob.objects.get(pk=job_id).state == DeleteJob.RUNNING  # not taken meanwhile

    DeleteJob.objects.filter(pk=job_id).update(lease_expires_at=timezone.now())
    assert run_jobs().strip() == "No delete job left to run."
    assert DeleteJob.objects.get(pk=job_id).state == DeleteJob.DONE
