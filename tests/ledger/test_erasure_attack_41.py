"""Attack round 41 (docs only): what an erasure stopped by a hold says, and what its audit and
the operators' words keep of the person afterwards.

- A request run again while the hold that stopped it stands said "Nothing was deleted",
  though its first run had erased part of the person's data.
- The erasure's own entries of a run a session hold stopped named the held (erased) session
  ids in plain text after the request finished.
- The subject's id followed by ``:`` or ``@`` (a composite key, an e-mail address) or after
  ``@`` (a mention) was not redacted from operators' reasons.
"""

from __future__ import annotations

import json

import pytest

from sessions_admin import core
from sessions_admin.core import db, faults
from sessions_admin.core import holds as holds_core
from sessions_admin.core.erasure import Subject
from sessions_admin.ledger import actions
from sessions_admin.ledger import erasure as erasure_ledger
from sessions_admin.ledger.models import AuditEntry, ErasureRequest, TrashEntry
from tests.builders import erasures_run_inline  # noqa: F401 - an autouse fixture

ALICE = "alice-41"


@pytest.fixture
def hooks():
    yield
    faults._actions.clear()
    faults._hits.clear()


def _ended_session(user_id: str, words: str) -> str:
    sid = core.create_session(source="telegram", user_id=user_id).session_id
    core.append_message(session_id=sid, role="user", content=words)
    core.end_session(session_id=sid, end_reason="user_exit")
    return sid


def _their_words_left() -> int:
    return int(db.fetchone("SELECT COUNT(*) FROM messages WHERE content LIKE %s", ["ALICE-41%"])[0])


def _entry_text(entry: AuditEntry) -> str:
    return json.dumps(
        [entry.session_ids, entry.before, entry.after, entry.reason, entry.detail],
        ensure_ascii=False,
    )


def test_a_run_again_under_the_hold_that_stopped_it_says_what_was_erased_before(monkeypatch, hooks):
    monkeypatch.setattr("sessions_admin.core.deletion.batches.BATCH_SESSIONS", 1)
    alice = [_ended_session(ALICE, f"ALICE-41 words {n}") for n in range(3)]
    subject = Subject(user_id=ALICE)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-41",
        expected_fingerprint=erasure_ledger.plan(subject).fingerprint,
        start=False,
    )
    placed = []

    def legal_holds_the_sessions_not_yet_erased() -> None:
        if placed:
            return
        for sid in alice:
            if db.fetchone("SELECT 1 FROM sessions WHERE id = %s", [sid]):
                placed.append(
                    actions.place_hold(
                        actor=None, kind=holds_core.SESSION, subject=sid, reason="litigation L-41"
                    )
                )

    faults.run_at("erasure.between_batches", legal_holds_the_sessions_not_yet_erased)
    with pytest.raises(holds_core.SessionsHeld):
        actions.run_erasure(request_id=request.pk)
    faults._actions.clear()
    assert _their_words_left() == 2

    # Opening the request's page runs it again; the hold still stands.
    with pytest.raises(holds_core.SessionsHeld):
        actions.run_erasure(request_id=request.pk)
    request.refresh_from_db()
    assert request.state == ErasureRequest.FAILED
    assert "Nothing was deleted" not in request.error
    assert "This run deleted nothing" in request.error
    assert "erased 1 of 3 sessions (1 of 3 messages) before the hold" in request.error
    again = AuditEntry.objects.filter(action="erasure").order_by("pk").last()
    assert again.outcome == AuditEntry.FAILED  # this run erased nothing
    assert "Nothing was deleted" not in again.detail
    assert _their_words_left() == 2  # nothing more went

    for hold in placed:
        actions.release_hold(actor=None, hold_id=hold.id, reason="settled")
    assert actions.run_erasure(request_id=request.pk) is not None
    assert _their_words_left() == 0
    entries = list(AuditEntry.objects.filter(action="erasure").order_by("pk"))
    assert [e.outcome for e in entries] == [
        AuditEntry.PARTIAL,
        AuditEntry.FAILED,
        AuditEntry.OK,
    ]
    for entry in AuditEntry.objects.all():
        text = _entry_text(entry)
        assert not [sid for sid in alice if sid in text], (entry.action, text)
        assert ALICE not in text


REASON = (
    "key mona-52:x; mail mona-52@example.com; ping @mona-52; dm:mona-52; see _mona-52_; "
    "others: mona-52_old mona-520 xmona-52 mona-52.net x_mona-52"
)
KEPT = ("mona-52_old", "mona-520", "xmona-52", "mona-52.net", "x_mona-52")


def test_the_subject_before_a_colon_or_at_sign_or_after_one_is_redacted_from_reasons():
    mona = _ended_session("mona-52", "MONA words")
    bob = _ended_session("bob-41", "ask @mona-52 about it")
    other = _ended_session("bob-42", "mail mona-520@example.com")
    plan = core.plan_cascade_delete(session_ids=[bob])
    actions.cascade_delete(
        actor=None,
        session_ids=[bob],
        include_branches=False,
        expected_fingerprint=plan.fingerprint,
        reason=REASON,
    )
    subject = Subject(user_id="mona-52")
    erasure_plan = erasure_ledger.plan(subject)
    # Another person's text naming her is listed for review and kept; a longer id is not her.
    assert erasure_plan.store.mentions == ()  # bob's session is in the trash, not the store
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-52 for mona-52@example.com",
        expected_fingerprint=erasure_plan.fingerprint,
    )
    actions.run_erasure(request_id=request.pk)

    assert db.fetchone("SELECT 1 FROM sessions WHERE id = %s", [mona]) is None
    assert db.fetchone("SELECT 1 FROM sessions WHERE id = %s", [other]) is not None
    (trash,) = TrashEntry.objects.all()
    cascade = AuditEntry.objects.get(action="cascade_delete")
    request.refresh_from_db()
    for words in (trash.reason, cascade.reason, request.reference):
        for leaked in ("mona-52:", "mona-52@", "@mona-52", ":mona-52;"):
            assert leaked not in words, words
    for kept in KEPT:
        assert kept in trash.reason and kept in cascade.reason
    assert trash.reason.count("[erased:") == 5
    assert "_[erased:" in trash.reason  # Markdown's emphasis keeps its underscores


def test_a_mention_after_an_at_sign_is_listed_for_review():
    _ended_session("mona-53", "MONA words")
    bob = _ended_session("bob-53", "ask @mona-53 about it")
    _ended_session("bob-54", "mail mona-530@example.com")
    plan = erasure_ledger.plan(Subject(user_id="mona-53"))
    assert plan.store.mentions == (bob,)
