"""Hermes's rules the core must keep where Hermes's writes differ from ours (regressions).

- Hermes's ``INSERT OR REPLACE`` on ``conversations`` drops our session_id
  column on every turn: deleting or merging a slug's session must still find
  the slug through its latest response.
- Hermes's API server continues a slug in the session its latest response
  names: after a merge that must be the merge target.
- ``ResponseStore.delete`` never leaves a slug pointing at a deleted response
  (Hermes would answer that slug "Previous response not found" forever).
- Per-model usage rows (``session_model_usage``) go with a deleted session and
  come back with a restore.
- Titles stay unique across a restore.
"""

from __future__ import annotations

import pytest

from sessions_admin import core
from tests.hermes import scenario
from tests.hermes.checks import assert_healthy
from tests.hermes.conftest import call, sql


def _hermes_next_turn_session(hermes, slug: str) -> str | None:
    """The session Hermes's API server continues for ``slug`` (api_server.py's lookup)."""
    response_id = hermes.one(call("responses.get_conversation", slug))
    if response_id is None:
        return None
    stored = hermes.one(call("responses.get", response_id))
    return stored["session_id"] if stored else "404: Previous response not found"


def _slug_turn(session_id: str, response_id: str, slug: str) -> list[dict]:
    return [
        call("state.append_message", session_id, "user", f"turn {response_id}"),
        call(
            "responses.put",
            response_id,
            {"response": {"id": response_id}, "conversation_history": [], "session_id": session_id},
        ),
        call("responses.set_conversation", slug, response_id),
    ]


@pytest.fixture
def two_slugs(hermes, attach):
    """Slug "alpha" on api-1 (two turns) and slug "beta" on api-2, written by Hermes after attach.

    Attaching first adds conversations.session_id; Hermes's next turns replace
    the rows and leave that column NULL, as on every live store.
    """
    hermes.run([call("state.create_session", "api-1", "api_server")])
    hermes.run([call("responses.set_conversation", "seed", "none")])
    attach()
    hermes.run(
        [
            *_slug_turn("api-1", "resp_1a", "alpha"),
            *_slug_turn("api-1", "resp_1b", "alpha"),
            call("state.create_session", "api-2", "api_server"),
            *_slug_turn("api-2", "resp_2a", "beta"),
        ]
    )
    rows = hermes.one(
        sql("SELECT name, session_id FROM conversations ORDER BY name", on="responses")
    )
    assert rows == [["alpha", None], ["beta", None], ["seed", None]]
    return hermes


def test_deleting_a_slugs_session_drops_the_slug_as_hermes_does(two_slugs, admin):
    hermes = two_slugs
    plan = core.plan_cascade_delete(session_ids=["api-1"])
    assert plan.conversation_names == ("alpha",)
    core.execute_cascade_delete(
        session_ids=["api-1"], expected_fingerprint=plan.fingerprint, actor="t", reason="r"
    )
    # No slug is left pointing at a deleted response: Hermes starts alpha afresh, not a 404.
    assert _hermes_next_turn_session(hermes, "alpha") is None
    assert _hermes_next_turn_session(hermes, "beta") == "api-2"
    assert_healthy(hermes)


def test_restoring_brings_the_slug_back(two_slugs, admin):
    hermes = two_slugs
    plan = core.plan_cascade_delete(session_ids=["api-1"])
    result = core.execute_cascade_delete(
        session_ids=["api-1"], expected_fingerprint=plan.fingerprint, actor="t", reason="r"
    )
    core.restore_trash_entry(entry_id=result.trash_entry_ids[0], actor="t")
    assert _hermes_next_turn_session(hermes, "alpha") == "api-1"


def test_after_a_merge_hermes_continues_the_slug_in_the_target(two_slugs, admin):
    hermes = two_slugs
    plan = core.plan_merge(session_ids=["api-1", "api-2"], target_id="api-1")
    assert plan.conversations_moved == ("beta",)
    merged = core.merge_sessions(
        session_ids=["api-1", "api-2"], target_id="api-1", expected_fingerprint=plan.fingerprint
    )
    assert _hermes_next_turn_session(hermes, "beta") == "api-1"
    assert _hermes_next_turn_session(hermes, "alpha") == "api-1"
    # The column is repopulated for the slugs the merge touched.
    assert core.conversation_session("beta") == "api-1"
    core.unmerge(merge_id=merged.merge_id)
    assert _hermes_next_turn_session(hermes, "beta") == "api-2"
    assert core.conversation_session("beta") == "api-2"
    assert_healthy(hermes, counted={"api-1", "api-2"})


def test_usage_rows_come_back_with_a_restore(hermes, attach):
    hermes.run(
        [
            call("state.create_session", "cli-x", "cli", model="m1"),
            call("state.append_message", "cli-x", "user", "hello walrus"),
            call(
                "state.update_token_counts", "cli-x", input_tokens=10, output_tokens=5, model="m1"
            ),
        ]
    )
    usage = hermes.one(sql("SELECT * FROM session_model_usage ORDER BY model"))
    assert usage
    attach()
    plan = core.plan_cascade_delete(session_ids=["cli-x"])
    result = core.execute_cascade_delete(
        session_ids=["cli-x"], expected_fingerprint=plan.fingerprint, actor="t", reason="r"
    )
    assert hermes.one(sql("SELECT COUNT(*) FROM session_model_usage")) == [[0]]
    core.restore_trash_entry(entry_id=result.trash_entry_ids[0], actor="t")
    assert hermes.one(sql("SELECT * FROM session_model_usage ORDER BY model")) == usage
    assert_healthy(hermes)


def test_a_restore_never_duplicates_a_title(hermes, attach):
    scenario.build(hermes)
    attach()
    plan = core.plan_cascade_delete(session_ids=["cli-1"])
    result = core.execute_cascade_delete(
        session_ids=["cli-1"], expected_fingerprint=plan.fingerprint, actor="t", reason="r"
    )
    hermes.one(call("state.set_session_title", "tui-1", "Refactor plan"))
    with pytest.raises(core.RestoreConflict, match="Refactor plan"):
        core.restore_trash_entry(entry_id=result.trash_entry_ids[0], actor="t")
    assert hermes.one(sql("SELECT COUNT(*) FROM sessions WHERE id = 'cli-1'")) == [[0]]
    assert_healthy(hermes)
