"""A deleted session's address: who deleted it, when, its trash entry and restore (roles that
may see the trash); everyone else, and a session purged or erased, gets a plain not-found."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core import erasure as erasure_core
from sessions_admin.ledger import actions, erasure
from sessions_admin.ledger.models import ErasureRequest, TrashEntry
from tests.builders import erasures_run_inline  # noqa: F401 - an autouse fixture

REASON = "ticket 4411 duplicate"


def _deleted(user_id: str = "u-gone-1") -> tuple[str, int]:
    sid = core.create_session(source="cli", user_id=user_id, title="Refund chat").session_id
    core.append_message(session_id=sid, role="user", content="hello")
    core.end_session(session_id=sid, end_reason="user_exit")
    plan = core.plan_cascade_delete(session_ids=[sid])
    result = core.execute_cascade_delete(
        session_ids=[sid], expected_fingerprint=plan.fingerprint, actor="ada", reason=REASON
    )
    return sid, result.trash_entry_ids[0]


def _in_store(sid: str) -> bool:
    return bool(db.fetchall("SELECT 1 FROM sessions WHERE id = %s", [sid]))


def test_an_admin_sees_who_deleted_it_and_restores_it_from_its_address(admin):
    sid, entry = _deleted()
    response = admin.get(reverse("session_detail", args=[sid]))
    assert response.status_code == 404
    page = response.content.decode()
    assert "ada" in page and REASON in page
    assert f"#trash-{entry}" in page
    action = re.search(r'<form class="restore" method="post" action="([^"]+)"', page).group(1)
    assert action == reverse("trash_restore", args=[entry])
    restored = admin.post(action, {"q": sid})
    assert restored.status_code == 302
    assert _in_store(sid)
    assert TrashEntry.objects.get(pk=entry).state == TrashEntry.RESTORED
    # Restored, then the address is the session's page again.
    assert admin.get(reverse("session_detail", args=[sid])).status_code == 200


@pytest.mark.parametrize("role", ["viewer", "support"])
def test_roles_without_the_trash_get_a_plain_not_found(signed_in, role):
    sid, entry = _deleted()
    response = signed_in(role).get(reverse("session_detail", args=[sid]))
    assert response.status_code == 404
    page = response.content.decode()
    assert "ada" not in page and REASON not in page
    assert reverse("trash_restore", args=[entry]) not in page


def test_a_purged_session_is_only_not_in_the_store(admin):
    sid, entry = _deleted()
    actions.purge(actor=None, older_than_days=None, reason="clean up")
    assert not TrashEntry.objects.filter(pk=entry).exists()
    page = admin.get(reverse("session_detail", args=[sid]))
    assert page.status_code == 404
    text = page.content.decode()
    assert "not in the store" in " ".join(text.split()) or "no session" in text
    assert "ada" not in text and REASON not in text


def test_an_erased_subjects_deleted_session_is_not_revealed(admin):
    sid, entry = _deleted(user_id="u-gone-erase")
    plan = erasure.plan(erasure_core.Subject(user_id="u-gone-erase"))
    queued = actions.request_erasure(
        actor=None,
        subject=plan.store.subject,
        reference="DSR-gone",
        expected_fingerprint=plan.fingerprint,
    )
    actions.run_erasure(request_id=queued.pk)
    assert ErasureRequest.objects.get(pk=queued.pk).state == ErasureRequest.DONE
    text = admin.get(reverse("session_detail", args=[sid])).content.decode()
    assert "Refund chat" not in text and REASON not in text
    assert reverse("trash_restore", args=[entry]) not in text


def test_a_session_an_unfinished_erasure_planned_is_not_described(admin):
    sid, entry = _deleted(user_id="u-gone-running")
    ErasureRequest.objects.create(
        reference="DSR-run",
        subject_hash="x",
        salt="y",
        state=ErasureRequest.FAILED,
        receipt={erasure.RUN: {"trash": {"session_ids": [sid]}}},
    )
    text = admin.get(reverse("session_detail", args=[sid])).content.decode()
    assert "Refund chat" not in text and REASON not in text
    assert reverse("trash_restore", args=[entry]) not in text
