"""Issue 25 item 16 on a store hermes-agent 0.19 writes: a slug survives Hermes's own turn.

The core resolves a slug and records a turn; then Hermes's API server (its own
``ResponseStore``, held open like a gateway) takes the slug's next turn, which
rewrites the slug's row with ``INSERT OR REPLACE (name, response_id)``; that
turn's response is then lost (a restart before it was flushed, simulated by
deleting the stored responses, or Hermes's own ``delete``, which takes the row
too). The slug still resolves to its session.
"""

from __future__ import annotations

import pytest

from sessions_admin import core
from tests.helpers import conversation, count
from tests.hermes.conftest import call, raw_rows, sql
from tests.hermes.live import LiveHermes

SLUG = "support-7"


@pytest.fixture
def live(hermes):
    running = LiveHermes(hermes)
    yield running
    running.close()


def _core_then_hermes_turn(live: LiveHermes) -> tuple[str, dict]:
    session_id = core.resolve_conversation(conversation=SLUG).session_id
    core.append_message(session_id=session_id, role="user", content="where is order 1001?")
    core.append_message(session_id=session_id, role="assistant", content="On its way.")
    core.record_turn(response_id="resp_core_1", session_id=session_id, conversation=SLUG)
    turn = live.turn(SLUG, "and order 1002?", "Also on its way.")
    assert turn["session_id"] == session_id and not turn["cold_start"]
    return session_id, turn


@pytest.mark.parametrize("lost_by", ["restart before the flush", "hermes delete"])
def test_a_slug_resolves_to_its_session_after_hermes_turn_lost_its_response(
    hermes, live, attach, lost_by
):
    attach()
    session_id, turn = _core_then_hermes_turn(live)
    rows = raw_rows(hermes.responses, "SELECT response_id, session_id FROM conversations")
    assert rows == [(turn["response_id"], None)]  # Hermes's INSERT OR REPLACE
    if lost_by == "hermes delete":
        assert live.one(call("responses.delete", turn["response_id"])) is True
        live.run([sql("DELETE FROM responses", on="responses", commit=True)])
    else:
        live.run([sql("DELETE FROM responses", on="responses", commit=True)])

    target = core.resolve_conversation(conversation=SLUG)
    assert (target.session_id, target.created) == (session_id, False)
    assert count("sessions") == 1
    assert conversation(SLUG)[1] == session_id
    messages = live.one(call("state.get_messages_as_conversation", session_id))
    assert [m["content"] for m in messages] == [
        "where is order 1001?",
        "On its way.",
        "and order 1002?",
        "Also on its way.",
    ]
