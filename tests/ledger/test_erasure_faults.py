"""An erasure that meets a database it cannot write, and the deletes whose trash it takes
(issue 26, "Also" and the erasure's side of item 2).

The faults are real. SQLite: the erasure runs as an operator runs it (``manage.py
erase_subject`` in a child process, tests/core/crash_child.py) whose file-size limit
(RLIMIT_FSIZE, SIGXFSZ ignored) stops the store, or the dashboard's database, from growing
at a chosen point (``faults.run_at``). PostgreSQL: a trigger makes a write fail with
``disk_full`` (SQLSTATE 53100), as PostgreSQL does when it cannot extend a file.

After it: the command exits 1 with a message (no traceback) naming the database and what
was erased before; the request keeps those words as its error and its audit entry says
what was erased (``partial``); nothing else changed; running the command again finishes
the erasure, with a receipt counting everything its runs erased.

A cascade delete whose audit entry was left pending (its process killed after the store
committed) and whose trash an erasure then took is completed from what that trash held,
never as "failed, nothing was deleted".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.db import connections

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.erasure import Subject
from sessions_admin.demo.consistency import check_store
from sessions_admin.ledger import actions, erasure
from sessions_admin.ledger.models import AuditEntry, ErasureRequest, TrashEntry, TrashSession
from tests.core.test_crash import CHILD_TIMEOUT, REPO
from tests.helpers import child_env, run_test_child
from tests.ledger.test_erasure_resume import (
    BATCH_MESSAGES,
    BATCH_SESSIONS,
    CHAT,
    KEY,
    SECRET,
    SLUG,
    USER,
    audit_entries_naming,
    database_counts,
    rows_naming,
    subject_with_history,
)

REFERENCE = "DSR-FULL-1"
SUBJECT = Subject(user_id=USER, chat_ids=(CHAT,), session_keys=(KEY,))
ARGV = ["erase_subject", "--user", USER, "--chat", CHAT, "--key", KEY]


def erase_subject_in_child(*, full: str | None = None, database: str = "store"):
    """``manage.py erase_subject --yes`` in a child process (small batches and parts); with
    ``full`` ("point@N"), ``database`` cannot grow from that point on (SQLite)."""
    settings = {
        "CRASH_CHILD_BATCH_SESSIONS": str(BATCH_SESSIONS),
        "CRASH_CHILD_BATCH_MESSAGES": str(BATCH_MESSAGES),
    }
    if full:
        settings["CRASH_CHILD_FULL_AT"] = full
        settings["CRASH_CHILD_FULL_DATABASE"] = database
    return run_test_child(
        "crash_child",
        "command",
        json.dumps({"argv": [*ARGV, "--reference", REFERENCE, "--yes"]}),
        settings=settings,
        timeout=CHILD_TIMEOUT * 2,
    )


def disk_full_trigger(
    table: str, condition: str, *, alias: str = "store", event: str = "DELETE"
) -> None:
    """PostgreSQL: a write (``event``) of a row of ``table`` matching ``condition`` fails as a
    full disk does."""
    db.execute(
        "CREATE OR REPLACE FUNCTION test_disk_full() RETURNS trigger AS $$ BEGIN "
        f"IF {condition} THEN "
        "RAISE EXCEPTION 'could not extend file: No space left on device' "
        "USING ERRCODE = 'disk_full'; END IF; "
        "IF TG_OP = 'DELETE' THEN RETURN OLD; END IF; RETURN NEW; END $$ LANGUAGE plpgsql",
        alias=alias,
    )
    db.execute(
        f"CREATE TRIGGER test_disk_full BEFORE {event} ON {table} "
        "FOR EACH ROW EXECUTE FUNCTION test_disk_full()",
        alias=alias,
    )


def drop_disk_full_triggers() -> None:
    for alias in ("store", "default"):
        if connections[alias].vendor == "postgresql":
            for table in ("messages", "ledger_trashentry", "ledger_erasurerequest"):
                db.execute(f"DROP TRIGGER IF EXISTS test_disk_full ON {table}", alias=alias)


@pytest.fixture
def history():
    ids = subject_with_history()
    yield ids
    drop_disk_full_triggers()


def present(session_ids) -> int:
    ids = list(session_ids)
    return int(
        db.fetchone(f"SELECT COUNT(*) FROM sessions WHERE id IN ({db.placeholders(ids)})", ids)[0]
    )


def finish_and_check_receipt(before: dict, values, erased_ids, audit_named: set[int]):
    """Run the command again (the disk freed): the same request finishes, no trace is left,
    and its receipt counts everything every run erased."""
    call_command(
        "erase_subject",
        user=USER,
        chat=[CHAT],
        key=[KEY],
        reference=REFERENCE,
        yes=True,
        stdout=open(os.devnull, "w"),  # noqa: SIM115
        stderr=open(os.devnull, "w"),  # noqa: SIM115
    )
    request = ErasureRequest.objects.get()
    assert request.state == ErasureRequest.DONE, request.error
    assert request.subject == ""
    assert rows_naming(values) == {}
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
    assert erased["audit_entries_redacted"] == len(audit_named)
    assert request.receipt["session_ids_sha256"] == sorted(
        erasure.hash_of(request.salt, sid) for sid in set(erased_ids)
    )
    assert erasure.verify_receipt(erasure.receipt_text(request.receipt).encode()).valid
    assert check_store() == []


def test_an_erasure_stopped_by_a_full_store_says_what_it_erased_and_a_rerun_finishes(history):
    full = erasure.plan(SUBJECT)
    planned = list(full.store.session_ids)
    erased_ids = [*planned, *full.trash.session_ids]
    values = [USER, CHAT, KEY, SECRET, SLUG, "resp-resume-1", *erased_ids]
    audit_named = audit_entries_naming([USER, CHAT, KEY, *erased_ids])
    trash_before = sorted(TrashEntry.objects.values_list("pk", "session_count", "message_count"))
    before = database_counts()
    if db.vendor() == "postgresql":
        disk_full_trigger("messages", f"OLD.session_id = '{planned[-1]}'")
        child = erase_subject_in_child()
    else:  # the store cannot grow after the erasure's second delete batch
        child = erase_subject_in_child(full="erasure.between_batches@2", database="store")

    # The operator reads which database and what was erased, not a traceback.
    assert child.returncode == 1, (child.returncode, child.stdout, child.stderr)
    assert "Traceback" not in child.stderr, child.stderr
    words = child.stderr.strip().splitlines()[-1]
    gone = len(planned) - present(planned)
    assert 0 < gone < len(planned)
    assert words.startswith("CommandError: The store"), words
    assert f"{gone} of {len(planned)} sessions" in words, words
    assert "run the erasure again" in words
    # The request keeps those words (and the subject, to run again); its audit entry says
    # what was erased, not that it rolled back.
    request = ErasureRequest.objects.get()
    assert request.state == ErasureRequest.FAILED
    assert request.error == words.removeprefix("CommandError: ")
    assert request.subject != ""
    entry = AuditEntry.objects.get(action="erasure")
    assert entry.outcome == AuditEntry.PARTIAL, (entry.outcome, entry.detail)
    assert entry.after["erased_so_far"]["sessions"] == gone
    assert entry.after["planned"]["sessions"] == len(planned)
    assert entry.detail == request.error
    # Nothing else changed: the trash and the earlier audit entries are as they were.
    assert (
        sorted(TrashEntry.objects.values_list("pk", "session_count", "message_count"))
        == trash_before
    )
    assert audit_entries_naming([USER, CHAT, KEY, *erased_ids]) >= audit_named
    assert check_store() == []
    drop_disk_full_triggers()

    finish_and_check_receipt(before, values, erased_ids, audit_named)


@pytest.mark.parametrize("at", ["erasure.between_batches@2", "erasure.after_store"])
def test_an_erasure_stopped_by_a_full_dashboard_database_names_it_and_a_rerun_finishes(history, at):
    pg_dashboard = connections["default"].vendor == "postgresql"
    full = erasure.plan(SUBJECT)
    planned = list(full.store.session_ids)
    erased_ids = [*planned, *full.trash.session_ids]
    values = [USER, CHAT, KEY, SECRET, SLUG, "resp-resume-1", *erased_ids]
    audit_named = audit_entries_naming([USER, CHAT, KEY, *erased_ids])
    trash_before = sorted(TrashEntry.objects.values_list("pk", "session_count", "message_count"))
    before = database_counts()
    if pg_dashboard and at == "erasure.after_store":  # its side cannot delete the trash
        disk_full_trigger("ledger_trashentry", "TRUE", alias="default")
        child = erase_subject_in_child()
    elif pg_dashboard:  # the lease renewed after the first delete batch cannot be written
        disk_full_trigger(
            "ledger_erasurerequest",
            "OLD.state = 'running' AND NEW.state = 'running' "
            "AND NEW.lease_expires_at > OLD.lease_expires_at",
            alias="default",
            event="UPDATE",
        )
        child = erase_subject_in_child()
    else:
        child = erase_subject_in_child(full=at, database="default")

    assert child.returncode == 1, (child.returncode, child.stdout, child.stderr)
    words = child.stderr.strip().splitlines()[-1]
    assert words.startswith("CommandError: The dashboard database could not be written"), words
    gone = len(planned) - present(planned)
    if at == "erasure.after_store":
        assert gone == len(planned)
        assert f"the store's side is erased ({gone} sessions" in words, words
    else:
        assert 0 < gone < len(planned)
        assert f"{gone} of {len(planned)} sessions" in words, words
    # The dashboard's side rolled back: the trash and the audit log are as they were.
    assert (
        sorted(TrashEntry.objects.values_list("pk", "session_count", "message_count"))
        == trash_before
    )
    assert audit_entries_naming([USER, CHAT, KEY, *erased_ids]) >= audit_named
    request = ErasureRequest.objects.get()
    if pg_dashboard:  # only one table refused: the request and its audit entry say why
        assert request.state == ErasureRequest.FAILED
        assert request.error == words.removeprefix("CommandError: ")
        entry = AuditEntry.objects.get(action="erasure")
        assert (entry.outcome, entry.detail) == (AuditEntry.PARTIAL, request.error)
    else:  # nothing could be recorded: its process is gone, the retry takes it over at once
        assert request.state == ErasureRequest.RUNNING
        assert request.pk in erasure.resumable_request_ids()
    assert check_store() == []
    drop_disk_full_triggers()

    finish_and_check_receipt(before, values, erased_ids, audit_named)


def test_an_erasure_the_dashboard_database_cannot_record_changes_nothing_and_says_so(history):
    if connections["default"].vendor != "sqlite":
        pytest.skip("a file-size limit needs SQLite files")
    full = erasure.plan(SUBJECT)
    before = database_counts()
    audit_before = AuditEntry.objects.count()

    child = erase_subject_in_child(full="start", database="default")

    assert child.returncode == 1, (child.returncode, child.stdout, child.stderr)
    assert "Traceback" not in child.stderr, child.stderr
    words = child.stderr.strip().splitlines()[-1]
    assert words.startswith("CommandError: The dashboard database could not be written"), words
    assert "nothing was changed" in words
    assert database_counts() == before
    assert present(full.store.session_ids) == len(full.store.session_ids)
    assert not ErasureRequest.objects.exists()
    assert AuditEntry.objects.count() == audit_before


# --- a pending cascade whose trash an erasure took ---------------------------------------

OWNER = "u-pending-5521"


def owners_conversation() -> list[str]:
    """The person's chat compressed once, with a delegate of its root: three sessions."""
    root = core.create_session(
        source="telegram", user_id=OWNER, chat_id="chat-pending-7", session_key="tg:pending-7"
    ).session_id
    core.append_messages(
        session_id=root,
        messages=[{"role": "user", "content": f"note {n} of {OWNER}"} for n in range(4)],
    )
    delegate = core.create_session(
        source="tool", parent_session_id=root, model_config={"_delegate_from": root}
    ).session_id
    core.append_message(session_id=delegate, role="assistant", content="sub-agent work")
    tip = core.rotate_for_compression(session_id=root, summary="summary").new_session_id
    core.append_message(session_id=tip, role="user", content="and one more")
    core.end_session(session_id=tip, end_reason="user_exit")
    return [root, delegate, tip]


def cascade_killed_at(root: str, crash_at: str):
    """The cascade page's action in a child killed at ``crash_at``: its entry stays pending."""
    plan = core.plan_cascade_delete(session_ids=[root])
    env = child_env()
    env["SESSIONS_ADMIN_CRASH_AT"] = crash_at
    env["CRASH_CHILD_BATCH_SESSIONS"] = "1"
    connections.close_all()
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.core.crash_child",
            "audited_cascade_delete",
            json.dumps(
                {
                    "actor": "ada",
                    "session_ids": [root],
                    "include_branches": False,
                    "expected_fingerprint": plan.fingerprint,
                    "reason": f"asked by {OWNER}",
                }
            ),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
    )
    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stdout, child.stderr)
    return plan


@pytest.mark.parametrize(
    ("crash_at", "outcome"),
    [
        ("audit.after_store_commit", AuditEntry.OK),  # every batch committed
        ("cascade.between_batches@1", AuditEntry.PARTIAL),  # the first batch only
        ("delete.after_commit@2", AuditEntry.PARTIAL),  # the second's entry left pending
    ],
)
def test_a_pending_cascade_whose_trash_an_erasure_took_is_not_completed_as_failed(
    crash_at, outcome
):
    ids = owners_conversation()
    plan = cascade_killed_at(ids[0], crash_at)
    entry = AuditEntry.objects.get(action="cascade_delete")
    assert entry.outcome == AuditEntry.PENDING
    operation = entry.before["trash_operation"]
    # What the cascade committed: its sessions are gone from the store, each in its trash.
    deleted = [sid for sid in plan.session_ids if not present([sid])]
    assert deleted and sorted(
        TrashSession.objects.filter(entry__operation=operation).values_list("session_id", flat=True)
    ) == sorted(deleted)
    deleted_messages = plan.message_count - int(
        db.fetchone(
            f"SELECT COUNT(*) FROM messages WHERE session_id IN "
            f"({db.placeholders(plan.session_ids)})",
            list(plan.session_ids),
        )[0]
    )
    assert (len(deleted) == len(plan.session_ids)) == (outcome == AuditEntry.OK)

    subject = Subject(user_id=OWNER)
    full = erasure.plan(subject)
    assert operation in full.trash.purge
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-PENDING-1",
        expected_fingerprint=full.fingerprint,
        start=False,
    )
    actions.run_erasure(request_id=request.pk)
    assert not TrashEntry.objects.filter(operation=operation).exists()

    assert actions.complete_stale_deletes(older_than_seconds=0) == [entry.pk]
    entry.refresh_from_db()
    assert entry.outcome == outcome, entry.detail
    assert entry.after["deleted_sessions"] == len(deleted)
    assert entry.after["deleted_messages"] == deleted_messages
    assert entry.after["trash_operation"] == operation
    assert f"erasure request #{request.pk}" in entry.detail
    # The erasure left no trace of the person, in this entry or anywhere.
    assert rows_naming([OWNER, "chat-pending-7", "tg:pending-7", *ids]) == {}
