"""Legal holds: no delete path removes a held session, and each refusal names the hold.

A hold on a session covers its whole lineage; a hold on a user covers every session of
that user, later ones included. Cascade, bulk preview, bulk job, the delete under the
store lock and the trash purge each refuse (or leave out) held sessions; releasing the
hold lets a later delete through. Run on both backends.
"""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core import db, deletion, holds
from sessions_admin.ledger import actions, jobs, trash
from sessions_admin.ledger.models import AuditEntry, DeleteJob, DeleteJobItem, TrashEntry
from tests.builders import cascade_lineage, store_snapshot
from tests.helpers import session_ids


def _ended(source: str = "cron", user_id: str | None = None, at: float = 1000.0) -> str:
    sid = core.create_session(source=source, user_id=user_id, started_at=at).session_id
    core.append_message(session_id=sid, role="user", content=f"hello from {user_id or source}")
    core.end_session(session_id=sid, end_reason="cron_complete")
    return sid


def test_a_session_hold_covers_its_whole_lineage_and_nothing_else():
    root, delegate, grand_delegate, tip, branch, child, other = cascade_lineage()
    hold = holds.place_hold(kind="session", subject=tip, reason="case 77", actor="ada")
    held = holds.holds_on([root, delegate, grand_delegate, tip, branch, child, other])
    assert set(held) == {root, delegate, grand_delegate, tip, branch, child}
    assert {h.id for h in held.values()} == {hold.id}
    # A segment the runtime adds later is covered too.
    newer = core.rotate_for_compression(session_id=branch, summary="again").new_session_id
    assert newer in holds.holds_on([newer])


def test_a_user_hold_covers_that_users_sessions_later_ones_included():
    theirs = _ended(user_id="u-42")
    mine = _ended(user_id="u-7")
    holds.place_hold(kind="user", subject="u-42", reason="litigation", actor="ada")
    later = _ended(user_id="u-42", at=2000.0)
    assert set(holds.holds_on([theirs, mine, later])) == {theirs, later}


def test_a_cascade_of_a_held_lineage_is_refused_and_changes_nothing():
    root, _d, _g, tip, *_ = cascade_lineage()
    hold = holds.place_hold(kind="session", subject=root, reason="case 77", actor="ada")
    before = store_snapshot()
    plan = core.plan_cascade_delete(session_ids=[tip])
    assert plan.held and all(words == hold.describe() for _, words in plan.held)
    with pytest.raises(holds.SessionsHeld, match=f"legal hold #{hold.id}"):
        core.execute_cascade_delete(
            session_ids=[tip], expected_fingerprint=plan.fingerprint, actor="bob", reason="r"
        )
    assert store_snapshot() == before
    assert TrashEntry.objects.count() == 0


def test_a_hold_placed_after_the_preview_still_stops_the_cascade():
    root, *_rest, other = cascade_lineage()
    plan = core.plan_cascade_delete(session_ids=[root])
    assert not plan.held
    holds.place_hold(kind="session", subject=root, reason="late request", actor="ada")
    before = store_snapshot()
    # The plan changed (it now carries the hold): refused either way, nothing deleted.
    with pytest.raises((core.PlanChanged, holds.SessionsHeld)):
        core.execute_cascade_delete(
            session_ids=[root], expected_fingerprint=plan.fingerprint, actor="bob", reason="r"
        )
    assert store_snapshot() == before


def test_the_delete_under_the_lock_refuses_held_sessions_whoever_calls_it():
    held = _ended(user_id="u-42")
    free = _ended(user_id="u-7")
    hold = holds.place_hold(kind="user", subject="u-42", reason="litigation", actor="ada")
    before = store_snapshot()
    with pytest.raises(holds.SessionsHeld, match=f"legal hold #{hold.id} on a user's") as refused:
        deletion.delete_batch([free, held], actor="x", reason="r", job_id=None)
    # The refusal reaches viewers too (a refused entry's detail): no subject, no reason.
    assert "u-42" not in str(refused.value).replace(held, "")
    assert "litigation" not in str(refused.value)
    assert store_snapshot() == before
    assert TrashEntry.objects.count() == 0  # the copy made before the lock was discarded


def test_a_bulk_preview_leaves_held_sessions_out_and_says_which_hold():
    held = [_ended(user_id="u-42", at=1000.0 + n) for n in range(3)]
    free = [_ended(user_id="u-7", at=1100.0 + n) for n in range(2)]
    hold = holds.place_hold(kind="user", subject="u-42", reason="litigation", actor="ada")
    preview = core.preview_bulk_delete(session_ids=[*held, *free])
    assert set(preview.session_ids) == set(free)
    assert preview.held_excluded == 3
    assert preview.holds == (hold.describe(),)


def test_a_hold_placed_while_a_job_runs_keeps_its_sessions():
    doomed = [_ended(user_id=f"u-{n % 2}", at=1000.0 + n) for n in range(8)]
    job = jobs.create_bulk_delete_job(
        session_ids=doomed, include_live=False, actor="ada", reason="cleanup"
    )
    jobs.run_job(job_id=job, batch_sessions=2, max_batches=1)
    first_batch = set(doomed) - session_ids()
    assert len(first_batch) == 2
    holds.place_hold(kind="user", subject="u-1", reason="late hold", actor="bob")
    jobs.run_job(job_id=job, batch_sessions=2)
    state = DeleteJob.objects.get(pk=job)
    assert state.state == DeleteJob.DONE
    kept = {sid for sid in doomed if sid in session_ids()}
    # What went before the hold is gone; every other u-1 session stays, every u-0 one went.
    user_1 = {sid for n, sid in enumerate(doomed) if n % 2 == 1}
    assert kept == user_1 - first_batch
    skipped = set(
        DeleteJobItem.objects.filter(job_id=job, state=DeleteJobItem.SKIPPED).values_list(
            "session_id", flat=True
        )
    )
    assert skipped == kept


def test_a_purge_keeps_trash_holding_a_held_session_until_the_hold_is_released():
    gone = _ended(user_id="u-42")
    other = _ended(user_id="u-7", at=1001.0)
    for sid in (gone, other):
        plan = core.plan_cascade_delete(session_ids=[sid])
        core.execute_cascade_delete(
            session_ids=[sid], expected_fingerprint=plan.fingerprint, actor="a", reason="r"
        )
    hold = holds.place_hold(kind="user", subject="u-42", reason="litigation", actor="ada")
    held_ops = trash.held_trash_operations()
    assert list(held_ops.values()) == [hold.describe()]
    assert trash.purge_trash() == 1
    left = TrashEntry.objects.get()
    assert left.session_ids == [gone]
    actions.release_hold(actor=None, hold_id=hold.id, reason="case closed")
    assert trash.purge_trash() == 1
    assert TrashEntry.objects.count() == 0


def test_placing_and_releasing_are_audited_and_validated():
    sid = _ended(user_id="u-42")
    with pytest.raises(core.SessionNotFound):
        actions.place_hold(actor=None, kind="session", subject="no-such", reason="r")
    with pytest.raises(core.InvalidInput):
        actions.place_hold(actor=None, kind="session", subject=sid, reason="   ")
    hold = actions.place_hold(actor=None, kind="session", subject=sid, reason="case 9")
    with pytest.raises(core.InvalidInput, match="already under legal hold"):
        actions.place_hold(actor=None, kind="session", subject=sid, reason="again")
    released = actions.release_hold(actor=None, hold_id=hold.id, reason="closed")
    assert released.released_at is not None and released.release_reason == "closed"
    with pytest.raises(core.InvalidInput, match="already released"):
        actions.release_hold(actor=None, hold_id=hold.id, reason="closed")
    assert not holds.holds_on([sid])
    ok = AuditEntry.objects.filter(outcome="ok").order_by("pk")
    assert [(e.action, e.session_ids) for e in ok] == [
        ("place_hold", [sid]),
        ("release_hold", [sid]),
    ]
    # Released: the session can be deleted again.
    plan = core.plan_cascade_delete(session_ids=[sid])
    core.execute_cascade_delete(
        session_ids=[sid], expected_fingerprint=plan.fingerprint, actor="a", reason="r"
    )
    assert sid not in session_ids()


def test_the_holds_command_places_lists_and_releases_through_the_audited_doors():
    import io

    from django.core.management import call_command
    from django.core.management.base import CommandError

    sid = _ended(user_id="u-42")
    out = io.StringIO()
    call_command("holds", "place", "--session", sid, "--reason", "case 5", stdout=out)
    (hold,) = holds.active_holds()
    assert f"legal hold #{hold.id}" in out.getvalue()
    call_command("holds", "place", "--user", "u-42", "--reason", "case 6", stdout=out)
    listing = io.StringIO()
    call_command("holds", "list", stdout=listing)
    assert sid in listing.getvalue() and "u-42" in listing.getvalue()
    with pytest.raises(CommandError, match="No session matches"):
        call_command("holds", "place", "--session", "nope", "--reason", "r", stdout=out)
    with pytest.raises(CommandError, match="Give a reason"):
        call_command("holds", "release", str(hold.id), "--reason", " ", stdout=out)
    call_command("holds", "release", str(hold.id), "--reason", "closed", stdout=out)
    assert [h.kind for h in holds.active_holds()] == ["user"]
    assert list(
        AuditEntry.objects.filter(outcome="ok").order_by("pk").values_list("action", flat=True)
    ) == ["place_hold", "place_hold", "release_hold"]


@pytest.mark.parametrize(
    "subject",
    [
        "alice\u200b",  # zero-width space: reads as "alice"
        "\ufeffalice",  # byte order mark
        "al\u200dice",  # zero-width joiner
        "alice\u202e",  # right-to-left override
        "alice\u2028",  # line separator
        " alice",
        "alice ",
        "%",
    ],
    ids=[
        "zwsp",
        "bom",
        "zwj",
        "bidi",
        "line-separator",
        "leading-space",
        "trailing-space",
        "wildcard",
    ],
)
@pytest.mark.parametrize("kind", [holds.USER, holds.SESSION])
def test_a_hold_subject_that_only_looks_like_an_id_is_refused(subject, kind):
    """A subject with an invisible character or padding would look like the real id and
    cover nothing: it is refused, naming why, and no hold is stored (erasure's rule)."""
    sid = _ended(user_id="alice")
    if kind == holds.SESSION:
        subject = subject.replace("alice", sid)
    with pytest.raises(core.InvalidInput, match="invisible|spaces before or after|wildcard"):
        actions.place_hold(actor="ada", kind=kind, subject=subject, reason="litigation")
    assert db.fetchall("SELECT subject FROM sessions_admin_holds") == []
    assert holds.holds_on([sid]) == {}
    assert not AuditEntry.objects.filter(action="place_hold", outcome="ok").exists()
