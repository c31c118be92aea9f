"""An erasure takes what the store keeps beside a subject's sessions for the dashboard and the
API: a runtime's idempotency keys (with the first answers) and a stopped cascade's claims."""

from __future__ import annotations

import json

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.erasure import Subject
from sessions_admin.core.idempotency import append_messages_once
from sessions_admin.ledger import actions
from sessions_admin.ledger import erasure as erasure_ledger
from sessions_admin.ledger.models import AuditEntry


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


def test_an_erasure_after_a_cascade_leaves_no_key_of_the_trashed_sessions_anywhere():
    key = "agent:main:telegram:dm:alice77"
    first = core.create_session(source="api", user_id="alice77", session_key=key).session_id
    for n in range(3):
        append_messages_once(
            key=f"k{n}",
            scope="token:runtime",
            request_hash=f"hash-{n}",
            session_id=first,
            messages=[{"role": "user", "content": f"hello {n}"}],
        )
    # What the API's runtime routes record: the key in an audit entry's before.
    actions.record(
        actor="api:runtime",
        action="start_session",
        session_ids=[first],
        before={"session_key": key},
    )
    plan = core.plan_cascade_delete(session_ids=[first])
    actions.cascade_delete(
        actor="ada",
        session_ids=[first],
        include_branches=False,
        expected_fingerprint=plan.fingerprint,
        reason="clean-up",
    )
    # The delete took the keys of appends to the session with it (a retry can only fail now).
    assert db.fetchall("SELECT key FROM sessions_admin_idempotency") == []

    _erase("alice77")

    assert db.fetchall("SELECT key FROM sessions_admin_idempotency") == []
    for entry in AuditEntry.objects.all():
        text = json.dumps(
            [entry.session_ids, entry.before, entry.after, entry.reason, entry.detail]
        )
        assert key not in text, (entry.action, text)
        assert first not in text, (entry.action, text)


def test_an_erasure_after_a_cascade_takes_the_slug_history_of_the_trashed_sessions():
    """The attack's round-4 break: the sessions were in the trash at erasure time, so the
    store's slug history about them (core, recorded and removed rows) stayed."""
    mine = core.create_session(source="api_server", user_id="alice77").session_id
    core.record_turn(response_id="resp_alice77_1", session_id=mine, conversation="alice77-slug")
    theirs = core.create_session(source="api_server", user_id="bob").session_id
    core.record_turn(response_id="resp_bob_1", session_id=theirs, conversation="bob-slug")
    plan = core.plan_cascade_delete(session_ids=[mine])
    actions.cascade_delete(
        actor="ada",
        session_ids=[mine],
        include_branches=False,
        expected_fingerprint=plan.fingerprint,
        reason="clean-up",
    )
    assert db.fetchall(
        "SELECT id FROM sessions_admin_slug_history WHERE slug = 'alice77-slug' OR session_id = %s",
        [mine],
    )

    _erase("alice77")

    assert (
        db.fetchall(
            "SELECT id FROM sessions_admin_slug_history WHERE slug = 'alice77-slug' "
            "OR session_id = %s OR response_id = 'resp_alice77_1'",
            [mine],
        )
        == []
    )
    # Another person's history stays.
    assert db.fetchall("SELECT id FROM sessions_admin_slug_history WHERE slug = 'bob-slug'")
