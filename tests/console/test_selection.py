"""The session list's selection reaches the bulk actions."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from django.urls import reverse

from sessions_admin import core
from sessions_admin.ledger.models import DeleteJob


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


def _ended_cli(n: int) -> list[str]:
    ids = []
    for k in range(n):
        sid = core.create_session(source="cli", started_at=100.0 + k).session_id
        core.append_message(session_id=sid, role="user", content=f"hello {k}")
        core.end_session(session_id=sid, end_reason="user_exit")
        ids.append(sid)
    return ids


def test_all_matching_a_search_selects_nothing_rather_than_every_session(signed_in):
    """A search's words are not a set of sessions: "all matching" with ``q`` (which the
    list never offers, but a crafted POST can send) is refused instead of selecting every
    session the other filters list."""
    _ended_cli(3)
    client = signed_in("admin")
    for query in ("q=zzzz&scope=all", "source=cli&q=zzzz", "from=not-a-date&scope=all"):
        response = client.post(
            reverse("bulk_delete_preview"), {"all_matching": "1", "filter": query}
        )
        assert response.status_code == 302
        assert "selection" not in parse_qs(urlparse(response["Location"]).query)
        page = client.get(response["Location"]).content.decode()
        assert "Nothing was selected" in page
    assert not DeleteJob.objects.exists()


def test_an_export_of_a_search_is_refused_rather_than_the_whole_store(signed_in):
    _ended_cli(2)
    response = signed_in("viewer").get(reverse("export_sessions"), {"q": "zzz", "format": "jsonl"})
    assert response.status_code == 400
    assert "full-text search" in response.content.decode()
