"""A job cancelled while its worker is still inside a batch the store keeps from finishing
says it is stopping on its page, and the page goes on refreshing until the batch is counted
(attack round 43: the cancel answered counts the store went on to contradict, silently)."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import DeleteJob
from tests.builders import old_sessions


def stopping_job() -> int:
    """A job as a cancel leaves it when the worker's batch outlasts the cancel's wait."""
    job_id = jobs.create_bulk_delete_job(
        session_ids=old_sessions(2), include_live=False, actor="ada", reason="r"
    )
    DeleteJob.objects.filter(pk=job_id).update(
        state=DeleteJob.CANCELLED,
        lease_owner="elsewhere:4242:worker",
        lease_expires_at=timezone.now() + timedelta(seconds=30),
        finished_at=timezone.now(),
    )
    return job_id


def test_a_stopping_job_says_so_and_keeps_refreshing(admin):
    job_id = stopping_job()
    page = admin.get(reverse("job_detail", args=[job_id])).content.decode()
    assert "data-stopping" in page and "Stopping:" in page
    assert 'hx-trigger="every 1s"' in page
    fragment = admin.get(reverse("job_detail", args=[job_id]), headers={"HX-Request": "true"})
    assert fragment.status_code == 200  # not "stop polling" (286) while it stops

    # The worker counted its batch and let go: an ordinary cancelled job.
    DeleteJob.objects.filter(pk=job_id).update(lease_owner="", lease_expires_at=None)
    fragment = admin.get(reverse("job_detail", args=[job_id]), headers={"HX-Request": "true"})
    assert fragment.status_code == 286 and b"data-stopping" not in fragment.content
    assert "data-stopping" not in admin.get(reverse("job_detail", args=[job_id])).content.decode()


def test_a_lease_that_ran_out_is_not_stopping_any_more(admin):
    """A worker that died inside its batch: once its lease runs out the job is cancelled."""
    job_id = stopping_job()
    DeleteJob.objects.filter(pk=job_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert not jobs.job_progress(job_id=job_id).stopping
    assert "data-stopping" not in admin.get(reverse("job_detail", args=[job_id])).content.decode()
