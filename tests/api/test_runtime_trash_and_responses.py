"""What a runtime token cannot take over through ids the store no longer holds (attack round 46).

X1: a session started under the id of a deleted session still in the trash took the id from
it, so its restore was refused for good (and a token limited to other sources could do it to
another source's session). X2: a turn storing a response the runtime had evicted, but which
another source's conversation still names as its latest, carried that conversation into the
caller's session.
"""

from __future__ import annotations

import json

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.slug_history import capture_slug_history
from sessions_admin.ledger.models import AuditEntry
from sessions_admin.ledger.trash import purge_trash
from sessions_admin.routers import responses_alias
from tests.api.conftest import ApiClient
from tests.builders import cascade_into_trash
from tests.console import urlmap

pytestmark = pytest.mark.usefixtures("no_worker")


@pytest.fixture
def telegram(make_token) -> ApiClient:
    return ApiClient(make_token("runtime", name="tg-only", sources=["telegram"]))


@pytest.fixture
def admin(make_token) -> ApiClient:
    return ApiClient(make_token("admin", name="ops-bot"))


def _trashed(source: str) -> tuple[str, int]:
    session_id = core.create_session(source=source, session_key=f"{source}:gone").session_id
    core.append_message(session_id=session_id, role="user", content=f"{source} secret")
    return session_id, cascade_into_trash(session_id, reason="ticket 46")


def _unchanged_but_refusals(before: dict) -> bool:
    after = urlmap.state()
    audited = [e for e in after.pop("audit") if e not in before["audit"]]
    return after == {k: v for k, v in before.items() if k != "audit"} and all(
        outcome != "ok" for _pk, _action, outcome in audited
    )


def test_no_session_starts_under_the_id_of_a_deleted_one_in_the_trash(telegram, runtime, admin):
    discord_id, discord_entry = _trashed("discord")
    telegram_id, telegram_entry = _trashed("telegram")
    before = urlmap.state()

    # Another source's deleted session: as for one in the store, a 403 naming nothing.
    answer = telegram.post(
        "runtime/sessions",
        {"source": "telegram", "session_key": "telegram:new", "session_id": discord_id},
    )
    assert answer.status == 403, answer.body
    # Its own source's, and any for an unlimited token: refused, saying why.
    for client, session_id in ((telegram, telegram_id), (runtime, discord_id)):
        answer = client.post(
            "runtime/sessions",
            {"source": "telegram", "session_key": "telegram:new", "session_id": session_id},
        )
        assert answer.status == 422, answer.body
        assert answer.body["errors"][0]["field"] == "session_id"
        assert "in the trash" in answer.body["detail"]
    assert _unchanged_but_refusals(before)
    refused = AuditEntry.objects.filter(outcome=AuditEntry.REFUSED, action="start_session")
    assert refused.count() == 3

    # Both restores still work.
    for entry_id in (discord_entry, telegram_entry):
        assert admin.post(f"trash/{entry_id}/restore", {}).status == 200
    assert db.fetchone(
        "SELECT COUNT(*) FROM sessions WHERE id IN (%s, %s)", [discord_id, telegram_id]
    ) == (2,)


def test_the_id_of_a_purged_session_starts_a_session_again(runtime):
    session_id, _entry_id = _trashed("telegram")
    assert purge_trash() >= 1  # the trash keeps it no more: nothing to restore, nothing taken
    answer = runtime.post(
        "runtime/sessions",
        {"source": "telegram", "session_key": "telegram:again", "session_id": session_id},
    )
    assert answer.status == 201, answer.body
    assert answer.body["session_id"] == session_id


def _evicted_latest_response(source: str, slug: str, response_id: str) -> str:
    """A conversation of ``source`` whose latest response the runtime evicted: the
    conversations row names it, the responses table no longer holds it."""
    session_id = core.create_session(source=source, session_key=f"{source}:{slug}").session_id
    core.record_turn(response_id=response_id, session_id=session_id, conversation=slug)
    db.execute(
        "DELETE FROM responses WHERE response_id = %s", [response_id], alias=responses_alias()
    )
    return session_id


def test_a_limited_token_does_not_store_a_response_another_sources_conversation_names(
    telegram,
):
    owner = _evicted_latest_response("api_server", "their-chat", "resp_evicted")
    mine = telegram.post("runtime/sessions", {"source": "telegram", "session_key": "tg:1"})
    before = urlmap.state()

    answer = telegram.post(
        f"runtime/sessions/{mine.body['session_id']}/turns",
        {"response_id": "resp_evicted", "data": {"output_text": "injected"}},
    )

    assert answer.status == 403, answer.body
    assert owner not in str(answer.body)
    assert _unchanged_but_refusals(before)
    assert (
        db.fetchone(
            "SELECT COUNT(*) FROM responses WHERE response_id = 'resp_evicted'",
            alias=responses_alias(),
        )[0]
        == 0
    )


def test_a_limited_token_stores_again_a_response_its_own_conversation_names(telegram):
    mine = telegram.post("runtime/sessions", {"source": "telegram", "session_key": "tg:2"})
    session_id = mine.body["session_id"]
    assert (
        telegram.post(
            f"runtime/sessions/{session_id}/turns",
            {"response_id": "resp_mine", "conversation": "my-chat", "data": {}},
        ).status
        == 201
    )
    db.execute("DELETE FROM responses WHERE response_id = 'resp_mine'", alias=responses_alias())
    answer = telegram.post(
        f"runtime/sessions/{session_id}/turns", {"response_id": "resp_mine", "data": {}}
    )
    assert answer.status == 201, answer.body


def test_a_title_another_source_holds_is_taken_without_naming_its_session(telegram, runtime):
    # X3: the 409 named the cli session holding the title (and as "owner").
    owner = core.create_session(source="cli", session_key="cli:1", title="Secret plan").session_id
    mine = telegram.post("runtime/sessions", {"source": "telegram", "session_key": "tg:3"})
    before = urlmap.state()
    answers = [
        telegram.post(
            "runtime/sessions",
            {"source": "telegram", "session_key": "tg:4", "title": "Secret plan"},
        ),
        telegram.post(
            f"runtime/sessions/{mine.body['session_id']}/branch", {"title": "Secret plan"}
        ),
    ]
    for answer in answers:
        assert answer.status == 409, answer.body
        assert answer.body["type"].endswith("/title-taken")
        assert answer.body["owner"] is None
        assert owner not in json.dumps(answer.body)
    assert _unchanged_but_refusals(before)
    # A token that may use every source is told which session holds it, as before.
    answer = runtime.post(
        "runtime/sessions", {"source": "telegram", "session_key": "tg:5", "title": "Secret plan"}
    )
    assert answer.status == 409 and answer.body["owner"] == owner


def test_a_limited_token_does_not_store_an_older_evicted_response_of_another_source(telegram):
    # Y2: not the latest any more, but what a client of that conversation continues from.
    discord = core.create_session(source="discord", session_key="dc:7").session_id
    core.record_turn(response_id="resp_old", session_id=discord, conversation="dc-chat")
    capture_slug_history()  # the poller saw it as the slug's latest
    core.record_turn(response_id="resp_new", session_id=discord, conversation="dc-chat")
    db.execute("DELETE FROM responses WHERE response_id = 'resp_old'", alias=responses_alias())
    mine = telegram.post("runtime/sessions", {"source": "telegram", "session_key": "tg:7"})
    before = urlmap.state()

    answer = telegram.post(
        f"runtime/sessions/{mine.body['session_id']}/turns",
        {"response_id": "resp_old", "data": {"output_text": "injected"}},
    )

    assert answer.status == 403, answer.body
    assert discord not in json.dumps(answer.body)
    assert _unchanged_but_refusals(before)
    # A response id nobody recorded is the token's to store.
    fresh = telegram.post(
        f"runtime/sessions/{mine.body['session_id']}/turns", {"response_id": "resp_tg", "data": {}}
    )
    assert fresh.status == 201, fresh.body


def test_a_title_a_deleted_session_holds_in_the_trash_is_taken(telegram, runtime, admin):
    # Y4: taken by a new session, the restore of the deleted one was refused for good.
    discord = core.create_session(source="discord", session_key="dc:9", title="Plans").session_id
    core.append_message(session_id=discord, role="user", content="discord secret")
    entry_id = cascade_into_trash(discord)
    mine = telegram.post("runtime/sessions", {"source": "telegram", "session_key": "tg:9"})
    before = urlmap.state()
    for client in (telegram, runtime):
        for path, body in (
            ("runtime/sessions", {"source": "telegram", "session_key": "tg:10", "title": "Plans"}),
            (f"runtime/sessions/{mine.body['session_id']}/branch", {"title": "Plans"}),
        ):
            answer = client.post(path, body)
            assert answer.status == 409, answer.body
            assert answer.body["type"].endswith("/title-taken")
            # Named to a token that may use the deleted session's source only.
            assert answer.body["owner"] == (discord if client is runtime else None)
            if client is telegram:
                assert discord not in json.dumps(answer.body)
    assert _unchanged_but_refusals(before)
    assert admin.post(f"trash/{entry_id}/restore", {}).status == 200
