"""What the operator reads after a database could not be written (issue 26, item 2 and "Also").

The cascade page says which database failed and what was deleted before it, with the trash
entry to undo it, never "Unexpected error (OperationalError)"; a failed job offers to finish;
the health panel lists a session a fault left being deleted.
"""

from __future__ import annotations

import html
import resource
import signal

import pytest
from django.db import OperationalError
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db, faults
from sessions_admin.ledger import actions, jobs
from sessions_admin.ledger.models import AuditEntry, DeleteJob, TrashEntry, TrashSession
from sessions_admin.ledger.trash import job_operation
from sessions_admin.store import health
from tests.builders import cascade_lineage, old_sessions
from tests.console.test_being_deleted_views import half_deleted
from tests.console.test_deletion_views import confirm_url, form
from tests.core.crash_child import fill
from tests.ledger.test_disk_full import FAILING_BATCH, store_full_from_batch

# Looking at a job wakes the delete worker; these tests run the job themselves.
pytestmark = pytest.mark.usefixtures("no_worker")


def test_the_cascade_page_says_the_store_is_full_and_what_was_deleted(admin):
    root = cascade_lineage()[0]
    plan = core.plan_cascade_delete(session_ids=[root])
    page = admin.get(reverse("cascade_delete", args=[root])).content.decode()
    fields = form(page, confirm_url(root)) | {"reason": "disk full"}

    with store_full_from_batch(plan, FAILING_BATCH):
        response = admin.post(confirm_url(root), fields)

    assert response.status_code == 200
    text = html.unescape(response.content.decode())
    trashed = TrashEntry.objects.order_by("pk")
    assert trashed.count() == FAILING_BATCH - 1
    first = trashed.first().pk
    assert "Unexpected error" not in text and "Nothing was deleted" not in text
    assert "The store" in text and "2 batches were deleted" in text
    assert f"entry #{first}" in text
    assert f'data-trash-entry="{first}"' in text
    # The page shows the plan of what is left: confirming it finishes the delete.
    left = form(text, confirm_url(root)) | {"reason": "finish"}
    assert left["fingerprint"] == core.plan_cascade_delete(session_ids=[root]).fingerprint
    admin.post(confirm_url(root), left)
    assert sorted(TrashSession.objects.values_list("session_id", flat=True)) == sorted(
        plan.session_ids
    )
    outcomes = list(
        AuditEntry.objects.filter(action="cascade_delete")
        .order_by("pk")
        .values_list("outcome", flat=True)
    )
    assert outcomes == [AuditEntry.PARTIAL, AuditEntry.OK]


def test_a_failed_job_offers_to_finish_and_finishing_deletes_the_rest(admin):
    selected = old_sessions(6)
    job_id = jobs.create_bulk_delete_job(
        session_ids=selected, include_live=False, actor="ada", reason="retention"
    )

    def refuse() -> None:
        raise OperationalError("database or disk is full")

    faults.run_at("job.after_batch_commit", refuse, nth=1)
    try:
        with pytest.raises(OperationalError):
            jobs.run_job(job_id=job_id, worker="w", batch_sessions=3)
    finally:
        faults._actions.clear()
        faults._hits.clear()

    page = html.unescape(admin.get(reverse("job_detail", args=[job_id])).content.decode())
    assert "dashboard database could not be written" in page
    assert reverse("job_resume", args=[job_id]) in page
    admin.post(reverse("job_resume", args=[job_id]))
    assert DeleteJob.objects.get(pk=job_id).state == DeleteJob.PENDING
    assert AuditEntry.objects.get(action="resume_bulk_delete").outcome == AuditEntry.OK
    jobs.run_job(job_id=job_id, worker="w2", batch_sessions=3)
    job = DeleteJob.objects.get(pk=job_id)
    assert (job.state, job.done) == (DeleteJob.DONE, len(selected))
    trashed = TrashSession.objects.filter(entry__operation=job_operation(job_id))
    assert sorted(trashed.values_list("session_id", flat=True)) == sorted(selected)


def test_the_health_panel_lists_a_session_a_fault_left_being_deleted(admin):
    sid = half_deleted()

    assert health.count("being_deleted") == 1
    panel = admin.get(reverse("health_panel")).content.decode()
    assert 'data-check="being_deleted"' in panel
    listed = admin.get(reverse("session_list") + "?health=being_deleted").content.decode()
    assert sid in listed
    # The way out it names: restoring its entry gives the session back, and the check clears.
    entry = TrashEntry.objects.filter(state=TrashEntry.COMPLETE).first()
    core.restore_trash_entry(entry_id=entry.pk, actor="ada")
    assert health.count("being_deleted") == 0


def test_a_database_error_no_view_words_is_a_clear_page_not_a_500(admin):
    """A restore whose store cannot be written: the page says so (503), and nothing changed."""
    root = cascade_lineage()[0]
    plan = core.plan_cascade_delete(session_ids=[root])
    result = core.execute_cascade_delete(
        session_ids=[root], expected_fingerprint=plan.fingerprint, actor="ada", reason="r"
    )
    admin.get(reverse("trash"))  # signed in and every connection open before the limit
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.getsignal(signal.SIGXFSZ)
    if db.vendor() == "sqlite":
        fill("store")
    else:
        db.execute(
            "CREATE OR REPLACE FUNCTION test_disk_full() RETURNS trigger AS $$ BEGIN "
            "RAISE EXCEPTION 'could not extend file: No space left on device' "
            "USING ERRCODE = 'disk_full'; END $$ LANGUAGE plpgsql"
        )
        db.execute(
            "CREATE TRIGGER test_disk_full BEFORE INSERT ON sessions "
            "FOR EACH ROW EXECUTE FUNCTION test_disk_full()"
        )
    try:
        response = admin.post(
            reverse("trash_restore", args=[result.trash_entry_ids[0]]), {"reason": "back"}
        )
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, handler)
        if db.vendor() == "postgresql":
            db.execute("DROP TRIGGER IF EXISTS test_disk_full ON sessions")

    assert response.status_code == 503
    text = html.unescape(response.content.decode())
    assert "The store could not be written" in text and "Unexpected error" not in text
    assert not db.fetchall(
        f"SELECT id FROM sessions WHERE id IN ({db.placeholders(plan.session_ids)})",
        list(plan.session_ids),
    )
    assert TrashEntry.objects.filter(state=TrashEntry.COMPLETE).count() == len(
        result.trash_entry_ids
    )
    # The restore's intent, recorded before its store transaction, is cleared: nothing came back.
    actions.settle_deletes_and_restores()
    assert not TrashEntry.objects.filter(restoring_since__isnull=False).exists()
    assert TrashEntry.objects.filter(state=TrashEntry.COMPLETE).count() == len(
        result.trash_entry_ids
    )
