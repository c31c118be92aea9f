"""Slug history: what a runtime writing like hermes-agent 0.19 leaves, recorded and used.

The runtime side here is plain SQL doing what 0.19's ``ResponseStore`` does
(``put``, ``set_conversation`` as delete-and-insert, eviction deleting the
slug's row with its response), so these run on both backends;
tests/hermes/test_slug_forks.py drives Hermes's own code.
"""

from __future__ import annotations

import json

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.conversations import conversation_history_of
from sessions_admin.core.slug_history import SlugHistoryPoller, slug_histories
from sessions_admin.routers import responses_alias
from tests.builders import empty_slug_history  # noqa: F401 - an autouse fixture


def _put(response_id: str, session_id: str, history: list[dict], created_at: int = 1_700_000_000):
    data = {
        "response": {"id": response_id, "object": "response", "created_at": created_at},
        "conversation_history": history,
        "instructions": None,
        "session_id": session_id,
    }
    db.execute(
        "INSERT INTO responses (response_id, data, accessed_at) VALUES (%s, %s, 1)",
        [response_id, json.dumps(data, default=str)],
        alias=responses_alias(),
    )


def _set_conversation(slug: str, response_id: str) -> None:
    # INSERT OR REPLACE (name, response_id): the row comes back without our session_id.
    db.execute("DELETE FROM conversations WHERE name = %s", [slug], alias=responses_alias())
    db.execute(
        "INSERT INTO conversations (name, response_id) VALUES (%s, %s)",
        [slug, response_id],
        alias=responses_alias(),
    )


def _evict(response_id: str) -> None:
    db.execute(
        "DELETE FROM conversations WHERE response_id = %s", [response_id], alias=responses_alias()
    )
    db.execute(
        "DELETE FROM responses WHERE response_id = %s", [response_id], alias=responses_alias()
    )


def _turn(slug: str, response_id: str, session_id: str, text: str, history=()) -> list[dict]:
    core.append_message(session_id=session_id, role="user", content=text)
    core.append_message(session_id=session_id, role="assistant", content=f"re: {text}")
    full = [
        *history,
        {"role": "user", "content": text},
        {"role": "assistant", "content": f"re: {text}"},
    ]
    _put(response_id, session_id, full)
    _set_conversation(slug, response_id)
    return full


def _cold_started(slug: str, poll) -> tuple[str, str]:
    a = core.create_session(source="api_server", started_at=1.0).session_id
    b = core.create_session(source="api_server", started_at=2.0).session_id
    _turn(slug, "r1", a, "first question")
    poll()
    _evict("r1")
    poll()
    _turn(slug, "r2", b, "asked again after the eviction")
    poll()
    return a, b


def test_each_change_is_recorded_once_however_many_pollers_see_it():
    a = core.create_session(source="api_server").session_id
    first, second = SlugHistoryPoller(), SlugHistoryPoller()
    history = _turn("chat", "r1", a, "hello")
    assert first.poll() == 1
    assert first.poll() == 0
    assert second.poll() == 0  # already recorded by the other poller
    _turn("chat", "r2", a, "more", history)
    assert second.poll() == 1
    assert first.poll() == 0
    _evict("r2")
    assert first.poll() == 1
    assert second.poll() == 0
    seen = slug_histories()["chat"]
    assert [(s.event, s.response_id, s.session_id) for s in seen] == [
        ("recorded", "r1", a),
        ("recorded", "r2", a),
        ("removed", "r2", None),
    ]
    assert seen[0].response_created_at == 1_700_000_000


def test_the_history_alone_finds_a_slug_fork_the_runtime_left_no_trace_of():
    poller = SlugHistoryPoller()
    a, b = _cold_started("support", poller.poll)
    # What 0.19 leaves: b's row and response, nothing naming the slug on a.
    groups = core.find_fork_groups()
    assert [(g.kind, g.key, g.session_ids) for g in groups] == [("conversation", "support", (a, b))]
    assert [(h.event, h.session_id) for h in groups[0].history] == [
        ("recorded", a),
        ("removed", None),
        ("recorded", b),
    ]
    assert any("slug history: response r1" in line for line in groups[0].evidence)


def test_a_slug_moving_along_its_lineage_is_not_a_fork():
    poller = SlugHistoryPoller()
    a = core.create_session(source="api_server", started_at=1.0).session_id
    _turn("linked", "r1", a, "before compression")
    poller.poll()
    b = core.rotate_for_compression(session_id=a).new_session_id
    _turn("linked", "r2", b, "after compression")
    poller.poll()
    assert len({h.session_id for h in slug_histories()["linked"]}) == 2
    assert core.find_fork_groups() == []


def test_merged_history_continues_the_slug_and_unmerge_restores_the_response_byte_exact():
    poller = SlugHistoryPoller()
    a, b = _cold_started("support", poller.poll)
    before = db.fetchone(
        "SELECT data FROM responses WHERE response_id = 'r2'", alias=responses_alias()
    )[0]
    plan = core.plan_merge(session_ids=[a, b])
    assert plan.latest_responses == (("support", "r2"),) and plan.is_api_conversation
    result = core.merge_sessions(
        session_ids=[a, b], expected_fingerprint=plan.fingerprint, continue_history=True
    )
    assert result.rewritten_responses == ("r2",)
    data = json.loads(
        db.fetchone("SELECT data FROM responses WHERE response_id = 'r2'", alias=responses_alias())[
            0
        ]
    )
    assert data["session_id"] == a
    assert data["conversation_history"] == conversation_history_of(a)
    assert [m["content"] for m in data["conversation_history"]] == [
        "first question",
        "re: first question",
        "asked again after the eviction",
        "re: asked again after the eviction",
    ]
    assert data["response"]["id"] == "r2"  # the rest of the data kept
    assert core.find_fork_groups() == []

    core.unmerge(merge_id=result.merge_id)
    after = db.fetchone(
        "SELECT data FROM responses WHERE response_id = 'r2'", alias=responses_alias()
    )[0]
    assert after == before
    assert [g.session_ids for g in core.find_fork_groups()] == [(a, b)]


def test_the_target_own_latest_response_is_rewritten_and_restored_too():
    a = core.create_session(source="api_server", started_at=1.0).session_id
    b = core.create_session(source="api_server", started_at=2.0).session_id
    core.append_message(session_id=a, role="user", content="older fork")
    _turn("chat", "rb", b, "the slug is on b now")
    before = db.fetchone(
        "SELECT data FROM responses WHERE response_id = 'rb'", alias=responses_alias()
    )[0]
    plan = core.plan_merge(session_ids=[a, b], target_id=b)
    result = core.merge_sessions(
        session_ids=[a, b],
        target_id=b,
        expected_fingerprint=plan.fingerprint,
        continue_history=True,
    )
    assert result.rewritten_responses == ("rb",)
    data = json.loads(
        db.fetchone("SELECT data FROM responses WHERE response_id = 'rb'", alias=responses_alias())[
            0
        ]
    )
    assert [m["content"] for m in data["conversation_history"]][0] == "older fork"
    core.unmerge(merge_id=result.merge_id)
    after = db.fetchone(
        "SELECT data FROM responses WHERE response_id = 'rb'", alias=responses_alias()
    )[0]
    assert after == before


def test_without_continue_history_the_stored_history_is_left_as_it_was():
    poller = SlugHistoryPoller()
    a, b = _cold_started("support", poller.poll)
    plan = core.plan_merge(session_ids=[a, b])
    result = core.merge_sessions(session_ids=[a, b], expected_fingerprint=plan.fingerprint)
    assert result.rewritten_responses == ()
    data = json.loads(
        db.fetchone("SELECT data FROM responses WHERE response_id = 'r2'", alias=responses_alias())[
            0
        ]
    )
    assert data["session_id"] == a and len(data["conversation_history"]) == 2
