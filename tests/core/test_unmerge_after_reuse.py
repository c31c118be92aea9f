"""An unmerge never undoes into a session that is not the one the merge took (attack round 41).

After a merge, a cascade delete of its target or a husk makes it impossible to undo until
the trash entry is restored. A runtime holding the deleted id could start a new session with
it: the unmerge then "succeeded", returning nothing into the new session or writing the old
husk's end over it, ending a live chat, and the trash entry could never be restored. And an
undo on the target of a turn the merge moved left that turn inactive in a husk no redo
reaches, once unmerged.
"""

from __future__ import annotations

import json
import time

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.ledger.trash import LEDGER_TRASH
from tests.core.test_bulk_undo_guard import ended, rows_of


def _merged(target_live: bool = False) -> tuple[str, str, int]:
    target = ended(started_at=time.time() - 600)
    husk = ended(started_at=time.time() - 500)
    if target_live:
        db.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = %s", [target])
    merged = core.merge_sessions(session_ids=[target, husk], target_id=target)
    return target, husk, merged.merge_id


def _cascade(session_id: str) -> int:
    plan = core.plan_cascade_delete(session_ids=[session_id])
    deleted = core.execute_cascade_delete(
        session_ids=[session_id],
        expected_fingerprint=plan.fingerprint,
        actor="a",
        reason="r",
        trash=LEDGER_TRASH,
        lose_undo=True,
    )
    return deleted.trash_entry_ids[0]


def _runtime_starts_again(session_id: str) -> None:
    """A runtime holding the id writes a new session with it (its own SQL), and a message."""
    db.execute(
        "INSERT INTO sessions (id, source, started_at, message_count) VALUES (%s, 'cli', %s, 0)",
        [session_id, time.time()],
    )
    core.append_message(session_id=session_id, role="user", content="the runtime again")


@pytest.mark.parametrize("which", ["target", "husk"])
def test_an_unmerge_is_refused_when_a_deleted_sessions_id_was_used_again(which):
    target, husk, merge_id = _merged()
    reused = target if which == "target" else husk
    _cascade(reused)
    _runtime_starts_again(reused)
    before = rows_of([target, husk])

    record = core.merge_record(merge_id=merge_id)
    assert record.replaced_ids == (reused,)
    assert "started new sessions with the same ids" in record.undo_lost
    with pytest.raises(core.InvalidInput, match="same ids"):
        core.unmerge(merge_id=merge_id)

    assert rows_of([target, husk]) == before  # nothing moved, the new session still live
    (ended_at,) = db.fetchone("SELECT ended_at FROM sessions WHERE id = %s", [reused])
    assert ended_at is None
    (undone,) = db.fetchone("SELECT undone_at FROM sessions_admin_merges WHERE id = %s", [merge_id])
    assert undone is None


def test_a_restored_session_is_the_same_one_and_the_unmerge_goes_on():
    target, husk, merge_id = _merged()
    entry_id = _cascade(husk)
    core.restore_trash_entry(entry_id=entry_id, actor="a", trash=LEDGER_TRASH)
    assert core.merge_record(merge_id=merge_id).undo_lost == ""
    assert core.unmerge(merge_id=merge_id).returned_messages == 2


def test_a_merge_recorded_before_start_times_were_kept_judges_by_its_age():
    target, husk, merge_id = _merged()
    (prior,) = db.fetchone(
        "SELECT prior_state FROM sessions_admin_merges WHERE id = %s", [merge_id]
    )
    legacy = {k: v for k, v in json.loads(prior).items() if k != "started_at"}
    db.execute(
        "UPDATE sessions_admin_merges SET prior_state = %s WHERE id = %s",
        [json.dumps(legacy), merge_id],
    )
    assert core.merge_record(merge_id=merge_id).undo_lost == ""
    _cascade(husk)
    _runtime_starts_again(husk)
    db.execute(
        "UPDATE sessions_admin_merges SET created_at = %s WHERE id = %s",
        [time.time() - 3600, merge_id],
    )
    with pytest.raises(core.InvalidInput, match="same ids"):
        core.unmerge(merge_id=merge_id)


def test_an_unmerge_waits_for_the_redo_of_a_turn_it_moved_that_was_undone_on_the_target():
    target, husk, merge_id = _merged(target_live=True)
    core.undo_last_turn(session_id=target)  # the husk's last message, moved into the target
    (inactive,) = db.fetchone(
        "SELECT COUNT(*) FROM messages WHERE session_id = %s AND active = 0", [target]
    )
    assert inactive >= 1
    with pytest.raises(core.InvalidInput, match="redo that turn first"):
        core.unmerge(merge_id=merge_id)
    core.redo_turn(session_id=target)
    core.unmerge(merge_id=merge_id)
    assert (
        db.fetchall(
            "SELECT session_id, COUNT(*) FROM messages WHERE active = 0 GROUP BY session_id"
        )
        == []
    )
