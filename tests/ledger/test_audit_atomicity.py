"""No store change without its audit entry (issue 11, item 17).

Operator text that no backend can hold (a NUL: PostgreSQL refuses it in text
and jsonb; a lone surrogate: no UTF-8 database can encode it) is refused by
``ledger.actions`` before anything is written, on every action. And the audit
entry is written as ``pending`` before the store operation, then completed:
a process killed between the store commit and the completion (a real SIGKILL
in a child process, at ``audit.after_store_commit``) leaves a pending entry
naming the action and its sessions, not nothing.
"""

from __future__ import annotations

import json
import logging

import pytest
from django.db import DatabaseError, transaction

from sessions_admin import core
from sessions_admin.ledger import actions, jobs
from sessions_admin.ledger.models import AuditEntry, AuditSession, DeleteJob, TrashEntry
from tests.builders import cascade_lineage, store_forked_conversation
from tests.core.test_crash import CHILD_TIMEOUT, assert_killed, store_state
from tests.helpers import run_test_child

BAD_TEXT = {"nul": "bad\x00text", "lone surrogate": "bad\ud800text"}


def everything() -> dict:
    """The store's rows and the dashboard's trash and jobs: what an action could change."""
    return {
        **store_state(),
        "trash": list(TrashEntry.objects.order_by("pk").values_list("pk", "state")),
        "jobs": list(DeleteJob.objects.order_by("pk").values_list("pk", "state")),
    }


def _chat_with_a_turn(key: str = "tg:dm:1") -> str:
    sid = core.create_session(source="telegram", session_key=key).session_id
    core.append_messages(
        session_id=sid,
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    )
    return sid


def _ended(key: str = "tg:dm:2") -> str:
    sid = _chat_with_a_turn(key)
    core.end_session(session_id=sid, end_reason="user_exit")
    return sid


def _trash_entry() -> int:
    sid = _ended("tg:dm:trash")
    plan = core.plan_cascade_delete(session_ids=[sid])
    result = core.execute_cascade_delete(
        session_ids=[sid], expected_fingerprint=plan.fingerprint, actor="ada", reason="setup"
    )
    return result.trash_entry_ids[0]


# Each case sets up its store, then returns the action with ``bad`` in one operator text.
def merge_reason(ada, bad):
    ids = store_forked_conversation()
    plan = core.plan_merge(session_ids=ids)
    return lambda: actions.merge(
        actor=ada,
        session_ids=ids,
        target_id=None,
        expected_fingerprint=plan.fingerprint,
        reason=bad,
    )


def merge_session_id(ada, bad):
    ids = store_forked_conversation()
    return lambda: actions.merge(
        actor=ada, session_ids=[ids[0], bad], target_id=None, expected_fingerprint="x"
    )


def unmerge_reason(ada, bad):
    merged = core.merge_sessions(session_ids=store_forked_conversation())
    return lambda: actions.unmerge(actor=ada, merge_id=merged.merge_id, reason=bad)


def reset_summary(ada, bad):
    _chat_with_a_turn("tg:dm:reset")
    return lambda: actions.reset(actor=ada, session_key="tg:dm:reset", summary=bad)


def reset_reason(ada, bad):
    _chat_with_a_turn("tg:dm:reset")
    return lambda: actions.reset(actor=ada, session_key="tg:dm:reset", reason=bad)


def resume_reason(ada, bad):
    sid = _ended()
    return lambda: actions.resume(actor=ada, ref=sid, reason=bad)


def resume_ref(ada, bad):
    _ended()
    return lambda: actions.resume(actor=ada, ref=bad)


def rewrite_reason(ada, bad):
    sid = _chat_with_a_turn()
    return lambda: actions.rewrite(actor=ada, session_id=sid, action="undo", reason=bad)


def cascade_delete_reason(ada, bad):
    sid = cascade_lineage()[0]
    plan = core.plan_cascade_delete(session_ids=[sid])
    return lambda: actions.cascade_delete(
        actor=ada,
        session_ids=[sid],
        include_branches=True,
        expected_fingerprint=plan.fingerprint,
        reason=bad,
    )


def bulk_delete_reason(ada, bad):
    sid = _ended()
    return lambda: actions.start_bulk_delete(
        actor=ada, session_ids=[sid], include_live=False, reason=bad
    )


def bulk_delete_description(ada, bad):
    sid = _ended()
    return lambda: actions.start_bulk_delete(
        actor=ada, session_ids=[sid], include_live=False, reason="retention", description=bad
    )


def restore_reason(ada, bad):
    entry_id = _trash_entry()
    return lambda: actions.restore(actor=ada, entry_id=entry_id, reason=bad)


def purge_reason(ada, bad):
    _trash_entry()
    return lambda: actions.purge(actor=ada, older_than_days=None, reason=bad)


def cancel_bulk_delete_reason(ada, bad):
    job = jobs.create_bulk_delete_job(
        session_ids=[_ended()], include_live=False, actor="ada", reason="r"
    )
    return lambda: actions.cancel_bulk_delete(actor=ada, job_id=job, reason=bad)


CASES = [
    merge_reason,
    merge_session_id,
    unmerge_reason,
    reset_summary,
    reset_reason,
    resume_reason,
    resume_ref,
    rewrite_reason,
    cascade_delete_reason,
    bulk_delete_reason,
    bulk_delete_description,
    restore_reason,
    purge_reason,
    cancel_bulk_delete_reason,
]


@pytest.mark.parametrize("bad", BAD_TEXT.values(), ids=BAD_TEXT.keys())
@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_text_no_backend_can_hold_is_refused_before_anything_is_written(ada, case, bad):
    act = case(ada, bad)
    before = everything()

    with pytest.raises(core.InvalidInput) as refused:
        act()

    assert "NUL" in str(refused.value) or "surrogate" in str(refused.value)
    assert everything() == before
    # Nothing was attempted, so nothing is audited; above all no entry claims it happened.
    assert not AuditEntry.objects.exists()


def test_operator_text_is_stripped_and_bounded_once_for_every_edge(ada):
    sid = _chat_with_a_turn()
    actions.rewrite(actor=ada, session_id=sid, action="undo", reason="  user asked  ")
    assert AuditEntry.objects.get().reason == "user asked"
    with pytest.raises(core.InvalidInput, match="keep it under 2,000"):
        actions.rewrite(actor=ada, session_id=sid, action="redo", reason="x" * 2001)
    with pytest.raises(core.InvalidInput, match="Give a reason"):
        actions.purge(actor=ada, older_than_days=None, reason=" \n ")
    with pytest.raises(core.InvalidInput, match="must be text"):
        actions.rewrite(actor=ada, session_id=sid, action="redo", reason=b"bytes")
    assert list(AuditEntry.objects.values_list("action", flat=True)) == ["undo"]
    assert core.lineage.session_row(sid)["message_count"] == 0  # the redo never ran


def test_a_completed_entry_records_when_and_every_session_it_touched(ada):
    _chat_with_a_turn("tg:dm:reset")
    old = core.live_session_for_key("tg:dm:reset")
    result = actions.reset(actor=ada, session_key="tg:dm:reset", reason="stuck")
    entry = AuditEntry.objects.get()
    assert entry.outcome == AuditEntry.OK and entry.completed_at is not None
    assert entry.after == {"ended": old, "new": result.new_session_id}
    assert set(entry.session_ids) == {old, result.new_session_id}
    assert set(entry.sessions.values_list("session_id", flat=True)) == {old, result.new_session_id}


def test_an_action_inside_a_transaction_on_the_audit_database_is_refused(ada):
    """Its pending entry would only commit with the caller's transaction: no trace after a crash."""
    sid = _chat_with_a_turn()
    before = everything()
    with pytest.raises(RuntimeError, match="must not run inside a transaction"):
        with transaction.atomic(using="default"):
            actions.rewrite(actor=ada, session_id=sid, action="undo")
    assert everything() == before
    assert not AuditEntry.objects.exists()


def test_a_completion_that_fails_is_logged_and_raised_and_the_entry_stays_pending(
    ada, monkeypatch, caplog
):
    sid = _chat_with_a_turn()
    complete = actions._complete

    def refused_by_the_audit_database(entry, *, outcome, **kwargs):
        if outcome == AuditEntry.OK:
            raise DatabaseError("could not extend file: No space left on device")
        return complete(entry, outcome=outcome, **kwargs)

    monkeypatch.setattr(actions.audit, "_complete", refused_by_the_audit_database)
    with caplog.at_level(logging.ERROR, logger="sessions_admin.ledger.actions"):
        with pytest.raises(actions.AuditIncomplete) as incomplete:
            actions.rewrite(actor=ada, session_id=sid, action="undo", reason="asked")

    assert not isinstance(incomplete.value, core.StoreError)  # never "nothing changed"
    assert core.lineage.session_row(sid)["message_count"] == 0  # the undo happened
    entry = AuditEntry.objects.get()
    assert (entry.outcome, entry.action, entry.reason) == (AuditEntry.PENDING, "undo", "asked")
    assert entry.completed_at is None and entry.session_ids == [sid]
    assert f"#{entry.pk}" in str(incomplete.value)
    assert any(
        r.levelno == logging.ERROR and f"#{entry.pk}" in r.getMessage() for r in caplog.records
    )


def test_a_refusal_is_completed_as_failed(ada):
    sid = core.create_session(source="cli").session_id
    with pytest.raises(core.NothingToUndo):
        actions.rewrite(actor=ada, session_id=sid, action="undo", reason="try")
    entry = AuditEntry.objects.get()
    assert entry.outcome == AuditEntry.FAILED and entry.completed_at is not None
    assert "no turn to undo" in entry.detail


def test_record_keeps_working_after_the_fact_and_never_fails_on_its_text(ada):
    """import_sessions records after its store change: a NUL there is escaped, not fatal."""
    entry = actions.record(
        actor="manage.py import_sessions",
        action="import_sessions",
        session_ids=["s1"],
        before={"file": "a\x00b.jsonl"},
        reason="from argv \udcff",
    )
    entry.refresh_from_db()
    assert entry.outcome == AuditEntry.OK and entry.completed_at is not None
    assert entry.before == {"file": "a\\x00b.jsonl"}
    assert entry.reason == "from argv \\udcff"
    assert list(AuditSession.objects.values_list("session_id", flat=True)) == ["s1"]


# --- a real kill -9 between the store commit and the audit completion --------------------------


def run_action_in_child(action: str, arguments: dict, *, crash_at: str | None):
    settings = {"SESSIONS_ADMIN_CRASH_AT": crash_at} if crash_at else {}
    return run_test_child(
        "audit_child", action, json.dumps(arguments), settings=settings, timeout=CHILD_TIMEOUT
    )


def _merge_arguments() -> tuple[list[str], dict]:
    ids = store_forked_conversation()
    plan = core.plan_merge(session_ids=ids)
    return ids, {
        "actor": "ada",
        "session_ids": ids,
        "target_id": None,
        "expected_fingerprint": plan.fingerprint,
        "reason": "one slug, three sessions",
    }


def test_a_merge_killed_after_its_commit_leaves_a_pending_entry_naming_it(db):
    ids, arguments = _merge_arguments()

    child = run_action_in_child("merge", arguments, crash_at="audit.after_store_commit")

    assert_killed(child)
    merges = store_state()["merges"]
    assert len(merges) == 1  # the store change is committed...
    entry = AuditEntry.objects.get()  # ...and the audit log says so, outcome unknown
    assert (entry.action, entry.outcome, entry.actor_name) == ("merge", AuditEntry.PENDING, "ada")
    assert entry.session_ids == ids
    assert set(entry.sessions.values_list("session_id", flat=True)) == set(ids)
    assert entry.reason == "one slug, three sessions"
    assert set(entry.before) == {*ids, "process"}  # the counts before, per session
    assert entry.completed_at is None and entry.after == {}
    # Its process is known dead: the next settle completes it from the store at once.
    actions.settle_deletes_and_restores()
    entry.refresh_from_db()
    assert entry.outcome == AuditEntry.OK and entry.after["merge_id"] == merges[0][0], entry.detail


def test_a_cascade_delete_killed_after_its_commit_leaves_a_pending_entry_naming_it(db):
    root = cascade_lineage()[0]
    plan = core.plan_cascade_delete(session_ids=[root])
    arguments = {
        "actor": "ada",
        "session_ids": [root],
        "include_branches": False,
        "expected_fingerprint": plan.fingerprint,
        "reason": "GDPR request 7",
    }

    child = run_action_in_child("cascade_delete", arguments, crash_at="audit.after_store_commit")

    assert_killed(child)
    assert core.lineage.session_row(root) is None  # deleted, into the trash
    assert TrashEntry.objects.filter(state=TrashEntry.COMPLETE).exists()
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.outcome, entry.reason) == (
        "cascade_delete",
        AuditEntry.PENDING,
        "GDPR request 7",
    )
    assert entry.session_ids == [root]


def test_the_same_merge_in_a_child_that_is_not_killed_is_completed(db):
    """The harness itself: without the crash point the entry ends ``ok``."""
    ids, arguments = _merge_arguments()

    child = run_action_in_child("merge", arguments, crash_at=None)

    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout) == [["merge", "ok"]]
    entry = AuditEntry.objects.get()
    assert entry.after["merge_id"] == store_state()["merges"][0][0]
    assert entry.completed_at is not None
