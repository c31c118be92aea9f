"""A killed erasure, run again, finishes: no trace of the person is left, the receipt counts it all.

The erasure runs in a child process (tests/core/crash_child.py) killed by SIGKILL at a
crash point (sessions_admin/core/faults.py): between its delete batches, between the parts
of a large session, after its plan is recorded, after the store's side, in the middle of
the dashboard's side. The operator then retries (the request's page, or ``erase_subject``
again). After that: no row of the store, the response store, the trash, the audit log,
the job items or the switch-event log names the person or one of their erased sessions;
the receipt's counts are what the databases lost between before the first run and after
the last; the request is done and keeps only hashes; the store is consistent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import being_deleted, db
from sessions_admin.core import erasure as erasure_core
from sessions_admin.core.erasure import Subject
from sessions_admin.core.schema import existing_tables
from sessions_admin.demo.consistency import check_store
from sessions_admin.ledger import actions, erasure, jobs
from sessions_admin.ledger.models import (
    AuditEntry,
    AuditSession,
    DeleteJob,
    DeleteJobItem,
    ErasureRequest,
    TrashEntry,
    TrashSession,
)
from sessions_admin.routers import responses_alias, store_alias
from tests.helpers import run_test_child

REPO = Path(__file__).resolve().parents[2]
USER = "u-resume-6621"
CHAT = "chat-resume-8830"
KEY = f"tg:{CHAT}"
SECRET = "quokka-marble-4471"
SLUG = "slug-resume-3307"
# Small batches and parts in the child, so the erasure takes several of each.
BATCH_SESSIONS = 2
BATCH_MESSAGES = 20
BIG_SESSION_MESSAGES = 3 * BATCH_MESSAGES + 5
SESSIONS = 7
# Own tables whose rows an erasure deletes (the switch events are tombstoned instead).
OWN_TABLES = [t for t in erasure_core.SIDE_ROW_KEYS if t != "sessions_admin_switch_events"] + [
    being_deleted.PARTS_TABLE
]


@pytest.fixture(autouse=True)
def _run_inline(monkeypatch):
    """What the page starts in a thread runs here, inline."""

    def start_erasures() -> None:
        for request_id in erasure.resumable_request_ids():
            actions.run_erasure(request_id=request_id)

    monkeypatch.setattr(actions, "start_erasures", start_erasures)


def subject_with_history() -> dict:
    """Several sessions on one key (switch events), one large, a slug and response, an earlier
    session in the trash (a cascade) and another deleted by a bulk delete job (job items),
    a released hold: audit entries and operator texts name them."""
    ids = []
    for number in range(SESSIONS):
        # The later ones each on a key of its own: their switch events name them alone.
        key = KEY if number < SESSIONS // 2 else f"{KEY}-{number}"
        sid = core.create_session(
            source="telegram", user_id=USER, chat_id=CHAT, session_key=key
        ).session_id
        core.append_messages(
            session_id=sid,
            messages=[
                {"role": "user", "content": f"turn {number}: my word is {SECRET}"},
                {"role": "assistant", "content": "noted"},
            ],
        )
        if number == 2:  # deleted in parts
            core.append_messages(
                session_id=sid,
                messages=[
                    {"role": "user", "content": f"line {n} {SECRET}"}
                    for n in range(BIG_SESSION_MESSAGES)
                ],
            )
        ids.append(sid)
    core.record_turn(response_id="resp-resume-1", session_id=ids[-1], conversation=SLUG)
    old = core.create_session(source="telegram", user_id=USER).session_id
    core.append_message(session_id=old, role="user", content=f"old {SECRET}")
    core.end_session(session_id=old, end_reason="user_exit")
    plan = core.plan_cascade_delete(session_ids=[old])
    actions.cascade_delete(
        actor=None,
        session_ids=[old],
        include_branches=False,
        expected_fingerprint=plan.fingerprint,
        reason=f"user {USER} asked",
    )
    older = core.create_session(source="telegram", user_id=USER).session_id
    core.append_message(session_id=older, role="user", content=f"older {SECRET}")
    core.end_session(session_id=older, end_reason="user_exit")
    job = jobs.create_bulk_delete_job(
        session_ids=[older], include_live=True, actor="ada", reason=f"cleanup of {USER}"
    )
    jobs.run_job(job_id=job)
    hold = actions.place_hold(actor=None, kind="user", subject=USER, reason=f"case about {CHAT}")
    actions.release_hold(actor=None, hold_id=hold.id, reason="closed")
    other = core.create_session(source="cli", user_id="u-other-1").session_id
    core.append_message(session_id=other, role="user", content="nothing to see")
    return {"store": ids, "trashed": [old, older], "other": other}


def _count(sql: str, params=(), *, alias: str | None = None) -> int:
    return int(db.fetchone(sql, list(params), alias=alias)[0])


def database_counts() -> dict[str, int]:
    """Every row an erasure can remove, counted in each database (the receipt's units)."""
    store_tables = existing_tables(store_alias())
    return {
        "sessions": _count("SELECT COUNT(*) FROM sessions"),
        "messages": _count("SELECT COUNT(*) FROM messages"),
        "conversation_slugs": _count("SELECT COUNT(*) FROM conversations", alias=responses_alias()),
        "stored_responses": _count("SELECT COUNT(*) FROM responses", alias=responses_alias()),
        "own_table_rows": sum(
            _count(f"SELECT COUNT(*) FROM {table}") for table in OWN_TABLES if table in store_tables
        ),
        "trash_entries": TrashEntry.objects.count(),
        "job_items": DeleteJobItem.objects.count(),
    }


def _names(text: str, values) -> bool:
    return any(value in text for value in values)


def audit_entries_naming(values) -> set[int]:
    linked = set(
        AuditSession.objects.filter(session_id__in=list(values)).values_list("entry_id", flat=True)
    )
    return linked | {
        entry.pk
        for entry in AuditEntry.objects.all()
        if _names(
            json.dumps([entry.session_ids, entry.before, entry.after, entry.reason, entry.detail]),
            values,
        )
    }


def rows_naming(values) -> dict[str, list]:
    """Every row of every database naming one of ``values`` (the person's strings, ids)."""
    found: dict[str, list] = {}
    for alias in dict.fromkeys([store_alias(), responses_alias()]):
        for table in sorted(existing_tables(alias)):
            if table.startswith(("django_", "auth_")) or "_fts" in table:
                continue
            for row in db.fetchall(f"SELECT * FROM {table}", alias=alias):
                if _names(json.dumps(row, default=str), values):
                    found.setdefault(f"{alias}.{table}", []).append(row)
    for model in (TrashEntry, TrashSession, DeleteJobItem, DeleteJob, ErasureRequest):
        for row in model.objects.values():
            if _names(json.dumps(row, default=str), values):
                found.setdefault(model.__name__, []).append(row)
    if entries := audit_entries_naming(values):
        found["AuditEntry"] = sorted(entries)
    return found


def run_child(request_id: int, *, crash_at: str):
    return run_test_child(
        "crash_child",
        "run_erasure",
        json.dumps({"request_id": request_id}),
        settings={
            "SESSIONS_ADMIN_CRASH_AT": crash_at,
            "CRASH_CHILD_BATCH_SESSIONS": str(BATCH_SESSIONS),
            "CRASH_CHILD_BATCH_MESSAGES": str(BATCH_MESSAGES),
        },
        timeout=120,
    )


CRASH_POINTS = [
    "erasure.after_plan_recorded",
    "delete.after_commit@2",  # a delete batch committed, the next not begun
    "erasure.between_batches@3",
    "delete.between_parts@1",  # a large session half deleted
    "delete.between_parts@2",
    "erasure.after_store",
    "erasure.during_dashboard",
]


@pytest.mark.parametrize(
    ("crash_at", "retry"),
    [(point, "page") for point in CRASH_POINTS]
    + [
        ("delete.between_parts@1+erasure.between_batches@1", "page"),
        ("delete.before_commit@2+erasure.during_dashboard", "page"),
        ("delete.after_trash_copy@3+erasure.after_store", "command"),
        ("delete.after_commit@2", "command"),
        ("delete.between_parts@1", "command"),
        ("erasure.during_dashboard", "command"),
    ],
)
def test_a_killed_erasure_retried_leaves_no_trace_and_a_receipt_of_everything(
    crash_at, retry, admin_client
):
    ids = subject_with_history()
    subject = Subject(user_id=USER, chat_ids=(CHAT,), session_keys=(KEY,))
    full = erasure.plan(subject)
    erased_ids = [*full.store.session_ids, *full.trash.session_ids]
    assert set(ids["store"]) <= set(full.store.session_ids)
    assert set(ids["trashed"]) <= set(full.trash.session_ids)
    values = [USER, CHAT, KEY, SECRET, SLUG, "resp-resume-1", *erased_ids]
    switch_events = _count(
        "SELECT COUNT(*) FROM sessions_admin_switch_events WHERE session_key LIKE %s", [f"{KEY}%"]
    )
    assert switch_events >= SESSIONS
    audit_named = audit_entries_naming([USER, CHAT, KEY, *erased_ids])
    before = database_counts()
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-RESUME-1",
        expected_fingerprint=full.fingerprint,
        start=False,
    )
    audit_named |= audit_entries_naming([USER, CHAT, KEY, *erased_ids])  # its own (hashes)

    for point in crash_at.split("+"):  # the retry of a killed run killed too, elsewhere
        child = run_child(request.pk, crash_at=point)
        assert child.returncode == -signal.SIGKILL, (child.returncode, child.stdout, child.stderr)
        request.refresh_from_db()
        assert request.state == ErasureRequest.RUNNING  # its lease still runs
    if retry == "page":
        assert request.pk in erasure.resumable_request_ids()  # taken over at once
        assert admin_client.get(reverse("erasure_detail", args=[request.pk])).status_code == 200
    else:
        call_command(
            "erase_subject",
            user=USER,
            chat=[CHAT],
            key=[KEY],
            reference="DSR-RESUME-1",
            yes=True,
            stdout=open(os.devnull, "w"),  # noqa: SIM115
        )
        assert ErasureRequest.objects.count() == 1  # the same request finished, no new one

    request.refresh_from_db()
    assert request.state == ErasureRequest.DONE, request.error
    assert request.subject == "" and erasure.RUN not in request.receipt
    left = rows_naming(values)
    assert left == {}, left
    assert _count("SELECT COUNT(*) FROM sessions WHERE id = %s", [ids["other"]]) == 1
    # The switch-event log kept every seq: the person's events are tombstones.
    assert _count(
        "SELECT COUNT(*) FROM sessions_admin_switch_events WHERE new_session_id = ''"
    ) >= (switch_events)
    after = database_counts()
    lost = {name: before[name] - after[name] for name in before}
    erased = request.receipt["erased"]
    assert {
        "sessions": erased["sessions"],
        "messages": erased["messages"] + erased["messages_in_other_sessions"],
        "conversation_slugs": erased["conversation_slugs"],
        "stored_responses": erased["stored_responses"],
        "own_table_rows": erased["own_table_rows"],
        "trash_entries": erased["trash_entries"],
        "job_items": erased["job_items"],
    } == lost
    assert lost["sessions"] == len(full.store.session_ids) and lost["job_items"] >= 1
    assert erased["audit_entries_redacted"] == len(audit_named)
    assert request.receipt["session_ids_sha256"] == sorted(
        erasure.hash_of(request.salt, sid) for sid in set(erased_ids)
    )
    assert erasure.verify_receipt(erasure.receipt_text(request.receipt).encode()).valid
    assert check_store() == []
    # Each killed run's audit entry is completed, pointing at the run that took it over.
    runs = AuditEntry.objects.filter(action="erasure")
    assert not runs.filter(outcome=AuditEntry.PENDING).exists()
    assert runs.filter(
        outcome=AuditEntry.PARTIAL, detail__contains="took the request over"
    ).count() == len(crash_at.split("+"))


def test_a_request_a_living_worker_runs_is_not_taken_over_until_it_dies():
    subject_with_history()
    subject = Subject(user_id=USER)
    full = erasure.plan(subject)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-RESUME-2",
        expected_fingerprint=full.fingerprint,
        start=False,
    )
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        claimed = erasure.claim(request.pk)
        # As if that living process had claimed it: its pid is the owner's.
        record = {erasure.RUN: {**claimed.receipt[erasure.RUN]}}
        record[erasure.RUN]["owner"] = {**record[erasure.RUN]["owner"], "pid": worker.pid}
        ErasureRequest.objects.filter(pk=request.pk).update(receipt=record)
        assert request.pk not in erasure.resumable_request_ids()
        assert actions.run_erasure(request_id=request.pk) is None
        assert ErasureRequest.objects.get(pk=request.pk).state == ErasureRequest.RUNNING
    finally:
        worker.kill()
        worker.wait()
    assert request.pk in erasure.resumable_request_ids()
    assert actions.run_erasure(request_id=request.pk) is not None
    assert ErasureRequest.objects.get(pk=request.pk).state == ErasureRequest.DONE


def test_a_run_taken_over_by_another_worker_stops_and_leaves_the_request_to_it():
    subject_with_history()
    subject = Subject(user_id=USER)
    full = erasure.plan(subject)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-RESUME-3",
        expected_fingerprint=full.fingerprint,
        start=False,
    )
    first = erasure.claim(request.pk)
    # Its lease ran out (thought dead): another worker takes it over.
    ErasureRequest.objects.filter(pk=request.pk).update(lease_expires_at=first.started_at)
    second = erasure.claim(request.pk)
    assert second is not None and second.started_at != first.started_at
    with pytest.raises(erasure.ErasureTakenOver):
        erasure.renew(first)
    erasure.fail(first, "stopped")
    assert ErasureRequest.objects.get(pk=request.pk).state == ErasureRequest.RUNNING
    erasure.renew(second)
