"""The API's job says ``stopping`` while a cancelled job's worker is still inside its batch."""

from __future__ import annotations

from sessions_admin.ledger.models import DeleteJob
from tests.api.conftest import ApiClient
from tests.console.test_job_stopping import stopping_job


def test_a_stopping_job_says_so_until_its_worker_lets_go(make_token):
    admin = ApiClient(make_token("admin", name="ops-bot"))
    job_id = stopping_job()
    answer = admin.get(f"jobs/{job_id}")
    assert answer.status == 200 and answer.body["stopping"] is True
    assert answer.body["state"] == "cancelled"

    DeleteJob.objects.filter(pk=job_id).update(lease_owner="", lease_expires_at=None)
    assert admin.get(f"jobs/{job_id}").body["stopping"] is False
