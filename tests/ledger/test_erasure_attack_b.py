"""Erasure breaks an attacker found from the docs and the commands alone (issue 25, items
1-6): a receipt that copied another person's hold into it, a killed erasure nobody
finished and a second request accepted beside it, an erasure with nothing left in the
store that left the bytes freed before it, and a subject the command could not even look
up. Each asserts the databases' rows (and, on SQLite, the files' bytes).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db, holds
from sessions_admin.core.erasure import Subject
from sessions_admin.ledger import actions, erasure, schedule
from sessions_admin.ledger.models import ErasureRequest, TrashEntry, TrashSession
from sessions_admin.routers import responses_alias, store_alias
from tests.builders import (
    erasures_run_inline,  # noqa: F401 - an autouse fixture
    store_snapshot,
)
from tests.helpers import file_bytes
from tests.ledger.test_erasure_resume import run_child

ALICE = "u-alice-attackb-4471"
VICTIM = "u-gina-attackb-2222"
HOLD_REASON = f"litigation gina vs {ALICE}"


def _ended_session(user_id: str | None, text: str) -> str:
    sid = core.create_session(source="telegram", user_id=user_id).session_id
    core.append_message(session_id=sid, role="user", content=text)
    core.end_session(session_id=sid, end_reason="user_exit")
    return sid


def _cascade(session_ids: list[str]) -> None:
    plan = core.plan_cascade_delete(session_ids=session_ids)
    actions.cascade_delete(
        actor=None,
        session_ids=session_ids,
        include_branches=False,
        expected_fingerprint=plan.fingerprint,
        reason="spring clean",
    )


def _erase(subject: Subject) -> ErasureRequest:
    plan = erasure.plan(subject)
    request = actions.request_erasure(
        actor=None, subject=subject, reference="DSR-AB-1", expected_fingerprint=plan.fingerprint
    )
    assert actions.run_erasure(request_id=request.pk) is not None
    request.refresh_from_db()
    return request


def _request_row_text(request: ErasureRequest) -> str:
    """Everything the dashboard's database keeps of the request, as text."""
    request.refresh_from_db()
    return json.dumps(
        [request.subject, request.reference, request.receipt, request.error], default=str
    )


# B5 ------------------------------------------------------------------------------------


def test_the_receipt_names_another_persons_hold_by_its_number_only():
    mine = _ended_session(ALICE, "alice's words")
    theirs = _ended_session(VICTIM, "gina's held words")
    _cascade([mine, theirs])
    hold = holds.place_hold(kind="user", subject=VICTIM, reason=HOLD_REASON, actor="ada")

    request = _erase(Subject(user_id=ALICE))

    assert request.state == ErasureRequest.DONE
    kept = request.receipt["kept"]["held_rows_of_other_people_in_shared_trash"]
    assert kept == [f"legal hold #{hold.id}"]
    stored = _request_row_text(request)
    for word in (ALICE, VICTIM, "litigation"):
        assert word not in stored
    assert ALICE not in erasure.receipt_text(request.receipt)


def test_the_receipt_hashes_every_erased_session_the_trashed_ones_too():
    live = _ended_session(ALICE, "still in the store")
    trashed = _ended_session(ALICE, "already deleted")
    _cascade([trashed])

    request = _erase(Subject(user_id=ALICE))

    salt = ErasureRequest.objects.get(pk=request.pk).salt
    assert request.receipt["session_ids_sha256"] == sorted(
        erasure.hash_of(salt, sid) for sid in (live, trashed)
    )
    assert not db.fetchall("SELECT id FROM sessions WHERE id IN (%s, %s)", [live, trashed])


# B6 ------------------------------------------------------------------------------------


def test_a_second_request_for_a_subject_with_an_unfinished_one_is_refused_naming_it():
    _ended_session(ALICE, "alice's words")
    subject = Subject(user_id=ALICE)
    plan = erasure.plan(subject)
    first = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-AB-1",
        expected_fingerprint=plan.fingerprint,
        start=False,
    )
    before = store_snapshot()

    with pytest.raises(core.InvalidInput, match=f"#{first.pk}"):
        actions.request_erasure(
            actor=None,
            subject=subject,
            reference="DSR-AB-2",
            expected_fingerprint=plan.fingerprint,
            start=False,
        )
    with pytest.raises(CommandError, match=f"#{first.pk}"):
        call_command("erase_subject", "--user", ALICE, "--yes", "--reference", "DSR-AB-3")

    assert list(ErasureRequest.objects.values_list("pk", "state")) == [
        (first.pk, ErasureRequest.PENDING)
    ]
    assert store_snapshot() == before


def test_the_scheduler_finishes_an_erasure_whose_worker_was_killed():
    sessions = [_ended_session(ALICE, f"alice's words {n}") for n in range(3)]
    subject = Subject(user_id=ALICE)
    plan = erasure.plan(subject)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-AB-KILL",
        expected_fingerprint=plan.fingerprint,
        start=False,
    )
    child = run_child(request.pk, crash_at="erasure.after_plan_recorded")
    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stderr)
    request.refresh_from_db()
    assert request.state == ErasureRequest.RUNNING and ALICE in request.subject

    stop = threading.Event()
    loop = threading.Thread(
        target=schedule.run_schedule, kwargs={"interval": 0.2, "stop": stop}, daemon=True
    )
    loop.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            request.refresh_from_db()
            if request.state == ErasureRequest.DONE:
                break
            time.sleep(0.2)
    finally:
        stop.set()
        loop.join(timeout=60)
        connections.close_all()

    request.refresh_from_db()
    assert request.state == ErasureRequest.DONE
    assert ALICE not in _request_row_text(request)
    assert request.receipt["erased"]["sessions"] == len(sessions)
    assert not db.fetchall("SELECT id FROM sessions WHERE user_id = %s", [ALICE])


# B7 ------------------------------------------------------------------------------------

IVAN = "u-ivan-attackb-4444"
IVAN_SECRET = "IVANSECRETpassport12345"


def _written_then_deleted_by_the_runtime() -> None:
    """The runtime wrote the person's rows and deleted them itself (SQLite: with
    ``secure_delete`` off, as most builds have it): nothing in the store names them now."""
    sid = core.create_session(source="telegram", user_id=IVAN, chat_id="chat-ivan").session_id
    core.append_messages(
        session_id=sid,
        messages=[{"role": "user", "content": f"{IVAN_SECRET} {n} " * 50} for n in range(5)],
    )
    connection = connections[store_alias()]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA secure_delete = OFF")
        cursor.execute("DELETE FROM messages WHERE session_id = %s", [sid])
        cursor.execute("DELETE FROM sessions WHERE id = %s", [sid])
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _store_files() -> list[Path]:
    files = []
    for alias in dict.fromkeys([store_alias(), responses_alias()]):
        name = Path(connections[alias].settings_dict["NAME"])
        files += sorted(p for p in name.parent.glob(name.name + "*") if p.is_file())
    return files


def _bytes_left() -> list[str]:
    return [str(p) for p in _store_files() if IVAN_SECRET.encode() in file_bytes(p)]


def _check_empty_erasure(request: ErasureRequest) -> None:
    assert request.state == ErasureRequest.DONE
    erased = request.receipt["erased"]
    assert erased["sessions"] == erased["messages"] == 0
    assert request.receipt["file_rewrite"]["state"] in (
        erasure.REWRITE_PENDING,
        erasure.REWRITE_DONE,
    )
    assert erasure.verify_receipt(erasure.receipt_text(request.receipt).encode()).valid
    if db.vendor() == "sqlite":
        assert request.receipt["file_rewrite"]["state"] == erasure.REWRITE_DONE
        assert _bytes_left() == []


def test_the_command_erases_bytes_freed_before_when_no_row_is_left():
    _written_then_deleted_by_the_runtime()
    assert erasure.plan(Subject(user_id=IVAN)).empty
    if db.vendor() == "sqlite":
        assert _bytes_left()  # the runtime's delete left them in freed space

    call_command("erase_subject", "--user", IVAN, "--yes", "--reference", "DSR-AB-T3")

    (request,) = ErasureRequest.objects.all()
    _check_empty_erasure(request)


def test_the_page_confirms_an_erasure_with_no_row_left_and_rewrites_the_files(admin_client):
    _written_then_deleted_by_the_runtime()
    plan = erasure.plan(Subject(user_id=IVAN))
    assert plan.empty

    response = admin_client.post(
        reverse("erasure_confirm"),
        {
            "user_id": IVAN,
            "chat_ids": "",
            "session_keys": "",
            "reference": "DSR-AB-T3",
            "fingerprint": plan.fingerprint,
        },
    )

    assert response.status_code == 302, response.content[:2000]
    (request,) = ErasureRequest.objects.all()
    assert actions.run_erasure(request_id=request.pk) is not None
    request.refresh_from_db()
    _check_empty_erasure(request)


# B8 ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--user", "x" * 100_000, "longer than"),
        ("--user", "ab\ud800", "lone surrogate"),
        ("--chat", "c" * 100_000, "longer than"),
        ("--key", "agent:main:\ud800", "lone surrogate"),
    ],
    ids=["long-user", "surrogate-user", "long-chat", "surrogate-key"],
)
def test_erase_subject_refuses_an_unusable_value_with_a_message_and_changes_nothing(
    option, value, message
):
    _ended_session(ALICE, "alice's words")
    before = store_snapshot()
    arguments = ["--user", ALICE] if option != "--user" else []

    with pytest.raises(CommandError, match=message):
        call_command("erase_subject", *arguments, option, value, "--yes", "--reference", "DSR-AB-8")

    assert store_snapshot() == before
    assert not ErasureRequest.objects.exists()


def test_a_restored_shared_entry_keeps_no_erased_session_id_as_a_part():
    """Attack on issue 26 (B6): a delete in parts of the subject's large session, shared with
    someone else's session in one trash operation, restored, then the subject erased: no
    trash entry keeps the erased session's id (``part_of``) in the dashboard's database."""
    big = core.create_session(source="telegram", user_id="vic-3003").session_id
    core.append_messages(
        session_id=big,
        messages=[{"role": "user", "content": f"line {n}"} for n in range(1_200)],
    )
    core.end_session(session_id=big, end_reason="user_exit")
    other = core.create_session(source="telegram", user_id="olga-4004").session_id
    core.append_message(session_id=other, role="user", content="mine")
    core.end_session(session_id=other, end_reason="user_exit")
    plan = core.plan_cascade_delete(session_ids=[big, other])
    actions.cascade_delete(
        actor=None,
        session_ids=[big, other],
        include_branches=False,
        expected_fingerprint=plan.fingerprint,
        reason="tidy up",
    )
    entry = TrashEntry.objects.filter(payload__part_of=big).first()
    assert entry is not None, "the large session was deleted in parts"
    actions.restore(actor=None, entry_id=entry.pk, reason="mistake")
    assert db.fetchone("SELECT COUNT(*) FROM sessions WHERE id = %s", [big])[0] == 1

    subject = Subject(user_id="vic-3003")
    plan = erasure.plan(subject)
    request = actions.request_erasure(
        actor=None, subject=subject, reference="DSR-parts", expected_fingerprint=plan.fingerprint
    )
    assert actions.run_erasure(request_id=request.pk) is not None

    assert not [e.pk for e in TrashEntry.objects.all() if big in json.dumps(e.payload)]
    assert not TrashSession.objects.filter(session_id=big).exists()
