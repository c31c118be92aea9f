"""Operator text no backend can hold is a message, never a 500; unknown outcomes show as such.

A merge or an unmerge whose reason held a NUL used to commit in the store and
then fail writing its audit entry on PostgreSQL (a 500, the change nowhere in
the audit log). The same posts now change nothing and say why. The audit page
shows an entry whose result was never recorded as "outcome unknown".
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from sessions_admin import core
from sessions_admin.ledger import actions, jobs
from sessions_admin.ledger.models import AuditEntry, DeleteJob
from tests.builders import forked_conversation, store_snapshot
from tests.console.pages import fingerprint_of, flashed, preview_url

NUL_REASON = "dup\x00slug"


@pytest.fixture
def support(signed_in):
    return signed_in("support")


def test_a_merge_with_a_nul_in_its_reason_changes_nothing_and_says_why(support):
    ids = forked_conversation()
    fingerprint = fingerprint_of(support.get(preview_url(ids)).content.decode())
    before = store_snapshot("sessions", "messages", "conversations", "merges")

    response = support.post(
        reverse("merge_execute"), {"ids": ids, "fingerprint": fingerprint, "reason": NUL_REASON}
    )

    assert response.status_code == 200
    assert "The reason cannot contain a NUL character." in response.content.decode()
    assert store_snapshot("sessions", "messages", "conversations", "merges") == before
    assert not AuditEntry.objects.exclude(outcome="refused").exists()
    # The reason comes back without the NUL, and the corrected form goes through.
    response = support.post(
        reverse("merge_execute"), {"ids": ids, "fingerprint": fingerprint, "reason": "dupslug"}
    )
    assert response.status_code == 302
    assert list(
        AuditEntry.objects.exclude(outcome="refused").values_list("action", "outcome", "reason")
    ) == [("merge", "ok", "dupslug")]


def test_an_unmerge_with_a_nul_in_its_reason_changes_nothing_and_says_why(support):
    merged = core.merge_sessions(session_ids=forked_conversation())
    before = store_snapshot("sessions", "messages", "conversations", "merges")

    response = support.post(reverse("merge_undo", args=[merged.merge_id]), {"reason": NUL_REASON})

    assert response.status_code == 302
    assert any(
        f"Merge #{merged.merge_id} was not undone" in m and "NUL" in m for m in flashed(response)
    )
    assert store_snapshot("sessions", "messages", "conversations", "merges") == before
    assert core.merge_record(merge_id=merged.merge_id).undone_at is None
    assert not AuditEntry.objects.exclude(outcome="refused").exists()


def test_cancelling_a_job_with_a_nul_in_its_reason_is_a_message(signed_in):
    admin = signed_in("admin")
    sid = core.create_session(source="cli").session_id
    core.end_session(session_id=sid, end_reason="user_exit")
    job = jobs.create_bulk_delete_job(session_ids=[sid], include_live=False, actor="a", reason="r")

    response = admin.post(reverse("job_cancel", args=[job]), {"reason": NUL_REASON})

    assert response.status_code == 302
    assert any(f"Job #{job} was not cancelled" in m for m in flashed(response))
    assert DeleteJob.objects.get(pk=job).state == DeleteJob.PENDING
    assert not AuditEntry.objects.exclude(outcome="refused").exists()


def test_the_audit_page_shows_an_unknown_outcome_distinctly(signed_in, operator_factory):
    """What a process killed between the store commit and the completion leaves behind."""
    ada = operator_factory("support", "ada")
    ids = forked_conversation()
    pending = actions.record(
        actor=ada,
        action="merge",
        session_ids=ids,
        before={"sessions": 3},
        reason="one slug",
        outcome=AuditEntry.PENDING,
    )
    actions.record(actor=ada, action="undo", session_ids=[ids[0]], reason="fine")
    client = signed_in("viewer")

    body = client.get(reverse("audit_log")).content.decode()
    row = body.split(f'data-entry="{pending.pk}"', 1)[1].split("</tr>", 1)[0]
    assert "outcome unknown" in row and "the process stopped before recording it" in row
    assert ids[0] in row and "one slug" in row
    assert body.count('class="pill warn outcome-unknown"') == 1  # the ok entry is not marked

    only = client.get(reverse("audit_log"), {"outcome": "pending"}).content.decode()
    assert f'data-entry="{pending.pk}"' in only and only.count('class="audit-entry') == 1
