"""Issue 25 item 16: a slug survives Hermes's own turn.

hermes-agent 0.19 advances a slug with ``INSERT OR REPLACE INTO conversations
(name, response_id)``, which leaves the core's ``session_id`` column NULL; its
LRU deletes the row together with the response. Once that turn's response is
not stored (evicted, or a restart before Hermes flushed it), neither the row nor
any response names the slug's session, yet the core recorded it on its own turn:
the slug resolves to that session, never ``ConversationNotFound`` or a fork.

The runtime's statements are plain SQL here (PostgreSQL has no ``INSERT OR
REPLACE``: the same row through an upsert that sets the column NULL), so these run
on both backends; tests/hermes/test_slug_hermes_turn.py drives Hermes's own code.
"""

from __future__ import annotations

import json

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.slug_history import TABLE, SlugHistoryPoller
from sessions_admin.routers import responses_alias
from tests.builders import empty_slug_history  # noqa: F401 - an autouse fixture
from tests.helpers import conversation, count


def _core_turn(slug: str, response_id: str) -> str:
    """A turn through the core, as a runtime using it as a library makes one."""
    session_id = core.resolve_conversation(conversation=slug).session_id
    core.append_message(session_id=session_id, role="user", content=f"asked in {response_id}")
    core.record_turn(response_id=response_id, session_id=session_id, conversation=slug)
    return session_id


def _hermes_set_conversation(slug: str, response_id: str) -> None:
    """``ResponseStore.set_conversation``: the row rewritten without the session column."""
    alias = responses_alias()
    if db.vendor(alias) == "sqlite":
        sql = "INSERT OR REPLACE INTO conversations (name, response_id) VALUES (%s, %s)"
    else:
        sql = (
            "INSERT INTO conversations (name, response_id) VALUES (%s, %s) ON CONFLICT (name) "
            "DO UPDATE SET response_id = excluded.response_id, session_id = NULL"
        )
    db.execute(sql, [slug, response_id], alias=alias)


def _hermes_put(response_id: str, session_id: str) -> None:
    db.execute(
        "INSERT INTO responses (response_id, data, accessed_at) VALUES (%s, %s, 2)",
        [response_id, json.dumps({"session_id": session_id, "conversation_history": []})],
        alias=responses_alias(),
    )


def _hermes_evicts(response_id: str) -> None:
    """``ResponseStore.put``'s LRU: the response goes, and the slug's row with it."""
    alias = responses_alias()
    db.execute("DELETE FROM conversations WHERE response_id = %s", [response_id], alias=alias)
    db.execute("DELETE FROM responses WHERE response_id = %s", [response_id], alias=alias)


@pytest.mark.parametrize("lost", ["never stored", "every response evicted"])
def test_a_slug_hermes_rewrote_resolves_to_the_session_the_core_recorded(lost):
    session_id = _core_turn("sidekick", "r1")
    _hermes_set_conversation("sidekick", "r2")  # Hermes's turn; its response r2 is not stored
    assert conversation("sidekick") == ("r2", None)
    if lost == "every response evicted":
        core.evict_responses(keep_latest=0)

    target = core.resolve_conversation(conversation="sidekick")
    assert (target.session_id, target.resolved_by, target.created) == (
        session_id,
        "conversation",
        False,
    )
    assert count("sessions") == 1
    assert conversation("sidekick") == ("r2", session_id)  # the column written back
    # The next turn goes on in the same session.
    core.append_message(session_id=target.session_id, role="user", content="still there?")
    core.record_turn(response_id="r3", session_id=target.session_id, conversation="sidekick")
    assert conversation("sidekick") == ("r3", session_id)


def test_an_unknown_previous_response_continues_by_the_slug_the_core_recorded():
    session_id = _core_turn("sidekick", "r1")
    _hermes_set_conversation("sidekick", "r2")
    core.evict_responses(keep_latest=0)
    target = core.resolve_conversation(conversation="sidekick", previous_response_id="r2")
    assert target.session_id == session_id
    assert count("sessions") == 1


def test_a_slug_whose_row_hermes_evicted_continues_its_session_instead_of_forking():
    session_id = _core_turn("sidekick", "r1")
    _hermes_set_conversation("sidekick", "r2")
    _hermes_put("r2", session_id)
    _hermes_evicts("r2")
    core.evict_responses(keep_latest=0)
    assert conversation("sidekick") is None

    target = core.resolve_conversation(conversation="sidekick")
    assert (target.session_id, target.created) == (session_id, False)
    assert count("sessions") == 1
    assert conversation("sidekick") == ("", session_id)


def test_a_session_hermes_moved_the_slug_to_later_is_the_one_continued():
    """The latest recorded session wins: the poller saw Hermes's own turn after the core's."""
    first = _core_turn("sidekick", "r1")
    moved = core.create_session(source="api_server").session_id
    _hermes_put("r2", moved)
    _hermes_set_conversation("sidekick", "r2")
    assert SlugHistoryPoller().poll() == 1
    _hermes_set_conversation("sidekick", "r3")  # a later turn whose response was lost
    core.evict_responses(keep_latest=0)

    target = core.resolve_conversation(conversation="sidekick")
    assert target.session_id == moved != first
    assert conversation("sidekick") == ("r3", moved)


def test_a_slug_the_core_put_on_a_continuation_resolves_there():
    first = _core_turn("sidekick", "r1")
    rotated = core.rotate_for_compression(session_id=first).new_session_id
    assert core.resolve_conversation(conversation="sidekick").session_id == rotated
    _hermes_set_conversation("sidekick", "r2")
    core.evict_responses(keep_latest=0)
    assert core.resolve_conversation(conversation="sidekick").session_id == rotated


def test_a_deleted_recorded_session_is_not_brought_back():
    session_id = _core_turn("sidekick", "r1")
    _hermes_set_conversation("sidekick", "r2")
    core.evict_responses(keep_latest=0)
    plan = core.plan_cascade_delete(session_ids=[session_id])
    core.execute_cascade_delete(
        session_ids=[session_id],
        expected_fingerprint=plan.fingerprint,
        actor="test",
        reason="the customer asked",
    )
    assert count("sessions") == 0
    with pytest.raises(core.ConversationNotFound):
        core.resolve_conversation(conversation="sidekick")
    assert count("sessions") == 0


def test_the_core_entries_are_not_fork_evidence_and_stay_one_per_slug():
    sessions = []
    for n in range(3):  # a runtime without continuity recording one slug on unlinked sessions
        sid = core.create_session(source="api_server", started_at=1000.0 + n).session_id
        core.record_turn(response_id=f"r{n}", session_id=sid, conversation="forky")
        sessions.append(sid)
    core.evict_responses(keep_latest=1)  # only the last turn's response survives
    core.record_turn(response_id="late", session_id=sessions[0], conversation="forky")
    groups = core.find_fork_groups()
    assert [(g.key, g.session_ids) for g in groups] == [("forky", (sessions[0], sessions[2]))]
    assert groups[0].history == ()
    entries = db.fetchall(f"SELECT event, session_id FROM {TABLE} WHERE slug = 'forky'")
    assert entries == [("core", sessions[0])]


def test_a_slug_recorded_on_a_merged_session_resolves_to_the_merge_target():
    a = core.create_session(source="api_server", started_at=1.0).session_id
    b = core.create_session(source="api_server", started_at=2.0).session_id
    core.append_message(session_id=b, role="user", content="the fork's turn")
    core.record_turn(response_id="r1", session_id=b, conversation="sidekick")
    plan = core.plan_merge(session_ids=[a, b])
    assert (
        core.merge_sessions(session_ids=[a, b], expected_fingerprint=plan.fingerprint).target_id
        == a
    )
    _hermes_set_conversation("sidekick", "r2")
    core.evict_responses(keep_latest=0)

    target = core.resolve_conversation(conversation="sidekick")
    assert (target.session_id, target.created) == (a, False)
    assert conversation("sidekick") == ("r2", a)
