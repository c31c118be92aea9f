"""The switch log over HTTP (``api/switches.py``): long polling and Server-Sent Events.

In-process here: what each door delivers for a cursor (the core's fields, in order, history and
erasure tombstones skipped with the cursor moved past them, a source-limited token's sources
only), how a stream resumes from ``Last-Event-ID`` and that it ends by itself. The subscriber in
another process, across reconnects and a server restart, is ``test_switches_process.py``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict

import pytest
from django.core.management import call_command

from sessions_admin import core
from sessions_admin.core import db, events
from tests.api.conftest import API, ApiClient

pytestmark = pytest.mark.usefixtures("no_worker")


def delivered_by_the_core(after: int = 0) -> list[dict]:
    """The switches the Python follower would tell a listener, as the core reads them."""
    return [
        asdict(e)
        for e in events.read_switch_events(after_seq=after, limit=10_000)
        if e.origin != events.HISTORY_ORIGIN
    ]


def end_of_log() -> int:
    return db.fetchone("SELECT COALESCE(MAX(seq), 0) FROM sessions_admin_switch_events")[0]


def some_switches(key: str = "tg:switch-1", source: str = "telegram", user: str = "u-1") -> None:
    first = core.create_session(source=source, session_key=key, user_id=user).session_id
    core.append_messages(session_id=first, messages=[{"role": "user", "content": "hi"}])
    rotated = core.rotate_for_compression(session_id=first, summary="so far").new_session_id
    core.reset_session_key(session_key=key)
    core.resume_session(ref=rotated)


def read_stream(client: ApiClient, query: str = "", **headers) -> list[dict]:
    """The stream's blocks, each a dict of its fields (``comment`` for a heartbeat)."""
    extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
    extra["HTTP_AUTHORIZATION"] = f"Bearer {client.secret}"
    response = client.client.get(f"{API}/switches/stream{query}", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/event-stream")
    assert response["Cache-Control"] == "no-cache"
    text = b"".join(response.streaming_content).decode()
    response.close()
    blocks = []
    for raw in text.split("\n\n"):
        if not raw:
            continue
        block: dict = {}
        for line in raw.split("\n"):
            field, _, value = line.partition(":")
            block[field or "comment"] = value[1:] if value.startswith(" ") else value
        blocks.append(block)
    return blocks


@pytest.fixture
def short_streams(settings):
    settings.SESSIONS_ADMIN_SWITCH_STREAM_SECONDS = 0.6
    settings.SESSIONS_ADMIN_SWITCH_HEARTBEAT_SECONDS = 0.2
    settings.SESSIONS_ADMIN_SWITCH_POLL_SECONDS = 0.05


def test_a_long_poll_answers_the_switches_after_the_cursor_with_the_core_fields(make_token):
    start = end_of_log()
    some_switches()
    expected = delivered_by_the_core(start)
    assert [e["reason"] for e in expected] == ["new", "compression", "reset", "resume"]
    client = ApiClient(make_token("runtime"))

    answer = client.get(f"switches?after={start}")
    assert answer.status == 200, answer.body
    assert answer.body == {"events": expected, "next_after": expected[-1]["seq"]}
    # A page at a time, in order, the cursor after each page.
    first = client.get(f"switches?after={start}&limit=3").body
    assert first["events"] == expected[:3] and first["next_after"] == expected[2]["seq"]
    rest = client.get(f"switches?after={first['next_after']}").body
    assert rest["events"] == expected[3:]
    # At the end: nothing, and the cursor stays.
    assert client.get(f"switches?after={end_of_log()}").body == {
        "events": [],
        "next_after": end_of_log(),
    }
    # Without a cursor: from now on.
    assert client.get("switches").body == {"events": [], "next_after": end_of_log()}


def test_a_long_poll_with_nothing_new_waits_then_answers_the_same_cursor(make_token, settings):
    settings.SESSIONS_ADMIN_SWITCH_POLL_SECONDS = 0.05
    some_switches()
    client = ApiClient(make_token("viewer"))
    started = time.monotonic()
    answer = client.get(f"switches?after={end_of_log()}&wait=0.4")
    assert time.monotonic() - started >= 0.4
    assert answer.body == {"events": [], "next_after": end_of_log()}
    # The server's bound caps what a client asks for.
    settings.SESSIONS_ADMIN_SWITCH_STREAM_SECONDS = 0.2
    started = time.monotonic()
    client.get(f"switches?after={end_of_log()}&wait=60")
    assert time.monotonic() - started < 5


def test_history_and_erased_sessions_are_never_delivered_but_the_cursor_passes_them(
    make_token, short_streams
):
    start = end_of_log()
    some_switches(key="tg:erased", user="u-erased")
    erased = delivered_by_the_core(start)
    some_switches(key="tg:kept", user="u-kept")
    call_command("erase_subject", user="u-erased", reference="T-1", yes=True, stdout=None)
    # Sessions loaded as history: their "new" events have the history origin.
    db.store_operation(events.record_new_sessions)(sessions=[("loaded-1", "k:loaded")], at=1.0)
    log = events.read_switch_events(after_seq=start, limit=10_000)
    tombstones = [e for e in log if e.seq in {x["seq"] for x in erased}]
    assert len(tombstones) == len(erased) and all(t.new_session_id == "" for t in tombstones)
    kept = delivered_by_the_core(start)
    assert kept and all(e["session_key"] == "tg:kept" for e in kept)
    assert log[-1].origin == events.HISTORY_ORIGIN

    client = ApiClient(make_token("runtime"))
    answer = client.get(f"switches?after={start}").body
    assert answer == {"events": kept, "next_after": log[-1].seq}
    # Only tombstones after the cursor: none delivered, the cursor moves past them all.
    answer = client.get(f"switches?after={start}&limit=1").body
    assert answer["events"] == kept[:1]
    assert answer["next_after"] == kept[0]["seq"] > tombstones[-1].seq

    blocks = read_stream(client, f"?after={start}")
    switches = [b for b in blocks if b.get("event") == "switch"]
    assert [json.loads(b["data"]) for b in switches] == kept
    assert [int(b["id"]) for b in switches] == [e["seq"] for e in kept]
    # The history event at the end is skipped with an id-only block: a reconnect starts after it.
    assert {"id": str(log[-1].seq)} in blocks


def test_a_source_limited_runtime_token_hears_only_its_sources(make_token):
    start = end_of_log()
    some_switches(key="tg:a", source="telegram")
    some_switches(key="cli:a", source="cli", user="u-2")
    limited = ApiClient(make_token("runtime", sources=["cli"]))
    answer = limited.get(f"switches?after={start}").body
    expected = [e for e in delivered_by_the_core(start) if e["source"] == "cli"]
    assert len(expected) == 4 and answer["events"] == expected
    assert answer["next_after"] == end_of_log()


def test_the_stream_resumes_after_last_event_id_and_ends_by_itself(make_token, short_streams):
    start = end_of_log()
    some_switches()
    expected = delivered_by_the_core(start)
    client = ApiClient(make_token("admin"))

    started = time.monotonic()
    blocks = read_stream(client, f"?after={start}")
    assert time.monotonic() - started < 5  # bounded: it ended by itself
    assert blocks[0] == {"retry": "1000", "id": str(start)}
    switches = [b for b in blocks if b.get("event") == "switch"]
    assert [json.loads(b["data"]) for b in switches] == expected
    assert [int(b["id"]) for b in switches] == [e["seq"] for e in expected]
    assert {"comment": "heartbeat"} in blocks  # quiet time is filled with heartbeats

    # Last-Event-ID wins over ?after= (EventSource reconnects to the same URL).
    middle = expected[1]["seq"]
    resumed = read_stream(client, f"?after={start}", **{"Last-Event-ID": str(middle)})
    assert [json.loads(b["data"]) for b in resumed if "data" in b] == expected[2:]
    # Without a cursor: from now on, the first block says where that is.
    now = read_stream(client)
    assert now[0]["id"] == str(end_of_log()) and not [b for b in now if "data" in b]


@pytest.mark.parametrize("bad", ["abc", "-1", "1.5", str(2**63)])
def test_a_malformed_last_event_id_is_refused(make_token, bad):
    answer = ApiClient(make_token("viewer")).get("switches/stream", **{"Last-Event-ID": bad})
    assert answer.status == 422, answer.body
    assert answer.body["errors"][0]["field"] == "Last-Event-ID"


def test_a_limited_token_is_never_told_another_sources_session_in_a_switch(make_token):
    # Attack round i: a discord session merged into a telegram one; the telegram-limited token
    # heard the merge with the discord session as previous and parent.
    start = end_of_log()
    tg = core.create_session(source="telegram", session_key="tg:merge:1").session_id
    core.append_message(session_id=tg, role="user", content="telegram")
    dc = core.create_session(source="discord", session_key="dc:merge:1").session_id
    core.append_message(session_id=dc, role="user", content="discord")
    core.merge_sessions(session_ids=[tg, dc], target_id=tg)
    limited = ApiClient(make_token("runtime", sources=["telegram"]))
    polled = limited.get(f"switches?after={start}").body["events"]
    streamed = [
        json.loads(b["data"])
        for b in read_stream(limited, f"?after={start}&seconds=0")
        if b.get("event") == "switch"
    ]
    assert polled == streamed and polled
    merged = [e for e in polled if e["reason"] == "merge"]
    assert merged and all(e["new_session_id"] == tg for e in merged)
    for event in polled:
        assert dc not in json.dumps(event)
    # An unlimited reader is still told which session went into it.
    unlimited = ApiClient(make_token("runtime")).get(f"switches?after={start}").body["events"]
    assert any(dc in (e["previous_session_id"], e["parent_session_id"]) for e in unlimited)


def test_a_shared_keys_switch_to_another_persons_session_survives_an_erasure(make_token):
    """A group chat's key: the subject's session reset, another person's started on the same
    key (attack round 38, S). Erasing the subject empties only what named her session: the
    other person's listeners still hear their session start, with the key."""
    start = end_of_log()
    key = "tg:group-38"
    hers = core.create_session(source="telegram", session_key=key, user_id="u-her-38").session_id
    core.append_message(session_id=hers, role="user", content="hi")
    theirs = core.create_session(source="telegram", session_key=key, user_id="u-him-38")
    theirs = theirs.session_id
    switch = [e for e in delivered_by_the_core(start) if e["new_session_id"] == theirs]
    assert len(switch) == 1 and switch[0]["previous_session_id"] == hers
    call_command("erase_subject", user="u-her-38", reference="T-S", yes=True, stdout=None)

    after = delivered_by_the_core(start)
    assert [e["new_session_id"] for e in after] == [theirs]
    assert after[0]["seq"] == switch[0]["seq"] and after[0]["session_key"] == key
    assert after[0]["previous_session_id"] is None
    logged = db.fetchall(
        "SELECT new_session_id, previous_session_id, parent_session_id "
        "FROM sessions_admin_switch_events WHERE seq > %s",
        [start],
    )
    assert hers not in {value for row in logged for value in row}
    client = ApiClient(make_token("runtime"))
    assert client.get(f"switches?after={start}").body["events"] == after
