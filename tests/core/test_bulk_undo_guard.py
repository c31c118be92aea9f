"""A delete never loses a merge's undo silently (issue 25, item 13).

An unmerge puts back every session of a merge, its target and each session it absorbed
(the husk): deleting one makes the merge impossible to undo. A bulk preset or selection
(a job) leaves them out, with their conversations, and says why; a cascade delete of
their conversation says what it loses, runs only when the operator confirms it, and the
trash entry names the merge, which says it cannot be undone instead of failing.
"""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core import db, merge
from sessions_admin.ledger import jobs, trash
from sessions_admin.ledger.trash import LEDGER_TRASH


def ended(source: str = "cli", *, messages: int = 2, started_at: float = 1.0) -> str:
    sid = core.create_session(source=source, started_at=started_at).session_id
    if messages:
        core.append_messages(
            session_id=sid,
            messages=[{"role": "user", "content": f"{sid} {n}"} for n in range(messages)],
        )
    core.end_session(session_id=sid, end_reason="user_exit")
    return sid


def rows_of(ids) -> dict:
    """Every row of these sessions and their messages, to compare before and after."""
    marks = db.placeholders(ids)
    return {
        "sessions": db.fetchall(f"SELECT * FROM sessions WHERE id IN ({marks}) ORDER BY id", ids),
        "messages": db.fetchall(
            f"SELECT * FROM messages WHERE session_id IN ({marks}) ORDER BY id", ids
        ),
    }


def merged_pair() -> tuple[str, str, int, dict]:
    """Two ended sessions merged (the older the target): (target, husk, merge id, their rows
    before the merge)."""
    target, husk = ended(started_at=1.0), ended(started_at=2.0)
    before = rows_of([target, husk])
    merged = core.merge_sessions(session_ids=[target, husk], target_id=target)
    return target, husk, merged.merge_id, before


def run_bulk_delete(session_ids) -> None:
    job_id = jobs.create_bulk_delete_job(
        session_ids=session_ids, include_live=False, actor="ada", reason="cleanup"
    )
    assert jobs.run_job(job_id=job_id).state == "done"


def assert_undo_restores(merge_id: int, ids, before: dict) -> None:
    core.unmerge(merge_id=merge_id)
    assert rows_of(ids) == before


@pytest.mark.parametrize(
    "preset",
    [
        {"preset": "ended_older_than", "days": 0},
        {"preset": "by_source", "source": "cli"},
        {"preset": "empty"},  # the husk: every message moved into the target
    ],
)
def test_a_preset_leaves_a_merges_sessions_out_and_says_why(preset):
    target, husk, merge_id, before = merged_pair()
    other = ended(messages=0 if preset["preset"] == "empty" else 1, started_at=3.0)

    selected = core.preset_session_ids(**preset)
    preview = core.preview_bulk_delete(session_ids=selected)

    assert preview.session_ids == (other,)
    shown = dict(preview.merge_kept)
    assert set(shown) == {target, husk} & set(selected)
    if target in shown:
        assert shown[target] == f"target of merge #{merge_id}, which can still be undone"
    assert shown[husk] == f"absorbed by merge #{merge_id}, which can still be undone"
    run_bulk_delete(selected)
    assert lineage_ids() == {target, husk}
    assert_undo_restores(merge_id, [target, husk], before)


def lineage_ids() -> set[str]:
    return {r[0] for r in db.fetchall("SELECT id FROM sessions")}


def test_a_selection_keeps_a_merges_sessions_with_their_whole_conversations():
    # A conversation compressed once whose tip a later merge absorbed another session into,
    # a merged pair, and a session of nobody's merge: all selected in the session list.
    root = core.create_session(source="cli", started_at=1.0).session_id
    core.append_message(session_id=root, role="user", content="on the root")
    tip = core.rotate_for_compression(session_id=root, summary="s").new_session_id
    core.append_message(session_id=tip, role="user", content="on the tip")
    core.end_session(session_id=tip, end_reason="user_exit")
    stray = ended(started_at=5.0)
    before_tip = rows_of([root, tip, stray])
    into_tip = core.merge_sessions(session_ids=[tip, stray], target_id=tip)
    target, husk, merge_id, before = merged_pair()
    other = ended(started_at=9.0)

    preview = core.preview_bulk_delete(session_ids=[root, target, husk, other])

    assert preview.session_ids == (other,)
    assert dict(preview.merge_kept) == {
        tip: f"target of merge #{into_tip.merge_id}, which can still be undone",
        target: f"target of merge #{merge_id}, which can still be undone",
        husk: f"absorbed by merge #{merge_id}, which can still be undone",
    }
    assert preview.merge_kept_with == 1  # the root stays with its tip: never split
    run_bulk_delete([root, target, husk, other])
    assert lineage_ids() == {root, tip, stray, target, husk}
    assert_undo_restores(merge_id, [target, husk], before)
    assert_undo_restores(into_tip.merge_id, [root, tip, stray], before_tip)


def test_a_cascade_delete_warns_asks_and_its_trash_entry_names_the_merge():
    target, husk, merge_id, before = merged_pair()
    plan = core.plan_cascade_delete(session_ids=[target])

    assert plan.merges == ((target, merge_id, "target"),)
    assert f"merge #{merge_id}" in core.lost_undo_words(plan)
    with pytest.raises(core.InvalidInput, match=f"merge #{merge_id}"):
        core.execute_cascade_delete(
            session_ids=[target], expected_fingerprint=plan.fingerprint, actor="a", reason="r"
        )
    assert lineage_ids() == {target, husk}  # refused: nothing deleted

    deleted = core.execute_cascade_delete(
        session_ids=[target],
        expected_fingerprint=plan.fingerprint,
        actor="a",
        reason="r",
        trash=LEDGER_TRASH,
        lose_undo=True,
    )

    assert deleted.lost_undos == (merge_id,)
    assert trash.merges_waiting_on([deleted.operation]) == {
        deleted.operation: ((merge_id, "target", target),)
    }
    record = core.merge_record(merge_id=merge_id)
    assert record.missing_ids == (target,)
    assert "can no longer be undone" in record.undo_lost
    with pytest.raises(core.InvalidInput, match="can no longer be undone"):
        core.unmerge(merge_id=merge_id)
    # Restored from the trash, the merge can be undone again, exactly.
    core.restore_trash_entry(entry_id=deleted.trash_entry_ids[0], actor="a", trash=LEDGER_TRASH)
    assert trash.merges_waiting_on([deleted.operation]) == {}
    assert core.merge_record(merge_id=merge_id).undo_lost == ""
    assert_undo_restores(merge_id, [target, husk], before)


def test_one_rule_says_which_sessions_a_merge_still_needs():
    target, husk, merge_id, _before = merged_pair()
    assert merge.undoable_merges_of() == {
        target: merge.UndoableMerge(merge_id, "target"),
        husk: merge.UndoableMerge(merge_id, "absorbed"),
    }
    core.unmerge(merge_id=merge_id)
    assert merge.undoable_merges_of() == {}
