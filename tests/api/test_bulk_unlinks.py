"""A bulk delete's dry run names the sessions below its set that the job keeps with their
parent link cleared (attack round 43, helper-68): the dry run said nothing of them, and the
job's page then said they were "started below it after the preview", weeks after they had."""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core import lineage
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import DeleteJob
from tests.api.conftest import ApiClient
from tests.api.test_deletion import ended_sessions
from tests.helpers import session_ids

pytestmark = pytest.mark.usefixtures("no_worker")


@pytest.fixture
def admin(make_token) -> ApiClient:
    return ApiClient(make_token("admin", name="ops-bot"))


def old_set_with_a_live_branch() -> tuple[list[str], str]:
    picked = ended_sessions(2)
    branch = core.branch_session(session_id=picked[0]).new_session_id
    return picked, branch


def test_the_dry_run_names_the_branches_it_unlinks_and_the_job_page_does_not_blame_the_runtime(
    admin,
):
    picked, branch = old_set_with_a_live_branch()
    dry = admin.post("bulk-deletes/dry-run", {"session_ids": picked}).body
    assert dry["count"] == 2
    assert [u["session_id"] for u in dry["unlinks"]] == [branch]
    assert "branch" in dry["unlinks"][0]["why"]
    answer = admin.post(
        "bulk-deletes", {"session_ids": picked, "fingerprint": dry["fingerprint"], "reason": "r"}
    )
    assert answer.status == 201, answer.body
    job = DeleteJob.objects.get()
    jobs.run_job(job_id=job.pk)
    assert session_ids() == {branch}
    assert lineage.session_row(branch)["parent_session_id"] is None
    status = admin.get(f"jobs/{job.pk}").body
    assert status["state"] == "done" and status["deleted"] == 2
    # Shown by the dry run: not among the children "started below it meanwhile".
    assert (status["unlinked_count"], status["unlinked"]) == (0, [])
