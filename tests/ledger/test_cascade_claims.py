"""Two confirmations of one cascade: one runs the whole plan, the other is refused (issue 26).

A cascade runs in many short store transactions, so two operators who confirmed the same
preview both passed the fingerprint check before either deleted anything, and then took turns:
each deleted part of the plan, both audited ok, one conversation split over two trash
operations (the last attack's break). A cascade now claims its plan's sessions in the store
before it runs (``core.deletion.claims``). Each test runs the cascades in real OS processes
(``tests/core/crash_child.py``, as the cascade page runs it: with its audit entry), held at the
moment the race needs by a pause point, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections

from sessions_admin import core
from sessions_admin.core import db, processes
from sessions_admin.core.deletion import claims
from sessions_admin.core.erasure import Subject
from sessions_admin.demo.consistency import check_store, check_trash
from sessions_admin.ledger import actions
from sessions_admin.ledger import erasure as erasure_ledger
from sessions_admin.ledger.models import AuditAction, AuditEntry, TrashEntry
from tests.builders import linked_conversation
from tests.core.test_crash import store_state
from tests.core.test_delete_in_parts import run_crash_child
from tests.helpers import child_env

ROOT = Path(settings.BASE_DIR)


def _confirmation(plan: core.DeletePlan, start: str, reason: str) -> dict:
    return {
        "actor": "ada",
        "session_ids": [start],
        "include_branches": True,
        "expected_fingerprint": plan.fingerprint,
        "reason": reason,
    }


def _held_cascade(arguments: dict, folder: Path) -> subprocess.Popen:
    """An audited cascade in its own process, stopped after its fingerprint check."""
    folder.mkdir()
    connections.close_all()
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.core.crash_child",
            "audited_cascade_delete",
            json.dumps(arguments),
        ],
        cwd=ROOT,
        env={
            **child_env(),
            "SESSIONS_ADMIN_PAUSE_AT": "cascade.checked",
            "SESSIONS_ADMIN_PAUSE_DIR": str(folder),
            # Two sessions a batch: the plan takes four batches, room for the two to interleave.
            "CRASH_CHILD_BATCH_SESSIONS": "2",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_reached(child: subprocess.Popen, folder: Path) -> None:
    deadline = time.monotonic() + 60
    while not (folder / "cascade.checked.reached").exists():
        if child.poll() is not None:
            pytest.fail(f"the cascade ended before its check: {child.stderr.read()}")
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_two_confirmations_of_one_preview_at_once_delete_the_plan_once_and_whole(tmp_path):
    ids = linked_conversation()
    before = store_state()
    plan = core.plan_cascade_delete(session_ids=[ids["tip"]], include_branches=True)
    folders = [tmp_path / "ada", tmp_path / "bob"]
    children = [
        _held_cascade(_confirmation(plan, ids["tip"], reason), folder)
        for reason, folder in zip(["first", "second"], folders, strict=True)
    ]
    for child, folder in zip(children, folders, strict=True):
        _wait_reached(child, folder)

    # Both passed the fingerprint check; both go on at the same moment.
    for folder in folders:
        (folder / "cascade.checked.release").touch()
    outcomes = [(child.wait(60), *child.communicate()) for child in children]

    ran = [out for code, out, _err in outcomes if code == 0]
    refused = [err for code, _out, err in outcomes if code != 0]
    assert len(ran) == 1 and len(refused) == 1, outcomes
    # Refused by the first one's claim, or (the first one finished before the second got
    # there, a loaded machine) by its plan: the sessions are gone, nothing more deleted.
    assert any(
        words in refused[0] for words in ("DeleteUnderWay", "PlanChanged", "No session matches")
    ), refused[0]
    result = json.loads(ran[0])
    assert result["deleted_sessions"] == len(plan.session_ids)
    assert result["deleted_messages"] == plan.message_count

    # One trash operation holds the whole plan; the audit says one ran and one did nothing.
    assert TrashEntry.objects.values("operation").distinct().count() == 1
    entries = AuditEntry.objects.filter(action=AuditAction.CASCADE_DELETE).order_by("pk")
    assert sorted(e.outcome for e in entries) == sorted([AuditEntry.OK, AuditEntry.FAILED])
    failed = entries.get(outcome=AuditEntry.FAILED)
    assert not (failed.after or {}).get("trash_entries")
    assert db.fetchone("SELECT COUNT(*) FROM sessions_admin_delete_claims")[0] == 0

    actions.restore(actor="ada", entry_id=TrashEntry.objects.order_by("pk").first().pk)
    assert store_state() == before
    assert check_store() == [] and check_trash() == []


def test_a_killed_cascades_claim_is_taken_over_at_once():
    ids = linked_conversation()
    before = store_state()
    plan = core.plan_cascade_delete(session_ids=[ids["tip"]], include_branches=True)
    child = run_crash_child(
        "cascade_delete",
        {**_confirmation(plan, ids["tip"], "killed"), "actor": "ada"},
        crash_at="cascade.between_batches@1",
        env={"CRASH_CHILD_BATCH_SESSIONS": "2"},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert db.fetchone("SELECT COUNT(*) FROM sessions_admin_delete_claims")[0] > 0

    # Its process is dead: the operator's next confirmation runs without waiting for the lease.
    again = core.plan_cascade_delete(session_ids=[ids["tip"]], include_branches=True)
    finished = actions.cascade_delete(**_confirmation(again, ids["tip"], "finish"))
    assert finished.deleted_sessions == len(again.session_ids)
    assert db.fetchone("SELECT COUNT(*) FROM sessions_admin_delete_claims")[0] == 0
    for first in TrashEntry.objects.values_list("operation", flat=True).distinct():
        entry = TrashEntry.objects.filter(operation=first, state=TrashEntry.COMPLETE).first()
        if entry is not None:
            actions.restore(actor="ada", entry_id=entry.pk)
    assert store_state() == before


def _claim_of_another_machine(session_id: str, *, renewed_ago: float) -> None:
    now = time.time()
    owner = json.dumps({"host": "another-host", "boot": "x", "pid": 12345})
    db.execute(
        "INSERT INTO sessions_admin_delete_claims "
        "(session_id, operation, actor, owner, claimed_at, renewed_at) "
        "VALUES (%s, 'op-elsewhere', 'bob', %s, %s, %s)",
        [session_id, owner, now - renewed_ago - 5, now - renewed_ago],
    )


def test_a_running_cascade_elsewhere_refuses_a_second_and_changes_nothing():
    ids = linked_conversation()
    before = store_state()
    plan = core.plan_cascade_delete(session_ids=[ids["tip"]], include_branches=True)
    _claim_of_another_machine(ids["branch"], renewed_ago=1)

    with pytest.raises(
        claims.DeleteUnderWay, match="already being deleted by another delete \\(bob"
    ):
        actions.cascade_delete(**_confirmation(plan, ids["tip"], "second"))

    assert store_state() == before
    assert not TrashEntry.objects.exists()
    entry = AuditEntry.objects.get(action=AuditAction.CASCADE_DELETE)
    assert entry.outcome == AuditEntry.FAILED
    # Its claim is untouched; this one's claim is gone.
    assert db.fetchall("SELECT session_id, operation FROM sessions_admin_delete_claims") == [
        (ids["branch"], "op-elsewhere")
    ]


def test_a_claim_left_unrenewed_past_its_lease_is_taken_over():
    ids = linked_conversation()
    plan = core.plan_cascade_delete(session_ids=[ids["tip"]], include_branches=True)
    _claim_of_another_machine(ids["branch"], renewed_ago=claims.CLAIM_LEASE_SECONDS + 1)

    result = actions.cascade_delete(**_confirmation(plan, ids["tip"], "after the lease"))

    assert result.deleted_sessions == len(plan.session_ids)
    assert db.fetchone("SELECT COUNT(*) FROM sessions_admin_delete_claims")[0] == 0


def test_an_erasure_takes_a_killed_cascades_claims_on_the_subjects_sessions():
    first = core.create_session(source="telegram", user_id="u-claimed").session_id
    core.append_message(session_id=first, role="user", content="mine")
    tip = core.rotate_for_compression(session_id=first, summary="s").new_session_id
    last = core.rotate_for_compression(session_id=tip, summary="s").new_session_id
    plan = core.plan_cascade_delete(session_ids=[last])
    child = run_crash_child(
        "cascade_delete",
        {
            "session_ids": [last],
            "expected_fingerprint": plan.fingerprint,
            "actor": "ada",
            "reason": "killed",
        },
        crash_at="cascade.between_batches@1",
        env={"CRASH_CHILD_BATCH_SESSIONS": "1"},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    claimed = [r[0] for r in db.fetchall("SELECT session_id FROM sessions_admin_delete_claims")]
    assert sorted(claimed) == sorted([first, tip, last])

    subject = Subject(user_id="u-claimed")
    preview = erasure_ledger.plan(subject)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-CLAIM",
        expected_fingerprint=preview.fingerprint,
        start=False,
    )
    actions.run_erasure(request_id=request.pk)

    assert db.fetchall("SELECT session_id FROM sessions_admin_delete_claims") == []
    assert db.fetchall("SELECT id FROM sessions WHERE user_id = 'u-claimed'") == []


def test_a_cascade_a_full_disk_stopped_in_a_live_worker_does_not_block_the_retry():
    """The cascade's own release failed (the store's disk was full) and its worker lives on:
    its audit entry says it ended, so the operator's retry runs at once, not after the lease."""
    ids = linked_conversation()
    plan = core.plan_cascade_delete(session_ids=[ids["tip"]], include_branches=True)
    now = time.time()
    worker = json.dumps({**processes.this_process(), "pid": os.getppid()})  # alive, not us
    db.execute(
        "INSERT INTO sessions_admin_delete_claims "
        "(session_id, operation, actor, owner, claimed_at, renewed_at) "
        "VALUES (%s, 'op-stopped', 'ada', %s, %s, %s)",
        [ids["branch"], worker, now - 5, now - 5],
    )
    AuditEntry.objects.create(
        actor_name="ada",
        action=AuditAction.CASCADE_DELETE,
        session_ids=[ids["tip"]],
        before={"trash_operation": "op-stopped"},
        after={"deleted_sessions": 0},
        outcome=AuditEntry.PARTIAL,
    )

    result = actions.cascade_delete(**_confirmation(plan, ids["tip"], "again"))

    assert result.deleted_sessions == len(plan.session_ids)
    assert db.fetchone("SELECT COUNT(*) FROM sessions_admin_delete_claims")[0] == 0
