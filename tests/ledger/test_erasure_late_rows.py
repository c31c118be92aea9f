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
from sessions_admin.ledger.models import ErasureRequest

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
