"""The console's bulk delete (attack round 43): one confirmed after the runtime wrote into one
of its sessions is refused, the dry run shown again and nothing deleted; the dry run names the
sessions below its set that the job keeps with their parent link cleared."""

from __future__ import annotations

from django.urls import reverse

from sessions_admin import core
from sessions_admin.ledger.models import AuditEntry, DeleteJob
from tests.api.test_plan_fingerprints import runtime_writes_into
from tests.builders import store_snapshot
from tests.console.test_deletion_views import ended_sessions, form

PARTS = ("sessions", "messages", "conversations", "responses")


def test_the_console_refuses_the_same_stale_bulk_delete(signed_in):
    client = signed_in("admin")
    picked = ended_sessions(2)
    page = client.get(reverse("bulk_delete"), {"preset": "ended_older_than", "days": "30"})
    fields = form(page.content.decode(), reverse("bulk_delete_start")) | {"reason": "tidy"}
    runtime_writes_into(picked[1])
    before = store_snapshot(*PARTS)
    response = client.post(reverse("bulk_delete_start"), fields)
    assert response.status_code == 200  # the dry run again, with what changed
    assert store_snapshot(*PARTS) == before and not DeleteJob.objects.exists()
    assert AuditEntry.objects.filter(action="bulk_delete").exclude(outcome="ok").exists()


def test_the_dry_run_names_the_sessions_below_it_kept_with_their_link_cleared(signed_in):
    client = signed_in("admin")
    picked = ended_sessions(2)
    branch = core.branch_session(session_id=picked[0]).new_session_id
    body = client.get(
        reverse("bulk_delete"), {"preset": "ended_older_than", "days": "30"}
    ).content.decode()
    assert "data-unlinks" in body and branch in body
