"""Item 3: ending (first reason wins) and resuming by id, title or prefix."""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.routers import responses_alias
from tests.helpers import conversation, messages, session


def test_the_first_end_reason_wins():
    ref = core.create_session(source="cli").session_id
    first = core.end_session(session_id=ref, end_reason="compression")
    ended_at = session(ref)["ended_at"]
    second = core.end_session(session_id=ref, end_reason="user_exit")
    assert (first.ended_now, second.ended_now) == (True, False)
    assert second.end_reason == "compression"
    assert session(ref)["end_reason"] == "compression"
    assert session(ref)["ended_at"] == ended_at


def test_ending_an_unknown_session_raises():
    with pytest.raises(core.SessionNotFound):
        core.end_session(session_id="nope", end_reason="user_exit")


@pytest.mark.parametrize("how", ["id", "title", "prefix"])
def test_resume_reopens_by_id_title_or_prefix(how):
    ref = core.create_session(source="cli", session_id="20260101_000000_abcdef12", title="Taxes")
    core.create_session(source="cli", session_id="20260101_000000_ffffffff")
    core.end_session(session_id=ref.session_id, end_reason="user_exit")
    given = {"id": ref.session_id, "title": "Taxes", "prefix": "20260101_000000_abc"}[how]
    result = core.resume_session(ref=given)
    row = session(ref.session_id)
    assert result.session_id == ref.session_id
    assert result.previous_end_reason == "user_exit"
    assert (row["ended_at"], row["end_reason"]) == (None, None)


def test_an_ambiguous_prefix_is_refused_and_nothing_changes():
    core.create_session(source="cli", session_id="abcd-1")
    core.create_session(source="cli", session_id="abcd-2")
    core.end_session(session_id="abcd-1", end_reason="user_exit")
    with pytest.raises(core.AmbiguousSessionRef):
        core.resume_session(ref="abcd")
    assert session("abcd-1")["end_reason"] == "user_exit"


def test_an_unknown_reference_is_not_found():
    with pytest.raises(core.SessionNotFound):
        core.resume_session(ref="no-such-session")


def test_resume_reopens_the_latest_segment_not_the_old_one():
    """Resuming an old segment would load its short transcript over the long one (#3123)."""
    root = core.create_session(source="cli", session_key="cli:me", title="Novel").session_id
    core.append_message(session_id=root, role="user", content="chapter 1")
    tip = core.rotate_for_compression(session_id=root, summary="ch1").new_session_id
    core.append_messages(
        session_id=tip,
        messages=[
            {"role": "user", "content": "chapter 2"},
            {"role": "assistant", "content": "ok"},
        ],
    )
    core.end_session(session_id=tip, end_reason="user_exit")
    result = core.resume_session(ref="Novel")
    assert result.matched_session_id == root
    assert result.session_id == tip
    assert session(tip)["ended_at"] is None
    assert session(root)["end_reason"] == "compression"  # the old segment stays closed
    assert len(messages(tip)) == 3


def test_resume_makes_it_the_live_session_of_its_key_and_conversation():
    old = core.create_session(source="telegram", session_key="tg:5").session_id
    newer = core.reset_session_key(session_key="tg:5").new_session_id
    # A slug a runtime left on the old session (the core now refuses a turn recorded
    # against an ended session, so the state is written as a pre-fix runtime left it).
    db.execute(
        "INSERT INTO conversations (name, response_id, session_id) VALUES (%s, %s, %s)",
        ["slug-5", "r-old", old],
        alias=responses_alias(),
    )
    result = core.resume_session(ref=old)
    assert result.switched_from_session_id == newer
    assert session(newer)["end_reason"] == "session_switch"
    assert core.live_session_for_key("tg:5") == old
    assert conversation("slug-5")[1] == old
    # Exactly one live session for the key.
    assert session(old)["ended_at"] is None
