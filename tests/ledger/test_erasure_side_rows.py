"""An erasure takes what the store keeps beside a subject's sessions for the dashboard and the
API: a runtime's idempotency keys (with the first answers) and a stopped cascade's claims."""

from __future__ import annotations

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.erasure import Subject
from sessions_admin.core.idempotency import append_messages_once
from sessions_admin.ledger import actions
from sessions_admin.ledger import erasure as erasure_ledger


def _erase(user_id: str) -> None:
    subject = Subject(user_id=user_id)
    preview = erasure_ledger.plan(subject)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-SIDE",
        expected_fingerprint=preview.fingerprint,
        start=False,
    )
    actions.run_erasure(request_id=request.pk)


def test_an_erasure_takes_the_idempotency_keys_of_the_subjects_appends_and_no_one_elses():
    mine = core.create_session(source="api", user_id="u-erased").session_id
    theirs = core.create_session(source="api", user_id="u-kept").session_id
    for session_id, key in [(mine, "k-mine-1"), (mine, "k-mine-2"), (theirs, "k-theirs")]:
        append_messages_once(
            key=key,
            scope="token:runtime",
            request_hash=f"hash-{key}",
            session_id=session_id,
            messages=[{"role": "user", "content": f"said with {key}"}],
        )

    _erase("u-erased")

    assert db.fetchall("SELECT key, session_id FROM sessions_admin_idempotency") == [
        ("k-theirs", theirs)
    ]
    assert db.fetchall("SELECT id FROM sessions WHERE user_id = 'u-erased'") == []
