"""Resume, reset and the stray-message move, as a running Hermes 0.19 gateway sees them.

A gateway (``gateway.session.SessionStore`` over ``hermes_state.SessionDB``,
hermes-agent's own code in its own process, ``gateway_driver.py``) keeps
routing its chats while the console acts on the same state.db. After each
console action the gateway receives the chat's next message and picks (or
recovers, or starts) a session by its own rules; the store must then hold one
live session for the chat, the one the operator meant.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import clock, stray
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditEntry
from sessions_admin.store import health
from tests.hermes.checks import assert_healthy, search, transcripts
from tests.hermes.conftest import HermesError, sql

GATEWAY_DRIVER = Path(__file__).with_name("gateway_driver.py")
CHAT = {"platform": "telegram", "chat_id": "42", "chat_type": "dm", "user_id": "42"}
OTHER_CHAT = {"platform": "telegram", "chat_id": "43", "chat_type": "dm", "user_id": "43"}


class Gateway:
    """One gateway process; ``gateway(op, **fields)`` answers with the op's result."""

    def __init__(self, python: str, home: Path):
        self.process = subprocess.Popen(
            [python, str(GATEWAY_DRIVER), str(home)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "HERMES_HOME": str(home)},
        )

    def __call__(self, op: str, **fields):
        self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise HermesError(f"gateway died:\n{self.process.stderr.read()[-4000:]}")
        answer = json.loads(line)
        if "error" in answer:
            raise HermesError(f"{op} {fields} -> {answer['error']}")
        return answer["result"]

    def turn(self, session_id: str, word: str) -> None:
        self("append", session_id=session_id, role="user", content=f"a question about {word}")
        self("append", session_id=session_id, role="assistant", content=f"{word} answered")

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture
def start_gateway(hermes):
    hermes.run([])  # state.db and response_store.db exist, with Hermes's schema
    started: list[Gateway] = []

    def start() -> Gateway:
        started.append(Gateway(hermes.python, hermes.home))
        return started[-1]

    yield start
    for gateway in started:
        gateway.stop()


def _key_sessions(hermes, key: str) -> list[list]:
    return hermes.one(
        sql(
            "SELECT id, ended_at IS NULL, end_reason, "
            "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) "
            "FROM sessions s WHERE session_key = ? ORDER BY started_at, id",
            key,
        )
    )


def _live(hermes, key: str) -> list[str]:
    return [sid for sid, live, _reason, _n in _key_sessions(hermes, key) if live]


def test_a_resume_survives_the_gateways_recovery_of_an_accidental_close(
    hermes, attach, admin, start_gateway
):
    gateway = start_gateway()
    earlier = gateway("route", chat=CHAT)
    gateway.turn(earlier, "aardvark")
    later = gateway("reset", chat=CHAT)  # the user's own /reset: a later sibling
    gateway.turn(later, "bison")
    # Hermes's older cleanup bug closes the routed session: recoverable for the gateway.
    gateway("end", session_id=later, reason="agent_close")
    key = gateway("key", chat=CHAT)
    attach()

    actions.resume(actor=admin, ref=earlier, reason="the customer wants the aardvark thread")
    routed = gateway("route", chat=CHAT)  # the chat's next message

    assert routed == earlier, "the gateway reopened the later sibling: the resume was undone"
    assert _live(hermes, key) == [earlier]
    reasons = {sid: reason for sid, _live, reason, _n in _key_sessions(hermes, key)}
    assert reasons[later] == "session_switch"
    entry = AuditEntry.objects.get(action="resume")
    assert entry.before["recoverable_siblings"] == {later: "agent_close"}
    assert entry.after["closed_recoverable"] == {
        later: {"end_reason_before": "agent_close", "end_reason": "session_switch"}
    }
    assert_healthy(hermes)


def _shape(hermes, session_id: str) -> list:
    return hermes.one(
        sql(
            "SELECT source, chat_type, user_id IS NOT NULL, chat_id IS NOT NULL, "
            "session_key IS NOT NULL, "
            "parent_session_id IS NULL, model_config IS NULL, origin_json IS NOT NULL "
            "FROM sessions WHERE id = ?",
            session_id,
        )
    )


def test_a_console_reset_leaves_what_hermes_reset_leaves_and_no_orphan(
    hermes, attach, admin, client, start_gateway
):
    gateway = start_gateway()
    key = gateway("key", chat=CHAT)
    current = gateway("route", chat=CHAT)
    gateway.turn(current, "capybara")
    # An older gateway's accidental close with messages: recovery would resurrect it.
    gateway("create", session_id="accidentally-closed", chat=CHAT)
    gateway.turn("accidentally-closed", "dromedary")
    gateway("end", session_id="accidentally-closed", reason="agent_close")
    # The same chat state on another chat, reset by Hermes's own /reset, for comparison.
    theirs_before = gateway("route", chat=OTHER_CHAT)
    gateway.turn(theirs_before, "elephant")
    theirs = gateway("reset", chat=OTHER_CHAT)
    attach()

    response = client.post(reverse("session_reset", args=[current]), {"reason": "start over"})
    assert response.status_code == 302
    routed = gateway("route", chat=CHAT)  # the chat's next message
    gateway.turn(routed, "flamingo")

    assert routed not in {current, "accidentally-closed"}
    assert _live(hermes, key) == [routed], "an empty session of the console's stayed live"
    reasons = {sid: reason for sid, _live, reason, _n in _key_sessions(hermes, key)}
    assert reasons == {
        current: "session_reset",
        "accidentally-closed": "session_reset",
        routed: None,
    }
    # As Hermes's own /reset leaves a chat: the ended session, one fresh unlinked session.
    assert gateway("route", chat=OTHER_CHAT) == theirs
    assert _shape(hermes, routed) == _shape(hermes, theirs)
    assert search(hermes, "capybara", "dromedary", "flamingo") == {
        "capybara": {current},
        "dromedary": {"accidentally-closed"},
        "flamingo": {routed},
    }
    entry = AuditEntry.objects.get(action="reset")
    assert entry.after["left_to_gateway"] is True and entry.after["new"] is None
    assert set(entry.after["closed_recoverable"]) == {"accidentally-closed"}
    assert_healthy(hermes)


def test_a_restarted_gateway_starts_the_next_session_after_a_console_reset(
    hermes, attach, admin, start_gateway
):
    gateway = start_gateway()
    key = gateway("key", chat=CHAT)
    current = gateway("route", chat=CHAT)
    gateway.turn(current, "gazelle")
    gateway.stop()
    attach()
    result = actions.reset(actor=admin, session_key=key, reason="start over")
    assert result.left_to_gateway and result.new_session_id is None

    restarted = start_gateway()  # loads its routing from state.db's gateway_routing
    routed = restarted("route", chat=CHAT)
    assert routed != current
    assert _live(hermes, key) == [routed]


def test_a_reset_with_a_summary_is_the_session_the_gateway_continues(
    hermes, attach, admin, start_gateway
):
    gateway = start_gateway()
    key = gateway("key", chat=CHAT)
    current = gateway("route", chat=CHAT)
    gateway.turn(current, "hyena")
    attach()
    result = actions.reset(
        actor=admin, session_key=key, summary="Earlier: the hyena question.", reason="shorter"
    )
    assert result.new_session_id and not result.left_to_gateway
    assert gateway("route", chat=CHAT) == result.new_session_id
    assert _live(hermes, key) == [result.new_session_id]
    # Created as Hermes creates a gateway session: unlinked, model_config left to the agent.
    assert _shape(hermes, result.new_session_id)[0][-3:] == [1, 1, 1]


def test_messages_a_gateway_wrote_into_a_merged_session_move_to_the_target_and_back(
    hermes, attach, admin, client, start_gateway
):
    gateway = start_gateway()
    key = gateway("key", chat=CHAT)
    # An accidental fork of one chat: the first ended agent_close, the gateway went on in a second.
    gateway("create", session_id="fork-a", chat=CHAT)
    gateway.turn("fork-a", "ibis")
    gateway("end", session_id="fork-a", reason="agent_close")
    gateway("create", session_id="fork-b", chat=CHAT)
    gateway.turn("fork-b", "jackal")
    attach()
    # The operator merged the fork into fork-a two minutes ago...
    plan = core.plan_merge(session_ids=["fork-a", "fork-b"], target_id="fork-a")
    with clock.use_clock(lambda: time.time() - 120):
        actions.merge(
            actor=admin,
            session_ids=["fork-a", "fork-b"],
            target_id="fork-a",
            expected_fingerprint=plan.fingerprint,
        )
    # ...and the gateway, still holding fork-b, kept writing into the husk (0.19 lets it).
    gateway.turn("fork-b", "koala")
    gateway.turn("fork-b", "lemur")
    stray_ids = [
        r[0]
        for r in hermes.one(sql("SELECT id FROM messages WHERE session_id = 'fork-b' ORDER BY id"))
    ]
    assert len(stray_ids) == 4
    assert health.count("written_after_end") == 1

    preview = client.get(reverse("stray_move_preview", args=["fork-b"]))
    assert preview.status_code == 200
    shown = preview.context["plan"]
    assert shown.message_ids == tuple(stray_ids) and shown.destination_id == "fork-a"
    # The page itself offers the move of a husk's messages: the destination and the form with
    # the plan's fingerprint (it once showed only why they were stray; attack round 46, W2).
    page = preview.content.decode()
    assert "the live session that continues it" in page and "<code>fork-a</code>" in page
    execute = re.escape(reverse("stray_move_execute", args=["fork-b"]))
    form = re.search(
        rf'<form method="post" action="{execute}"[^>]*>.*?name="fingerprint" value="([^"]+)"',
        page,
        re.S,
    )
    assert form and form.group(1) == shown.fingerprint
    detail = client.get(reverse("session_detail", args=["fork-b"])).content.decode()
    assert reverse("stray_move_preview", args=["fork-b"]) in detail
    before = transcripts(hermes, ["fork-a"])["fork-a"]

    response = client.post(
        reverse("stray_move_execute", args=["fork-b"]),
        {"fingerprint": form.group(1), "reason": "gateway wrote into the merged fork"},
    )
    assert response.status_code == 302
    assert health.count("written_after_end") == 0
    moved = transcripts(hermes, ["fork-a", "fork-b"])
    assert [m[0] for m in moved["fork-a"]] == sorted([m[0] for m in before] + stray_ids)
    assert moved["fork-b"] == []
    assert search(hermes, "koala", "lemur") == {"koala": {"fork-a"}, "lemur": {"fork-a"}}
    assert_healthy(hermes, counted={"fork-a", "fork-b"})
    assert _live(hermes, key) == ["fork-a"]

    # Undo: the same rows go back to the session they were written in.
    entry = AuditEntry.objects.get(action=actions.STRAY_MOVE)
    assert entry.after["message_ids"] == stray_ids
    page = client.get(reverse("stray_move_preview", args=["fork-b"])).content.decode()
    assert reverse("stray_move_undo", args=[entry.pk]) in page
    response = client.post(reverse("stray_move_undo", args=[entry.pk]), {"reason": "undo"})
    assert response.status_code == 302
    assert transcripts(hermes, ["fork-a"])["fork-a"] == before
    assert search(hermes, "koala", "lemur") == {"koala": {"fork-b"}, "lemur": {"fork-b"}}
    assert health.count("written_after_end") == 1
    assert_healthy(hermes, counted={"fork-a", "fork-b"})

    # A stale preview executes nothing: another stray message arrived meanwhile.
    stale = stray.plan_stray_move(session_id="fork-b")
    gateway("append", session_id="fork-b", role="user", content="one more mongoose")
    response = client.post(
        reverse("stray_move_execute", args=["fork-b"]), {"fingerprint": stale.fingerprint}
    )
    assert response.status_code == 409
    assert len(stray.plan_stray_move(session_id="fork-b").message_ids) == 5
