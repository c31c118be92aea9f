"""One operator action is one restorable unit in the trash, whatever its batches.

A cascade delete of a long chain and a bulk delete job both write one trash
entry per batch; the entries share an operation, and restoring any of them puts
the whole operation back in one store transaction (all of it, or nothing).
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from sessions_admin import core
from sessions_admin.core import deletion
from sessions_admin.ledger import actions, jobs, trash
from sessions_admin.ledger.models import AuditEntry, DeleteJob, TrashEntry
from tests.builders import store_snapshot
from tests.helpers import session_ids

SEGMENTS = 50


@pytest.fixture
def small_batches(monkeypatch):
    """A cascade of a few dozen sessions takes several batches (the default is 200)."""
    monkeypatch.setattr(deletion.batches, "BATCH_SESSIONS", 7)
    monkeypatch.setattr(deletion.batches, "BATCH_MESSAGES", 30)


def long_chain(segments: int = SEGMENTS) -> list[str]:
    """A conversation compressed ``segments - 1`` times, with a delegate and a slug on the way."""
    root = core.create_session(source="telegram", session_key="tg:42").session_id
    chain = [root]
    for n in range(segments - 1):
        core.append_messages(
            session_id=chain[-1],
            messages=[
                {"role": "user", "content": f"question {n}"},
                {"role": "assistant", "content": f"answer {n}"},
            ],
        )
        if n == 10:
            core.create_session(
                source="tool",
                parent_session_id=chain[-1],
                model_config={"_delegate_from": chain[-1]},
            )
        chain.append(
            core.rotate_for_compression(session_id=chain[-1], summary=f"s{n}").new_session_id
        )
    core.record_turn(response_id="resp-tip", session_id=chain[-1], conversation="support-42")
    return chain


def _cascade(root: str, reason: str = "customer asked"):
    plan = core.plan_cascade_delete(session_ids=[root])
    return plan, core.execute_cascade_delete(
        session_ids=[root], expected_fingerprint=plan.fingerprint, actor="ada", reason=reason
    )


@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_a_long_cascade_is_one_operation_and_restores_the_exact_store(small_batches, which):
    other = core.create_session(source="cli").session_id
    chain = long_chain()
    before = store_snapshot()
    plan, result = _cascade(chain[0])
    assert len(plan.session_ids) == SEGMENTS + 1
    assert len(result.trash_entry_ids) >= 5  # several batches
    entries = TrashEntry.objects.filter(pk__in=result.trash_entry_ids)
    assert set(entries.values_list("operation", flat=True)) == {result.operation}
    assert TrashEntry.objects.count() == len(result.trash_entry_ids)
    assert session_ids() == {other}

    asked = {
        "first": result.trash_entry_ids[0],
        "middle": result.trash_entry_ids[len(result.trash_entry_ids) // 2],
        "last": result.trash_entry_ids[-1],
    }[which]
    restored = core.restore_trash_entry(entry_id=asked, actor="bob")

    assert store_snapshot() == before  # the whole lineage, its slug and response included
    assert restored.trash_entry_id == asked
    assert sorted(restored.trash_entry_ids) == sorted(result.trash_entry_ids)
    assert set(restored.restored_sessions) == set(plan.session_ids)
    assert restored.restored_messages == plan.message_count
    assert set(TrashEntry.objects.values_list("state", flat=True)) == {TrashEntry.RESTORED}
    for entry_id in result.trash_entry_ids:
        with pytest.raises(core.InvalidInput, match="already restored"):
            core.restore_trash_entry(entry_id=entry_id, actor="bob")


def test_a_conflict_in_one_batch_restores_nothing_of_the_operation(small_batches):
    chain = long_chain(20)
    _plan, result = _cascade(chain[0])
    assert len(result.trash_entry_ids) > 2
    # A session of the first batch (the deepest segments) is back in the store.
    first_batch = TrashEntry.objects.get(pk=result.trash_entry_ids[0]).session_ids
    core.create_session(source="cli", session_id=first_batch[0])
    after_delete = store_snapshot()
    with pytest.raises(deletion.RestoreConflict):
        core.restore_trash_entry(entry_id=result.trash_entry_ids[-1], actor="bob")
    assert store_snapshot() == after_delete
    assert set(TrashEntry.objects.values_list("state", flat=True)) == {TrashEntry.COMPLETE}


def test_a_bulk_jobs_batches_are_one_operation_restored_together():
    keep = core.create_session(source="cli").session_id
    doomed = []
    for n in range(10):
        sid = core.create_session(source="cron", started_at=1000.0 + n).session_id
        core.append_message(session_id=sid, role="user", content=f"job {n}")
        core.end_session(session_id=sid, end_reason="cron_complete")
        doomed.append(sid)
    before = store_snapshot()
    job = jobs.create_bulk_delete_job(
        session_ids=doomed, include_live=False, actor="ada", reason="cron cleanup"
    )
    jobs.run_job(job_id=job, batch_sessions=3)
    entries = list(TrashEntry.objects.order_by("pk"))
    assert len(entries) == 4
    assert {e.operation for e in entries} == {trash.job_operation(job)}
    assert session_ids() == {keep}

    result = actions.restore(actor=None, entry_id=entries[1].pk)

    assert store_snapshot() == before
    assert sorted(result.trash_entry_ids) == [e.pk for e in entries]
    assert set(TrashEntry.objects.values_list("state", flat=True)) == {TrashEntry.RESTORED}
    # One audited action naming every session the operation brought back.
    audit = AuditEntry.objects.get(action="restore")
    assert audit.outcome == "ok" and set(audit.session_ids) == set(doomed)
    assert audit.after["trash_entries"] == [e.pk for e in entries]
    assert audit.before["trash_operation"] == trash.job_operation(job)


def test_a_running_job_cannot_be_restored_half_way():
    doomed = []
    for n in range(6):
        sid = core.create_session(source="cron", started_at=1000.0 + n).session_id
        core.end_session(session_id=sid, end_reason="cron_complete")
        doomed.append(sid)
    job = jobs.create_bulk_delete_job(session_ids=doomed, include_live=False, actor="a", reason="r")
    jobs.run_job(job_id=job, batch_sessions=2, max_batches=1)
    assert DeleteJob.objects.get(pk=job).state == DeleteJob.RUNNING
    (entry,) = TrashEntry.objects.all()
    after_batch = store_snapshot()
    with pytest.raises(core.InvalidInput, match="still running"):
        actions.restore(actor=None, entry_id=entry.pk)
    assert store_snapshot() == after_batch
    assert TrashEntry.objects.get().state == TrashEntry.COMPLETE

    jobs.cancel_job(job_id=job)  # stopped: what it deleted is restorable whole
    actions.restore(actor=None, entry_id=entry.pk)
    assert session_ids() == set(doomed)


def test_a_purge_takes_whole_operations(small_batches):
    chain = long_chain(20)
    _plan, result = _cascade(chain[0])
    first, *rest = result.trash_entry_ids
    TrashEntry.objects.filter(pk=first).update(
        created_at=timezone.now() - timezone.timedelta(days=9)
    )
    # Its last batch is recent: the operation is not old yet, and none of it goes.
    assert trash.purge_trash(older_than_days=1) == 0
    assert TrashEntry.objects.count() == len(result.trash_entry_ids)
    TrashEntry.objects.filter(pk__in=rest).update(
        created_at=timezone.now() - timezone.timedelta(days=8)
    )
    assert trash.purge_trash(older_than_days=1) == 1
    assert TrashEntry.objects.count() == 0
