"""Long cascades and restores run as jobs (issue 29, item 4).

A confirmed cascade (or a restore) larger than the configured size is checked and claimed in
the request exactly as one run there, then deleted (restored) by the worker, which completes
its audit entry: the request returns at once with the plan intact, the worker deletes exactly
the plan into one trash operation, a worker killed halfway is taken over, a second
confirmation is refused. Small ones stay in the request.
"""

from __future__ import annotations

import io
import signal

import pytest
from django.core.management import call_command
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db, deletion
from sessions_admin.core.deletion import claims
from sessions_admin.demo.consistency import check_store, check_trash
from sessions_admin.ledger import actions, jobs, worker
from sessions_admin.ledger.models import AuditAction, AuditEntry, DeleteJob, TrashEntry
from sessions_admin.ledger.trash import LEDGER_TRASH
from tests.builders import linked_conversation
from tests.core.test_crash import store_state
from tests.core.test_delete_in_parts import expire_lease, run_crash_child
from tests.helpers import present

HX = {"HX-Request": "true"}


@pytest.fixture(autouse=True)
def worker_calls(monkeypatch):
    """No background thread: the test runs the job itself (or in a child process)."""
    calls: list[int] = []
    monkeypatch.setattr(worker, "ensure_worker_running", lambda: calls.append(1))
    return calls


def big_conversation() -> tuple[dict[str, str], core.DeletePlan]:
    """Eight linked sessions with 60 more messages on two of them; its plan from the tip."""
    ids = linked_conversation()
    for sid in (ids["branch"], ids["last"]):
        core.append_messages(
            session_id=sid,
            messages=[
                {"role": "user" if n % 2 else "assistant", "content": f"line {n}"}
                for n in range(30)
            ],
        )
    core.end_session(session_id=ids["late_delegate"], end_reason="agent_close")
    plan = core.plan_cascade_delete(session_ids=[ids["tip"]], include_branches=True)
    return ids, plan


def bystander() -> str:
    sid = core.create_session(source="cli", session_key="cli:other").session_id
    core.append_message(session_id=sid, role="user", content="not part of it")
    return sid


def confirmation(plan: core.DeletePlan) -> dict:
    data = {
        "fingerprint": plan.fingerprint,
        "reason": "customer asked",
        "include_branches": "1",
    }
    if deletion.needs_typed_confirmation(
        sessions=len(plan.session_ids), messages=plan.message_count
    ):
        data["typed_count"] = str(len(plan.session_ids))
    return data


def claimed() -> int:
    return db.fetchone("SELECT COUNT(*) FROM sessions_admin_delete_claims")[0]


@pytest.fixture
def long_deletes(settings):
    """Sizes from which cascades and restores run as jobs, small enough for these stores."""
    settings.SESSIONS_ADMIN_CASCADE_JOB_MESSAGES = 30
    settings.SESSIONS_ADMIN_RESTORE_JOB_MESSAGES = 30
    settings.SESSIONS_ADMIN_LONG_JOB_SESSIONS = 200
    return settings


def test_a_large_cascade_confirmed_in_the_console_becomes_a_job_then_deletes_the_plan(
    admin_client, long_deletes, worker_calls
):
    ids, plan = big_conversation()
    other = bystander()
    before = store_state()
    assert plan.message_count >= 30

    response = admin_client.post(
        reverse("cascade_delete_confirm", args=[ids["tip"]]), confirmation(plan), headers=HX
    )

    # At once: an htmx redirect to the job's page, nothing of the plan deleted yet.
    job = DeleteJob.objects.get()
    assert response.status_code == 200
    assert response["HX-Redirect"] == reverse("job_detail", args=[job.pk])
    assert job.kind == DeleteJob.CASCADE and job.state == DeleteJob.PENDING
    assert job.total == len(plan.session_ids) and job.total_messages == plan.message_count
    assert store_state() == before
    assert not TrashEntry.objects.exists()
    assert worker_calls  # the worker was asked for
    # Checked and claimed in the request: its audit entry is pending, naming its operation.
    entry = AuditEntry.objects.get(action=AuditAction.CASCADE_DELETE)
    assert entry.outcome == AuditEntry.PENDING and job.audit_entry == entry.pk
    assert entry.before["trash_operation"] == job.operation
    assert claimed() == len(plan.session_ids)

    # A second confirmation of the same plan is refused: no second job, nothing deleted.
    again = admin_client.post(
        reverse("cascade_delete_confirm", args=[ids["tip"]]), confirmation(plan)
    )
    assert again.status_code == 200
    assert DeleteJob.objects.count() == 1
    assert store_state() == before
    # The pending entry is the job's: settling stale deletes leaves it alone.
    assert actions.complete_stale_deletes(older_than_seconds=0) == []

    progress = jobs.run_job(job_id=job.pk)

    assert progress.state == DeleteJob.DONE
    assert present(plan.session_ids) == set()
    assert present([other]) == {other}
    trash = TrashEntry.objects.filter(state=TrashEntry.COMPLETE)
    assert set(trash.values_list("operation", flat=True)) == {job.operation}
    assert sorted(sid for e in trash for sid in e.session_ids if e.session_count) == sorted(
        plan.session_ids
    )
    entry.refresh_from_db()
    assert entry.outcome == AuditEntry.OK
    assert entry.after["deleted_sessions"] == len(plan.session_ids)
    assert entry.after["deleted_messages"] == plan.message_count
    assert entry.after["job"] == job.pk
    assert claimed() == 0
    assert progress.deleted == len(plan.session_ids)
    assert progress.deleted_messages == plan.message_count
    assert check_store() == [] and check_trash() == []

    # One trash entry per action: restoring it gives the store back as it was.
    actions.restore(actor="ada", entry_id=trash.order_by("pk").first().pk)
    assert store_state() == before


def test_a_cascade_below_the_size_still_runs_in_the_request(admin_client, long_deletes):
    ids, plan = big_conversation()
    long_deletes.SESSIONS_ADMIN_CASCADE_JOB_MESSAGES = plan.message_count + 1

    response = admin_client.post(
        reverse("cascade_delete_confirm", args=[ids["tip"]]), confirmation(plan)
    )

    assert response.status_code == 302 and response["Location"] == reverse("trash")
    assert not DeleteJob.objects.exists()
    assert present(plan.session_ids) == set()
    assert AuditEntry.objects.get(action=AuditAction.CASCADE_DELETE).outcome == AuditEntry.OK


def test_a_large_restore_becomes_a_job_then_restores_the_whole_operation(
    admin_client, long_deletes
):
    ids, plan = big_conversation()
    before = store_state()
    long_deletes.SESSIONS_ADMIN_CASCADE_JOB_MESSAGES = plan.message_count + 1  # in the request
    actions.cascade_delete(
        actor="ada",
        session_ids=[ids["tip"]],
        include_branches=True,
        expected_fingerprint=plan.fingerprint,
        reason="customer asked",
    )
    deleted = store_state()
    first = TrashEntry.objects.order_by("pk").first()

    response = admin_client.post(reverse("trash_restore", args=[first.pk]), {})

    job = DeleteJob.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("job_detail", args=[job.pk])
    assert job.kind == DeleteJob.RESTORE and job.state == DeleteJob.PENDING
    assert store_state() == deleted  # nothing restored in the request
    entry = AuditEntry.objects.get(action=AuditAction.RESTORE)
    assert entry.outcome == AuditEntry.PENDING and job.audit_entry == entry.pk
    assert actions.complete_stale_restores(older_than_seconds=0) == []
    # A second restore of the same entry meanwhile is refused, nothing changed.
    admin_client.post(reverse("trash_restore", args=[first.pk]), {})
    assert DeleteJob.objects.count() == 1 and store_state() == deleted

    progress = jobs.run_job(job_id=job.pk)

    assert progress.state == DeleteJob.DONE
    assert store_state() == before
    assert not TrashEntry.objects.exclude(state=TrashEntry.RESTORED).exists()
    entry.refresh_from_db()
    assert entry.outcome == AuditEntry.OK
    assert entry.after["restored_sessions"] == len(plan.session_ids)
    assert entry.after["restored_messages"] == plan.message_count
    job.refresh_from_db()
    assert sorted(job.params["restored"]) == sorted(plan.session_ids)
    assert check_store() == [] and check_trash() == []


def test_a_cascade_job_cannot_be_cancelled(admin_client, long_deletes):
    ids, plan = big_conversation()
    before = store_state()
    admin_client.post(reverse("cascade_delete_confirm", args=[ids["tip"]]), confirmation(plan))
    job = DeleteJob.objects.get()

    admin_client.post(reverse("job_cancel", args=[job.pk]), {"reason": "stop"})

    job.refresh_from_db()
    assert job.state == DeleteJob.PENDING
    assert store_state() == before
    jobs.run_job(job_id=job.pk)
    assert present(plan.session_ids) == set()


def test_a_cascade_job_killed_halfway_is_finished_by_the_next_worker(admin_client, long_deletes):
    ids, plan = big_conversation()
    other = bystander()
    before = store_state()
    admin_client.post(reverse("cascade_delete_confirm", args=[ids["tip"]]), confirmation(plan))
    job = DeleteJob.objects.get()

    # The worker's process (``run_jobs``) dies after the cascade's first batch of two sessions.
    child = run_crash_child(
        "run_jobs",
        {"idle_exit": 0.5},
        crash_at="cascade.between_batches@1",
        env={"CRASH_CHILD_BATCH_SESSIONS": "2"},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    job.refresh_from_db()
    assert job.state == DeleteJob.RUNNING
    gone = set(plan.session_ids) - present(plan.session_ids)
    assert 0 < len(gone) < len(plan.session_ids)  # halfway
    entry = AuditEntry.objects.get(action=AuditAction.CASCADE_DELETE)
    assert entry.outcome == AuditEntry.PENDING
    # Not settled as a dead cascade while its job can still finish it (as check_consistency
    # and the trash page settle), and not restorable.
    assert actions.complete_stale_deletes(older_than_seconds=0) == []
    actions.settle_deletes_and_restores()
    entry.refresh_from_db()
    assert entry.outcome == AuditEntry.PENDING
    with pytest.raises(core.InvalidInput):
        actions.restore(actor="ada", entry_id=TrashEntry.objects.order_by("pk").first().pk)
    # Nor is a new confirmation of what is left run beside it: its claim is the job's.
    left = core.plan_cascade_delete(session_ids=[ids["tip"]], include_branches=True)
    assert claimed() > 0 and left.session_ids

    # Its lease runs out; the next worker (another process) takes the job and its claim over.
    expire_lease(job.pk)
    finished = run_crash_child("run_jobs", {"idle_exit": 0.5}, crash_at="")
    assert finished.returncode == 0, finished.stderr

    job.refresh_from_db()
    assert job.state == DeleteJob.DONE, job.error
    assert present(plan.session_ids) == set()
    assert present([other]) == {other}
    trash = TrashEntry.objects.exclude(state=TrashEntry.PENDING)
    assert set(trash.values_list("operation", flat=True)) == {job.operation}
    entry.refresh_from_db()
    assert entry.outcome == AuditEntry.OK
    assert entry.after["deleted_sessions"] == len(plan.session_ids)
    assert entry.after["deleted_messages"] == plan.message_count
    assert claimed() == 0
    call_command("check_consistency", stdout=io.StringIO())
    progress = jobs.job_progress(job_id=job.pk)
    assert progress.deleted == len(plan.session_ids)
    assert progress.deleted_messages == plan.message_count

    actions.restore(actor="ada", entry_id=trash.order_by("pk").first().pk)
    assert store_state() == before


def test_a_large_session_killed_between_its_parts_is_finished_whole(admin_client, long_deletes):
    """One session of 120 messages, deleted in parts of 50 by the job's worker, killed after
    its first part: the next worker finishes it in the same operation, the bar moving by part."""
    sid = core.create_session(source="cli", session_key="cli:big").session_id
    core.append_messages(
        session_id=sid,
        messages=[{"role": "user", "content": f"line {n}"} for n in range(120)],
    )
    core.end_session(session_id=sid, end_reason="user_exit")
    before = store_state()
    plan = core.plan_cascade_delete(session_ids=[sid])
    admin_client.post(reverse("cascade_delete_confirm", args=[sid]), confirmation(plan))
    job = DeleteJob.objects.get()

    child = run_crash_child(
        "run_jobs",
        {"idle_exit": 0.5},
        crash_at="delete.between_parts@1",
        env={"CRASH_CHILD_BATCH_MESSAGES": "50"},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert present([sid]) == {sid}
    halfway = jobs.job_progress(job_id=job.pk)
    assert halfway.deleted_messages == 50 and 0 < halfway.percent < 100
    assert AuditEntry.objects.get(action=AuditAction.CASCADE_DELETE).outcome == "pending"

    expire_lease(job.pk)
    finished = run_crash_child(
        "run_jobs", {"idle_exit": 0.5}, crash_at="", env={"CRASH_CHILD_BATCH_MESSAGES": "50"}
    )
    assert finished.returncode == 0, finished.stderr
    job.refresh_from_db()
    assert job.state == DeleteJob.DONE, job.error
    assert present([sid]) == set()
    assert set(TrashEntry.objects.values_list("operation", flat=True)) == {job.operation}
    entry = AuditEntry.objects.get(action=AuditAction.CASCADE_DELETE)
    assert entry.outcome == AuditEntry.OK
    assert (entry.after["deleted_sessions"], entry.after["deleted_messages"]) == (1, 120)
    assert jobs.job_progress(job_id=job.pk).percent == 100
    assert check_store() == [] and check_trash() == [] and claimed() == 0
    actions.restore(actor="ada", entry_id=TrashEntry.objects.order_by("pk").first().pk)
    assert store_state() == before


@pytest.mark.parametrize("crash_at", ["restore.before_commit", "restore.after_commit"])
def test_a_restore_job_killed_is_settled_by_the_next_worker(admin_client, long_deletes, crash_at):
    """Killed before its commit, the next worker restores; killed after it, the next worker
    finds it committed: either way the store is back whole and the audit entry ok, once."""
    ids, plan = big_conversation()
    before = store_state()
    long_deletes.SESSIONS_ADMIN_CASCADE_JOB_MESSAGES = plan.message_count + 1
    actions.cascade_delete(
        actor="ada",
        session_ids=[ids["tip"]],
        include_branches=True,
        expected_fingerprint=plan.fingerprint,
        reason="customer asked",
    )
    first = TrashEntry.objects.order_by("pk").first()
    admin_client.post(reverse("trash_restore", args=[first.pk]), {})
    job = DeleteJob.objects.get(kind=DeleteJob.RESTORE)

    child = run_crash_child("run_jobs", {"idle_exit": 0.5}, crash_at=crash_at)
    assert child.returncode == -signal.SIGKILL, child.stderr
    entry = AuditEntry.objects.get(action=AuditAction.RESTORE)
    assert entry.outcome == AuditEntry.PENDING
    assert actions.complete_stale_restores(older_than_seconds=0) == []  # the job's to complete

    expire_lease(job.pk)
    finished = run_crash_child("run_jobs", {"idle_exit": 0.5}, crash_at="")
    assert finished.returncode == 0, finished.stderr
    job.refresh_from_db()
    assert job.state == DeleteJob.DONE, job.error
    assert store_state() == before
    assert not TrashEntry.objects.exclude(state=TrashEntry.RESTORED).exists()
    entry.refresh_from_db()
    assert entry.outcome == AuditEntry.OK
    assert entry.after["restored_sessions"] == len(plan.session_ids)
    assert check_store() == [] and check_trash() == []


def test_a_job_whose_claim_ran_out_before_it_started_deletes_nothing_and_says_so(
    admin_client, long_deletes
):
    """A cascade job that waited past its claim's lease (the worker busy with a long job):
    a second confirmation may then run, and the job fails having deleted nothing."""
    ids, plan = big_conversation()
    admin_client.post(reverse("cascade_delete_confirm", args=[ids["tip"]]), confirmation(plan))
    job = DeleteJob.objects.get()
    db.execute(
        "UPDATE sessions_admin_delete_claims SET renewed_at = renewed_at - %s",
        [claims.CLAIM_LEASE_SECONDS + 1],
    )
    long_deletes.SESSIONS_ADMIN_CASCADE_JOB_MESSAGES = plan.message_count + 1
    admin_client.post(reverse("cascade_delete_confirm", args=[ids["tip"]]), confirmation(plan))
    assert present(plan.session_ids) == set()  # the second confirmation ran, in the request

    progress = jobs.run_job(job_id=job.pk)

    assert progress.state == DeleteJob.FAILED
    assert not TrashEntry.objects.filter(operation=job.operation).exists()
    entry = AuditEntry.objects.get(pk=job.audit_entry)
    assert entry.outcome == AuditEntry.FAILED and "nothing was deleted" in entry.detail
    ran = AuditEntry.objects.exclude(pk=job.audit_entry).get(action=AuditAction.CASCADE_DELETE)
    assert ran.outcome == AuditEntry.OK
    assert ran.after["deleted_sessions"] == len(plan.session_ids)
    assert claimed() == 0


def test_a_restore_of_an_entry_already_restored_is_refused_in_the_request(long_deletes):
    # Attack round j: a second restore sent after the first one's job had finished was answered
    # 202 with a job that could only fail.
    ids, plan = big_conversation()
    deleted = core.execute_cascade_delete(
        session_ids=[ids["tip"]],
        include_branches=True,
        expected_fingerprint=plan.fingerprint,
        actor="ada",
        reason="cleanup",
        trash=LEDGER_TRASH,
    )
    entry_id = deleted.trash_entry_ids[0]
    actions.restore(actor=None, entry_id=entry_id, reason="by mistake")
    jobs_before = DeleteJob.objects.count()
    with pytest.raises(core.InvalidInput, match="already restored"):
        actions.start_restore(actor=None, entry_id=entry_id, reason="again")
    assert DeleteJob.objects.count() == jobs_before
    assert not AuditEntry.objects.filter(action=AuditAction.RESTORE, outcome="pending").exists()
