"""Item 8: a conversation slug keeps its session across evicted responses (hermes-agent #16517)."""

from __future__ import annotations

import json

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.routers import responses_alias
from tests.helpers import conversation, count, run_threads, session


def _turn(slug: str, response_id: str, *, previous: str | None = None) -> core.ConversationTarget:
    target = core.resolve_conversation(conversation=slug, previous_response_id=previous)
    core.append_message(session_id=target.session_id, role="user", content=response_id)
    core.record_turn(response_id=response_id, session_id=target.session_id, conversation=slug)
    return target


def test_a_new_slug_gets_a_new_session_recorded_on_its_row():
    target = core.resolve_conversation(conversation="sidekick-a", user_id="u1")
    assert (target.resolved_by, target.created) == ("new", True)
    assert session(target.session_id)["source"] == "api_server"
    assert conversation("sidekick-a")[1] == target.session_id


def test_every_turn_persists_the_session_on_the_conversation_row():
    first = _turn("sidekick-b", "resp-1")
    second = _turn("sidekick-b", "resp-2", previous="resp-1")
    assert second.session_id == first.session_id
    assert second.resolved_by == "response"
    assert conversation("sidekick-b") == ("resp-2", first.session_id)
    data = json.loads(
        db.fetchone(
            "SELECT data FROM responses WHERE response_id = 'resp-2'", alias=responses_alias()
        )[0]
    )
    assert data["session_id"] == first.session_id


def test_the_slug_continues_the_same_session_after_its_responses_are_evicted():
    first = _turn("sidekick-c", "resp-1")
    _turn("sidekick-c", "resp-2", previous="resp-1")
    core.evict_responses(keep_latest=0)
    assert count("sessions") == 1
    again = _turn("sidekick-c", "resp-3", previous="resp-2")
    assert again.session_id == first.session_id
    assert again.resolved_by == "conversation"
    assert count("sessions") == 1  # no cold-start fork
    assert (
        len(db.fetchall("SELECT id FROM messages WHERE session_id = %s", [first.session_id])) == 3
    )


def test_an_unknown_previous_response_without_a_slug_is_not_found():
    _turn("sidekick-d", "resp-1")
    core.evict_responses(keep_latest=0)
    with pytest.raises(core.ConversationNotFound):
        core.resolve_conversation(previous_response_id="resp-1")
    assert count("sessions") == 1


def test_a_slug_with_no_recorded_session_is_not_found():
    # A row written before sessions were recorded on conversations, its response evicted.
    db.execute(
        "INSERT INTO conversations (name, response_id, session_id) VALUES ('legacy', 'gone', NULL)",
        alias=responses_alias(),
    )
    with pytest.raises(core.ConversationNotFound):
        core.resolve_conversation(conversation="legacy")
    assert count("sessions") == 0


def test_a_legacy_row_is_repaired_from_its_surviving_response():
    ref = core.create_session(source="api_server").session_id
    db.execute(
        "INSERT INTO responses (response_id, data, accessed_at) VALUES ('r9', %s, 1)",
        [json.dumps({"session_id": ref})],
        alias=responses_alias(),
    )
    db.execute(
        "INSERT INTO conversations (name, response_id, session_id) VALUES ('old', 'r9', NULL)",
        alias=responses_alias(),
    )
    assert core.resolve_conversation(conversation="old").session_id == ref
    assert conversation("old")[1] == ref


def test_a_slug_follows_its_session_through_compression():
    first = _turn("sidekick-e", "resp-1")
    rotated = core.rotate_for_compression(session_id=first.session_id)
    core.evict_responses(keep_latest=0)
    assert core.resolve_conversation(conversation="sidekick-e").session_id == rotated.new_session_id


def test_bad_requests_are_refused():
    with pytest.raises(core.InvalidInput):
        core.resolve_conversation()
    with pytest.raises(core.InvalidInput):
        core.resolve_conversation(conversation="")
    with pytest.raises(core.SessionNotFound):
        core.record_turn(response_id="r", session_id="ghost", conversation="x")
    assert conversation("x") is None


def test_racing_requests_for_one_new_slug_agree_on_one_session():
    targets = run_threads(lambda i: core.resolve_conversation(conversation="race"), 6)
    assert len({t.session_id for t in targets}) == 1
    assert sum(t.created for t in targets) == 1
    assert count("sessions") == 1
    assert conversation("race")[1] == targets[0].session_id


def test_concurrent_turns_on_one_slug_with_evictions_never_fork():
    _turn("busy", "seed")

    def client(i: int) -> set[str]:
        seen = set()
        for n in range(10):
            target = core.resolve_conversation(conversation="busy")
            core.append_message(session_id=target.session_id, role="user", content=f"{i}-{n}")
            core.record_turn(
                response_id=f"r{i}-{n}", session_id=target.session_id, conversation="busy"
            )
            if n % 3 == 0:
                core.evict_responses(keep_latest=1)
            seen.add(target.session_id)
        return seen

    seen = set().union(*run_threads(client, 4))
    assert len(seen) == 1
    assert count("sessions") == 1
    assert count("messages") == 41


def test_attach_repopulates_session_ids_a_runtime_left_blank():
    from django.core.management import call_command

    ref = core.create_session(source="api_server").session_id
    alias = responses_alias()
    db.execute(
        "INSERT INTO responses (response_id, data, accessed_at) VALUES ('r1', %s, 1)",
        [json.dumps({"session_id": ref})],
        alias=alias,
    )
    # What Hermes's INSERT OR REPLACE leaves: the row without our column's value.
    db.execute(
        "INSERT INTO conversations (name, response_id) VALUES ('hermes-slug', 'r1')", alias=alias
    )
    db.execute(
        "INSERT INTO conversations (name, response_id) VALUES ('gone', 'evicted')", alias=alias
    )
    call_command("init_store")
    assert conversation("hermes-slug") == ("r1", ref)
    assert conversation("gone") == ("evicted", None)


def test_a_resume_writes_the_column_of_its_own_slug_back():
    # Hermes's INSERT OR REPLACE left it NULL; the resume touched the slug (attack round 46).
    ref = core.create_session(source="api_server", session_key="api:k").session_id
    db.execute(
        "INSERT INTO responses (response_id, data, accessed_at) VALUES ('r10', %s, 1)",
        [json.dumps({"session_id": ref})],
        alias=responses_alias(),
    )
    db.execute(
        "INSERT INTO conversations (name, response_id, session_id) VALUES ('mine', 'r10', NULL)",
        alias=responses_alias(),
    )
    core.end_session(session_id=ref, end_reason="user_exit")
    core.resume_session(ref=ref)
    assert conversation("mine") == ("r10", ref)
