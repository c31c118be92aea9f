"""A Hermes Agent store written by hermes-agent's own code, with every lineage the dashboard handles.

- a gateway reset (``promote_to_session_reset`` + a new session of the key);
- an accidental session_key fork (``agent_close``, then an unlinked session);
- a compression chain (``end_session(compression)`` + a child), with a
  delegate, a nested delegate and a /branch under its tip;
- undone turns (``rewind_to_message``);
- a ``/v1/responses`` conversation slug that the API server's LRU evicted and
  cold-started on a new session (hermes-agent #16517), written through
  ``ResponseStore`` exactly as the API server writes it.

Each session's messages carry a distinct animal name, so the tests can ask
Hermes's own full-text search where a message went.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.hermes.conftest import Hermes, call

KEY = "agent:main:telegram:dm:42"
FORK_KEY = "agent:main:discord:dm:7"
SLUG = "planner"


@dataclass(frozen=True)
class Scenario:
    message_ids: dict[str, list[int]]  # session -> its message ids, in order


def _turn(session_id: str, user: str, reply: str) -> list[dict]:
    return [
        call("state.append_message", session_id, "user", user),
        call("state.append_message", session_id, "assistant", reply),
    ]


def _response(response_id: str, session_id: str, history: list[dict]) -> dict:
    return call(
        "responses.put",
        response_id,
        {
            "response": {"id": response_id, "object": "response", "status": "completed"},
            "conversation_history": history,
            "instructions": None,
            "session_id": session_id,
        },
    )


def gateway_and_cli_ops() -> list[dict]:
    telegram = {"user_id": "42", "session_key": KEY, "chat_id": "42", "chat_type": "dm"}
    discord = {"user_id": "7", "session_key": FORK_KEY, "chat_id": "7", "chat_type": "dm"}
    tool_call = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "delegate_task", "arguments": "{}"},
        }
    ]
    return [
        # A gateway reset: the old session ends session_reset, the key starts afresh.
        call("state.create_session", "tg-old", "telegram", **telegram),
        *_turn("tg-old", "remember the aardvark", "Noted: aardvark."),
        call("state.promote_to_session_reset", "tg-old"),
        call("state.create_session", "tg-new", "telegram", **telegram),
        *_turn("tg-new", "a fresh start with a bison", "Hello bison."),
        # An accidental fork of a key: ended agent_close, then a new unlinked session.
        call("state.create_session", "dc-a", "discord", **discord),
        *_turn("dc-a", "the capybara question", "Capybara answer."),
        call("state.end_session", "dc-a", "agent_close"),
        call("state.create_session", "dc-b", "discord", **discord),
        *_turn("dc-b", "and the dromedary question", "Dromedary answer."),
        # A compression chain; delegates and a branch hang off its tip.
        call("state.create_session", "cli-1", "cli", model="test-model"),
        call("state.set_session_title", "cli-1", "Refactor plan"),
        *_turn("cli-1", "plan the elephant refactor", "Elephant plan drafted."),
        call("state.end_session", "cli-1", "compression"),
        call("state.create_session", "cli-2", "cli", model="test-model", parent_session_id="cli-1"),
        call("state.append_message", "cli-2", "system", "Summary so far: the elephant plan."),
        call("state.append_message", "cli-2", "user", "continue with the flamingo step"),
        call("state.append_message", "cli-2", "assistant", "", tool_calls=tool_call),
        call(
            "state.append_message",
            "cli-2",
            "tool",
            "delegate finished",
            tool_call_id="call_1",
            tool_name="delegate_task",
        ),
        call(
            "state.create_session",
            "sub-1",
            "cli",
            parent_session_id="cli-2",
            model_config={"_delegate_from": "cli-2"},
        ),
        *_turn("sub-1", "subtask about the gazelle", "Gazelle subtask done."),
        call("state.end_session", "sub-1", "completed"),
        call(
            "state.create_session",
            "sub-2",
            "cli",
            parent_session_id="sub-1",
            model_config={"_delegate_from": "sub-1"},
        ),
        *_turn("sub-2", "nested hyena subtask", "Hyena done."),
        call("state.end_session", "sub-2", "completed"),
        call(
            "state.create_session",
            "br-1",
            "cli",
            parent_session_id="cli-2",
            model_config={"_branched_from": "cli-2"},
        ),
        *_turn("br-1", "what if the ibis instead", "Ibis variant."),
        # Undone turns: the second turn is rewound (its rows become inactive).
        call("state.create_session", "tui-1", "tui"),
        *_turn("tui-1", "first jackal turn", "Jackal reply."),
        *_turn("tui-1", "second koala turn", "Koala reply."),
    ]


def responses_before_eviction_ops() -> list[dict]:
    hello = {"role": "user", "content": "hello lemur"}
    return [
        call("state.create_session", "api-a", "api_server"),
        *_turn("api-a", "hello lemur", "Lemur reply."),
        _response("resp_a1", "api-a", [hello]),
        call("responses.set_conversation", SLUG, "resp_a1"),
        *_turn("api-a", "more about the lemur", "More lemur."),
        _response("resp_a2", "api-a", [hello, {"role": "user", "content": "more"}]),
        call("responses.set_conversation", SLUG, "resp_a2"),
    ]


def eviction_and_cold_start_ops() -> list[dict]:
    """Other traffic evicts the slug's responses (and Hermes deletes its row); the slug restarts."""
    filler = [op for n in range(4) for op in (_response(f"resp_other_{n}", "api-other", []),)]
    return [
        call("state.create_session", "api-other", "api_server"),
        *_turn("api-other", "unrelated narwhal", "Narwhal."),
        *filler,
        call("state.create_session", "api-b", "api_server"),
        *_turn("api-b", "hello again, mongoose", "Mongoose reply."),
        _response("resp_b1", "api-b", [{"role": "user", "content": "hello again"}]),
        call("responses.set_conversation", SLUG, "resp_b1"),
    ]


def build(hermes: Hermes) -> Scenario:
    """Write the whole scenario with hermes-agent (max 3 stored responses, as a small LRU)."""
    hermes.max_responses = 3
    results = hermes.run(
        gateway_and_cli_ops() + responses_before_eviction_ops() + eviction_and_cold_start_ops()
    )
    ids = messages_by_session(hermes)
    koala = ids["tui-1"][2]
    hermes.one(call("state.rewind_to_message", "tui-1", koala))
    assert results  # every op succeeded (Hermes.run is strict)
    return Scenario(message_ids=ids)


def messages_by_session(hermes: Hermes) -> dict[str, list[int]]:
    rows = hermes.one({"sql": "SELECT session_id, id FROM messages ORDER BY id", "on": "state"})
    found: dict[str, list[int]] = {}
    for session_id, message_id in rows:
        found.setdefault(session_id, []).append(message_id)
    return found
