"""The console's deletes and a merge's undo (issue 25, item 13): the cascade page warns and
asks, the bulk dry run says what it keeps and why, the trash names the merge, and the
merge's undo says it can no longer be undone instead of failing."""

from __future__ import annotations

from django.urls import reverse

from sessions_admin import core
from sessions_admin.ledger.models import AuditEntry
from tests.helpers import session_ids


def merged_pair() -> tuple[str, str, int]:
    ids = []
    for n in range(2):
        sid = core.create_session(source="cli", started_at=float(n + 1)).session_id
        core.append_message(session_id=sid, role="user", content=f"message {n}")
        core.end_session(session_id=sid, end_reason="user_exit")
        ids.append(sid)
    merged = core.merge_sessions(session_ids=ids, target_id=ids[0])
    return ids[0], ids[1], merged.merge_id


def test_a_cascade_of_a_merge_target_runs_only_once_the_lost_undo_is_confirmed(admin_client):
    target, husk, merge_id = merged_pair()
    page = admin_client.get(reverse("cascade_delete", args=[target]))
    assert f"merge #{merge_id}" in page.context["lost_undo"]
    fields = {"fingerprint": page.context["plan"].fingerprint, "reason": "cleanup"}
    confirm = reverse("cascade_delete_confirm", args=[target])

    refused = admin_client.post(confirm, fields)

    assert refused.status_code == 200
    assert any(f"merge #{merge_id}" in p for p in refused.context["problems"])
    assert session_ids() == {target, husk}

    done = admin_client.post(confirm, fields | {"lose_undo": "1"}, follow=True)

    assert done.redirect_chain[-1][0] == reverse("trash")
    assert session_ids() == {husk}
    audit = AuditEntry.objects.get(action="cascade_delete", outcome="ok")
    assert audit.after["lost_undo_of_merges"] == [merge_id]
    (row,) = done.context["rows"]
    assert row.merges == ((merge_id, "target", target),)
    # Its undo says it cannot be undone, and changes nothing.
    admin_client.post(reverse("merge_undo", args=[merge_id]), {"reason": "try"})
    assert core.merge_record(merge_id=merge_id).undone_at is None
    assert "can no longer be undone" in core.merge_record(merge_id=merge_id).undo_lost
    assert session_ids() == {husk}


def test_the_bulk_dry_run_says_what_it_keeps_for_a_merge(admin_client):
    target, husk, merge_id = merged_pair()
    other = core.create_session(source="cli").session_id
    core.end_session(session_id=other, end_reason="user_exit")

    page = admin_client.get(reverse("bulk_delete"), {"preset": "by_source", "source": "cli"})

    dry_run = page.context["dry_run"]
    assert dry_run.count == 1
    assert dict(dry_run.merge_kept) == {
        target: f"target of merge #{merge_id}, which can still be undone",
        husk: f"absorbed by merge #{merge_id}, which can still be undone",
    }
