"""Copies of the subject's messages that a branch made (attack round 38, V): support merged
the subject's session into another session (an API conversation with messages of its own),
then branched that session: the branch holds copies of her moved messages. The erasure
takes her moved messages and their copies, and nothing else of either session."""

from __future__ import annotations

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core import erasure as erasure_core
from sessions_admin.core.erasure import Subject
from sessions_admin.ledger import actions
from sessions_admin.ledger import erasure as erasure_ledger

ALICE = "alice-v38"


def _contents(session_id: str) -> list[str]:
    return [
        r[0]
        for r in db.fetchall(
            "SELECT content FROM messages WHERE session_id = %s ORDER BY id", [session_id]
        )
    ]


def test_a_branchs_copies_of_her_merged_messages_are_erased_and_nothing_else():
    hers = core.create_session(source="telegram", user_id=ALICE).session_id
    core.append_messages(
        session_id=hers,
        messages=[{"role": "user", "content": f"ALICE-WORDS {k}"} for k in range(3)],
    )
    core.end_session(session_id=hers, end_reason="user_exit")
    api = core.create_session(source="api_server").session_id
    core.append_messages(
        session_id=api,
        messages=[
            {"role": "user", "content": "API-WORDS 0"},
            # The same words as hers, written at another time: not a copy, kept.
            {"role": "user", "content": "ALICE-WORDS 0"},
        ],
    )
    core.merge_sessions(session_ids=[api, hers], target_id=api)
    branch = core.branch_session(session_id=api).new_session_id
    assert sum(c.startswith("ALICE-WORDS") for c in _contents(branch)) == 4

    plan = erasure_core.plan_erasure(subject=Subject(user_id=ALICE))
    assert {sid for _mid, sid in plan.other_messages} == {api, branch}
    assert len(plan.other_messages) == 6
    request = actions.request_erasure(
        actor=None,
        subject=Subject(user_id=ALICE),
        reference="DSR-V38",
        expected_fingerprint=erasure_ledger.plan(Subject(user_id=ALICE)).fingerprint,
        start=False,
    )
    receipt = actions.run_erasure(request_id=request.pk)
    assert _contents(api) == ["API-WORDS 0", "ALICE-WORDS 0"]
    assert _contents(branch) == ["API-WORDS 0", "ALICE-WORDS 0"]
    assert receipt["erased"]["messages_in_other_sessions"] == 6
    for sid in (api, branch):
        row = db.fetchone("SELECT message_count FROM sessions WHERE id = %s", [sid])
        assert row[0] == 2
