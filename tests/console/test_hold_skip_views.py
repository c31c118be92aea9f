"""Where a delete left held data out, the console names the session and the hold (#id)."""

from __future__ import annotations

import html

from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import holds
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import DeleteJobItem, TrashEntry
from tests.builders import cascade_lineage, store_snapshot
from tests.console.pages import preview_url


def _cascade(session_id: str) -> None:
    plan = core.plan_cascade_delete(session_ids=[session_id])
    core.execute_cascade_delete(
        session_ids=[session_id], expected_fingerprint=plan.fingerprint, actor="a", reason="r"
    )


def test_the_trash_purge_names_the_entry_session_and_hold_it_kept(signed_in):
    client = signed_in("admin")
    _root, _d, _g, tip, branch, _c, other = cascade_lineage()
    _cascade(branch)
    _cascade(other)
    hold = holds.place_hold(kind="session", subject=tip, reason="case 90", actor="ada")
    page = html.unescape(client.get(reverse("trash")).content.decode())
    assert f"hold #{hold.id}" in page and branch in page
    response = client.post(
        reverse("trash_purge"),
        {"scope": "all", "reason": "spring cleaning", "confirm_purge": "1"},
        follow=True,
    )
    kept = TrashEntry.objects.get()
    assert kept.session_ids == [branch]
    shown = html.unescape(response.content.decode())
    assert f"trash entry #{kept.pk} (session {branch}), hold #{hold.id}" in shown


def test_the_job_page_names_each_session_a_hold_kept(signed_in, no_worker):
    client = signed_in("admin")
    root, *_rest, other = cascade_lineage()
    core.end_session(session_id=other, end_reason="user_exit")
    job = jobs.create_bulk_delete_job(
        session_ids=[root, other], include_live=True, actor="ada", reason="cleanup"
    )
    hold = holds.place_hold(kind="session", subject=root, reason="case 91", actor="ada")
    jobs.run_job(job_id=job)
    skipped = set(
        DeleteJobItem.objects.filter(job_id=job, state=DeleteJobItem.SKIPPED).values_list(
            "session_id", flat=True
        )
    )
    assert root in skipped and other not in skipped
    page = html.unescape(client.get(reverse("job_detail", args=[job])).content.decode())
    assert f"hold #{hold.id}" in page
    assert f"{len(skipped)} skipped: " in page
    for sid in skipped:
        assert f"{sid}, hold #{hold.id}" in page


def test_the_merge_preview_of_a_held_session_names_the_hold_and_offers_no_confirm(signed_in):
    client = signed_in("support")
    a = core.create_session(source="cli", user_id="u-1", started_at=1.0).session_id
    core.append_message(session_id=a, role="user", content="held words")
    core.end_session(session_id=a, end_reason="user_exit")
    b = core.create_session(source="cli", user_id="u-1", started_at=2.0).session_id
    core.append_message(session_id=b, role="user", content="other words")
    hold = holds.place_hold(kind="session", subject=a, reason="case 92", actor="ada")
    before = store_snapshot()
    page = html.unescape(client.get(preview_url([a, b], target=b)).content.decode())
    assert f"legal hold #{hold.id}" in page
    assert 'class="act-form confirm-merge"' not in page
    plan = core.plan_merge(session_ids=[a, b], target_id=b)
    response = client.post(
        reverse("merge_execute"),
        {"ids": [a, b], "target": b, "fingerprint": plan.fingerprint, "reason": "try"},
    )
    assert response.status_code in (200, 302, 409)
    assert store_snapshot() == before


def test_a_session_only_in_the_trash_is_held_from_the_holds_page(signed_in):
    client = signed_in("support")
    _root, _d, _g, _tip, branch, _c, _other = cascade_lineage()
    _cascade(branch)
    response = client.post(
        reverse("hold_place"), {"kind": "session", "subject": branch, "reason": "case 93"}
    )
    assert response.status_code == 302
    (hold,) = holds.active_holds()
    assert (hold.kind, hold.subject) == ("session", branch)
    page = client.get(reverse("holds")).content.decode()
    assert f"?q={branch}" in page  # found in the trash, not in the store
    client.post(reverse("trash_purge"), {"scope": "all", "reason": "cleanup", "confirm_purge": "1"})
    assert TrashEntry.objects.get().session_ids == [branch]
