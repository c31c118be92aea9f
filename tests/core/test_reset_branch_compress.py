"""Items 4 and 5: reset of a session_key, branch at a message, rotation for compression."""

from __future__ import annotations

import json

import pytest

from sessions_admin import core
from tests.helpers import count, messages, session


def _chat(session_id: str, turns: int) -> list[int]:
    ids: list[int] = []
    for n in range(turns):
        ids += core.append_messages(
            session_id=session_id,
            messages=[
                {"role": "user", "content": f"q{n}"},
                {"role": "assistant", "content": f"a{n}"},
            ],
        ).message_ids
    return ids


def test_reset_ends_the_live_session_and_starts_a_linked_fresh_one():
    old = core.create_session(
        source="telegram",
        session_key="tg:1",
        user_id="u1",
        chat_id="c1",
        model="m",
    ).session_id
    _chat(old, 2)
    result = core.reset_session_key(session_key="tg:1", summary="We talked about cats.")
    new = session(result.new_session_id)
    assert result.ended_session_id == old
    assert session(old)["end_reason"] == "session_reset"
    assert json.loads(new["model_config"])["_reset_from"] == old
    assert new["parent_session_id"] is None
    assert (new["source"], new["session_key"], new["user_id"], new["chat_id"], new["model"]) == (
        "telegram",
        "tg:1",
        "u1",
        "c1",
        "m",
    )
    assert new["ended_at"] is None
    assert [m["content"] for m in messages(result.new_session_id)] == ["We talked about cats."]
    assert len(messages(old)) == 4  # nothing moved or lost


def test_reset_of_an_unknown_key_is_not_found():
    with pytest.raises(core.SessionNotFound):
        core.reset_session_key(session_key="nobody")
    assert count("sessions") == 0


def test_branch_carries_the_transcript_up_to_the_message_and_links_to_its_parent():
    parent = core.create_session(source="cli", session_key="cli:b").session_id
    ids = _chat(parent, 3)
    core.undo_last_turn(session_id=parent)  # undone rows are not carried
    result = core.branch_session(session_id=parent, at_message_id=ids[3], title="What if")
    child = session(result.new_session_id)
    assert child["parent_session_id"] == parent
    assert json.loads(child["model_config"])["_branched_from"] == parent
    assert child["title"] == "What if"
    assert [m["content"] for m in messages(result.new_session_id)] == ["q0", "a0", "q1", "a1"]
    assert child["message_count"] == 4 == result.copied_messages
    assert session(parent)["end_reason"] == "branched"
    assert core.live_session_for_key("cli:b") == result.new_session_id
    assert len(messages(parent)) == 6


def test_branch_at_a_message_of_another_session_is_refused():
    a = core.create_session(source="cli").session_id
    b = core.create_session(source="cli").session_id
    other = _chat(b, 1)
    with pytest.raises(core.InvalidInput):
        core.branch_session(session_id=a, at_message_id=other[0])
    assert count("sessions") == 2
    assert session(a)["ended_at"] is None


def test_compression_ends_the_parent_and_continues_in_a_linked_child():
    parent = core.create_session(
        source="discord",
        session_key="dc:1",
        model_config={"_branched_from": "x", "temp": 1},
    ).session_id
    _chat(parent, 2)
    result = core.rotate_for_compression(
        session_id=parent,
        summary="Summary",
        carry_messages=[{"role": "user", "content": "q1"}],
    )
    child = session(result.new_session_id)
    config = json.loads(child["model_config"])
    assert session(parent)["end_reason"] == "compression"
    assert child["parent_session_id"] == parent
    # A continuation carries no branch marker, or readers would not follow it.
    assert "_branched_from" not in config and config["temp"] == 1
    assert [m["content"] for m in messages(result.new_session_id)] == ["Summary", "q1"]
    assert core.compression_tip(session_id=parent) == result.new_session_id
    assert core.compression_chain(session_id=result.new_session_id) == [
        parent,
        result.new_session_id,
    ]
    assert core.live_session_for_key("dc:1") == result.new_session_id


def test_compressing_an_ended_session_is_refused():
    ref = core.create_session(source="cli").session_id
    core.end_session(session_id=ref, end_reason="user_exit")
    with pytest.raises(core.SessionEnded):
        core.rotate_for_compression(session_id=ref)
    assert count("sessions") == 1


def test_a_live_delegate_sharing_the_key_is_not_the_conversation():
    parent = core.create_session(source="telegram", session_key="tg:d", model="main").session_id
    delegate = core.create_session(
        source="tool",
        session_key="tg:d",
        parent_session_id=parent,
        model="sub",
        model_config={"_delegate_from": parent},
    ).session_id
    assert core.live_session_for_key("tg:d") == parent
    result = core.reset_session_key(session_key="tg:d")
    new = session(result.new_session_id)
    assert result.ended_session_id == parent
    assert json.loads(new["model_config"])["_reset_from"] == parent
    assert (new["source"], new["model"]) == ("telegram", "main")
    assert session(delegate)["ended_at"] is None
