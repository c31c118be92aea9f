"""Slug forks on a store hermes-agent 0.19 writes, found through the slug history (issue 12, 1-2).

Hermes's API server runs in a process of its own (``LiveHermes``: its
``ResponseStore`` with a small LRU and its ``SessionDB``, held open like a
gateway's). Its LRU evicts a slug's latest response, deletes the slug's row
with it, and the slug's next turn cold-starts on a new, unlinked session: from
Hermes's files alone nothing ties the sessions together any more. The
console's poller records the slug history from attach on; ``/forks/`` shows the
group with its evidence; the merge (through the audited action) can give the
slug's latest stored response the merged transcript, which Hermes's own
``ResponseStore.get`` and its next turn then read; the unmerge restores the
response byte-exact.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core.slug_history import SlugHistoryPoller, slug_histories
from sessions_admin.ledger import actions, worker
from tests.hermes.conftest import call, raw_rows
from tests.hermes.live import LiveHermes

SLUG = "support-42"


@pytest.fixture
def live(hermes):
    hermes.max_responses = 3
    running = LiveHermes(hermes)
    yield running
    running.close()


def _evict(live: LiveHermes, n: int, poll) -> None:
    """Other clients' traffic: three more responses push the slug's out of the LRU."""
    for k in range(3):
        live.turn(f"other-{n}-{k}", f"other client {n}.{k}", "ok")
        poll()


def _cold_started_slug(live: LiveHermes, poll) -> list[str]:
    """Two turns, eviction, a cold start, eviction, another cold start: three unlinked sessions."""
    first = live.turn(SLUG, "my order 1001 is late", "Sorry, checking order 1001.")
    poll()
    second = live.turn(SLUG, "it was due monday", "It shipped tuesday.")
    poll()
    assert second["session_id"] == first["session_id"] and not second["cold_start"]
    _evict(live, 1, poll)
    assert live.one(call("responses.get_conversation", SLUG)) is None  # Hermes dropped the slug
    third = live.turn(SLUG, "any news on my order?", "Which order?")
    poll()
    _evict(live, 2, poll)
    fourth = live.turn(SLUG, "order 1001, again", "Which order, please?")
    poll()
    assert third["cold_start"] and fourth["cold_start"]
    sessions = [first["session_id"], third["session_id"], fourth["session_id"]]
    assert len(set(sessions)) == 3
    return sessions


def test_slug_forks_after_attach_are_shown_with_evidence_and_merged(
    hermes, live, attach, admin, client
):
    attach()
    poller = SlugHistoryPoller()
    sessions = _cold_started_slug(live, poller.poll)
    # Nothing in Hermes's files links them: the row is rewritten, responses name no slug.
    assert raw_rows(hermes.responses, "SELECT COUNT(*) FROM conversations WHERE name = ?", (SLUG,))

    groups = [g for g in core.find_fork_groups() if g.kind == "conversation"]
    assert [(g.key, g.session_ids) for g in groups] == [(SLUG, tuple(sessions))]
    history = groups[0].history
    assert [(h.event, h.session_id) for h in history] == [
        ("recorded", sessions[0]),
        ("recorded", sessions[0]),
        ("removed", None),
        ("recorded", sessions[1]),
        ("removed", None),
        ("recorded", sessions[2]),
    ]
    assert all(h.response_created_at for h in history if h.event == "recorded")

    page = client.get(reverse("fork_list"))
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-group="conversation:{SLUG}"' in html
    for seen in history:
        assert seen.response_id in html
    for session_id in sessions:
        assert session_id in html
    assert "row deleted" in html

    plan = core.plan_merge(session_ids=list(sessions))
    assert plan.target_id == sessions[0] and plan.is_api_conversation
    result = actions.merge(
        actor=admin,
        session_ids=list(sessions),
        target_id=None,
        expected_fingerprint=plan.fingerprint,
        reason="one customer, one conversation",
        continue_history=True,
    )
    assert result.rewritten_responses
    assert not [g for g in core.find_fork_groups() if g.key == SLUG]
    # The client's next turn continues in the target with the whole conversation.
    nxt = live.turn(SLUG, "so where is order 1001?", "Delivered today.")
    assert nxt["session_id"] == sessions[0] and not nxt["cold_start"]
    assert nxt["history_length"] == 2 * 4 + 2
    poller.poll()
    assert not [g for g in core.find_fork_groups() if g.key == SLUG]


def test_merge_gives_hermes_the_merged_history_and_unmerge_restores_it_byte_exact(
    hermes, live, attach, admin, client
):
    attach()
    poller = SlugHistoryPoller()
    sessions = _cold_started_slug(live, poller.poll)
    latest = live.one(call("responses.get_conversation", SLUG))
    before = raw_rows(
        hermes.responses, "SELECT data FROM responses WHERE response_id = ?", (latest,)
    )
    assert len(live.one(call("responses.get", latest))["conversation_history"]) == 2

    preview = client.get(reverse("merge_preview") + "?" + "&".join(f"ids={s}" for s in sessions))
    assert preview.context["continue_history"] is True  # on by default for an API conversation
    assert 'name="continue_history" value="1" checked' in preview.content.decode()
    response = client.post(
        reverse("merge_execute"),
        {
            "ids": sessions,
            "target": sessions[0],
            "fingerprint": preview.context["plan"].fingerprint,
            "continue_history": "1",
        },
    )
    assert response.status_code == 302

    stored = live.one(call("responses.get", latest))
    assert stored["session_id"] == sessions[0]
    merged = live.one(call("state.get_messages_as_conversation", sessions[0]))
    assert [(m["role"], m["content"]) for m in stored["conversation_history"]] == [
        (m["role"], m["content"]) for m in merged
    ]
    assert [m["content"] for m in stored["conversation_history"]][::2] == [
        "my order 1001 is late",
        "it was due monday",
        "any news on my order?",
        "order 1001, again",
    ]

    merge_id = core.merges_of_session(session_id=sessions[0])[0].merge_id
    actions.unmerge(actor=admin, merge_id=merge_id, reason="wrong customer")
    after = raw_rows(
        hermes.responses, "SELECT data FROM responses WHERE response_id = ?", (latest,)
    )
    assert after == before
    restored = live.one(call("responses.get", latest))
    assert restored["session_id"] == sessions[2]
    assert len(restored["conversation_history"]) == 2


def test_without_the_choice_the_merge_leaves_the_stored_history_alone(hermes, live, attach, admin):
    attach()
    poller = SlugHistoryPoller()
    sessions = _cold_started_slug(live, poller.poll)
    latest = live.one(call("responses.get_conversation", SLUG))
    plan = core.plan_merge(session_ids=list(sessions))
    result = actions.merge(
        actor=admin,
        session_ids=list(sessions),
        target_id=None,
        expected_fingerprint=plan.fingerprint,
    )
    assert result.rewritten_responses == ()
    stored = live.one(call("responses.get", latest))
    assert stored["session_id"] == sessions[0]  # repointed, as before
    assert len(stored["conversation_history"]) == 2


def test_the_background_poller_records_hermes_writes_as_they_happen(hermes, live, attach, settings):
    attach()
    settings.SESSIONS_ADMIN_SLUG_HISTORY_SECONDS = 0.05
    stop = threading.Event()
    thread = worker.ensure_slug_history_running(stop=stop)
    assert thread is not None

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if len(slug_histories().get(SLUG, [])) >= count:
                return
            time.sleep(0.05)
        raise AssertionError(f"the poller recorded {slug_histories().get(SLUG)}")

    try:
        first = live.turn(SLUG, "hello", "hi")
        wait_for(1)
        _evict(live, 1, lambda: None)
        wait_for(2)  # the slug's row removed
        second = live.turn(SLUG, "hello again", "hi, who are you?")
        wait_for(3)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert second["cold_start"]
    groups = [g for g in core.find_fork_groups() if g.key == SLUG]
    assert [g.session_ids for g in groups] == [(first["session_id"], second["session_id"])]
