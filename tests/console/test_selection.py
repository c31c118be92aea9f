"""The session list's selection reaches the bulk actions."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from django.urls import reverse

from sessions_admin import core


def test_the_list_offers_bulk_actions_by_role(signed_in):
    core.create_session(source="cli")
    admin_page = signed_in("admin").get(reverse("session_list")).content.decode()
    assert reverse("bulk_delete_preview") in admin_page
    assert "Delete selected" in admin_page and "Merge selected" in admin_page


def test_support_sees_merge_but_not_delete(signed_in):
    core.create_session(source="cli")
    page = signed_in("support").get(reverse("session_list")).content.decode()
    assert "Merge selected" in page and "Delete selected" not in page


def test_all_matching_resolves_the_list_filter_to_exact_ids(signed_in):
    cli = []
    for n in range(3):
        sid = core.create_session(source="cli", started_at=100.0 + n).session_id
        core.end_session(session_id=sid, end_reason="user_exit")
        cli.append(sid)
    other = core.create_session(source="discord").session_id
    core.end_session(session_id=other, end_reason="user_exit")
    client = signed_in("admin")
    response = client.post(
        reverse("bulk_delete_preview"),
        {"all_matching": "1", "filter": "source=cli&scope=all", "ids": [other]},
    )
    assert response.status_code == 302
    assert "selection" in parse_qs(urlparse(response["Location"]).query)
    dry_run = client.get(response["Location"])
    body = dry_run.content.decode()
    for sid in cli:
        assert sid in body
    assert other not in body


def test_a_viewer_cannot_post_a_selection(signed_in):
    sid = core.create_session(source="cli").session_id
    response = signed_in("viewer").post(reverse("bulk_delete_preview"), {"ids": [sid]})
    assert response.status_code == 403
