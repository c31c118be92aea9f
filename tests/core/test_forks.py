"""Fork detection: unlinked sessions of one conversation, with their evidence."""

from __future__ import annotations

import json

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.routers import responses_alias
from tests.builders import cold_start_fork


def test_a_slug_recorded_on_unlinked_sessions_is_a_fork_group():
    ids = cold_start_fork("sidekick-x", 3)
    groups = core.find_fork_groups()
    assert [(g.kind, g.key, g.session_ids) for g in groups] == [
        ("conversation", "sidekick-x", tuple(ids))
    ]
    assert len(groups[0].evidence) == 3


def test_after_evictions_the_sessions_with_surviving_evidence_remain_grouped():
    ids = cold_start_fork("sidekick-y", 3)
    core.evict_responses(keep_latest=1)  # only the last turn's response survives
    core.record_turn(response_id="late", session_id=ids[0], conversation="sidekick-y")
    groups = core.find_fork_groups()
    assert [(g.key, g.session_ids) for g in groups] == [("sidekick-y", (ids[0], ids[2]))]


def test_a_hermes_response_chain_links_a_slug_to_earlier_sessions():
    a = core.create_session(source="api_server", started_at=1.0).session_id
    b = core.create_session(source="api_server", started_at=2.0).session_id
    alias = responses_alias()
    for rid, sid, prev in [("r1", a, None), ("r2", b, "r1")]:
        data = {"session_id": sid, "response": {"id": rid, "previous_response_id": prev}}
        db.execute(
            "INSERT INTO responses (response_id, data, accessed_at) VALUES (%s, %s, 1)",
            [rid, json.dumps(data)],
            alias=alias,
        )
    # Hermes's own INSERT OR REPLACE leaves no session_id on the row.
    db.execute("INSERT INTO conversations (name, response_id) VALUES ('chat', 'r2')", alias=alias)
    groups = core.find_fork_groups()
    assert [(g.kind, g.key, g.session_ids) for g in groups] == [("conversation", "chat", (a, b))]


def test_sessions_linked_by_lineage_are_not_forks():
    target = core.resolve_conversation(conversation="linked")
    core.record_turn(response_id="l1", session_id=target.session_id, conversation="linked")
    rotated = core.rotate_for_compression(session_id=target.session_id).new_session_id
    core.record_turn(response_id="l2", session_id=rotated, conversation="linked")
    assert core.find_fork_groups() == []


def test_a_session_key_restarted_without_a_boundary_is_a_fork_group():
    a = core.create_session(source="telegram", session_key="tg:9", started_at=1.0).session_id
    core.end_session(session_id=a, end_reason="agent_close")
    b = core.create_session(source="telegram", session_key="tg:9", started_at=2.0).session_id
    db.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = %s", [b])
    c = core.create_session(source="telegram", session_key="tg:9", started_at=3.0).session_id
    # b was ended by c's creation with new_session (an intentional boundary) ...
    groups = core.find_fork_groups()
    assert [(g.kind, g.session_ids) for g in groups] == [("session_key", (a, b))]
    assert core.fork_groups_of_session(session_id=c) == []
    assert core.fork_session_ids() == {a, b}


def test_resets_and_user_exits_are_intentional_boundaries():
    a = core.create_session(source="telegram", session_key="tg:1", started_at=1.0).session_id
    core.reset_session_key(session_key="tg:1")
    core.end_session(session_id=core.live_session_for_key("tg:1"), end_reason="user_exit")
    core.create_session(source="telegram", session_key="tg:1")
    assert core.find_fork_groups() == []
    assert core.fork_groups_of_session(session_id=a) == []
