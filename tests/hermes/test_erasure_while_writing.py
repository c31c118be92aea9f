"""An erasure while hermes-agent keeps writing to the subject's sessions with its own SQL
(attack round 38, A and H).

Hermes's ``SessionDB`` does not go through the core, so nothing refuses its writes while an
erasure runs. What it appends to one of the subject's sessions, and the sessions it starts
below them (a delegate, with no user id), are erased too and counted in the receipt; a child
it starts there for another user stays, whole. The runtime writes exactly between two of the
erasure's delete batches, in its own process.
"""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core import db, faults
from sessions_admin.core.erasure import Subject
from sessions_admin.ledger import actions
from sessions_admin.ledger import erasure as erasure_ledger
from sessions_admin.ledger.models import ErasureRequest
from tests.hermes.checks import assert_healthy
from tests.hermes.conftest import call

ALICE = "alice-h38"
BOB = "bob-h38"


def _session_ops(session_id: str, user: str | None, words: str, count: int, **more) -> list:
    kwargs = {"user_id": user, **more} if user else more
    return [
        call("state.create_session", session_id, "telegram" if user else "cli", **kwargs),
        *(call("state.append_message", session_id, "user", f"{words} {k}") for k in range(count)),
    ]


def _count(sql: str, *params) -> int:
    return int(db.fetchone(sql, list(params))[0])


@pytest.fixture
def one_session_a_batch(monkeypatch):
    monkeypatch.setattr("sessions_admin.core.deletion.batches.BATCH_SESSIONS", 1)


@pytest.fixture
def no_hook():
    yield
    faults._actions.clear()
    faults._hits.clear()


def test_what_hermes_writes_during_an_erasure_is_erased_and_counted(
    hermes, attach, one_session_a_batch, no_hook
):
    hermes.run(
        [
            *_session_ops("al-1", ALICE, "ALICE-WORDS", 4),
            call("state.end_session", "al-1", "user_exit"),
            *_session_ops("al-2", ALICE, "ALICE-WORDS", 5),
            call("state.end_session", "al-2", "user_exit"),
            *_session_ops("al-3", ALICE, "ALICE-WORDS", 6),  # live: the runtime's
            *_session_ops("bob-1", BOB, "BOB-WORDS", 3),
        ]
    )
    attach()
    subject = Subject(user_id=ALICE)
    plan = erasure_ledger.plan(subject)
    assert set(plan.store.session_ids) == {"al-1", "al-2", "al-3"}
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-H38",
        expected_fingerprint=plan.fingerprint,
        start=False,
    )
    written: dict[str, int] = {}

    def runtime_writes() -> None:
        # One of Alice's sessions is gone; Hermes goes on with those left, in its own process.
        left = sorted(
            r[0] for r in db.fetchall("SELECT id FROM sessions WHERE user_id = %s", [ALICE])
        )
        assert len(left) == 2
        parent = left[0]
        hermes.run(
            [
                *(
                    call("state.append_message", sid, "assistant", f"ALICE-WORDS late {k}")
                    for sid in left
                    for k in range(3)
                ),
                # A delegate the runtime starts below her session: no user id of its own.
                *_session_ops("al-child", None, "ALICE-WORDS child", 2, parent_session_id=parent),
                # Bob's session started below hers (another user): his, kept.
                *_session_ops("bob-child", BOB, "BOB-WORDS child", 2, parent_session_id=parent),
            ]
        )
        written["late"] = 3 * len(left) + 2

    faults.run_at("erasure.between_batches", runtime_writes)
    receipt = actions.run_erasure(request_id=request.pk)

    assert written["late"] == 8
    request.refresh_from_db()
    assert request.state == ErasureRequest.DONE
    # Nothing of hers is left, the delegate's messages included; Bob's are all there.
    assert _count("SELECT COUNT(*) FROM messages WHERE content LIKE %s", "ALICE-WORDS%") == 0
    assert (
        _count("SELECT COUNT(*) FROM sessions WHERE id IN ('al-1','al-2','al-3','al-child')") == 0
    )
    assert _count("SELECT COUNT(*) FROM messages WHERE content LIKE %s", "BOB-WORDS%") == 5
    assert _count("SELECT COUNT(*) FROM sessions WHERE id = 'bob-child'") == 1
    # The receipt counts what went: 15 messages counted before, 8 written during, 4 sessions.
    assert receipt["erased"]["messages"] == 15 + 8
    assert receipt["erased"]["sessions"] == 4
    assert erasure_ledger.hash_of(request.salt, "al-child") in receipt["session_ids_sha256"]
    assert_healthy(hermes)


def test_a_run_killed_after_a_late_child_was_added_resumes_with_it(
    hermes, attach, one_session_a_batch, no_hook
):
    """The child added to the plan is recorded before it is deleted: a run that stops right
    after (here: a database error on the next batch) is finished by running it again, which
    erases and counts it too."""
    hermes.run(
        [
            *_session_ops("al-1", ALICE, "ALICE-WORDS", 2),
            call("state.end_session", "al-1", "user_exit"),
            *_session_ops("al-2", ALICE, "ALICE-WORDS", 2),
        ]
    )
    attach()
    subject = Subject(user_id=ALICE)
    plan = erasure_ledger.plan(subject)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-H38b",
        expected_fingerprint=plan.fingerprint,
        start=False,
    )

    def runtime_starts_a_child() -> None:
        left = [r[0] for r in db.fetchall("SELECT id FROM sessions WHERE user_id = %s", [ALICE])]
        hermes.run(_session_ops("al-kid", None, "ALICE-WORDS kid", 3, parent_session_id=left[0]))

    def the_run_dies() -> None:
        raise RuntimeError("the worker stopped")

    faults.run_at("erasure.between_batches", runtime_starts_a_child)
    # The next batch is the child's: the run stops right after it committed.
    faults.run_at("delete.after_commit", the_run_dies, nth=2)
    with pytest.raises(RuntimeError):
        actions.run_erasure(request_id=request.pk)
    request.refresh_from_db()
    assert request.state == ErasureRequest.FAILED
    assert "al-kid" in erasure_ledger.recorded_run(request)[0].store.session_ids
    faults._actions.clear()
    receipt = actions.run_erasure(request_id=request.pk)
    assert _count("SELECT COUNT(*) FROM messages WHERE content LIKE %s", "ALICE-WORDS%") == 0
    assert receipt["erased"]["sessions"] == 3
    assert erasure_ledger.hash_of(request.salt, "al-kid") in receipt["session_ids_sha256"]
    assert_healthy(hermes)


def test_what_hermes_appends_to_a_session_erased_in_parts_is_counted(
    hermes, attach, monkeypatch, no_hook
):
    # Larger than a batch: erased in parts, the runtime appending between two of them.
    monkeypatch.setattr("sessions_admin.core.deletion.batches.BATCH_MESSAGES", 3)
    hermes.run(
        [
            *_session_ops("al-big", ALICE, "ALICE-WORDS", 10),
            *_session_ops("bob-1", BOB, "BOB-WORDS", 3),
        ]
    )
    attach()
    subject = Subject(user_id=ALICE)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-H38c",
        expected_fingerprint=erasure_ledger.plan(subject).fingerprint,
        start=False,
    )
    faults.run_at(
        "delete.between_parts",
        lambda: hermes.run(
            [
                call("state.append_message", "al-big", "user", f"ALICE-WORDS more {k}")
                for k in range(4)
            ]
        ),
    )
    receipt = actions.run_erasure(request_id=request.pk)
    assert _count("SELECT COUNT(*) FROM messages WHERE content LIKE %s", "ALICE-WORDS%") == 0
    assert _count("SELECT COUNT(*) FROM messages WHERE content LIKE %s", "BOB-WORDS%") == 3
    assert receipt["erased"]["messages"] == 14
    assert receipt["erased"]["sessions"] == 1
    assert_healthy(hermes)


def test_a_conversation_hermes_goes_on_with_during_an_erasure_leaves_nothing(
    hermes, attach, one_session_a_batch, no_hook
):
    """Hermes's API server goes on with the subject's slug while the erasure runs, and the
    slug history poller records that turn; later a runtime holding the erased session's id
    writes it again. The turn's response and slug, the history row and the session written
    again all go, and the receipt counts them."""
    from sessions_admin.core import slug_history

    turn = {"api_turn": {"conversation": "alice-chat", "input": "ALICE-WORDS hi", "reply": "ok"}}
    hermes.run(
        [
            *_session_ops("al-1", ALICE, "ALICE-WORDS", 2),
            call("state.end_session", "al-1", "user_exit"),
            # Her API conversation: a session the slug's stored response names.
            *_session_ops("al-api", ALICE, "ALICE-WORDS", 2),
            call(
                "responses.put",
                "resp-al-0",
                {
                    "response": {"id": "resp-al-0", "object": "response", "status": "completed"},
                    "conversation_history": [],
                    "instructions": None,
                    "session_id": "al-api",
                },
            ),
            call("responses.set_conversation", "alice-chat", "resp-al-0"),
            *_session_ops("bob-1", BOB, "BOB-WORDS", 2),
        ]
    )
    attach()
    slug_history.capture_slug_history()
    subject = Subject(user_id=ALICE)
    plan = erasure_ledger.plan(subject)
    # Children first, then by id: al-1 goes in the first batch, al-api in the second.
    assert plan.store.session_ids == ("al-1", "al-api")
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-H38d",
        expected_fingerprint=plan.fingerprint,
        start=False,
    )

    def hermes_turn() -> None:
        assert hermes.run([turn])[0]["session_id"] == "al-api"  # she goes on
        slug_history.capture_slug_history()
        faults.run_at("erasure.between_batches", stale_runtime_writes_again, nth=2)

    def stale_runtime_writes_again() -> None:
        assert _count("SELECT COUNT(*) FROM sessions WHERE id = 'al-api'") == 0
        hermes.run(_session_ops("al-api", None, "ALICE-WORDS again", 1))

    faults.run_at("erasure.between_batches", hermes_turn)
    receipt = actions.run_erasure(request_id=request.pk)

    assert _count("SELECT COUNT(*) FROM sessions WHERE id IN ('al-1', 'al-api')") == 0
    assert _count("SELECT COUNT(*) FROM messages WHERE content LIKE %s", "ALICE-WORDS%") == 0
    assert _count("SELECT COUNT(*) FROM messages WHERE content LIKE %s", "BOB-WORDS%") == 2
    history = _count(
        "SELECT COUNT(*) FROM sessions_admin_slug_history WHERE slug = %s OR session_id = %s",
        "alice-chat",
        "al-api",
    )
    assert history == 0
    left = hermes.run(
        [
            {"sql": "SELECT COUNT(*) FROM conversations", "on": "responses"},
            {"sql": "SELECT COUNT(*) FROM responses", "on": "responses"},
        ]
    )
    assert left == [[[0]], [[0]]]
    assert (
        erasure_ledger.hash_of(request.salt, "alice-chat") in receipt["conversation_slugs_sha256"]
    )
    # 4 counted before; the turn's 2 and the stale runtime's 1 written while it ran.
    assert receipt["erased"]["messages"] == 4 + 2 + 1
    # Two sessions, and al-api's row written again by the stale runtime, deleted again.
    assert receipt["erased"]["sessions"] == 3
    # resp-al-0 and the turn's; the slug once (deleted, written again by the turn, deleted).
    assert receipt["erased"]["stored_responses"] == 2
    assert receipt["erased"]["conversation_slugs"] == 1
    assert_healthy(hermes)


def test_a_trashed_session_a_runtime_writes_again_during_the_erasure_goes_too(
    hermes, attach, one_session_a_batch, no_hook
):
    """One of the subject's sessions was in the dashboard's trash when the erasure began;
    a runtime holding its id wrote it again (same id, her user id) and started a delegate
    below it while the erasure ran (attack round 39). Both go, and are counted."""
    hermes.run(
        [
            *_session_ops("al-trashed", ALICE, "ALICE-WORDS", 2),
            call("state.end_session", "al-trashed", "user_exit"),
            *_session_ops("al-1", ALICE, "ALICE-WORDS", 2),
            call("state.end_session", "al-1", "user_exit"),
            *_session_ops("al-2", ALICE, "ALICE-WORDS", 2),
            call("state.end_session", "al-2", "user_exit"),
            *_session_ops("bob-1", BOB, "BOB-WORDS", 2),
        ]
    )
    attach()
    actions.cascade_delete(
        actor=None,
        session_ids=["al-trashed"],
        include_branches=False,
        expected_fingerprint=core.plan_cascade_delete(session_ids=["al-trashed"]).fingerprint,
        reason="tidy",
    )
    subject = Subject(user_id=ALICE)
    plan = erasure_ledger.plan(subject)
    assert plan.trash.session_ids == ("al-trashed",)
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-H39",
        expected_fingerprint=plan.fingerprint,
        start=False,
    )

    def runtime_writes_the_trashed_one_again() -> None:
        hermes.run(
            [
                *_session_ops("al-trashed", ALICE, "ALICE-WORDS again", 1),
                *_session_ops(
                    "al-trashed-kid", None, "ALICE-WORDS kid", 1, parent_session_id="al-trashed"
                ),
            ]
        )

    faults.run_at("erasure.between_batches", runtime_writes_the_trashed_one_again)
    receipt = actions.run_erasure(request_id=request.pk)
    assert _count("SELECT COUNT(*) FROM sessions WHERE id LIKE 'al-%'") == 0
    assert _count("SELECT COUNT(*) FROM messages WHERE content LIKE %s", "ALICE-WORDS%") == 0
    assert _count("SELECT COUNT(*) FROM messages WHERE content LIKE %s", "BOB-WORDS%") == 2
    # al-1, al-2 and the trashed one (in the trash), then its row written again and the kid.
    assert receipt["erased"]["sessions"] == 2 + 2
    assert receipt["erased"]["messages"] == 4 + 2
    hashes = set(receipt["session_ids_sha256"])
    assert erasure_ledger.hash_of(request.salt, "al-trashed-kid") in hashes
    assert_healthy(hermes)
