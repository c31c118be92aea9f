"""What a killed process or a refused dashboard write leaves in the trash is settled from the
store (issue 26, the attack's breaks 1-4).

The store and the dashboard's database commit apart: a restore commits the store, then marks
its trash entries restored; a delete batch writes its entry pending, then deletes, then marks
it complete. A process killed between the two, or a dashboard whose disk is full at the
second, used to leave entries listed as restorable while their rows were back in the store
(a retry refused, a later delete trashing the sessions twice), a batch that never committed
listed as pending for good, and a restore audit entry pending forever. A restore also came
back with half a session when a delete killed between a session's parts was run again.

Each fault is real (SIGKILL at a crash point, a file-size limit); afterwards the trash is
settled (``actions.settle_deletes_and_restores``, run by the trash page, every restore, purge
and delete, ``check_consistency`` and the schedule) and then: every message is in the store or
the trash exactly once, restoring gives the store back row for row, the audit says what
committed, and ``check_store``/``check_trash`` are clean.
"""

from __future__ import annotations

import signal

import pytest
from django.db import OperationalError
from django.urls import reverse
from django.utils import timezone

from sessions_admin import core
from sessions_admin.core import being_deleted, db, deletion, faults, holds, processes
from sessions_admin.core.errors import InvalidInput
from sessions_admin.demo.consistency import check_store, check_trash
from sessions_admin.ledger import actions, jobs, trash, worker
from sessions_admin.ledger.models import AuditEntry, DeleteJob, TrashEntry, TrashSession
from tests.builders import linked_conversation, old_sessions, store_forked_conversation
from tests.core.test_crash import store_state
from tests.core.test_delete_in_parts import (
    big_session,
    cascade_killed_after_first_part,
    run_crash_child,
    session_rows,
)
from tests.ledger.test_disk_full import run_full_child


def _cascade(start: str, reason: str = "cleanup") -> core.DeleteResult:
    plan = core.plan_cascade_delete(session_ids=[start], include_branches=True)
    return actions.cascade_delete(
        actor="ada",
        session_ids=[start],
        include_branches=True,
        expected_fingerprint=plan.fingerprint,
        reason=reason,
    )


def _trashed_once(session_ids) -> None:
    """Each session is held by exactly one trash entry not restored."""
    held = list(
        TrashSession.objects.filter(session_id__in=list(session_ids), entry__session_count__gt=0)
        .exclude(entry__state=TrashEntry.RESTORED)
        .values_list("session_id", flat=True)
    )
    assert sorted(held) == sorted(session_ids)


@pytest.fixture
def refused_marks():
    """The dashboard's database refuses the write that marks a restore's entries, right after
    the store committed (a full disk, a PostgreSQL restart)."""

    def refuse() -> None:
        raise OperationalError("database or disk is full")

    faults.run_at("restore.after_commit", refuse)
    yield
    faults._actions.clear()
    faults._hits.clear()


@pytest.mark.parametrize("crash_at", ["restore.after_commit", "audit.after_store_commit"])
def test_a_restore_killed_after_its_store_commit_is_settled_restored_and_audited(crash_at):
    ids = linked_conversation()
    before = store_state()
    deleted = _cascade(ids["tip"])
    first = deleted.trash_entry_ids[0]

    child = run_crash_child(
        "audited_restore", {"actor": "ada", "entry_id": first}, crash_at=crash_at
    )

    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stderr)
    assert store_state() == before  # the store committed: every row is back
    audit = AuditEntry.objects.get(action="restore")
    assert audit.outcome == AuditEntry.PENDING
    if crash_at == "restore.after_commit":  # the state the page used to offer a restore of
        assert set(TrashEntry.objects.values_list("state", flat=True)) == {TrashEntry.COMPLETE}
        assert check_trash()  # rows in the store and in the trash at once: said

    actions.settle_deletes_and_restores()

    assert set(TrashEntry.objects.values_list("state", flat=True)) == {TrashEntry.RESTORED}
    audit.refresh_from_db()
    # Its process is dead: completed at once, from what the store has back.
    assert audit.outcome == AuditEntry.OK
    assert audit.after["restored_sessions"] == deleted.deleted_sessions
    with pytest.raises(InvalidInput, match="already restored"):
        actions.restore(actor="ada", entry_id=first)
    assert check_store() == [] and check_trash() == []
    # Deleted again, each session is in the trash once.
    again = _cascade(ids["tip"], "again")
    _trashed_once([row[0] for row in before["sessions"] if row[0] in again_ids(again)])


def again_ids(result: core.DeleteResult) -> set[str]:
    ids: set[str] = set()
    for entry in TrashEntry.objects.filter(operation=result.operation):
        ids.update(entry.session_ids)
    return ids


def test_a_restore_whose_marks_the_dashboard_refuses_is_not_offered_again(refused_marks):
    ids = linked_conversation()
    before = store_state()
    deleted = _cascade(ids["tip"])
    first = deleted.trash_entry_ids[0]

    result = actions.restore(actor="ada", entry_id=first)  # the store committed: said so

    assert store_state() == before
    assert set(result.trash_entry_ids) == set(deleted.trash_entry_ids)
    # Not marked, but its intent is recorded; the next restore settles it before anything.
    assert TrashEntry.objects.filter(restoring_since__isnull=False).count() == len(
        deleted.trash_entry_ids
    )
    faults._actions.clear()
    with pytest.raises(InvalidInput, match="already restored"):
        core.restore_trash_entry(entry_id=first, actor="ada", trash=trash.LEDGER_TRASH)
    assert set(TrashEntry.objects.values_list("state", flat=True)) == {TrashEntry.RESTORED}
    assert not TrashEntry.objects.filter(restoring_since__isnull=False).exists()
    assert store_state() == before
    assert check_store() == [] and check_trash() == []


def test_a_restore_on_a_full_dashboard_disk_is_settled_from_the_store():
    if db.vendor() != "sqlite":
        pytest.skip("a file-size limit needs SQLite files")
    ids = linked_conversation()
    before = store_state()
    deleted = _cascade(ids["tip"])

    child = run_full_child(
        {"actor": "ada", "entry_id": deleted.trash_entry_ids[0]},
        database="default",
        at="restore.after_commit",
        operation="audited_restore",
    )

    # The marks and the audit outcome could not be written: the command fails loudly...
    assert child.returncode == 1, (child.stdout, child.stderr)
    assert "applied to the store" in child.stderr.strip().splitlines()[-1]
    # ...but the store has every row back, and nothing is half marked for good.
    assert store_state() == before
    actions.settle_deletes_and_restores()
    assert set(TrashEntry.objects.values_list("state", flat=True)) == {TrashEntry.RESTORED}
    audit = AuditEntry.objects.get(action="restore")
    assert audit.outcome == AuditEntry.OK, audit.detail
    assert check_store() == [] and check_trash() == []


def test_a_restore_whose_intent_the_full_dashboard_refuses_changes_nothing():
    if db.vendor() != "sqlite":
        pytest.skip("a file-size limit needs SQLite files")
    ids = linked_conversation()
    deleted = _cascade(ids["tip"])
    after_delete = store_state()

    child = run_full_child(
        {"actor": "ada", "entry_id": deleted.trash_entry_ids[0]},
        database="default",
        at="start",
        operation="audited_restore",
    )

    assert child.returncode == 1, (child.stdout, child.stderr)
    assert "dashboard database could not be written" in child.stderr.strip().splitlines()[-1]
    assert store_state() == after_delete
    assert set(TrashEntry.objects.values_list("state", flat=True)) == {TrashEntry.COMPLETE}
    assert check_trash() == []


def test_a_killed_cascades_uncommitted_batch_leaves_the_trash_and_the_rest_restores():
    ids = linked_conversation()
    before = store_state()
    plan = core.plan_cascade_delete(session_ids=[ids["tip"]], include_branches=True)

    child = run_crash_child(
        "cascade_delete",
        {
            "session_ids": [ids["tip"]],
            "include_branches": True,
            "expected_fingerprint": plan.fingerprint,
            "actor": "ada",
            "reason": "killed",
        },
        crash_at="delete.after_trash_copy@2",
        env={"CRASH_CHILD_BATCH_SESSIONS": "2"},
    )

    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stderr)
    pending = TrashEntry.objects.get(state=TrashEntry.PENDING)
    assert db.fetchall(  # its rows are still in the store: the delete never ran
        f"SELECT id FROM sessions WHERE id IN ({db.placeholders(pending.session_ids)})",
        pending.session_ids,
    )

    actions.settle_deletes_and_restores()

    # Its process is dead and its rows are all in the store: the entry goes.
    assert not TrashEntry.objects.filter(pk=pending.pk).exists()
    assert trash.purgeable_operations(older_than_days=None)  # no pending entry blocks a purge
    first = TrashEntry.objects.order_by("pk").first()
    result = actions.restore(actor="ada", entry_id=first.pk)
    assert result.trash_entry_ids == (first.pk,)
    assert store_state() == before
    assert check_store() == [] and check_trash() == []


def test_a_live_batchs_pending_entry_is_left_alone():
    # A pending entry of a process that is alive (this one) and young is a batch between its
    # copy and its lock: settling must not drop it.
    ids = linked_conversation()
    payload = {"sessions": [{"id": ids["tip"]}], "messages": []}
    entry_id = trash.LEDGER_TRASH.open_entry(
        session_ids=[ids["tip"]],
        rows={**payload, "conversations": [], "responses": [], "kept_children": []},
        actor="ada",
        reason="running",
        job_id=None,
        operation="live-op",
    )
    actions.settle_deletes_and_restores()
    assert TrashEntry.objects.get(pk=entry_id).state == TrashEntry.PENDING


def test_a_session_split_between_two_operations_comes_back_whole(admin_client):
    sid = big_session(300)
    before = session_rows(sid)
    child = cascade_killed_after_first_part(sid)
    assert child.returncode == -signal.SIGKILL, child.stderr
    stopped = TrashEntry.objects.get().operation
    again = core.plan_cascade_delete(session_ids=[sid])
    finished = actions.cascade_delete(
        actor="ada",
        session_ids=[sid],
        include_branches=False,
        expected_fingerprint=again.fingerprint,
        reason="again",
    )
    first_stopped = TrashEntry.objects.filter(operation=stopped).order_by("pk").first().pk
    first_finished = finished.trash_entry_ids[0]

    # The trash page's order: the part's operation names the one holding the session's row.
    assert trash.part_rows_elsewhere([stopped, finished.operation]) == {
        stopped: ((sid, first_finished),)
    }
    # Its button says what it restores: not "500 messages" (attack round 46, Z3).
    page = admin_client.get("/trash/").content.decode()
    assert f"Restore it with #{first_finished}: the whole session</button>" in page
    # Either operation brings the whole session back: the row's, or the parts' (which then
    # takes the operation holding the row with it).
    answer = admin_client.post(reverse("trash_restore", args=[first_stopped]), follow=True)
    # Its message names both operations it restored (attack round 46, AB).
    said = [str(m) for m in answer.context["messages"]]
    assert any(
        f"from trash entries #{first_stopped} and #{first_finished} (their whole operations:" in m
        for m in said
    ), said

    assert session_rows(sid) == before  # every message, the row's message_count matching
    assert being_deleted.marks_on([sid]) == {}
    assert set(TrashEntry.objects.values_list("state", flat=True)) == {TrashEntry.RESTORED}
    assert check_store() == [] and check_trash() == []


def test_a_delete_that_carried_on_a_killed_ones_parts_gives_them_all_back_when_stopped(
    monkeypatch,
):
    sid = big_session(400, key="agent:main:telegram:dm:9")
    before = session_rows(sid)
    assert cascade_killed_after_first_part(sid).returncode == -signal.SIGKILL
    # A second delete carries the session on, then a hold lands between its parts.
    faults.run_at(
        "delete.between_parts",
        lambda: holds.place_hold(kind="session", subject=sid, reason="legal", actor="ada"),
    )
    monkeypatch.setitem(deletion.delete_in_batches.__kwdefaults__, "batch_messages", 100)
    again = core.plan_cascade_delete(session_ids=[sid])
    try:
        with pytest.raises(holds.SessionsHeld):
            core.execute_cascade_delete(
                session_ids=[sid], expected_fingerprint=again.fingerprint, actor="a", reason="r"
            )
    finally:
        faults._actions.clear()
        faults._hits.clear()

    # Given back whole: the first delete's part as well as the second's.
    assert session_rows(sid) == before
    assert being_deleted.marks_on([sid]) == {}
    assert not TrashEntry.objects.exclude(state=TrashEntry.RESTORED).exists()
    assert check_store() == [] and check_trash() == []


# --- a merge whose outcome could not be recorded ----------------------------------------------


def _merge_arguments() -> tuple[dict, core.MergePlan]:
    ids = store_forked_conversation()
    plan = core.plan_merge(session_ids=ids)
    return {
        "actor": "ada",
        "session_ids": ids,
        "target_id": None,
        "expected_fingerprint": plan.fingerprint,
        "reason": "forks",
    }, plan


def _complete_merges_now() -> None:
    actions.complete_stale_merges(older_than_seconds=0)


def test_a_merge_killed_after_its_store_commit_is_audited_from_the_store():
    arguments, plan = _merge_arguments()

    child = run_crash_child("audited_merge", arguments, crash_at="audit.after_store_commit")

    assert child.returncode == -signal.SIGKILL, child.stderr
    audit = AuditEntry.objects.get(action="merge")
    assert audit.outcome == AuditEntry.PENDING
    merge_id = db.fetchone("SELECT MAX(id) FROM sessions_admin_merges")[0]
    _complete_merges_now()
    audit.refresh_from_db()
    assert audit.outcome == AuditEntry.OK and audit.after["merge_id"] == merge_id
    assert check_store() == []


def test_a_merge_killed_before_its_store_commit_is_audited_as_failed():
    arguments, plan = _merge_arguments()
    before = store_state()

    child = run_crash_child("audited_merge", arguments, crash_at="merge.before_commit")

    assert child.returncode == -signal.SIGKILL, child.stderr
    assert store_state() == before
    _complete_merges_now()
    audit = AuditEntry.objects.get(action="merge")
    assert audit.outcome == AuditEntry.FAILED and "nothing was merged" in audit.detail
    # The same confirmed plan still goes through, and is audited on its own.
    actions.merge(**arguments)
    assert AuditEntry.objects.filter(action="merge", outcome=AuditEntry.OK).count() == 1


def test_a_merge_whose_dashboard_fills_after_the_store_commit_is_audited_from_the_store():
    if db.vendor() != "sqlite":
        pytest.skip("a file-size limit needs SQLite files")
    arguments, plan = _merge_arguments()

    child = run_full_child(
        arguments, database="default", at="audit.after_store_commit", operation="audited_merge"
    )

    assert child.returncode == 1, (child.stdout, child.stderr)
    assert "applied to the store" in child.stderr.strip().splitlines()[-1]
    _complete_merges_now()
    audit = AuditEntry.objects.get(action="merge")
    assert audit.outcome == AuditEntry.OK
    assert db.fetchone("SELECT COUNT(*) FROM sessions_admin_merges")[0] == 1
    assert check_store() == []


# --- a bulk delete job whose dashboard database fills -----------------------------------------


def test_a_job_whose_dashboard_fills_after_a_batch_commit_counts_what_committed_and_finishes(
    monkeypatch,
):
    if db.vendor() != "sqlite":
        pytest.skip("a file-size limit needs SQLite files")

    monkeypatch.setattr(worker, "ensure_worker_running", lambda: None)
    selected = old_sessions(9)
    before = store_state()
    job_id = jobs.create_bulk_delete_job(
        session_ids=selected, include_live=False, actor="ada", reason="retention"
    )

    # The dashboard cannot grow from right after the second batch's store commit: the write
    # marking that batch's items, and every later one, fails.
    child = run_full_child(
        {"job_id": job_id, "worker": "w", "batch_sessions": 3},
        database="default",
        at="job.after_batch_commit@2",
        operation="run_job",
    )
    assert child.returncode != 0, (child.stdout, child.stderr)

    actions.settle_deletes_and_restores()
    trashed = TrashSession.objects.filter(
        entry__operation=trash.job_operation(job_id), entry__state=TrashEntry.COMPLETE
    )
    # Exactly the two committed batches are in the trash, each session once; the rest is in
    # the store untouched.
    assert trashed.count() == 6
    assert sorted(
        db.fetchall(f"SELECT id FROM sessions WHERE id IN ({db.placeholders(selected)})", selected)
    ) == sorted(
        (sid,) for sid in selected if sid not in set(trashed.values_list("session_id", flat=True))
    )
    assert check_store() == [] and check_trash() == []

    # Finished: resumed (its worker is dead), every selected session deleted once, counts exact.
    job = DeleteJob.objects.get(pk=job_id)
    if job.state in (DeleteJob.RUNNING, DeleteJob.PENDING):
        DeleteJob.objects.filter(pk=job_id).update(lease_expires_at=timezone.now())
    else:
        actions.resume_bulk_delete(actor="ada", job_id=job_id)
    assert jobs.run_job(job_id=job_id, worker="w2", batch_sessions=3).state == DeleteJob.DONE
    job = DeleteJob.objects.get(pk=job_id)
    assert job.done == len(selected)
    _trashed_once(selected)
    assert check_store() == [] and check_trash() == []
    # And undone: restoring the job's operation gives the store back row for row.
    actions.restore(actor="ada", entry_id=trashed.first().entry_id)
    assert store_state() == before


def test_a_restore_killed_before_its_store_commit_is_audited_failed_and_can_run_again():
    ids = linked_conversation()
    before = store_state()
    deleted = _cascade(ids["tip"])
    after_delete = store_state()
    first = deleted.trash_entry_ids[0]

    child = run_crash_child(
        "audited_restore", {"actor": "ada", "entry_id": first}, crash_at="restore.before_commit"
    )

    assert child.returncode == -signal.SIGKILL, child.stderr
    assert store_state() == after_delete  # rolled back with its process
    actions.settle_deletes_and_restores()
    assert set(TrashEntry.objects.values_list("state", flat=True)) == {TrashEntry.COMPLETE}
    assert not TrashEntry.objects.filter(restoring_since__isnull=False).exists()
    killed = AuditEntry.objects.get(action="restore")
    assert killed.outcome == AuditEntry.FAILED and "nothing was restored" in killed.detail
    actions.restore(actor="ada", entry_id=first)
    assert store_state() == before
    assert check_store() == [] and check_trash() == []


@pytest.mark.parametrize(
    "crash_at,outcome",
    [("audit.after_store_commit", AuditEntry.OK), ("cascade.between_batches@1", "partial")],
)
def test_a_pending_cascade_whose_trash_is_purged_is_completed_from_what_it_held(crash_at, outcome):
    ids = linked_conversation()
    plan = core.plan_cascade_delete(session_ids=[ids["tip"]], include_branches=True)
    child = run_crash_child(
        "audited_cascade_delete",
        {
            "actor": "ada",
            "session_ids": [ids["tip"]],
            "include_branches": True,
            "expected_fingerprint": plan.fingerprint,
            "reason": "killed",
        },
        crash_at=crash_at,
        env={"CRASH_CHILD_BATCH_SESSIONS": "2"},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    # Run by a worker on another machine, which may still be adding batches (one of this
    # machine known dead is completed at once: tests/ledger/test_audit_atomicity.py).
    entry = AuditEntry.objects.get(action="cascade_delete")
    entry.before["process"] = {"host": "another-host", "boot": "b", "pid": 1}
    entry.save(update_fields=["before"])
    actions.settle_deletes_and_restores()
    held = TrashEntry.objects.filter(state=TrashEntry.COMPLETE)
    held_count = held.count()
    sessions = sum(held.values_list("session_count", flat=True))
    messages = sum(held.values_list("message_count", flat=True))

    # While its entry is pending the cascade may still be adding batches: no purge takes it.
    actions.purge(actor="ada", older_than_days=None, reason="disk space")
    assert TrashEntry.objects.filter(state=TrashEntry.COMPLETE).count() == held_count > 0
    # A purge that raced it all the same notes what the trash held before dropping it.
    trash.note_pending_cascades(
        list(held.values_list("operation", flat=True)),
        key=trash.PURGED_TRASH,
        cause={"purged": True},
    )
    TrashEntry.objects.all().delete()
    actions.complete_stale_deletes(older_than_seconds=0)

    audit = AuditEntry.objects.get(action="cascade_delete")
    assert audit.outcome == outcome, audit.detail
    assert audit.after["deleted_sessions"] == sessions and sessions > 0
    assert audit.after["deleted_messages"] == messages
    assert "purged" in audit.detail


def test_a_purge_while_a_job_deletes_leaves_its_operation_whole(monkeypatch):

    monkeypatch.setattr(worker, "ensure_worker_running", lambda: None)
    selected = old_sessions(9, sources=("cli", "telegram"), messages=3)
    before = store_state()
    job_id = jobs.create_bulk_delete_job(
        session_ids=selected, include_live=False, actor="ada", reason="retention"
    )
    purged = []
    # Another operator purges the whole trash between the job's first and second batch.
    faults.run_at(
        "job.after_batch_commit",
        lambda: purged.append(
            actions.purge(actor="bob", older_than_days=None, reason="disk space").purged
        ),
    )
    try:
        assert jobs.run_job(job_id=job_id, worker="w", batch_sessions=3).state == DeleteJob.DONE
    finally:
        faults._actions.clear()
        faults._hits.clear()

    assert purged == [0]  # the running job's operation is not purged, not even in part
    _trashed_once(selected)
    actions.restore(
        actor="ada", entry_id=TrashEntry.objects.filter(job_id=job_id).order_by("pk").first().pk
    )
    assert store_state() == before


def test_a_batch_whose_sessions_another_delete_took_meanwhile_deletes_nothing_twice():
    # Two operators start the same previewed bulk delete: the second job's batch copies the
    # sessions, then the first job deletes them before the second takes the store's lock.
    ids = [core.create_session(source="cli").session_id for _ in range(3)]
    for sid in ids:
        core.append_message(session_id=sid, role="user", content="hi")
        core.end_session(session_id=sid, end_reason="user_exit")
    taken: list = []

    class TakenMeanwhile(trash.LedgerTrash):
        def open_entry(self, **kw):
            entry_id = super().open_entry(**kw)
            if not taken:
                taken.append(
                    deletion.delete_batch(list(ids), actor="bob", reason="first job", job_id=None)
                )
            return entry_id

    second = deletion.delete_batch(
        list(ids),
        actor="ada",
        reason="second job",
        job_id=None,
        trash=TakenMeanwhile(),
        keep_live=True,
    )

    assert taken[0][:2] == (3, 3) and second[:2] == (0, 0)
    _trashed_once(ids)
    assert check_store() == [] and check_trash() == []


@pytest.mark.parametrize(
    "crash_at,outcome", [("audit.after_store_commit", "ok"), ("unmerge.before_commit", "failed")]
)
def test_an_unmerge_killed_around_its_store_commit_is_audited_from_the_store(crash_at, outcome):
    arguments, _plan = _merge_arguments()
    merged = actions.merge(**arguments)

    child = run_crash_child(
        "audited_unmerge", {"actor": "ada", "merge_id": merged.merge_id}, crash_at=crash_at
    )

    assert child.returncode == -signal.SIGKILL, child.stderr
    actions.complete_stale_unmerges(older_than_seconds=0)
    audit = AuditEntry.objects.get(action="unmerge")
    assert audit.outcome == outcome, audit.detail
    assert check_store() == []


def test_a_merge_of_sessions_that_differ_is_refused_by_the_action_unless_confirmed():
    # The rule the merge page states, enforced by ledger.actions itself (any caller).
    first = core.create_session(source="telegram", user_id="u-1").session_id
    second = core.create_session(source="discord", user_id="u-2").session_id
    for sid in (first, second):
        core.append_message(session_id=sid, role="user", content="hello")
    plan = core.plan_merge(session_ids=[first, second])
    assert plan.differs
    arguments = {
        "actor": "ada",
        "session_ids": [first, second],
        "target_id": None,
        "expected_fingerprint": plan.fingerprint,
    }
    before = store_state()

    with pytest.raises(InvalidInput, match="type 1"):
        actions.merge(**arguments, reason="same person")
    with pytest.raises(InvalidInput, match="give a reason"):
        actions.merge(**arguments, typed_count=1)
    assert store_state() == before
    assert not AuditEntry.objects.filter(action="merge").exists()  # refused before it ran

    result = actions.merge(**arguments, typed_count=1, reason="same person")
    audit = AuditEntry.objects.get(action="merge", outcome=AuditEntry.OK)
    assert audit.before["confirmed_differences"]
    assert result.moved_messages == plan.moved_messages


def test_two_sessions_split_crosswise_between_two_operations_come_back_whole(monkeypatch):
    # Two deletes at once (a job and a retention run) can each take parts of one large
    # session and the row of the other: neither operation could be restored first.
    monkeypatch.setitem(deletion.delete_in_batches.__kwdefaults__, "batch_messages", 100)
    first, second = big_session(300), big_session(300)
    before = store_state()
    assert cascade_killed_after_first_part(second).returncode == -signal.SIGKILL
    x = TrashEntry.objects.get().operation
    assert cascade_killed_after_first_part(first).returncode == -signal.SIGKILL
    y = TrashEntry.objects.exclude(operation=x).get().operation
    for sid, operation in ((first, x), (second, y)):
        plan = core.plan_cascade_delete(session_ids=[sid])
        core.execute_cascade_delete(
            session_ids=[sid],
            expected_fingerprint=plan.fingerprint,
            actor="a",
            reason="carried on",
            operation=operation,
        )
    assert trash.part_rows_elsewhere([x, y]) == {
        x: ((second, TrashEntry.objects.filter(operation=y).order_by("pk").first().pk),),
        y: ((first, TrashEntry.objects.filter(operation=x).order_by("pk").first().pk),),
    }

    restored = actions.restore(
        actor="ada", entry_id=TrashEntry.objects.filter(operation=x).order_by("pk").first().pk
    )

    assert set(restored.trash_entry_ids) == set(TrashEntry.objects.values_list("pk", flat=True))
    assert store_state() == before
    assert check_store() == [] and check_trash() == []


def test_a_pending_copy_whose_rows_another_delete_took_is_dropped_not_completed():
    ids = linked_conversation()
    tip = ids["tip"]
    _rows, payload = deletion.snapshot_rows([tip], lock=False)  # a second delete's copy...
    _cascade(tip)  # ...then the first delete takes the rows and commits
    copy = trash.LEDGER_TRASH.open_entry(  # the second's entry, written just after
        session_ids=[tip],
        rows=payload,
        actor="b",
        reason="second job",
        job_id=None,
        operation="second-op",
    )

    actions.settle_deletes_and_restores()
    # Its process (this one) is alive: it may still lock, find its rows gone and drop it.
    assert TrashEntry.objects.get(pk=copy).state == TrashEntry.PENDING

    TrashEntry.objects.filter(pk=copy).update(owner={**processes.this_process(), "pid": 2**22 + 7})
    actions.settle_deletes_and_restores()
    assert not TrashEntry.objects.filter(pk=copy).exists()  # a duplicate: dropped
    assert check_trash() == []


def test_a_killed_unmerge_is_not_credited_with_another_operators_undo():
    arguments, _plan = _merge_arguments()
    merged = actions.merge(**arguments)
    child = run_crash_child(
        "audited_unmerge",
        {"actor": "ada", "merge_id": merged.merge_id},
        crash_at="unmerge.before_commit",
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    actions.unmerge(actor="bob", merge_id=merged.merge_id, reason="bob undid it")

    actions.complete_stale_unmerges(older_than_seconds=0)

    killed, done = AuditEntry.objects.filter(action="unmerge").order_by("pk")
    assert (killed.outcome, done.outcome) == (AuditEntry.FAILED, AuditEntry.OK)


def test_a_restore_killed_waiting_for_the_store_lock_is_audited_failed_at_once():

    ids = linked_conversation()
    deleted = _cascade(ids["tip"])
    after_delete = store_state()
    # Killed before it touched anything: at its first store statement (the restore lock).
    child = run_crash_child(
        "audited_restore",
        {"actor": "ada", "entry_id": deleted.trash_entry_ids[0]},
        crash_at="restore.before_commit",
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    # Make it look as if it died before any entry was touched (no intent written).
    TrashEntry.objects.update(restoring_since=None, restore_audit=None, owner={})
    assert store_state() == after_delete

    actions.settle_deletes_and_restores()  # not ten minutes later: its process is dead

    audit = AuditEntry.objects.get(action="restore")
    assert audit.outcome == AuditEntry.FAILED, audit.detail


def test_check_trash_names_a_message_held_twice():
    ids = linked_conversation()
    _rows, payload = deletion.snapshot_rows([ids["tip"]], lock=False)
    _cascade(ids["tip"])
    assert check_trash() == []
    copy = trash.LEDGER_TRASH.open_entry(
        session_ids=[ids["tip"]],
        rows=payload,
        actor="b",
        reason="a double",
        job_id=None,
        operation="double",
    )
    trash.LEDGER_TRASH.mark_complete(copy)

    assert any("holds messages twice" in problem for problem in check_trash())


def cascade_killed_between_batches(session_id: str) -> None:
    """An audited cascade of ``session_id``'s conversation (branches included), two sessions a
    batch, its process killed after the first batch: its audit entry is left pending."""
    plan = core.plan_cascade_delete(session_ids=[session_id], include_branches=True)
    child = run_crash_child(
        "audited_cascade_delete",
        {
            "actor": "ada",
            "session_ids": [session_id],
            "include_branches": True,
            "expected_fingerprint": plan.fingerprint,
            "reason": "killed",
        },
        crash_at="cascade.between_batches@1",
        env={"CRASH_CHILD_BATCH_SESSIONS": "2"},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr


def test_a_cascade_killed_between_batches_can_be_restored_at_once():
    """Attack 40: its audit entry stayed pending ten minutes after the process was killed, and
    a restore of what it had deleted was refused meanwhile ("restore it once it has"). Its
    process is known dead: the entry is completed from its trash, and the restore runs."""
    ids = linked_conversation()
    before = store_state()
    cascade_killed_between_batches(ids["tip"])
    first = TrashEntry.objects.filter(state=TrashEntry.COMPLETE).order_by("pk").first()
    assert first is not None
    actions.restore(actor="ada", entry_id=first.pk)
    cascade = AuditEntry.objects.get(action="cascade_delete")
    assert cascade.outcome == "partial", cascade.detail
    assert store_state() == before
    assert check_store() == [] and check_trash() == []
