"""Cascade delete: plan exactly, delete exactly the plan, trash everything, restore exactly."""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core import db, deletion
from sessions_admin.ledger import trash
from sessions_admin.ledger.models import TrashEntry
from sessions_admin.routers import responses_alias
from tests.builders import cascade_lineage, store_snapshot
from tests.helpers import session_ids


def test_the_plan_groups_what_goes_by_relation_and_counts_by_sql():
    root, delegate, grand, tip, branch, child, other = cascade_lineage()
    plan = core.plan_cascade_delete(session_ids=[tip])  # any segment names the conversation
    assert set(plan.session_ids) == {root, delegate, grand, tip}
    assert dict(plan.relations) == {"picked": 1, "delegate": 2, "compression": 1}
    assert set(plan.kept_children) == {(branch, "branch"), (child, "child")}
    assert plan.message_count == 4
    assert plan.conversation_names == ("slug-d",)
    assert plan.response_count == 1
    # Children come before their parents.
    order = list(plan.session_ids)
    assert order.index(grand) < order.index(delegate) < order.index(root)
    with_branches = core.plan_cascade_delete(session_ids=[root], include_branches=True)
    assert branch in with_branches.session_ids


def test_the_plan_names_each_sessions_relation_as_the_cascade_page_shows_it():
    root, delegate, grand, tip, branch, child, other = cascade_lineage()
    plan = core.plan_cascade_delete(session_ids=[tip], include_branches=True)
    assert [sid for sid, _ in plan.session_relations] == list(plan.session_ids)
    assert dict(plan.session_relations) == {
        root: "picked",
        delegate: "delegate",
        grand: "delegate",
        tip: "compression",
        branch: "branch",
    }


def test_it_deletes_exactly_the_planned_set_and_leaves_nothing_behind():
    root, delegate, grand, tip, branch, child, other = cascade_lineage()
    plan = core.plan_cascade_delete(session_ids=[root])
    result = core.execute_cascade_delete(
        session_ids=[root],
        expected_fingerprint=plan.fingerprint,
        actor="ada",
        reason="GDPR request",
    )
    assert session_ids() == {branch, child, other}
    assert (result.deleted_sessions, result.deleted_messages) == (4, 4)
    assert (
        db.fetchall("SELECT id FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)")
        == []
    )
    assert db.fetchone("SELECT parent_session_id FROM sessions WHERE id = %s", [branch])[0] is None
    assert db.fetchone("SELECT parent_session_id FROM sessions WHERE id = %s", [child])[0] is None
    assert db.fetchall("SELECT name FROM conversations", alias=responses_alias()) == []
    assert db.fetchall("SELECT response_id FROM responses", alias=responses_alias()) == []
    if db.vendor() == "sqlite":
        hits = db.fetchall("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'needle'")
        assert [h[0] for h in hits] == [
            r[0] for r in db.fetchall("SELECT id FROM messages WHERE session_id = %s", [other])
        ]
    entries = TrashEntry.objects.all()
    assert entries.count() == 1 and entries[0].state == TrashEntry.COMPLETE
    assert entries[0].reason == "GDPR request"


def test_restoring_the_trash_gives_back_the_exact_rows():
    cascade_lineage()
    root = db.fetchone(
        "SELECT id FROM sessions WHERE session_key = 'cli:d' "
        "AND parent_session_id IS NULL ORDER BY started_at LIMIT 1"
    )[0]
    before = store_snapshot()
    plan = core.plan_cascade_delete(session_ids=[root])
    result = core.execute_cascade_delete(
        session_ids=[root], expected_fingerprint=plan.fingerprint, actor="ada", reason="test"
    )
    restored = core.restore_trash_entry(entry_id=result.trash_entry_ids[0], actor="ada")
    assert store_snapshot() == before
    assert restored.restored_messages == 4
    if db.vendor() == "sqlite":  # the search index has them again
        hits = db.fetchall("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'alpha'")
        assert len(hits) == 1
    with pytest.raises(core.InvalidInput):
        core.restore_trash_entry(entry_id=result.trash_entry_ids[0], actor="ada")


def test_a_stale_plan_is_refused_and_nothing_is_deleted():
    root, *_ = cascade_lineage()
    plan = core.plan_cascade_delete(session_ids=[root])
    core.create_session(
        source="tool", parent_session_id=root, model_config={"_delegate_from": root}
    )
    before = store_snapshot()
    with pytest.raises(core.PlanChanged):
        core.execute_cascade_delete(
            session_ids=[root], expected_fingerprint=plan.fingerprint, actor="a", reason="r"
        )
    assert store_snapshot() == before
    assert TrashEntry.objects.count() == 0


def test_a_reason_is_required():
    root, *_ = cascade_lineage()
    plan = core.plan_cascade_delete(session_ids=[root])
    with pytest.raises(core.InvalidInput):
        core.execute_cascade_delete(
            session_ids=[root], expected_fingerprint=plan.fingerprint, actor="a", reason="  "
        )


def test_large_deletes_run_in_small_batches_children_first():
    root = core.create_session(source="cli").session_id
    current = root
    for _ in range(12):
        core.append_messages(session_id=current, messages=[{"role": "user", "content": "x"}] * 5)
        current = core.rotate_for_compression(session_id=current).new_session_id
    plan = core.plan_cascade_delete(session_ids=[root])
    batches = list(
        deletion.delete_in_batches(
            plan.session_ids, actor="a", reason="r", batch_sessions=4, batch_messages=12
        )
    )
    assert len(batches) > 3
    assert sum(b[1] for b in batches) == 13
    assert session_ids() == set()
    assert TrashEntry.objects.filter(state=TrashEntry.COMPLETE).count() == len(batches)


def test_restore_refuses_when_the_ids_are_back_in_use():
    root, *_ = cascade_lineage()
    plan = core.plan_cascade_delete(session_ids=[root])
    result = core.execute_cascade_delete(
        session_ids=[root], expected_fingerprint=plan.fingerprint, actor="a", reason="r"
    )
    core.create_session(source="cli", session_id=root)
    with pytest.raises(deletion.RestoreConflict):
        core.restore_trash_entry(entry_id=result.trash_entry_ids[0], actor="a")
    assert TrashEntry.objects.get(pk=result.trash_entry_ids[0]).state == TrashEntry.COMPLETE


def test_purge_drops_old_entries_only():
    root, *_ = cascade_lineage()
    plan = core.plan_cascade_delete(session_ids=[root])
    core.execute_cascade_delete(
        session_ids=[root], expected_fingerprint=plan.fingerprint, actor="a", reason="r"
    )
    assert trash.purge_trash(older_than_days=1) == 0
    assert TrashEntry.objects.count() == 1
    assert trash.purge_trash() >= 1
    assert TrashEntry.objects.count() == 0


def test_purge_never_drops_a_pending_entry_and_counts_entries():
    root, *_ = cascade_lineage()
    plan = core.plan_cascade_delete(session_ids=[root])
    core.execute_cascade_delete(
        session_ids=[root], expected_fingerprint=plan.fingerprint, actor="a", reason="r"
    )
    pending = TrashEntry.objects.create(actor_name="a", session_ids=["x"], payload={})
    assert trash.purge_trash() == 1
    assert list(TrashEntry.objects.values_list("pk", flat=True)) == [pending.pk]


def test_rows_written_between_the_trash_copy_and_the_lock_are_copied_again():
    """The copy is taken before the store lock; a runtime append in between must not be lost."""
    live = core.create_session(source="cli", session_key="cli:busy").session_id
    core.append_message(session_id=live, role="user", content="before the copy")
    copies = []

    class CopyThenRuntimeWrites(trash.LedgerTrash):
        def open_entry(self, **kwargs):
            entry_id = super().open_entry(**kwargs)
            copies.append(entry_id)
            if len(copies) == 1:
                core.append_message(session_id=live, role="assistant", content="after the copy")
            return entry_id

    deleted, messages, trash_id = deletion.delete_batch(
        [live], actor="op", reason="test", job_id=None, trash=CopyThenRuntimeWrites()
    )
    assert (deleted, messages) == (1, 2)
    assert len(copies) == 2 and trash_id == copies[1]
    # The first, outdated copy is gone; the one kept holds both messages.
    assert list(TrashEntry.objects.values_list("pk", flat=True)) == [trash_id]
    entry = TrashEntry.objects.get(pk=trash_id)
    assert [m["content"] for m in entry.payload["messages"]] == [
        "before the copy",
        "after the copy",
    ]
    assert not db.fetchall("SELECT id FROM messages WHERE session_id = %s", [live])
    core.restore_trash_entry(entry_id=trash_id, actor="op")
    assert core.active_transcript(session_id=live)[-1]["content"] == "after the copy"


def test_a_batch_whose_trash_copy_was_dropped_copies_again():
    """Another batch holding the lock may drop a pending copy; the delete then never runs uncopied."""
    sid = core.create_session(source="cli").session_id
    core.append_message(session_id=sid, role="user", content="keep me")
    copies = []

    class CopyThenDropped(trash.LedgerTrash):
        def open_entry(self, **kwargs):
            entry_id = super().open_entry(**kwargs)
            copies.append(entry_id)
            if len(copies) == 1:
                TrashEntry.objects.filter(pk=entry_id).delete()  # as discard_unfinished would
            return entry_id

    deleted, messages, trash_id = deletion.delete_batch(
        [sid], actor="op", reason="t", job_id=None, trash=CopyThenDropped()
    )
    assert (deleted, messages, trash_id) == (1, 1, copies[1])
    assert TrashEntry.objects.get(pk=trash_id).payload["messages"][0]["content"] == "keep me"
