"""Attack round 44 (docs only): merges, then the trash or a hold, reached other people's data.

A merge moves the absorbed session's messages and children (a delegate without a user id)
into its target; its record is all that still says whose they are. The erasures and holds
looked only at today's parent links and at the store:

- bob's erasure after bob's session was merged into alice's conversation left bob's delegate
  in the store for good (the merge had put it below alice's session);
- a user hold on bob placed after that merge did not cover the delegate: a bulk delete took
  it and a purge destroyed it;
- once the target was cascaded into the trash, bob's erasure left bob's moved messages there
  (a restore brought them back after a "done" receipt), and alice's erasure purged bob's moved
  messages and delegate with alice's conversation.
"""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core import db, holds
from sessions_admin.core.erasure import Subject
from sessions_admin.core.errors import InvalidInput
from sessions_admin.demo.consistency import check_store
from sessions_admin.ledger import actions, jobs
from sessions_admin.ledger import erasure as erasure_ledger
from sessions_admin.ledger.models import TrashEntry
from sessions_admin.ledger.trash import decode_trash_value
from tests.builders import erasures_run_inline  # noqa: F401 - an autouse fixture

ALICE = "alice-44"
BOB = "bob-5521"
CAROL = "carol-77"


def _session(
    user: str | None, words: list[str], *, parent: str | None = None, end: str = "user_exit"
) -> str:
    sid = core.create_session(
        source="telegram" if user else "subagent", user_id=user, parent_session_id=parent
    ).session_id
    for n, text in enumerate(words):
        core.append_message(
            session_id=sid, role="user" if n % 2 == 0 else "assistant", content=text
        )
    core.end_session(session_id=sid, end_reason=end)
    return sid


def _store_says(text: str) -> int:
    return db.fetchone("SELECT COUNT(*) FROM messages WHERE content = %s", [text])[0]


def _trash_says(text: str) -> int:
    return sum(
        1
        for payload in TrashEntry.objects.values_list("payload", flat=True)
        for message in payload.get("messages", [])
        if decode_trash_value(message.get("content")) == text
    )


def _exists(session_id: str) -> bool:
    return core.lineage.session_row(session_id) is not None


@pytest.fixture
def merged():
    """alice's conversation (root, a continuation), bob's session with a delegate; support
    merged bob's session into alice's continuation, which put bob's delegate below it."""
    a1 = _session(ALICE, ["alice secret one", "ok alice"], end="compression")
    a2 = _session(None, ["alice secret two", "ok2"], parent=a1)
    b1 = _session(BOB, ["bob private one", "ok bob"])
    bd = _session(None, ["delegate task for bob"], parent=b1)
    core.merge_sessions(session_ids=[a2, b1], target_id=a2)
    assert core.lineage.session_row(bd)["parent_session_id"] == a2
    return {"a1": a1, "a2": a2, "b1": b1, "bd": bd}


def _erase(subject: Subject):
    plan = erasure_ledger.plan(subject)
    request = actions.request_erasure(
        actor=None, subject=subject, reference="DSR-44", expected_fingerprint=plan.fingerprint
    )
    actions.run_erasure(request_id=request.pk)
    request.refresh_from_db()
    return plan, request


def _cascade_into_trash(root: str) -> None:
    plan = core.plan_cascade_delete(session_ids=[root])
    actions.cascade_delete(
        actor=None,
        session_ids=[root],
        include_branches=True,
        expected_fingerprint=plan.fingerprint,
        reason="cleanup",
        lose_undo=True,
    )


def test_the_erasure_of_the_absorbed_person_takes_the_delegate_the_merge_moved(merged):
    plan, request = _erase(Subject(user_id=BOB))
    assert merged["bd"] in plan.store.session_ids
    assert request.state == "done"
    assert not _exists(merged["bd"]) and _store_says("delegate task for bob") == 0
    assert _store_says("bob private one") == 0
    # alice's conversation is untouched.
    assert _exists(merged["a2"]) and _store_says("alice secret two") == 1


def test_a_user_hold_placed_after_the_merge_covers_the_delegate_it_moved(merged):
    hold = holds.place_hold(kind=holds.USER, subject=BOB, reason="litigation", actor="lee")
    assert holds.holds_on([merged["bd"]])[merged["bd"]].id == hold.id
    other = _session(CAROL, ["carol's old chat"])
    job = jobs.create_bulk_delete_job(
        session_ids=[merged["bd"], other], include_live=False, actor="ada", reason="cleanup"
    )
    jobs.run_job(job_id=job)
    assert not _exists(other)
    assert _exists(merged["bd"]) and _store_says("delegate task for bob") == 1
    # A session hold on bob's session covers it too, and what is below it.
    holds.release_hold(hold_id=hold.id, reason="settled", actor="lee")
    below = _session(None, ["the delegate's own delegate"], parent=merged["bd"])
    on_session = holds.place_hold(
        kind=holds.SESSION, subject=merged["b1"], reason="claim", actor="lee"
    )
    covered = holds.holds_on([merged["bd"], below])
    assert {sid: h.id for sid, h in covered.items()} == {
        merged["bd"]: on_session.id,
        below: on_session.id,
    }


def test_the_absorbed_persons_moved_messages_in_the_trash_are_erased_and_never_restored(merged):
    _cascade_into_trash(merged["a1"])
    assert _trash_says("bob private one") == 1
    plan, request = _erase(Subject(user_id=BOB))
    assert plan.trash.prune_messages
    assert request.state == "done"
    assert _trash_says("bob private one") == 0 and _trash_says("ok bob") == 0
    assert request.receipt["erased"]["messages_in_trash"] == 2
    assert _store_says("delegate task for bob") == 0  # the delegate the cascade kept went too
    # alice's conversation comes back whole, without a word of bob's.
    entry = TrashEntry.objects.order_by("pk").first()
    actions.restore(actor=None, entry_id=entry.pk)
    assert _store_says("alice secret two") == 1 and _store_says("alice secret one") == 1
    assert _store_says("bob private one") == 0 and not _exists(merged["bd"])


def test_the_subjects_message_moved_into_another_persons_trashed_session_is_erased():
    group_alice = _session(ALICE, ["alice in group"])
    group_carol = _session(CAROL, ["carol in group"])
    core.merge_sessions(session_ids=[group_carol, group_alice], target_id=group_carol)
    _cascade_into_trash(group_carol)
    _plan, request = _erase(Subject(user_id=ALICE))
    assert request.state == "done"
    assert _trash_says("alice in group") == 0 and _trash_says("carol in group") == 1
    actions.restore(actor=None, entry_id=TrashEntry.objects.order_by("pk").first().pk)
    assert _store_says("carol in group") == 1 and _store_says("alice in group") == 0


def test_the_targets_persons_erasure_never_takes_what_the_merge_moved_in_from_the_trash(merged):
    with pytest.raises(InvalidInput, match="unmerged first"):
        erasure_ledger.plan(Subject(user_id=ALICE))
    _cascade_into_trash(merged["a1"])
    with pytest.raises(InvalidInput, match="another user's"):
        erasure_ledger.plan(Subject(user_id=ALICE))
    assert _trash_says("bob private one") == 1 and _store_says("delegate task for bob") == 1


# --- attack round 44, the verification (helper-74) ---------------------------------------------


def test_a_merge_of_merges_still_gives_the_delegate_to_the_person_it_was_below(merged):
    """bob's delegate went below alice's continuation (merge 1), then with it into carol's
    session (merge 2): it is still bob's, for his erasure as for a hold on him."""
    below = _session(None, ["sub-delegate of bob"], parent=merged["bd"])
    carol = _session(CAROL, ["carol's chat"])
    core.merge_sessions(session_ids=[carol, merged["a2"]], target_id=carol)
    assert core.lineage.session_row(merged["bd"])["parent_session_id"] == carol
    hold = holds.place_hold(kind=holds.USER, subject=BOB, reason="claim", actor="lee")
    assert {merged["bd"], below} <= set(holds.holds_on([merged["bd"], below]))
    holds.release_hold(hold_id=hold.id, reason="settled", actor="lee")

    plan, request = _erase(Subject(user_id=BOB))
    assert {merged["b1"], merged["bd"], below} <= set(plan.store.session_ids)
    assert request.state == "done"
    assert _store_says("delegate task for bob") == 0 and _store_says("sub-delegate of bob") == 0
    assert _store_says("carol's chat") == 1 and _store_says("alice secret two") == 1


def test_an_unmerge_waits_for_a_child_it_moved_that_is_in_the_trash(merged):
    """Undone while bob's delegate was in the trash, the merge gave back only what the store
    held: restored afterwards, the delegate stayed below alice's session for good."""
    job = jobs.create_bulk_delete_job(
        session_ids=[merged["bd"]], include_live=False, actor="ada", reason="cleanup"
    )
    jobs.run_job(job_id=job)
    assert not _exists(merged["bd"])
    merge_id = db.fetchone("SELECT MAX(id) FROM sessions_admin_merges")[0]
    with pytest.raises(InvalidInput, match="is in the trash"):
        actions.unmerge(actor=None, merge_id=merge_id, reason="wrong merge")
    assert core.lineage.session_row(merged["b1"])["end_reason"] == "merged"  # nothing changed

    actions.restore(actor=None, entry_id=TrashEntry.objects.get().pk)
    actions.unmerge(actor=None, merge_id=merge_id, reason="wrong merge")
    assert core.lineage.session_row(merged["bd"])["parent_session_id"] == merged["b1"]
    plan = erasure_ledger.plan(Subject(user_id=ALICE))
    assert merged["bd"] not in plan.store.session_ids


def test_a_restore_of_an_entry_an_erasure_cut_messages_from_leaves_the_counters_right(merged):
    _cascade_into_trash(merged["a1"])
    _erase(Subject(user_id=BOB))
    actions.restore(actor=None, entry_id=TrashEntry.objects.order_by("pk").first().pk)
    assert core.lineage.session_row(merged["a2"])["message_count"] == 2
    assert check_store() == []


def test_the_tool_calls_cut_with_the_messages_leave_the_tool_call_count_right():
    a1 = _session(ALICE, ["alice asks"], end="compression")
    a2 = _session(None, ["alice again"], parent=a1)
    b1 = core.create_session(source="telegram", user_id=BOB).session_id
    calls = [
        {"id": f"c{n}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for n in range(2)
    ]
    core.append_messages(
        session_id=b1,
        messages=[
            {"role": "user", "content": "bob asks"},
            {"role": "assistant", "content": None, "tool_calls": calls},
        ],
    )
    core.end_session(session_id=b1, end_reason="user_exit")
    core.merge_sessions(session_ids=[a2, b1], target_id=a2)
    assert core.lineage.session_row(a2)["tool_call_count"] == 2
    _cascade_into_trash(a1)
    _erase(Subject(user_id=BOB))
    actions.restore(actor=None, entry_id=TrashEntry.objects.order_by("pk").first().pk)
    row = core.lineage.session_row(a2)
    assert (row["message_count"], row["tool_call_count"]) == (1, 0)
    assert check_store() == []


def test_one_merge_of_two_peoples_sessions_still_knows_the_second_after_the_first_is_erased():
    """One merge took bob's and carol's sessions into alice's: bob's erasure closed its record,
    which then no longer said what it moved of carol's (attack round 44's second verification)."""
    a1 = _session(ALICE, ["alice asks"], end="compression")
    a2 = _session(None, ["alice again"], parent=a1)
    b1 = _session(BOB, ["bob private one"])
    bd = _session(None, ["delegate task for bob"], parent=b1)
    c1 = _session(CAROL, ["carol private one", "ok carol"])
    cd = _session(None, ["delegate task for carol"], parent=c1)
    core.merge_sessions(session_ids=[a2, b1, c1], target_id=a2)
    _erase(Subject(user_id=BOB))
    assert _store_says("bob private one") == 0 and not _exists(bd)

    hold = holds.place_hold(kind=holds.USER, subject=CAROL, reason="claim", actor="lee")
    assert holds.holds_on([cd])[cd].id == hold.id
    holds.release_hold(hold_id=hold.id, reason="settled", actor="lee")
    plan, request = _erase(Subject(user_id=CAROL))
    assert cd in plan.store.session_ids and len(plan.store.other_messages) == 2
    assert request.state == "done"
    assert _store_says("carol private one") == 0 and _store_says("ok carol") == 0
    assert not _exists(cd)
    assert _store_says("alice again") == 1 and check_store() == []


def test_a_restored_entrys_copy_of_the_moved_messages_is_scrubbed_not_counted(merged):
    """Cascaded, then restored: the entry keeps a copy of the rows it put back. The erasure
    scrubs bob's from it, and counts his messages once, where they are: in the store."""
    _cascade_into_trash(merged["a1"])
    actions.restore(actor=None, entry_id=TrashEntry.objects.order_by("pk").first().pk)
    _plan, request = _erase(Subject(user_id=BOB))
    erased = request.receipt["erased"]
    assert erased["messages_in_trash"] == 0 and erased["sessions_in_trash"] == 0
    assert _trash_says("bob private one") == 0 and _store_says("bob private one") == 0
    assert _trash_says("alice secret two") == 1  # the restored entry's record of alice's


def test_a_restore_of_an_entry_an_unfinished_erasure_cuts_the_persons_messages_from_waits(
    merged,
):
    """bob's moved messages are in alice's trashed session; bob's erasure began and stopped
    (its plan recorded): restoring alice's entry now would put them back behind a receipt that
    says they were erased (attack round 44: a restore raced the erasure's confirmation)."""
    from sessions_admin.ledger.erasure import SessionsUnderErasure
    from tests.ledger.test_erasure_merged_meanwhile import stopped_after_its_plan

    _cascade_into_trash(merged["a1"])
    request = stopped_after_its_plan(Subject(user_id=BOB))
    entry = TrashEntry.objects.order_by("pk").first()
    with pytest.raises(SessionsUnderErasure):
        actions.restore(actor=None, entry_id=entry.pk)
    assert _store_says("bob private one") == 0 and _trash_says("bob private one") == 1

    actions.run_erasure(request_id=request.pk)  # finished from its page
    request.refresh_from_db()
    assert request.state == "done" and request.receipt["erased"]["messages_in_trash"] == 2
    actions.restore(actor=None, entry_id=entry.pk)
    assert _store_says("bob private one") == 0 and _store_says("alice secret two") == 1
    assert check_store() == []


def _erasure_raced_by_a_restore(monkeypatch, subject: Subject, entry: TrashEntry):
    """``subject``'s erasure confirmed, not run yet; its run restores ``entry`` just after it
    planned, before it records its plan (the race's other side committing then)."""
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-45",
        expected_fingerprint=erasure_ledger.plan(subject).fingerprint,
        start=False,
    )
    planned = erasure_ledger.plan

    def plan_then_restore(asked: Subject):
        full = planned(asked)
        if asked == subject and TrashEntry.objects.get(pk=entry.pk).state != "restored":
            actions.restore(actor=None, entry_id=entry.pk)
        return full

    monkeypatch.setattr(erasure_ledger, "plan", plan_then_restore)
    return request


def _bobs_erasure_raced_by_a_restore(merged, monkeypatch):
    """alice's conversation (with bob's moved messages) in the trash, bob's erasure raced by
    its restore (``_erasure_raced_by_a_restore``). The request and the entry."""
    _cascade_into_trash(merged["a1"])
    entry = TrashEntry.objects.order_by("pk").first()
    return _erasure_raced_by_a_restore(monkeypatch, Subject(user_id=BOB), entry), entry


def test_a_restore_committed_after_the_erasure_planned_leaves_nothing_of_the_person(
    merged, monkeypatch
):
    """Attack round 44, Q1: bob's moved messages were in alice's trashed session; a restore of
    it, sent as bob's erasure was confirmed, passed its check before the run recorded its plan
    and committed after the run had planned. The run said ``done`` and bob's messages stayed
    in alice's session. The run now takes them back out as it closes the merge's record, and
    counts them."""
    request, entry = _bobs_erasure_raced_by_a_restore(merged, monkeypatch)
    actions.run_erasure(request_id=request.pk)
    request.refresh_from_db()
    assert TrashEntry.objects.get(pk=entry.pk).state == "restored"
    assert request.state == "done"
    assert _store_says("bob private one") == 0 and _store_says("ok bob") == 0
    assert _trash_says("bob private one") == 0
    # alice's conversation is back, whole, with nothing of bob's in it.
    assert _store_says("alice secret two") == 1 and _store_says("ok2") == 1
    erased = request.receipt["erased"]
    # Counted once, where the databases lost them: in alice's session in the store.
    assert erased["messages_in_other_sessions"] + erased["messages_in_trash"] == 2
    assert erased["messages_in_other_sessions"] == 2
    assert check_store() == []


def test_the_messages_a_restore_put_back_are_counted_once_when_the_store_was_busy(
    merged, monkeypatch
):
    """The step that takes them back is retried when the store is busy: it finds them again,
    and they are counted (and recorded) once."""
    from django.db import OperationalError

    from sessions_admin.core import faults

    request, _entry = _bobs_erasure_raced_by_a_restore(merged, monkeypatch)

    def busy() -> None:
        raise OperationalError("database is locked")

    faults.run_at("erasure.closing_merges", busy)
    try:
        actions.run_erasure(request_id=request.pk)
    finally:
        faults._actions.clear()
        faults._hits.clear()
    request.refresh_from_db()
    assert request.state == "done" and _store_says("bob private one") == 0
    assert request.receipt["erased"]["messages_in_other_sessions"] == 2
    assert check_store() == []


def test_a_restore_that_reaches_the_store_after_the_erasure_began_is_refused_there(merged):
    """The other order of the same race: the restore's first check ran before the erasure
    recorded its plan, and its store transaction began after. Checked again inside that
    transaction (under the store's write lock), it is refused and puts nothing back."""
    from sessions_admin.ledger.erasure import RESTORING_TRASH, SessionsUnderErasure
    from tests.ledger.test_erasure_merged_meanwhile import stopped_after_its_plan

    _cascade_into_trash(merged["a1"])
    request = stopped_after_its_plan(Subject(user_id=BOB))
    entry = TrashEntry.objects.order_by("pk").first()
    # The restore's store transaction alone, as if the action's check had run before the
    # erasure recorded its plan: with the trash restores use, and with the default one.
    for trash in (RESTORING_TRASH, None):
        with pytest.raises(SessionsUnderErasure):
            core.restore_trash_entry(entry_id=entry.pk, actor="lee", trash=trash)
    entry.refresh_from_db()
    assert entry.state != "restored" and entry.restoring_since is None
    assert not _exists(merged["a2"]) and _store_says("bob private one") == 0
    actions.run_erasure(request_id=request.pk)
    request.refresh_from_db()
    assert request.state == "done" and request.receipt["erased"]["messages_in_trash"] == 2
    actions.restore(actor=None, entry_id=entry.pk)
    assert _store_says("bob private one") == 0 and _store_says("alice secret two") == 1
    assert check_store() == []


def test_the_persons_own_session_a_restore_put_back_as_the_erasure_planned_is_counted(
    monkeypatch,
):
    """Attack round 45, S1: dave's session was in the trash; a restore of it committed after
    his erasure's run had planned (the run that took over a killed one). The run erased it from
    the store, rightly, but its receipt counted none of its messages: the plan had them in the
    trash, and the trash entry, restored, lost nothing."""
    dave = "dave-45"
    trashed = _session(dave, ["dave one", "dave two", "dave three", "dave four"])
    kept = _session(dave, ["dave five", "dave six"])
    _cascade_into_trash(trashed)
    entry = TrashEntry.objects.get()
    request = _erasure_raced_by_a_restore(monkeypatch, Subject(user_id=dave), entry)
    actions.run_erasure(request_id=request.pk)
    request.refresh_from_db()
    assert request.state == "done"
    assert not _exists(trashed) and not _exists(kept)
    assert db.fetchone("SELECT COUNT(*) FROM messages WHERE content LIKE %s", ["dave %"])[0] == 0
    erased = request.receipt["erased"]
    # What the databases lost: 2 sessions and 6 messages, each counted once.
    assert erased["sessions"] + erased.get("sessions_in_trash", 0) == 2
    assert erased["messages"] + erased.get("messages_in_trash", 0) == 6
    assert check_store() == []
