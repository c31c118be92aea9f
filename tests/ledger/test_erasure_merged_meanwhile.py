"""A merge made while an erasure runs (or between a failed run and its retry) never lets the
erasure take another person's messages, nor leave the subject's in another person's session
while it says they were erased (attack round 38: G-merge, merge2, R, T).

The erasure carries out the plan it recorded; each delete batch, and each part of a large
session, checks under the store's lock that no merge the plan did not know names one of its
sessions. One that does stops the erasure with that merge named and nothing of the batch
deleted; once support undoes the merge, running it again finishes, and the other person's
messages are all still there.
"""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core import erasure as erasure_core
from sessions_admin.core.erasure import MergedSincePlan, Subject

ALICE = "alice-38"
BOB = "bob-38"


def _session(user: str, n: int, words: str) -> str:
    sid = core.create_session(source="telegram", user_id=user).session_id
    core.append_messages(
        session_id=sid,
        messages=[{"role": "user", "content": f"{words} {k}"} for k in range(n)],
    )
    core.end_session(session_id=sid, end_reason="user_exit")
    return sid


def _messages_saying(words: str) -> int:
    return db.fetchone("SELECT COUNT(*) FROM messages WHERE content LIKE %s", [f"{words}%"])[0]


@pytest.fixture(params=["whole", "in parts"])
def batch_messages(request, monkeypatch) -> str:
    if request.param == "in parts":
        # Alice's sessions are larger than a batch: deleted in parts, each part checked.
        monkeypatch.setattr("sessions_admin.core.deletion.batches.BATCH_MESSAGES", 4)
    return request.param


@pytest.mark.parametrize("direction", ["bob into alice", "alice into bob"])
def test_a_merge_made_after_the_plan_stops_the_erasure_until_it_is_undone(
    batch_messages, direction
):
    alice = [_session(ALICE, 6, "ALICE-WORDS"), _session(ALICE, 6, "ALICE-WORDS")]
    bob = _session(BOB, 5, "BOB-WORDS")
    plan = erasure_core.plan_erasure(subject=Subject(user_id=ALICE))
    assert set(plan.session_ids) == set(alice)
    before = erasure_core.rows_present(plan=plan)
    # Support merges while the erasure is queued (or between a failed run and its retry).
    if direction == "bob into alice":
        merge = core.merge_sessions(session_ids=[alice[1], bob], target_id=alice[1])
    else:
        merge = core.merge_sessions(session_ids=[bob, alice[1]], target_id=bob)
    with pytest.raises(MergedSincePlan) as refused:
        erasure_core.erase(subject=Subject(user_id=ALICE), plan=plan, before=before)
    assert f"merge #{merge.merge_id}" in str(refused.value)
    assert _messages_saying("BOB-WORDS") == 5  # never another person's messages
    if direction == "alice into bob":
        # Her moved messages were not erased behind a receipt that says so: they wait.
        assert _messages_saying("ALICE-WORDS") >= 6
    core.unmerge(merge_id=merge.merge_id)
    result = erasure_core.erase(subject=Subject(user_id=ALICE), plan=plan, before=before)
    assert _messages_saying("BOB-WORDS") == 5
    assert _messages_saying("ALICE-WORDS") == 0
    assert result.messages == 12
    assert db.fetchone("SELECT COUNT(*) FROM sessions WHERE id = %s", [bob])[0] == 1


def test_the_plans_own_merges_do_not_stop_it():
    # Alice's own sessions merged before the plan: the erasure takes them as planned.
    alice = [_session(ALICE, 3, "ALICE-WORDS"), _session(ALICE, 3, "ALICE-WORDS")]
    core.merge_sessions(session_ids=alice, target_id=alice[0])
    plan = erasure_core.plan_erasure(subject=Subject(user_id=ALICE))
    erasure_core.erase(subject=Subject(user_id=ALICE), plan=plan)
    assert _messages_saying("ALICE-WORDS") == 0


def test_a_recorded_plan_keeps_the_merges_it_knew():
    alice = _session(ALICE, 2, "ALICE-WORDS")
    plan = erasure_core.plan_erasure(subject=Subject(user_id=ALICE))
    again = erasure_core.plan_from_record(erasure_core.plan_record(plan))
    assert again.known_merges == plan.known_merges == ()
    assert alice in again.session_ids


@pytest.fixture
def failed_midway():
    """Alice's erasure began (its plan recorded) and failed before erasing: a session of hers
    in the store, one in the trash; then the second admin's moves below."""
    from sessions_admin.ledger import actions
    from sessions_admin.ledger.models import ErasureRequest, TrashEntry

    kept = _session(ALICE, 3, "ALICE-WORDS")
    trashed = _session(ALICE, 3, "ALICE-WORDS")
    fingerprint = core.plan_cascade_delete(session_ids=[trashed]).fingerprint
    actions.cascade_delete(
        actor=None,
        session_ids=[trashed],
        include_branches=False,
        expected_fingerprint=fingerprint,
        reason="tidy",
    )
    entry = TrashEntry.objects.get()
    request = stopped_after_its_plan(Subject(user_id=ALICE))
    assert request.state == ErasureRequest.FAILED
    return {"kept": kept, "trashed": trashed, "entry": entry, "request": request}


def stopped_after_its_plan(subject: Subject):
    """An erasure request for ``subject`` confirmed, begun (its plan recorded), then stopped
    before erasing anything: failed, waiting to be run again."""
    from sessions_admin.core import faults
    from sessions_admin.ledger import actions
    from sessions_admin.ledger import erasure as erasure_ledger

    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-38",
        expected_fingerprint=erasure_ledger.plan(subject).fingerprint,
        start=False,
    )

    def stop() -> None:
        raise RuntimeError("the worker stopped here")

    faults.run_at("erasure.after_plan_recorded", stop)
    try:
        with pytest.raises(RuntimeError):
            actions.run_erasure(request_id=request.pk)
    finally:
        faults._actions.clear()
        faults._hits.clear()
    request.refresh_from_db()
    return request


def test_nobody_restores_or_deletes_what_an_unfinished_erasure_is_taking(failed_midway):
    from sessions_admin.core.errors import StoreError
    from sessions_admin.ledger import actions
    from sessions_admin.ledger.erasure import SessionsUnderErasure
    from sessions_admin.ledger.models import DeleteJob, ErasureRequest, TrashEntry

    kept, trashed = failed_midway["kept"], failed_midway["trashed"]
    request = failed_midway["request"]
    bob = _session(BOB, 5, "BOB-WORDS")
    before = (_messages_saying("ALICE-WORDS"), list(TrashEntry.objects.values_list("pk", "state")))
    attempts = [
        lambda: actions.restore(actor=None, entry_id=failed_midway["entry"].pk),
        lambda: actions.cascade_delete(
            actor=None,
            session_ids=[kept],
            include_branches=False,
            expected_fingerprint=core.plan_cascade_delete(session_ids=[kept]).fingerprint,
            reason="second admin",
        ),
        lambda: actions.start_bulk_delete(
            actor=None, session_ids=[kept], include_live=False, reason="second admin"
        ),
        lambda: actions.merge(
            actor=None,
            session_ids=[kept, bob],
            target_id=kept,
            expected_fingerprint=core.plan_merge(
                session_ids=[kept, bob], target_id=kept
            ).fingerprint,
            reason="second admin",
            typed_count=1,
        ),
    ]
    for attempt in attempts:
        with pytest.raises(SessionsUnderErasure) as refused:
            attempt()
        assert isinstance(refused.value, StoreError)
        assert f"#{request.pk}" in str(refused.value)
    assert (
        _messages_saying("ALICE-WORDS"),
        list(TrashEntry.objects.values_list("pk", "state")),
    ) == before
    assert not DeleteJob.objects.exists()
    actions.run_erasure(request_id=request.pk)
    request.refresh_from_db()
    assert request.state == ErasureRequest.DONE
    assert request.error == ""  # the first run's failure no longer describes it
    assert _messages_saying("ALICE-WORDS") == 0
    assert not any(
        trashed in ids for ids in TrashEntry.objects.values_list("session_ids", flat=True)
    )


def test_a_child_a_cascade_kept_is_erased_with_the_trashed_parent():
    # Attack round 38, E: amy's root cascaded first (its child, with no user id as Hermes
    # writes a sub-agent run, kept with its link cleared; the trash records the link), then
    # amy's erasure: the child is hers and goes, and another user's kept child stays.
    from sessions_admin.ledger import actions
    from sessions_admin.ledger import erasure as erasure_ledger

    root = _session(ALICE, 2, "ALICE-WORDS")
    kid = core.create_session(source="tool", parent_session_id=root).session_id
    core.append_messages(session_id=kid, messages=[{"role": "user", "content": "ALICE-WORDS kid"}])
    core.end_session(session_id=kid, end_reason="user_exit")
    other = core.create_session(source="tool", parent_session_id=root, user_id=BOB).session_id
    core.append_messages(session_id=other, messages=[{"role": "user", "content": "BOB-WORDS"}])
    core.end_session(session_id=other, end_reason="user_exit")
    plan = core.plan_cascade_delete(session_ids=[root])
    assert kid not in plan.session_ids  # an untyped child: kept, its link cleared
    actions.cascade_delete(
        actor=None,
        session_ids=[root],
        include_branches=False,
        expected_fingerprint=plan.fingerprint,
        reason="tidy",
    )
    assert db.fetchone("SELECT parent_session_id FROM sessions WHERE id = %s", [kid])[0] is None
    subject = Subject(user_id=ALICE)
    full = erasure_ledger.plan(subject)
    assert kid in full.store.session_ids and other not in full.store.session_ids
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-E",
        expected_fingerprint=full.fingerprint,
        start=False,
    )
    actions.run_erasure(request_id=request.pk)
    assert _messages_saying("ALICE-WORDS") == 0
    assert _messages_saying("BOB-WORDS") == 1
