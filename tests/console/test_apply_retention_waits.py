"""``manage.py apply_retention`` runs its job to the end even when this process's background
worker claimed it first (issue 26 attack: the command returned "job running, 0 deleted" and
left the job under a lease nobody renewed)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from sessions_admin.console.management.commands.apply_retention import _run_to_the_end
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import DeleteJob
from tests.builders import old_sessions


def test_a_job_another_worker_holds_is_waited_for_and_finished():
    selected = old_sessions(3, sources=("cli", "telegram"), messages=3)
    job_id = jobs.create_bulk_delete_job(
        session_ids=selected, include_live=False, actor="ada", reason="retention"
    )
    # Claimed by a worker (this process's background thread) that then stops renewing it.
    DeleteJob.objects.filter(pk=job_id).update(
        state=DeleteJob.RUNNING,
        lease_owner="background",
        lease_expires_at=timezone.now() + timedelta(seconds=1),
    )

    progress = _run_to_the_end(job_id)

    assert progress.state == DeleteJob.DONE
    assert progress.deleted == len(selected)
