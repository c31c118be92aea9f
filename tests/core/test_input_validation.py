"""Whatever a runtime passes, the core answers ``InvalidInput`` (a ``StoreError``) and writes nothing.

Issue items 15 and 16: lone surrogates in ids, keys and slugs, timestamps that are not times,
values that are not JSON, ids of the wrong type; and the same answer to an id prefix on both
backends.
"""

from __future__ import annotations

import math

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.routers import responses_alias

LONE = "x\ud800y"


class NotJson:
    pass


def store_state() -> tuple:
    return (
        db.fetchall("SELECT id, ended_at, message_count, input_tokens FROM sessions ORDER BY id"),
        db.fetchall("SELECT id, session_id, content, active FROM messages ORDER BY id"),
        db.fetchall("SELECT seq FROM sessions_admin_switch_events ORDER BY seq"),
        db.fetchall(
            "SELECT name, session_id FROM conversations ORDER BY name", alias=responses_alias()
        ),
    )


@pytest.fixture
def live():
    ref = core.create_session(source="telegram", session_key="tg:live").session_id
    core.append_message(session_id=ref, role="user", content="hello")
    return ref


CALLS = {
    "create: surrogate id": lambda live: core.create_session(source="cli", session_id=LONE),
    "create: surrogate key": lambda live: core.create_session(source="cli", session_key=LONE),
    "create: int id": lambda live: core.create_session(source="cli", session_id=42),
    "create: int key": lambda live: core.create_session(source="cli", session_key=7),
    "create: nan started_at": lambda live: core.create_session(source="cli", started_at=math.nan),
    "create: inf started_at": lambda live: core.create_session(source="cli", started_at=math.inf),
    "create: huge started_at": lambda live: core.create_session(source="cli", started_at=1e300),
    "create: text started_at": lambda live: core.create_session(source="cli", started_at="now"),
    "create: object model_config": lambda live: core.create_session(
        source="cli", model_config={"x": NotJson()}
    ),
    "create: nan model_config": lambda live: core.create_session(
        source="cli", model_config={"x": math.nan}
    ),
    "create: list model_config": lambda live: core.create_session(source="cli", model_config=[1]),
    "create: surrogate parent": lambda live: core.create_session(
        source="cli", parent_session_id=LONE
    ),
    "append: surrogate id": lambda live: core.append_message(
        session_id=LONE, role="user", content="hi"
    ),
    "append: int id": lambda live: core.append_message(session_id=12, role="user", content="hi"),
    "append: list id": lambda live: core.append_message(
        session_id=[live], role="user", content="hi"
    ),
    "append: nan timestamp": lambda live: core.append_message(
        session_id=live, role="user", content="hi", timestamp=math.nan
    ),
    "append: negative timestamp": lambda live: core.append_message(
        session_id=live, role="user", content="hi", timestamp=-5
    ),
    "append: millisecond timestamp": lambda live: core.append_message(
        session_id=live, role="user", content="hi", timestamp=1.7e12
    ),
    "append: object tool_calls": lambda live: core.append_message(
        session_id=live, role="assistant", tool_calls=[{"fn": NotJson()}]
    ),
    "append: nan tool_calls": lambda live: core.append_message(
        session_id=live, role="assistant", tool_calls=[{"arg": math.inf}]
    ),
    # Stored as it came, it was lost to Hermes's reader (attack round 46, X4).
    "append: tool_calls text that is not JSON": lambda live: core.append_message(
        session_id=live, role="assistant", tool_calls="notjson{"
    ),
    "append: tool_calls text of a number": lambda live: core.append_message(
        session_id=live, role="assistant", tool_calls="42"
    ),
    "append: tool_calls text of an object": lambda live: core.append_message(
        session_id=live, role="assistant", tool_calls='{"a": 1}'
    ),
    "append: tool_calls an object": lambda live: core.append_message(
        session_id=live, role="assistant", tool_calls={"a": 1}
    ),
    "append: tool_calls a number": lambda live: core.append_message(
        session_id=live, role="assistant", tool_calls=42
    ),
    "append: object content": lambda live: core.append_message(
        session_id=live, role="user", content=[NotJson()]
    ),
    "append: surrogate tool_call_id": lambda live: core.append_message(
        session_id=live, role="tool", content="ok", tool_call_id=LONE
    ),
    "append: int tool_name": lambda live: core.append_message(
        session_id=live, role="tool", content="ok", tool_name=5
    ),
    "append: text token_count": lambda live: core.append_message(
        session_id=live, role="user", content="hi", token_count="3"
    ),
    "append: messages not a list": lambda live: core.append_messages(session_id=live, messages=5),
    "append: message not a mapping": lambda live: core.append_messages(
        session_id=live, messages=["hi"]
    ),
    "end: surrogate id": lambda live: core.end_session(session_id=LONE, end_reason="x"),
    "usage: nan cost": lambda live: core.add_usage(session_id=live, cost_usd=math.nan),
    "usage: text tokens": lambda live: core.add_usage(session_id=live, input_tokens="5"),
    "usage: huge tokens": lambda live: core.add_usage(session_id=live, input_tokens=2**70),
    "reset: surrogate key": lambda live: core.reset_session_key(session_key=LONE),
    "reset: surrogate summary": lambda live: core.reset_session_key(
        session_key="tg:live", summary=LONE
    ),
    "resume: surrogate ref": lambda live: core.resume_session(ref=LONE),
    "resume: int ref": lambda live: core.resume_session(ref=5),
    "undo: surrogate id": lambda live: core.undo_last_turn(session_id=LONE),
    "undo: int id": lambda live: core.undo_last_turn(session_id=3),
    "save: surrogate id": lambda live: core.save_transcript(session_id=LONE, messages=[]),
    "save: messages not a list": lambda live: core.save_transcript(
        session_id=live, messages="hello"
    ),
    "branch: huge message id": lambda live: core.branch_session(
        session_id=live, at_message_id=2**80
    ),
    "branch: text message id": lambda live: core.branch_session(session_id=live, at_message_id="1"),
    "slug: surrogate": lambda live: core.resolve_conversation(conversation=LONE),
    "slug: int": lambda live: core.resolve_conversation(conversation=5),
    "previous response: surrogate": lambda live: core.resolve_conversation(
        previous_response_id=LONE
    ),
    "turn: surrogate response id": lambda live: core.record_turn(response_id=LONE, session_id=live),
    "turn: surrogate slug": lambda live: core.record_turn(
        response_id="r", session_id=live, conversation=LONE
    ),
    "turn: surrogate session": lambda live: core.record_turn(response_id="r", session_id=LONE),
    "turn: object data": lambda live: core.record_turn(
        response_id="r", session_id=live, data={"x": NotJson()}
    ),
    "title: surrogate": lambda live: core.set_title(session_id=live, title=LONE),
}


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
def test_bad_input_is_invalid_input_and_writes_nothing(live, call):
    before = store_state()
    with pytest.raises(core.InvalidInput):
        call(live)
    assert store_state() == before


def test_an_id_prefix_means_the_same_session_on_every_backend():
    core.create_session(source="cli", session_id="20260101_000000_ABCDEF12")
    core.create_session(source="cli", session_id="20260101_000000_abcdef99")
    assert core.resolve_session_ref("20260101_000000_ABC") == "20260101_000000_ABCDEF12"
    assert core.resolve_session_ref("20260101_000000_abc") == "20260101_000000_abcdef99"
    with pytest.raises(core.SessionNotFound):
        core.resolve_session_ref("20260101_000000_Abc")
    with pytest.raises(core.AmbiguousSessionRef):
        core.resolve_session_ref("20260101_000000_")
    # LIKE's wildcards in a reference are plain characters.
    with pytest.raises(core.SessionNotFound):
        core.resolve_session_ref("2026%")
