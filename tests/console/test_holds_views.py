"""The legal holds page, and what the delete pages show and refuse when a hold stands."""

from __future__ import annotations

import re

from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import holds
from sessions_admin.ledger.models import AuditEntry, TrashEntry
from tests.builders import cascade_lineage, store_snapshot
from tests.console.pages import flashed, messages_shown


def test_support_places_a_hold_from_the_session_page_and_releases_it(signed_in):
    client = signed_in("support")
    root, _d, _g, tip, branch, *_ = cascade_lineage()
    page = client.get(reverse("session_detail", args=[branch])).content.decode()
    link = re.search(r'href="([^"]*)">Place a legal hold</a>', page).group(1).replace("&amp;", "&")
    form = client.get(link).content.decode()
    assert f'value="{branch}"' in form and 'value="session" checked' in form

    response = client.post(
        reverse("hold_place"), {"kind": "session", "subject": branch, "reason": "case 12"}
    )
    assert response.status_code == 302
    (hold,) = holds.active_holds()
    assert (hold.kind, hold.subject, hold.placed_by) == ("session", branch, "op-support")
    # Every session of the lineage now shows the badge.
    for sid in (root, tip, branch):
        page = client.get(reverse("session_detail", args=[sid])).content.decode()
        assert f"on legal hold #{hold.id}" in page

    refused = client.post(reverse("hold_release", args=[hold.id]), {"reason": " "}, follow=True)
    assert "Give a reason" in refused.content.decode()
    assert holds.active_holds() == [hold]
    client.post(reverse("hold_release", args=[hold.id]), {"reason": "case closed"})
    assert holds.active_holds() == []
    actions = list(
        AuditEntry.objects.filter(outcome="ok").order_by("pk").values_list("action", "actor_name")
    )
    assert actions == [("place_hold", "op-support"), ("release_hold", "op-support")]


def test_a_bad_hold_is_a_message_and_changes_nothing(signed_in):
    client = signed_in("support")
    for data, words in [
        ({"kind": "session", "subject": "no-such-session", "reason": "r"}, "No session matches"),
        ({"kind": "planet", "subject": "x", "reason": "r"}, "on a session or on a user"),
        ({"kind": "user", "subject": "u-1", "reason": ""}, "Give a reason"),
        ({"kind": "user", "subject": "", "reason": "r"}, "session or user id"),
        # Looks like "b7alice" on the page and would cover nobody.
        ({"kind": "user", "subject": "b7alice\u200b", "reason": "r"}, "invisible"),
    ]:
        response = client.post(reverse("hold_place"), data)
        assert response.status_code == 400
        assert words in response.content.decode()
    assert holds.recent_holds() == []
    # Each attempt is on record (refused at the form, or failed in the core), none as done.
    assert AuditEntry.objects.filter(action="place_hold").count() == 5
    assert not AuditEntry.objects.filter(outcome="ok").exists()


def test_a_viewer_cannot_place_a_hold(signed_in):
    client = signed_in("viewer")
    sid = core.create_session(source="cli").session_id
    page = client.get(reverse("session_detail", args=[sid])).content.decode()
    assert "Place a legal hold" not in page
    response = client.post(
        reverse("hold_place"), {"kind": "session", "subject": sid, "reason": "r"}
    )
    assert response.status_code == 403
    assert holds.recent_holds() == []


def test_the_cascade_page_names_the_hold_and_a_confirm_deletes_nothing(signed_in):
    client = signed_in("admin")
    root, *_ = cascade_lineage()
    plan = core.plan_cascade_delete(session_ids=[root])
    hold = holds.place_hold(kind="session", subject=root, reason="case 77", actor="ada")
    page = client.get(reverse("cascade_delete", args=[root])).content.decode()
    assert "under legal hold" in page and hold.describe() in page
    assert reverse("cascade_delete_confirm", args=[root]) not in page  # no confirm form
    before = store_snapshot()
    for fingerprint in (plan.fingerprint, core.plan_cascade_delete(session_ids=[root]).fingerprint):
        response = client.post(
            reverse("cascade_delete_confirm", args=[root]),
            {"fingerprint": fingerprint, "reason": "try anyway", "typed_count": "7"},
        )
        assert response.status_code == 200
        assert "Nothing was deleted" in response.content.decode()
    assert store_snapshot() == before
    assert TrashEntry.objects.count() == 0


def test_the_trash_page_marks_held_entries_and_a_purge_keeps_them(signed_in):
    client = signed_in("admin")
    sid = core.create_session(source="cli", user_id="u-42").session_id
    core.end_session(session_id=sid, end_reason="user_exit")
    plan = core.plan_cascade_delete(session_ids=[sid])
    core.execute_cascade_delete(
        session_ids=[sid], expected_fingerprint=plan.fingerprint, actor="a", reason="r"
    )
    holds.place_hold(kind="user", subject="u-42", reason="litigation", actor="ada")
    page = client.get(reverse("trash")).content.decode()
    assert "on legal hold: not purged" in page
    response = client.post(
        reverse("trash_purge"),
        {"scope": "all", "reason": "spring cleaning", "confirm_purge": "1"},
        follow=True,
    )
    assert "under legal hold" in response.content.decode()
    assert TrashEntry.objects.count() == 1


def test_a_hold_on_a_user_without_sessions_is_placed_with_a_warning(signed_in):
    client = signed_in("support")
    core.create_session(source="cli", user_id="u-has-one")
    response = client.post(
        reverse("hold_place"),
        {"kind": "user", "subject": "u-typo-none", "reason": "case 9"},
        follow=True,
    )
    assert response.redirect_chain[-1][0] == reverse("holds")
    (hold,) = holds.active_holds()
    assert (hold.kind, hold.subject) == ("user", "u-typo-none")
    said = messages_shown(response)
    assert any("covers nothing yet" in m and "u-typo-none" in m for m in said), said
    # A user with sessions gets no such warning.
    response = client.post(
        reverse("hold_place"), {"kind": "user", "subject": "u-has-one", "reason": "case 10"}
    )
    assert not any("covers nothing" in m for m in flashed(response))
    assert len(holds.active_holds()) == 2
