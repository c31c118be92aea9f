"""Item 1: creating a session is idempotent and never switches persistence off."""

from __future__ import annotations

import pytest

from sessions_admin import core
from tests.helpers import count, session


def test_it_creates_a_row_with_metadata():
    ref = core.create_session(
        source="telegram",
        user_id="u1",
        session_key="tg:1",
        model="m1",
        model_config={"temperature": 0.2},
        title="Trip planning",
    )
    row = session(ref.session_id)
    assert ref.created is True
    assert (row["source"], row["user_id"], row["session_key"], row["model"], row["title"]) == (
        "telegram",
        "u1",
        "tg:1",
        "m1",
        "Trip planning",
    )
    assert row["ended_at"] is None
    assert row["message_count"] == 0


def test_registering_an_existing_id_is_a_no_op_that_fills_null_metadata():
    ref = core.create_session(source="cli", session_id="s-1", model="first-model")
    again = core.create_session(
        source="cli", session_id="s-1", model="other-model", chat_type="dm", thread_id="t9"
    )
    row = session("s-1")
    assert again == core.SessionRef(session_id=ref.session_id, created=False)
    assert count("sessions") == 1
    # NULL columns are filled, set ones are never overwritten.
    assert (row["source"], row["model"], row["chat_type"], row["thread_id"]) == (
        "cli",
        "first-model",
        "dm",
        "t9",
    )


def test_a_session_without_a_key_user_or_chat_is_not_handed_to_one_by_registering_it():
    # A Hermes CLI session has none: registered again with mallory's, it became hers, her
    # key's live session, and her erasure's (attack round 46, AA1).
    core.create_session(source="cli", session_id="s-cli")
    before = session("s-cli")
    for claim in ({"session_key": "k:mallory"}, {"user_id": "mallory"}, {"chat_id": "m-chat"}):
        with pytest.raises(core.InvalidInput, match="another conversation's"):
            core.create_session(source="cli", session_id="s-cli", **claim)
    assert session("s-cli") == before


def test_an_id_of_another_conversation_is_not_registered_again():
    # Joining it, the caller wrote into another chat's transcript (attack round 46, Y1).
    core.create_session(source="telegram", session_id="s-a", session_key="tg:alice", user_id="a")
    before = session("s-a")
    for other in (
        {"source": "discord", "session_key": "dc:bob"},
        {"source": "telegram", "session_key": "tg:bob"},
        {"source": "telegram", "session_key": "tg:alice", "user_id": "b"},
        {"source": "telegram", "chat_id": "c1", "user_id": "b"},
    ):
        with pytest.raises(core.InvalidInput, match="another conversation's") as refused:
            core.create_session(session_id="s-a", **other)
        assert refused.value.field == "session_id"
    assert session("s-a") == before and count("sessions") == 1
    # Its own values again, or fewer of them: the same session (hermes-agent #3123).
    assert not core.create_session(
        source="telegram", session_id="s-a", session_key="tg:alice"
    ).created


def test_registering_twice_keeps_appending_possible():
    """hermes-agent #3123: a duplicate registration once disabled persistence."""
    core.create_session(source="cli", session_id="dup")
    core.create_session(source="cli", session_id="dup")
    result = core.append_message(session_id="dup", role="user", content="still stored")
    assert result.message_count == 1
    assert session("dup")["message_count"] == 1


def test_a_new_root_for_a_session_key_ends_the_previous_live_session():
    first = core.create_session(source="discord", session_key="dc:7")
    second = core.create_session(source="discord", session_key="dc:7")
    assert session(first.session_id)["end_reason"] == "new_session"
    assert session(second.session_id)["ended_at"] is None
    assert core.live_session_for_key("dc:7") == second.session_id


def test_a_delegate_child_does_not_end_its_parent():
    parent = core.create_session(source="cli", session_key="k")
    child = core.create_session(
        source="tool",
        session_key="k",
        parent_session_id=parent.session_id,
        model_config={"_delegate_from": parent.session_id},
    )
    assert session(parent.session_id)["ended_at"] is None
    assert session(child.session_id)["parent_session_id"] == parent.session_id


def test_a_missing_parent_is_refused_and_nothing_is_written():
    with pytest.raises(core.SessionNotFound):
        core.create_session(source="cli", parent_session_id="nope")
    assert count("sessions") == 0


def test_a_taken_title_is_refused_and_nothing_is_written():
    core.create_session(source="cli", title="Same")
    with pytest.raises(core.TitleTaken):
        core.create_session(source="cli", title="Same")
    assert count("sessions") == 1


@pytest.mark.parametrize("source", ["", "   ", None, "x\x00y", "x\ud800y"])
def test_bad_sources_are_refused(source):
    with pytest.raises(core.InvalidInput):
        core.create_session(source=source)
    assert count("sessions") == 0


@pytest.mark.parametrize(
    "session_id",
    ["s-9\n", "s-9\u200b", " s-9", "s-9/../x", "..", "s\u202e9"],
    ids=["newline", "zero-width", "leading space", "a path", "dot-dot", "bidi override"],
)
def test_a_new_id_that_would_not_read_as_itself_is_refused(session_id):
    # Lookalikes of another id, or ids no console page could reach (attack round 46, Y8).
    with pytest.raises(core.InvalidInput) as refused:
        core.create_session(source="cli", session_id=session_id)
    assert refused.value.field == "session_id"
    assert count("sessions") == 0
