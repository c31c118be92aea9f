"""A subject with hundreds of chats (attack round 39): the dashboard's side looked for every
chat id and key of the erased sessions in operator texts with one OR of them all, which
SQLite refused past a depth of 1,000; the store was erased, the request failed on every
retry, and no receipt was issued. Now it finishes, and the texts naming them are redacted."""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.erasure import Subject
from sessions_admin.ledger import actions
from sessions_admin.ledger import erasure as erasure_ledger
from sessions_admin.ledger.models import AuditEntry, DeleteJob, ErasureRequest

pytestmark = pytest.mark.usefixtures("no_worker")

USER = "u-many-chats-39"
CHATS = 300


def test_a_subject_with_hundreds_of_chats_is_erased_with_a_receipt():
    sessions = []
    for n in range(CHATS):
        sid = core.create_session(
            source="telegram",
            user_id=USER,
            chat_id=f"chat-39-{n:04d}",
            session_key=f"agent:main:telegram:dm:chat-39-{n:04d}",
        ).session_id
        sessions.append(sid)
    core.append_message(session_id=sessions[0], role="user", content="hello")
    other = core.create_session(source="telegram", user_id="someone-else-39").session_id
    # An operator text naming one of the chats (a bulk delete's reason).
    actions.start_bulk_delete(
        actor=None,
        session_ids=[other],
        include_live=True,
        reason="asked by chat-39-0123 to tidy",
    )
    subject = Subject(user_id=USER)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-MANY",
        expected_fingerprint=erasure_ledger.plan(subject).fingerprint,
        start=False,
    )
    receipt = actions.run_erasure(request_id=request.pk)
    request.refresh_from_db()
    assert request.state == ErasureRequest.DONE, request.error
    assert receipt["erased"]["sessions"] == CHATS
    assert db.fetchone("SELECT COUNT(*) FROM sessions WHERE user_id = %s", [USER])[0] == 0
    reason = DeleteJob.objects.get().reason
    assert "chat-39-0123" not in reason and "[erased:" in reason
    assert not any("chat-39-" in str(e.before) + str(e.reason) for e in AuditEntry.objects.all())
