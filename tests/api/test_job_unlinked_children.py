"""A child a runtime starts below a session while a delete job runs (after its preview) is
kept, with its parent link cleared, and the job names it once finished (attack round 38,
F): on its page, in its progress and in the API's job status. A cascade's own cut children,
which its preview listed, are not named again. Restoring the job's trash links it again."""

from __future__ import annotations

import time

import pytest
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.ledger import actions, jobs
from sessions_admin.ledger.actions import long_deletes
from sessions_admin.ledger.models import TrashEntry
from tests.api.conftest import ApiClient
from tests.helpers import parent_of, present

pytestmark = pytest.mark.usefixtures("no_worker")


def _ended(**more) -> str:
    sid = core.create_session(source="telegram", **more).session_id
    core.append_message(session_id=sid, role="user", content="hello")
    core.end_session(session_id=sid, end_reason="user_exit")
    return sid


def _runtime_starts_child_of(parent: str, child: str) -> None:
    """The runtime's own SQL: a plain session below ``parent`` (no link type of ours)."""
    db.execute(
        "INSERT INTO sessions (id, source, started_at, parent_session_id, message_count) "
        "VALUES (%s, 'cli', %s, %s, 0)",
        [child, time.time(), parent],
    )


def test_a_bulk_job_names_the_child_started_below_a_session_it_deleted(admin_client, make_token):
    parent, other = _ended(), _ended()
    job_id = actions.start_bulk_delete(
        actor=None, session_ids=[parent, other], include_live=False, reason="tidy up"
    )
    assert jobs.job_progress(job_id=job_id).unlinked == ()
    _runtime_starts_child_of(parent, "late-child-f38")
    progress = jobs.run_job(job_id=job_id)
    assert present([parent, other]) == set() and present(["late-child-f38"]) == {"late-child-f38"}
    assert parent_of("late-child-f38") is None
    progress = jobs.job_progress(job_id=job_id)
    assert progress.unlinked_count == 1 and progress.unlinked == (("late-child-f38", parent),)
    page = admin_client.get(reverse("job_detail", args=[job_id])).content.decode()
    assert "data-unlinked-children" in page and "late-child-f38" in page
    answer = ApiClient(make_token("admin")).get(f"jobs/{job_id}")
    assert answer.status == 200, answer.body
    status = answer.body
    assert status["unlinked_count"] == 1
    assert status["unlinked"] == [{"session_id": "late-child-f38", "parent_session_id": parent}]
    # Restoring the job's trash links it again.
    entry = TrashEntry.objects.filter(job_id=job_id).order_by("pk").first()
    actions.restore(actor=None, entry_id=entry.pk)
    assert parent_of("late-child-f38") == parent


def test_a_cascade_job_names_only_the_children_its_preview_did_not(settings):
    settings.SESSIONS_ADMIN_LONG_JOB_SESSIONS = 1
    root = core.create_session(source="telegram").session_id
    core.append_message(session_id=root, role="user", content="hello")
    planned_child = core.create_session(source="cli", parent_session_id=root).session_id
    core.end_session(session_id=planned_child, end_reason="user_exit")
    tip = core.rotate_for_compression(session_id=root, summary="s").new_session_id
    core.end_session(session_id=tip, end_reason="user_exit")
    plan = core.plan_cascade_delete(session_ids=[root])
    cut = [child for child, _ in plan.kept_children]
    job_id = long_deletes.start_cascade_delete(
        actor=None,
        session_ids=[root],
        include_branches=False,
        expected_fingerprint=plan.fingerprint,
        reason="tidy",
    )
    _runtime_starts_child_of(tip, "late-child-f38c")
    jobs.run_job(job_id=job_id)
    assert present([root, tip]) == set()
    progress = jobs.job_progress(job_id=job_id)
    named = dict(progress.unlinked)
    assert named == {"late-child-f38c": tip}
    assert not set(cut) & set(named)
