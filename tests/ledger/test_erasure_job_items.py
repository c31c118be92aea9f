"""A bulk delete job whose pending session an erasure took (attack round 38, x): the job's
item goes with the person, and the job says where it went instead of ending "1 of 2"
without a word, in its progress, its page and the API."""

from __future__ import annotations

import pytest
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core.erasure import Subject
from sessions_admin.ledger import actions, jobs
from sessions_admin.ledger import erasure as erasure_ledger
from sessions_admin.ledger.models import DeleteJobItem
from tests.helpers import present

pytestmark = pytest.mark.usefixtures("no_worker")

ALICE = "alice-x38"


def _ended(user: str) -> str:
    sid = core.create_session(source="telegram", user_id=user).session_id
    core.append_message(session_id=sid, role="user", content=f"{user} words")
    core.end_session(session_id=sid, end_reason="user_exit")
    return sid


def test_a_job_names_the_erasure_that_took_its_pending_session(admin_client):
    alice, bob = _ended(ALICE), _ended("bob-x38")
    job_id = actions.start_bulk_delete(
        actor=None, session_ids=[alice, bob], include_live=False, reason="tidy up"
    )
    subject = Subject(user_id=ALICE)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-x38",
        expected_fingerprint=erasure_ledger.plan(subject).fingerprint,
        start=False,
    )
    actions.run_erasure(request_id=request.pk)
    assert not DeleteJobItem.objects.filter(session_id=alice).exists()

    progress = jobs.run_job(job_id=job_id)
    assert present([alice, bob]) == set()
    assert progress.state == "done"
    assert (progress.total, progress.processed, progress.deleted) == (2, 2, 1)
    assert progress.skipped == 1
    assert progress.erased == (jobs.ErasedSkip(request.pk, 1),)
    assert f"1 erased by erasure request #{request.pk}" in progress.skipped_text
    page = admin_client.get(reverse("job_detail", args=[job_id])).content.decode()
    assert "data-erased-skips" in page and f"erasure request #{request.pk}" in page
    assert ALICE not in page and alice not in page


def test_a_job_that_already_deleted_the_session_is_not_told_twice():
    alice = _ended(ALICE)
    job_id = actions.start_bulk_delete(
        actor=None, session_ids=[alice], include_live=False, reason="tidy up"
    )
    jobs.run_job(job_id=job_id)
    subject = Subject(user_id=ALICE)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-x38b",
        expected_fingerprint=erasure_ledger.plan(subject).fingerprint,
        start=False,
    )
    actions.run_erasure(request_id=request.pk)
    progress = jobs.job_progress(job_id=job_id)
    # Its trash entry was erased, the job's count of what it deleted stays.
    assert (progress.total, progress.processed, progress.deleted, progress.skipped) == (1, 1, 1, 0)
    assert progress.erased == ()
