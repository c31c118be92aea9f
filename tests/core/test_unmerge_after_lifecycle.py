"""An unmerge undoes the merge, not what the target's chat did after it (attack round 46, W1).

A resume, a reset or a new live session of the key after the merge stay as they are; the
key keeps one live session, and a switch event is written exactly when the unmerge changes
which session that is.
"""

from __future__ import annotations

from sessions_admin import core
from sessions_admin.core import db
from tests.helpers import session

KEY = "telegram:unmerge"


def _started(content: str, *, reset_first: bool) -> str:
    if reset_first:
        session_id = core.reset_session_key(session_key=KEY).new_session_id
    else:
        session_id = core.create_session(source="telegram", session_key=KEY).session_id
    core.append_message(session_id=session_id, role="user", content=content)
    return session_id


def _merged(ids: list[str]) -> int:
    plan = core.plan_merge(session_ids=ids, target_id=ids[0])
    return core.merge_sessions(
        session_ids=ids, target_id=ids[0], expected_fingerprint=plan.fingerprint
    ).merge_id


def _live_of_key() -> list[str]:
    return [
        r[0]
        for r in db.fetchall(
            "SELECT id FROM sessions WHERE session_key = %s AND ended_at IS NULL", [KEY]
        )
    ]


def _last_seq() -> int:
    return db.fetchone("SELECT COALESCE(MAX(seq), 0) FROM sessions_admin_switch_events")[0]


def _switches_after(seq: int) -> list[tuple]:
    return db.fetchall(
        "SELECT new_session_id, previous_session_id, reason FROM sessions_admin_switch_events "
        "WHERE seq > %s ORDER BY seq",
        [seq],
    )


def test_a_target_resumed_after_the_merge_stays_live_through_the_unmerge():
    first = _started("a1", reset_first=False)
    second = _started("b1", reset_first=True)
    _started("c1", reset_first=True)  # live; first and second ended session_reset
    merge_id = _merged([first, second])
    core.reset_session_key(session_key=KEY)
    core.resume_session(ref=first)
    assert _live_of_key() == [first]
    seq = _last_seq()

    core.unmerge(merge_id=merge_id)

    assert _live_of_key() == [first]
    assert (session(first)["ended_at"], session(first)["end_reason"]) == (None, None)
    assert session(second)["end_reason"] == "session_reset"
    assert _switches_after(seq) == []  # nothing switched
    core.append_message(session_id=first, role="user", content="still here")
    assert [m["content"] for m in core.active_transcript(session_id=first)] == [
        "a1",
        "still here",
    ]


def test_a_target_reset_after_the_merge_keeps_its_end_and_the_key_its_new_session():
    first = _started("a1", reset_first=False)
    second = _started("b1", reset_first=True)  # live: the merge reopens the target
    merge_id = _merged([first, second])
    assert _live_of_key() == [first]
    newest = core.reset_session_key(session_key=KEY).new_session_id
    seq = _last_seq()

    core.unmerge(merge_id=merge_id)

    # The second fork was live before the merge, but the chat went on in a new session since.
    assert _live_of_key() == [newest]
    assert session(first)["end_reason"] == "session_reset"  # as the reset left it
    assert session(second)["end_reason"] == "session_switch"
    assert _switches_after(seq) == []  # the live session stayed the newest one


def test_the_unmerge_tells_of_the_fork_it_makes_live_again():
    first = _started("a1", reset_first=False)
    second = _started("b1", reset_first=True)  # live: the merge reopens the target
    merge_id = _merged([first, second])
    seq = _last_seq()

    core.unmerge(merge_id=merge_id)

    assert _live_of_key() == [second]
    assert session(first)["end_reason"] == "session_reset"  # its end before the merge
    assert _switches_after(seq) == [(second, first, "unmerge")]
