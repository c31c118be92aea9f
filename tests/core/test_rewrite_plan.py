"""plan_rewrite: what undo, redo and retry would change, and the fingerprint they check."""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core.transcript import RewritePlanChanged, plan_rewrite
from tests.builders import store_snapshot, two_turns
from tests.helpers import messages


def inactive(ref: str) -> list[int]:
    return [m["id"] for m in messages(ref) if not m["active"]]


def test_each_plan_names_the_rows_its_operation_changes():
    ref, ids = two_turns()
    before = store_snapshot()
    undo = plan_rewrite(session_id=ref, action="undo")
    retry = plan_rewrite(session_id=ref, action="retry")
    assert store_snapshot() == before  # planning writes nothing
    assert undo.message_ids == tuple(ids[2:]) and retry.message_ids == (ids[3],)
    with pytest.raises(core.NothingToUndo):
        plan_rewrite(session_id=ref, action="redo")

    done = core.undo_last_turn(session_id=ref, expected_fingerprint=undo.fingerprint)
    assert done.message_ids == undo.message_ids and inactive(ref) == ids[2:]
    redo = plan_rewrite(session_id=ref, action="redo")
    assert redo.message_ids == tuple(ids[2:])
    core.redo_turn(session_id=ref, expected_fingerprint=redo.fingerprint)
    assert inactive(ref) == []
    retry = plan_rewrite(session_id=ref, action="retry")
    core.retry_last_turn(session_id=ref, expected_fingerprint=retry.fingerprint)
    assert inactive(ref) == [ids[3]]


@pytest.mark.parametrize("action", ["undo", "retry", "redo"])
def test_a_stale_fingerprint_changes_nothing(action):
    ref, _ = two_turns(f"cli:stale-{action}")
    if action == "redo":
        core.undo_last_turn(session_id=ref)
    plan = plan_rewrite(session_id=ref, action=action)
    # The runtime writes between the preview and the confirmation.
    if action == "redo":
        core.undo_last_turn(session_id=ref)  # another undo: redo would now bring back other rows
    else:
        core.append_message(session_id=ref, role="assistant", content="late")
    before = store_snapshot()
    operation = {
        "undo": core.undo_last_turn,
        "retry": core.retry_last_turn,
        "redo": core.redo_turn,
    }[action]
    with pytest.raises(RewritePlanChanged) as refused:
        operation(session_id=ref, expected_fingerprint=plan.fingerprint)
    assert store_snapshot() == before
    assert refused.value.plan.fingerprint != plan.fingerprint


def test_an_ended_session_has_no_plan_and_names_the_live_one():
    old, _ = two_turns("cli:ended")
    live = core.reset_session_key(session_key="cli:ended").new_session_id
    with pytest.raises(core.SessionEnded) as ended:
        plan_rewrite(session_id=old, action="undo")
    assert ended.value.live_session_id == live
    with pytest.raises(core.InvalidInput):
        plan_rewrite(session_id=live, action="rewrite everything")
