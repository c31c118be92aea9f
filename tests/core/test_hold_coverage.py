"""A legal hold covers what it says, wherever the rows are, and nothing escapes it.

- A session hold covers its whole lineage in the store and in the trash: a branch or
  segment trashed before the hold was placed, the sessions a kept child lost when its
  parent was deleted, and a session held while it is only in the trash.
- A user hold covers the lineage of the user's sessions: delegates and children the
  runtime left without a user id, in the store and in the trash.
- A merge never takes held messages out of their hold (refused, naming the hold); a
  target holds what it absorbed, so a hold on the husk keeps the target; no sequence of
  merge, delete, purge and undo loses a held message.
- Every skip names the hold: a job's progress and its audit entries, a purge's report.

Each test checks the databases' rows. Run on both backends.
"""

from __future__ import annotations

import io
import re
import time

import pytest
from django.core.management import call_command

from sessions_admin import core
from sessions_admin.core import clock, db, deletion, holds, stray
from sessions_admin.ledger import actions, jobs, trash
from sessions_admin.ledger.models import AuditEntry, DeleteJobItem, TrashEntry
from tests.builders import cascade_lineage, store_snapshot


def _store_ids() -> set[str]:
    return {r[0] for r in db.fetchall("SELECT id FROM sessions")}


def _store_message_ids() -> set[int]:
    return {int(r[0]) for r in db.fetchall("SELECT id FROM messages")}


def _trashed_ids() -> set[str]:
    """Sessions whose rows the trash keeps (entries not restored)."""
    found: set[str] = set()
    for payload in TrashEntry.objects.exclude(state=TrashEntry.RESTORED).values_list(
        "payload", flat=True
    ):
        found |= {row["id"] for row in payload.get("sessions", [])}
    return found


def _trashed_message_ids() -> set[int]:
    found: set[int] = set()
    for payload in TrashEntry.objects.exclude(state=TrashEntry.RESTORED).values_list(
        "payload", flat=True
    ):
        found |= {int(row["id"]) for row in payload.get("messages", [])}
    return found


def _cascade(session_id: str, *, include_branches: bool = False) -> None:
    plan = core.plan_cascade_delete(session_ids=[session_id], include_branches=include_branches)
    core.execute_cascade_delete(
        session_ids=[session_id],
        include_branches=include_branches,
        expected_fingerprint=plan.fingerprint,
        actor="bob",
        reason="cleanup",
    )


def _chat(user_id: str | None, *, at: float, text: str) -> str:
    sid = core.create_session(source="telegram", user_id=user_id, started_at=at).session_id
    core.append_message(session_id=sid, role="user", content=text)
    return sid


def _user_conversation() -> dict[str, str]:
    """A user's chat with a delegate (no user id, as Hermes writes subagents) that has a child
    of its own, compressed once into a segment the runtime also left without a user id."""
    root = _chat("u-42", at=1000.0, text="my order is late")
    delegate = core.create_session(
        source="tool", parent_session_id=root, model_config={"_delegate_from": root}
    ).session_id
    core.append_message(session_id=delegate, role="assistant", content="looked up the order")
    sub = core.create_session(
        source="tool", parent_session_id=delegate, model_config={"_delegate_from": delegate}
    ).session_id
    core.append_message(session_id=sub, role="assistant", content="carrier says tuesday")
    core.end_session(session_id=root, end_reason="compression")
    child = core.create_session(source="telegram", parent_session_id=root).session_id
    core.append_message(session_id=child, role="assistant", content="it ships tuesday")
    for sid in (sub, delegate, child):
        core.end_session(session_id=sid, end_reason="cron_complete")
    assert {r[0] for r in db.fetchall("SELECT user_id FROM sessions WHERE id <> %s", [root])} == {
        None
    }
    return {"root": root, "delegate": delegate, "sub": sub, "child": child}


# --- 7. a session hold covers its lineage in the trash ----------------------------------------


def test_a_branch_trashed_before_the_hold_survives_a_purge():
    root, _d, _g, tip, branch, _c, other = cascade_lineage()
    _cascade(branch)
    _cascade(other)
    assert branch in _trashed_ids()
    hold = holds.place_hold(kind="session", subject=tip, reason="case 77", actor="ada")
    assert trash.held_trash_operations() == {
        TrashEntry.objects.get(session_ids=[branch]).operation: hold.describe()
    }
    report = trash.purge_trash_report()
    assert report.purged == 1  # the unrelated session's entry
    assert _trashed_ids() == {branch}
    assert [(k.session_id, k.hold.id) for k in report.kept] == [(branch, hold.id)]
    # Released, the next purge drops it.
    holds.release_hold(hold_id=hold.id, reason="closed", actor="ada")
    assert trash.purge_trash() == 1
    assert _trashed_ids() == set()


def test_the_parents_a_kept_branch_lost_stay_with_it_in_the_trash():
    # The conversation was deleted without its branch (kept, its parent link cleared); the
    # branch is put under hold afterwards: the trashed segments it came from are its lineage.
    root, delegate, grand, tip, branch, child, _other = cascade_lineage()
    _cascade(root)
    assert core.lineage.parent_of(session_id=branch) is None
    trashed = _trashed_ids()
    assert {root, tip, delegate, grand} <= trashed
    hold = holds.place_hold(kind="session", subject=branch, reason="case 78", actor="ada")
    trash.purge_trash()
    assert _trashed_ids() == trashed
    held = trash.held_trash()
    assert {found.hold.id for found in held.values()} == {hold.id}


def test_a_session_only_in_the_trash_can_be_held_and_its_lineage_with_it():
    root, delegate, grand, tip, branch, child, other = cascade_lineage()
    _cascade(branch)
    assert branch not in _store_ids()
    hold = actions.place_hold(actor=None, kind="session", subject=branch, reason="case 79")
    # Its trash entry is kept, and the store sessions of its lineage are covered.
    assert trash.purge_trash() == 0
    assert _trashed_ids() == {branch}
    assert set(holds.holds_on([root, tip, delegate, grand, child, other])) == {
        root,
        tip,
        delegate,
        grand,
        child,
    }
    before = store_snapshot()
    with pytest.raises(holds.SessionsHeld, match=f"legal hold #{hold.id}"):
        deletion.delete_batch([child], actor="x", reason="r", job_id=None)
    assert store_snapshot() == before
    # An id found nowhere is still refused.
    with pytest.raises(core.SessionNotFound):
        actions.place_hold(actor=None, kind="session", subject="no-such-session", reason="r")


# --- 7. a user hold covers the sessions the runtime left without a user id -------------------


def test_a_user_hold_covers_the_delegates_and_children_without_a_user_id():
    chat = _user_conversation()
    unrelated = _chat(None, at=3000.0, text="someone else")
    core.end_session(session_id=unrelated, end_reason="cron_complete")
    hold = holds.place_hold(kind="user", subject="u-42", reason="litigation", actor="ada")
    held = holds.holds_on([*chat.values(), unrelated])
    assert set(held) == set(chat.values())
    assert {h.id for h in held.values()} == {hold.id}
    # A bulk delete leaves them out, the delete under the lock refuses them, a cascade is refused.
    preview = core.preview_bulk_delete(session_ids=[chat["delegate"], chat["child"], unrelated])
    assert preview.session_ids == (unrelated,)
    before = store_snapshot()
    for batch in ([chat["sub"]], [chat["child"]]):
        # 9: the refusal names the session and the hold.
        with pytest.raises(holds.SessionsHeld, match=re.escape(f"{batch[0]}, hold #{hold.id}")):
            deletion.delete_batch(batch, actor="x", reason="r", job_id=None)
    plan = core.plan_cascade_delete(session_ids=[chat["delegate"]])
    assert plan.held
    with pytest.raises(holds.SessionsHeld):
        core.execute_cascade_delete(
            session_ids=[chat["delegate"]],
            expected_fingerprint=plan.fingerprint,
            actor="x",
            reason="r",
        )
    assert store_snapshot() == before
    assert TrashEntry.objects.count() == 0


def test_a_user_hold_keeps_a_bulk_job_from_the_delegate_without_a_user_id():
    chat = _user_conversation()
    job = jobs.create_bulk_delete_job(
        session_ids=[chat["delegate"]], include_live=False, actor="ada", reason="cleanup"
    )
    hold = holds.place_hold(kind="user", subject="u-42", reason="litigation", actor="ada")
    progress = jobs.run_job(job_id=job)
    assert {chat["delegate"], chat["sub"]} <= _store_ids()
    assert progress.state == "done" and progress.deleted == 0 and progress.skipped == 2
    assert set(
        DeleteJobItem.objects.filter(job_id=job, state=DeleteJobItem.SKIPPED).values_list(
            "session_id", flat=True
        )
    ) == {chat["delegate"], chat["sub"]}
    # 9: the progress names each session with its hold, and so does the audit log.
    assert {(h.session_id, h.hold_id) for h in progress.held} == {
        (chat["delegate"], hold.id),
        (chat["sub"], hold.id),
    }
    assert progress.skipped_text.startswith("2 skipped: ")
    assert f"{chat['delegate']}, hold #{hold.id}" in progress.skipped_text
    (entry,) = AuditEntry.objects.filter(action=jobs.HELD_SKIP_ACTION)
    assert entry.before["job"] == job
    assert set(entry.session_ids) == {chat["delegate"], chat["sub"]}
    assert {(row["session"], row["hold"]) for row in entry.after["held"]} == {
        (chat["delegate"], hold.id),
        (chat["sub"], hold.id),
    }


def test_a_user_hold_keeps_a_trashed_delegate_without_a_user_id_from_the_purge():
    chat = _user_conversation()
    other = _chat("u-7", at=3000.0, text="another customer")
    core.end_session(session_id=other, end_reason="cron_complete")
    # The delegate (and its own delegate) went to the trash on their own, before the hold.
    deletion.delete_batch([chat["sub"], chat["delegate"]], actor="x", reason="r", job_id=None)
    deletion.delete_batch([other], actor="x", reason="r", job_id=None)
    hold = holds.place_hold(kind="user", subject="u-42", reason="litigation", actor="ada")
    (kept_entry,) = [e for e in TrashEntry.objects.all() if chat["sub"] in e.session_ids]
    dry = io.StringIO()
    call_command("purge_trash", "--days", "0", "--dry-run", stdout=dry)
    # The dry run counts only what goes, and names what the hold keeps as the run would.
    assert "Would purge 1 trash entries (1 sessions" in dry.getvalue()
    assert (
        f"Would keep 1 trash entry under legal hold: trash entry #{kept_entry.pk}" in dry.getvalue()
    )
    assert f"hold #{hold.id}" in dry.getvalue()
    assert TrashEntry.objects.count() == 2
    out = io.StringIO()
    call_command("purge_trash", "--days", "0", stdout=out)
    assert _trashed_ids() == {chat["delegate"], chat["sub"]}
    # 9: the command names what it kept, with the hold.
    text = out.getvalue()
    assert "Purged 1 trash entries" in text
    assert f"hold #{hold.id}" in text and "under legal hold" in text
    kept_entry = TrashEntry.objects.get()
    assert f"trash entry #{kept_entry.pk}" in text
    (audit,) = AuditEntry.objects.filter(action="purge_trash", outcome="ok")
    assert audit.after["purged_entries"] == 1
    assert [(k["trash_entry"], k["hold"]) for k in audit.after["kept_under_hold"]] == [
        (kept_entry.pk, hold.id)
    ]
    assert audit.after["kept_under_hold"][0]["session"] in {chat["delegate"], chat["sub"]}


# --- 8. no escape through merge -----------------------------------------------------------


def _two_chats() -> tuple[str, str]:
    a = _chat("u-1", at=1000.0, text="held words one")
    core.append_message(session_id=a, role="assistant", content="held words two")
    core.end_session(session_id=a, end_reason="user_exit")
    b = _chat("u-1", at=2000.0, text="other words")
    return a, b


def test_merging_a_held_session_into_another_is_refused_naming_the_hold():
    a, b = _two_chats()
    hold = holds.place_hold(kind="session", subject=a, reason="case 80", actor="ada")
    plan = core.plan_merge(session_ids=[a, b], target_id=b)
    assert len(plan.held) == 1 and f"legal hold #{hold.id}" in plan.held[0]
    before = store_snapshot()
    with pytest.raises(holds.HeldMessagesWouldLeave, match=f"legal hold #{hold.id}"):
        core.merge_sessions(session_ids=[a, b], target_id=b, expected_fingerprint=plan.fingerprint)
    assert store_snapshot() == before
    # Through the audited door too: the refusal is audited with the hold in its detail.
    with pytest.raises(holds.HeldMessagesWouldLeave):
        actions.merge(
            actor=None, session_ids=[a, b], target_id=b, expected_fingerprint=plan.fingerprint
        )
    failed = AuditEntry.objects.get(action="merge")
    assert failed.outcome == "failed" and f"legal hold #{hold.id}" in failed.detail
    assert store_snapshot() == before


def test_a_merge_into_a_held_session_stays_held_and_cannot_be_undone_out_of_the_hold():
    a, b = _two_chats()
    hold = holds.place_hold(kind="session", subject=a, reason="case 81", actor="ada")
    plan = core.plan_merge(session_ids=[a, b], target_id=a)
    merged = core.merge_sessions(
        session_ids=[a, b], target_id=a, expected_fingerprint=plan.fingerprint
    )
    held_messages = _store_message_ids()
    # The undo would move b's messages out of the hold into b: refused.
    with pytest.raises(holds.HeldMessagesWouldLeave, match=f"legal hold #{hold.id}"):
        core.unmerge(merge_id=merged.merge_id)
    # Deleting the husk and purging loses nothing held.
    deletion.delete_batch([b], actor="x", reason="r", job_id=None)
    trash.purge_trash()
    assert _store_message_ids() == held_messages
    with pytest.raises(holds.SessionsHeld):
        deletion.delete_batch([a], actor="x", reason="r", job_id=None)


def test_a_hold_on_a_merged_husk_keeps_the_target_that_holds_its_messages():
    a, b = _two_chats()
    a_messages = {
        int(r[0]) for r in db.fetchall("SELECT id FROM messages WHERE session_id = %s", [a])
    }
    plan = core.plan_merge(session_ids=[a, b], target_id=b)
    core.merge_sessions(session_ids=[a, b], target_id=b, expected_fingerprint=plan.fingerprint)
    hold = holds.place_hold(kind="session", subject=a, reason="case 82", actor="ada")
    assert holds.holds_on([b]) == {b: hold}
    before = store_snapshot()
    with pytest.raises(holds.SessionsHeld, match=f"legal hold #{hold.id}"):
        deletion.delete_batch([b], actor="x", reason="r", job_id=None)
    assert store_snapshot() == before
    assert a_messages <= _store_message_ids()


def test_merge_then_delete_then_hold_then_purge_keeps_the_held_messages_in_the_trash():
    a, b = _two_chats()
    a_messages = {
        int(r[0]) for r in db.fetchall("SELECT id FROM messages WHERE session_id = %s", [a])
    }
    plan = core.plan_merge(session_ids=[a, b], target_id=b)
    merged = core.merge_sessions(
        session_ids=[a, b], target_id=b, expected_fingerprint=plan.fingerprint
    )
    # The target goes to the trash with a's messages; then a hold lands on the husk.
    deletion.delete_batch([b], actor="x", reason="r", job_id=None)
    hold = holds.place_hold(kind="session", subject=a, reason="case 83", actor="ada")
    report = trash.purge_trash_report()
    assert report.purged == 0
    assert [(k.session_id, k.hold.id) for k in report.kept] == [(b, hold.id)]
    assert a_messages <= _trashed_message_ids()
    # Restored, the merge can be undone (the messages go back into the held session).
    entry = TrashEntry.objects.get()
    core.restore_trash_entry(entry_id=entry.pk, actor="ada")
    core.unmerge(merge_id=merged.merge_id)
    assert a_messages == {
        int(r[0]) for r in db.fetchall("SELECT id FROM messages WHERE session_id = %s", [a])
    }


def test_an_undo_that_would_take_messages_out_of_a_target_held_since_is_refused():
    a, b = _two_chats()
    plan = core.plan_merge(session_ids=[a, b], target_id=b)
    merged = core.merge_sessions(
        session_ids=[a, b], target_id=b, expected_fingerprint=plan.fingerprint
    )
    hold = holds.place_hold(kind="session", subject=b, reason="case 84", actor="ada")
    before = store_snapshot()
    with pytest.raises(holds.HeldMessagesWouldLeave, match=f"legal hold #{hold.id}"):
        core.unmerge(merge_id=merged.merge_id)
    assert store_snapshot() == before
    holds.release_hold(hold_id=hold.id, reason="closed", actor="ada")
    assert core.unmerge(merge_id=merged.merge_id).returned_messages == 2


def _merged_husk_with_strays() -> tuple[str, str, list[int]]:
    """A husk a merge absorbed into ``kept``, into which a stale gateway then wrote twice."""
    key = "agent:main:discord:dm:5"
    kept = core.create_session(source="discord", session_key=key).session_id
    core.append_message(session_id=kept, role="user", content="first")
    core.end_session(session_id=kept, end_reason="agent_close")
    husk = core.create_session(source="discord", session_key=key).session_id
    core.append_message(session_id=husk, role="user", content="second")
    plan = core.plan_merge(session_ids=[kept, husk], target_id=kept)
    with clock.use_clock(lambda: time.time() - 120):
        core.merge_sessions(
            session_ids=[kept, husk], target_id=kept, expected_fingerprint=plan.fingerprint
        )
    strays = []
    for content in ("late one", "late two"):
        db.execute(
            "INSERT INTO messages (session_id, role, content, timestamp, active) "
            "VALUES (%s, 'user', %s, %s, 1)",
            [husk, content, time.time()],
        )
        strays.append(int(db.fetchone("SELECT MAX(id) FROM messages")[0]))
    return kept, husk, strays


def test_stray_messages_of_a_held_husk_are_not_moved_out_of_the_hold():
    # Moved into the target, they would be held only while the merge stands: its undo would
    # leave them in a session no hold covers.
    kept, husk, strays = _merged_husk_with_strays()
    hold = holds.place_hold(kind="session", subject=husk, reason="case 85", actor="ada")
    moving = stray.plan_stray_move(session_id=husk)
    assert moving.message_ids == tuple(strays)
    # The preview says so, and offers no move (attack round 46, Z2: it offered one that every
    # click refused with no reason shown).
    assert f"legal hold #{hold.id}" in moving.held and not moving.movable
    before = store_snapshot()
    with pytest.raises(holds.HeldMessagesWouldLeave, match=f"legal hold #{hold.id}"):
        stray.move_stray_messages(session_id=husk, expected_fingerprint=moving.fingerprint)
    assert store_snapshot() == before


def test_a_refused_stray_move_tells_htmx_why(admin_client):
    kept, husk, strays = _merged_husk_with_strays()
    moving = stray.plan_stray_move(session_id=husk)
    hold = holds.place_hold(kind="session", subject=husk, reason="case 87", actor="ada")
    before = store_snapshot()
    answer = admin_client.post(
        f"/sessions/{husk}/stray/move/",
        {"fingerprint": moving.fingerprint},
        headers={"HX-Request": "true"},
    )
    # htmx swaps 2xx answers only: the refusal comes as the fragment, with its reason.
    assert answer.status_code == 200
    body = answer.content.decode()
    assert "Nothing was moved" in body and f"legal hold #{hold.id}" in body
    assert store_snapshot() == before
    plain = admin_client.post(f"/sessions/{husk}/stray/move/", {"fingerprint": moving.fingerprint})
    assert plain.status_code == 409


def test_stray_messages_moved_into_a_session_held_since_are_not_returned_out_of_it():
    kept, husk, strays = _merged_husk_with_strays()
    moving = stray.plan_stray_move(session_id=husk)
    moved = stray.move_stray_messages(session_id=husk, expected_fingerprint=moving.fingerprint)
    hold = holds.place_hold(kind="session", subject=kept, reason="case 86", actor="ada")
    before = store_snapshot()
    with pytest.raises(holds.HeldMessagesWouldLeave, match=f"legal hold #{hold.id}"):
        stray.return_stray_messages(
            session_id=husk, destination_id=kept, message_ids=moved.message_ids
        )
    assert store_snapshot() == before
