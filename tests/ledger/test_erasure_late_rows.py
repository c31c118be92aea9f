"""A runtime writing with its own SQL, on its own connection, while the subject is erased,
on either backend (tests/hermes/test_erasure_while_writing.py does it with hermes-agent's
own code on SQLite): what it appends to the subject's sessions and the sessions it starts
below them are erased and counted; another user's child stays with everything it holds.
"""

from __future__ import annotations

import sqlite3
import time

import psycopg
import pytest
from django.db import connections

from sessions_admin import core
from sessions_admin.core import db, faults
from sessions_admin.core.erasure import Subject
from sessions_admin.ledger import actions
from sessions_admin.ledger import erasure as erasure_ledger
from sessions_admin.ledger.models import AuditEntry, ErasureRequest

ALICE = "alice-late"
BOB = "bob-late"


def _runtime_sql(statements: list[tuple[str, list]]) -> None:
    """Run ``statements`` in one transaction on a connection of their own (not the core's)."""
    store = connections["store"]
    if store.vendor == "postgresql":
        params = store.get_connection_params()
        with psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"}) as conn:
            for sql, args in statements:
                conn.execute(sql, args)
        return
    conn = sqlite3.connect(store.settings_dict["NAME"], timeout=30)
    try:
        with conn:
            for sql, args in statements:
                conn.execute(sql.replace("%s", "?"), args)
    finally:
        conn.close()


def _message(session_id: str, content: str) -> tuple[str, list]:
    return (
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (%s, 'user', %s, %s)",
        [session_id, content, time.time()],
    )


def _session(session_id: str, parent: str, user: str | None) -> tuple[str, list]:
    return (
        "INSERT INTO sessions (id, source, user_id, started_at, parent_session_id, "
        "message_count) VALUES (%s, 'cli', %s, %s, %s, 0)",
        [session_id, user, time.time(), parent],
    )


def _count_saying(words: str) -> int:
    return int(db.fetchone("SELECT COUNT(*) FROM messages WHERE content LIKE %s", [f"{words}%"])[0])


@pytest.fixture
def hooks():
    yield
    faults._actions.clear()
    faults._hits.clear()


def test_a_runtimes_own_writes_during_an_erasure_are_erased_and_counted(monkeypatch, hooks):
    monkeypatch.setattr("sessions_admin.core.deletion.batches.BATCH_SESSIONS", 1)
    alice = []
    for live in (False, False, True):
        sid = core.create_session(source="telegram", user_id=ALICE).session_id
        core.append_messages(
            session_id=sid,
            messages=[{"role": "user", "content": f"ALICE-WORDS {k}"} for k in range(4)],
        )
        if not live:
            core.end_session(session_id=sid, end_reason="user_exit")
        alice.append(sid)
    bob = core.create_session(source="telegram", user_id=BOB).session_id
    core.append_message(session_id=bob, role="user", content="BOB-WORDS 0")
    subject = Subject(user_id=ALICE)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-LATE",
        expected_fingerprint=erasure_ledger.plan(subject).fingerprint,
        start=False,
    )

    def runtime_writes() -> None:
        left = sorted(
            r[0] for r in db.fetchall("SELECT id FROM sessions WHERE user_id = %s", [ALICE])
        )
        assert len(left) == 2
        _runtime_sql(
            [
                *(_message(sid, f"ALICE-WORDS late {k}") for sid in left for k in range(2)),
                _session("late-kid", left[0], None),
                _message("late-kid", "ALICE-WORDS kid 0"),
                _message("late-kid", "ALICE-WORDS kid 1"),
                _session("late-grandkid", "late-kid", None),
                _message("late-grandkid", "ALICE-WORDS grandkid"),
                _session("bob-kid", left[0], BOB),
                _message("bob-kid", "BOB-WORDS kid"),
            ]
        )

    faults.run_at("erasure.between_batches", runtime_writes)
    receipt = actions.run_erasure(request_id=request.pk)

    request.refresh_from_db()
    assert request.state == ErasureRequest.DONE
    assert _count_saying("ALICE-WORDS") == 0
    assert _count_saying("BOB-WORDS") == 2
    remaining = {r[0] for r in db.fetchall("SELECT id FROM sessions")}
    assert remaining == {bob, "bob-kid"}
    # 12 counted before; 4 appended, 3 in the new sessions; 3 sessions and 2 new ones.
    assert receipt["erased"]["messages"] == 12 + 4 + 3
    assert receipt["erased"]["sessions"] == 5
    hashes = set(receipt["session_ids_sha256"])
    assert {
        erasure_ledger.hash_of(request.salt, sid) for sid in ["late-kid", "late-grandkid", *alice]
    } <= hashes
    assert erasure_ledger.hash_of(request.salt, "bob-kid") not in hashes


def test_a_hold_placed_and_released_while_it_ran_is_erased_by_the_run_that_finishes(
    monkeypatch, hooks
):
    """A hold on the subject placed while the erasure runs stops it (holds win); released, the
    request is run again and finishes: the released hold names the subject, so it goes too,
    and another hold whose reason names them is redacted (attack round 39). The run again
    carries out the first run's recorded plan, which knew neither hold."""
    from sessions_admin.core import holds as holds_core

    monkeypatch.setattr("sessions_admin.core.deletion.batches.BATCH_SESSIONS", 1)
    for _ in range(3):
        sid = core.create_session(source="telegram", user_id=ALICE).session_id
        core.append_message(session_id=sid, role="user", content="ALICE-WORDS")
        core.end_session(session_id=sid, end_reason="user_exit")
    bob = core.create_session(source="telegram", user_id=BOB).session_id
    subject = Subject(user_id=ALICE)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-HOLD",
        expected_fingerprint=erasure_ledger.plan(subject).fingerprint,
        start=False,
    )
    placed = []

    def legal_places_holds() -> None:
        placed.append(
            actions.place_hold(
                actor=None, kind=holds_core.USER, subject=ALICE, reason="litigation L-39"
            )
        )
        placed.append(
            actions.place_hold(
                actor=None,
                kind=holds_core.SESSION,
                subject=bob,
                reason=f"bob's, asked about {ALICE}",
            )
        )

    faults.run_at("erasure.between_batches", legal_places_holds)
    with pytest.raises(holds_core.SessionsHeld):
        actions.run_erasure(request_id=request.pk)
    assert _count_saying("ALICE-WORDS") == 2  # held: the rest waits
    request.refresh_from_db()
    assert "1 of 3 sessions (1 messages) were erased before it" in request.error
    assert "Nothing was deleted" not in request.error
    entry = AuditEntry.objects.filter(action="erasure").order_by("pk").last()
    assert entry.outcome == AuditEntry.PARTIAL
    assert entry.after["erased_so_far"]["sessions"] == 1
    faults._actions.clear()
    actions.release_hold(actor=None, hold_id=placed[0].id, reason="settled")
    receipt = actions.run_erasure(request_id=request.pk)
    assert receipt is not None and _count_saying("ALICE-WORDS") == 0
    rows = db.fetchall("SELECT id, kind, subject, reason FROM sessions_admin_holds ORDER BY id")
    assert [r[0] for r in rows] == [placed[1].id]  # bob's hold stays, standing
    assert ALICE not in str(rows) and "[erased]" in rows[0][3]


def test_a_session_written_again_after_the_last_batch_goes_in_another_round(monkeypatch):
    """A runtime holding an erased session's id writes it again while the erasure clears what
    the deletes left (the index merge, the checkpoint): the erasure looks once more after
    all of it, and goes round again (attack round 39: re-created rows written after the
    erasure's only check stayed behind a "done" receipt)."""
    from sessions_admin.core.erasure import run as erasure_run

    sid = core.create_session(source="telegram", user_id=ALICE).session_id
    core.append_message(session_id=sid, role="user", content="ALICE-WORDS 0")
    core.end_session(session_id=sid, end_reason="user_exit")
    subject = Subject(user_id=ALICE)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-AGAIN",
        expected_fingerprint=erasure_ledger.plan(subject).fingerprint,
        start=False,
    )
    purge = erasure_run._purge_leftovers
    calls = []

    def runtime_writes_during_the_purge():
        calls.append(1)
        if len(calls) == 1:
            session = _session(sid, None, ALICE)
            _runtime_sql(
                [(session[0], [sid, ALICE, time.time(), None]), _message(sid, "ALICE-WORDS again")]
            )
        return purge()

    monkeypatch.setattr(erasure_run, "_purge_leftovers", runtime_writes_during_the_purge)
    receipt = actions.run_erasure(request_id=request.pk)
    assert len(calls) == 2
    assert _count_saying("ALICE-WORDS") == 0
    assert db.fetchone("SELECT COUNT(*) FROM sessions WHERE id = %s", [sid])[0] == 0
    assert receipt["erased"]["sessions"] == 2 and receipt["erased"]["messages"] == 2


def test_a_runtime_that_keeps_writing_erased_ids_again_stops_the_run_partly_done(monkeypatch):
    """A runtime re-creating an erased session's id round after round outpaces the erasure: it
    stops after ``MAX_GROWTH_ROUNDS`` with what it erased kept erased, and says so on the
    request and in a ``partial`` audit entry (it said "0 sessions", ``after`` empty); run
    again once the runtime stops, it finishes."""
    from sessions_admin.core.erasure import run as erasure_run

    monkeypatch.setattr(erasure_run, "MAX_GROWTH_ROUNDS", 2)
    sessions = []
    for _ in range(2):
        sid = core.create_session(source="telegram", user_id=ALICE).session_id
        core.append_message(session_id=sid, role="user", content="ALICE-WORDS 0")
        core.end_session(session_id=sid, end_reason="user_exit")
        sessions.append(sid)
    subject = Subject(user_id=ALICE)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-OUTPACED",
        expected_fingerprint=erasure_ledger.plan(subject).fingerprint,
        start=False,
    )
    purge = erasure_run._purge_leftovers

    def runtime_writes_it_again_every_time():
        session = _session(sessions[0], None, ALICE)
        _runtime_sql([(session[0], [sessions[0], ALICE, time.time(), None])])
        return purge()

    monkeypatch.setattr(erasure_run, "_purge_leftovers", runtime_writes_it_again_every_time)
    with pytest.raises(erasure_run.RuntimeOutpacedErasure):
        actions.run_erasure(request_id=request.pk)
    request.refresh_from_db()
    assert request.state == ErasureRequest.FAILED
    assert "sessions (2 messages) were erased before it stopped" in request.error
    entry = AuditEntry.objects.filter(action="erasure").order_by("pk").last()
    assert entry.outcome == AuditEntry.PARTIAL
    assert entry.after["erased_so_far"]["messages"] == 2
    assert entry.after["stopped_by"] == "RuntimeOutpacedErasure"

    monkeypatch.setattr(erasure_run, "_purge_leftovers", purge)  # the runtime stopped
    receipt = actions.run_erasure(request_id=request.pk)
    assert receipt is not None and _count_saying("ALICE-WORDS") == 0
    assert db.fetchone("SELECT COUNT(*) FROM sessions WHERE user_id = %s", [ALICE])[0] == 0
