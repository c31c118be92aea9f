"""Merging forks: preview, execute, undo exactly."""

from __future__ import annotations

import json

import pytest

from sessions_admin import core
from sessions_admin.core import db, merge
from sessions_admin.routers import responses_alias
from tests.builders import store_forked_conversation, store_snapshot
from tests.helpers import counter_mismatches, messages, run_threads, session


def test_the_plan_counts_what_will_move():
    ids = store_forked_conversation()
    plan = core.plan_merge(session_ids=ids)
    assert plan.target_id == ids[0]
    assert plan.absorbed_ids == (ids[1], ids[2])
    assert plan.moved_messages == 4
    assert [s.messages for s in plan.sources] == [2, 2, 2]
    assert [s.active_messages for s in plan.sources] == [2, 0, 2]
    assert plan.conversations_moved == ("sidekick-m",)
    assert len(plan.reparented_children) == 1
    assert plan.reopen_target is True  # the last fork is live
    assert store_snapshot() == store_snapshot()  # planning wrote nothing


def test_merge_moves_everything_into_the_target_in_order():
    ids = store_forked_conversation()
    before_ids = [r[0] for r in db.fetchall("SELECT id FROM messages ORDER BY id")]
    plan = core.plan_merge(session_ids=ids)
    result = core.merge_sessions(session_ids=ids, expected_fingerprint=plan.fingerprint)
    target = session(ids[0])
    assert result.target_id == ids[0]
    assert [m["id"] for m in messages(ids[0])] == before_ids  # none lost, none duplicated
    assert [m["content"] for m in messages(ids[0], active_only=True)] == ["q0", "a0", "q2", "a2"]
    assert (target["message_count"], target["ended_at"]) == (4, None)
    assert target["input_tokens"] == 60 and target["output_tokens"] == 3
    assert target["estimated_cost_usd"] == pytest.approx(0.3)
    for sid in ids[1:]:
        row = session(sid)
        assert row["end_reason"] == "merged"
        assert json.loads(row["model_config"])["_merged_into"] == ids[0]
        assert (row["message_count"], row["input_tokens"]) == (0, 0)
    child = db.fetchone("SELECT parent_session_id FROM sessions WHERE source = 'tool'")
    assert child[0] == ids[0]
    assert core.resolve_conversation(conversation="sidekick-m").session_id == ids[0]
    assert counter_mismatches() == []
    # A runtime still holding an absorbed id is told where to write.
    with pytest.raises(core.SessionEnded) as caught:
        core.append_message(session_id=ids[2], role="user", content="late")
    assert caught.value.live_session_id == ids[0]
    assert core.find_fork_groups() == []


def test_merge_then_unmerge_gives_back_the_exact_rows():
    ids = store_forked_conversation()
    before = store_snapshot()
    result = core.merge_sessions(session_ids=ids)
    assert store_snapshot() != before
    core.unmerge(merge_id=result.merge_id)
    assert store_snapshot() == before
    with pytest.raises(core.InvalidInput):
        core.unmerge(merge_id=result.merge_id)


def test_a_stale_preview_is_refused_and_nothing_changes():
    ids = store_forked_conversation()
    plan = core.plan_merge(session_ids=ids)
    core.append_message(session_id=ids[2], role="user", content="the runtime wrote meanwhile")
    before = store_snapshot()
    with pytest.raises(merge.PlanChanged):
        core.merge_sessions(session_ids=ids, expected_fingerprint=plan.fingerprint)
    assert store_snapshot() == before


def test_merging_into_a_compressed_target_fills_its_tip():
    root = core.create_session(source="cli", started_at=1.0).session_id
    tip = core.rotate_for_compression(session_id=root).new_session_id
    fork = core.create_session(source="cli", started_at=2.0).session_id
    core.append_message(session_id=fork, role="user", content="from the fork")
    result = core.merge_sessions(session_ids=[root, fork])
    assert result.target_id == tip
    assert [m["content"] for m in messages(tip)] == ["from the fork"]


@pytest.mark.parametrize("picks", [[], ["only-one"], ["a", "a"]], ids=["none", "one", "same-twice"])
def test_bad_picks_are_refused(picks):
    core.create_session(source="cli", session_id="a")
    core.create_session(source="cli", session_id="only-one")
    with pytest.raises(core.InvalidInput):
        core.plan_merge(session_ids=picks)


def test_unknown_sessions_and_already_merged_ones_are_refused():
    ids = store_forked_conversation()
    with pytest.raises(core.SessionNotFound):
        core.plan_merge(session_ids=[ids[0], "ghost"])
    core.merge_sessions(session_ids=ids[:2])
    with pytest.raises(core.InvalidInput):
        core.merge_sessions(session_ids=[ids[2], ids[1]])


def test_a_target_that_descends_from_an_absorbed_session_is_refused():
    parent = core.create_session(source="cli").session_id
    branch = core.branch_session(session_id=parent).new_session_id
    with pytest.raises(core.InvalidInput):
        core.plan_merge(session_ids=[parent, branch], target_id=branch)


def test_runtime_appends_during_a_merge_are_neither_lost_nor_misplaced():
    ids = store_forked_conversation()
    acknowledged: list[int] = []

    def work(i: int):
        if i == 0:
            return core.merge_sessions(session_ids=ids)
        sid = ids[2]
        for n in range(30):
            try:
                acknowledged.extend(
                    core.append_message(
                        session_id=sid, role="user", content=f"live {n}"
                    ).message_ids
                )
            except core.SessionEnded as ended:
                sid = ended.live_session_id
                acknowledged.extend(
                    core.append_message(
                        session_id=sid, role="user", content=f"live {n}"
                    ).message_ids
                )
        return None

    run_threads(work, 2)
    stored = {r[0]: r[1] for r in db.fetchall("SELECT id, session_id FROM messages")}
    assert all(stored[mid] == ids[0] for mid in acknowledged)
    assert len(acknowledged) == 30
    assert counter_mismatches() == []


def test_merges_must_be_undone_newest_first():
    a, b, c = (core.create_session(source="cli", started_at=float(n)).session_id for n in range(3))
    for sid in (a, b, c):
        core.append_message(session_id=sid, role="user", content=sid)
    before = store_snapshot()
    first = core.merge_sessions(session_ids=[a, b])
    second = core.merge_sessions(session_ids=[a, c])
    after_both = store_snapshot()
    with pytest.raises(core.InvalidInput, match=f"#{second.merge_id}"):
        core.unmerge(merge_id=first.merge_id)
    assert store_snapshot() == after_both
    core.unmerge(merge_id=second.merge_id)
    core.unmerge(merge_id=first.merge_id)
    assert store_snapshot() == before


def test_merge_history_of_a_session_matches_ids_exactly():
    a = core.create_session(source="cli", session_id="s_1", started_at=1.0).session_id
    b = core.create_session(source="cli", session_id="s%1", started_at=2.0).session_id
    core.create_session(source="cli", session_id="sx1", started_at=3.0)
    result = core.merge_sessions(session_ids=[a, b])
    assert [m.merge_id for m in core.merges_of_session(session_id="s%1")] == [result.merge_id]
    assert core.merges_of_session(session_id="sx1") == []
    with pytest.raises(core.MergeNotFound):
        core.unmerge(merge_id=999)


def test_unmerge_gives_back_each_response_text_as_hermes_wrote_it():
    ids = store_forked_conversation("spaced-slug")
    # Hermes writes json.dumps with its default spacing and its own key order; a merge
    # re-serializes the data (jsonb reorders keys) and the unmerge must not keep that.
    hermes_text = json.dumps({"output": [], "session_id": ids[1], "conversation": "spaced-slug"})
    db.execute(
        "UPDATE responses SET data = %s WHERE response_id = %s",
        [hermes_text, "r1"],
        alias=responses_alias(),
    )
    before = store_snapshot()
    before_responses = db.fetchall(
        "SELECT response_id, data FROM responses ORDER BY response_id", alias=responses_alias()
    )
    plan = core.plan_merge(session_ids=ids)
    result = core.merge_sessions(session_ids=ids, expected_fingerprint=plan.fingerprint)
    moved = db.fetchone(
        "SELECT data FROM responses WHERE response_id = 'r1'", alias=responses_alias()
    )[0]
    assert json.loads(moved)["session_id"] == ids[0]
    core.unmerge(merge_id=result.merge_id)
    assert store_snapshot() == before
    assert (
        db.fetchall(
            "SELECT response_id, data FROM responses ORDER BY response_id",
            alias=responses_alias(),
        )
        == before_responses
    )


def _chat_with_a_branch() -> tuple[str, str]:
    parent = core.create_session(source="cli", session_key="cli:branchy").session_id
    core.append_message(session_id=parent, role="user", content="hello")
    core.append_message(session_id=parent, role="assistant", content="hi")
    branch = core.branch_session(session_id=parent).new_session_id
    core.append_message(session_id=branch, role="user", content="another way")
    return parent, branch


def test_a_session_and_its_own_branch_are_not_merged():
    # A branch begins with a copy of its parent's transcript: merged back, the copy would
    # follow the original (attack round 46, W3).
    parent, branch = _chat_with_a_branch()
    grandchild = core.branch_session(session_id=branch).new_session_id
    before = store_snapshot()
    for picks in ([parent, branch], [parent, grandchild], [branch, grandchild]):
        with pytest.raises(core.InvalidInput, match="is a branch of"):
            core.plan_merge(session_ids=picks, target_id=picks[0])
        with pytest.raises(core.InvalidInput, match="is a branch of"):
            core.merge_sessions(session_ids=picks, target_id=picks[0])
    assert store_snapshot() == before


def test_a_branch_hermes_marked_only_by_its_parents_end_is_not_merged_either():
    # Rows from before Hermes's _branched_from marker: the parent ended 'branched' and the
    # child started after that (hermes_state's _BRANCH_CHILD_SQL reads them so too).
    parent, branch = _chat_with_a_branch()
    db.execute("UPDATE sessions SET model_config = NULL WHERE id = %s", [branch])
    assert session(parent)["end_reason"] == "branched"
    with pytest.raises(core.InvalidInput, match="is a branch of"):
        core.plan_merge(session_ids=[parent, branch], target_id=parent)
