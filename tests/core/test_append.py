"""Item 2: appends are never silently dropped; a stale session id learns where to write."""

from __future__ import annotations

import threading
import time

import pytest

from sessions_admin import core
from tests.helpers import count, counter_mismatches, messages, rows, run_threads, session


def test_it_appends_in_id_order_and_counts_active_rows_and_tool_calls():
    ref = core.create_session(source="cli")
    result = core.append_messages(
        session_id=ref.session_id,
        messages=[
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": "{}"},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "time", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "content": "sunny", "tool_call_id": "c1", "tool_name": "weather"},
        ],
    )
    stored = messages(ref.session_id)
    assert [m["id"] for m in stored] == list(result.message_ids)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool"]
    assert session(ref.session_id)["message_count"] == 3
    assert session(ref.session_id)["tool_call_count"] == 2
    assert (result.message_count, result.tool_call_count) == (3, 2)


def test_appending_to_an_unknown_session_raises_and_writes_nothing():
    with pytest.raises(core.SessionNotFound):
        core.append_message(session_id="ghost", role="user", content="hello?")
    assert count("messages") == 0


def test_one_bad_message_rejects_the_whole_batch():
    ref = core.create_session(source="cli")
    with pytest.raises(core.InvalidInput):
        core.append_messages(
            session_id=ref.session_id,
            messages=[{"role": "user", "content": "ok"}, {"role": "wizard", "content": "no"}],
        )
    assert messages(ref.session_id) == []
    assert session(ref.session_id)["message_count"] == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "user", "content": "nul \x00 inside"},
        {"role": "user", "content": "lone \ud800 surrogate"},
        {"role": "assistant", "content": "ok", "tool_name": "\udfff"},
    ],
)
def test_text_neither_database_can_store_is_refused_and_nothing_is_written(bad):
    ref = core.create_session(source="cli")
    with pytest.raises(core.InvalidInput):
        core.append_messages(
            session_id=ref.session_id, messages=[{"role": "user", "content": "ok"}, bad]
        )
    assert messages(ref.session_id) == []
    assert session(ref.session_id)["message_count"] == 0


def test_appending_to_a_reset_session_names_the_live_session_of_its_key():
    """hermes-agent #3210: a cached agent kept writing into the session a reset ended."""
    old = core.create_session(source="telegram", session_key="tg:42").session_id
    reset = core.reset_session_key(session_key="tg:42")
    with pytest.raises(core.SessionEnded) as caught:
        core.append_message(session_id=old, role="user", content="after reset")
    assert caught.value.live_session_id == reset.new_session_id
    assert reset.new_session_id in str(caught.value)
    assert messages(old) == []
    assert session(old)["message_count"] == 0


def test_appending_to_a_compressed_session_names_the_continuation():
    old = core.create_session(source="cli").session_id
    rotated = core.rotate_for_compression(session_id=old, summary="so far")
    with pytest.raises(core.SessionEnded) as caught:
        core.append_message(session_id=old, role="user", content="late")
    assert caught.value.live_session_id == rotated.new_session_id
    assert caught.value.via == "compression chain"


def test_appending_to_an_ended_conversation_session_names_where_the_slug_continues():
    target = core.resolve_conversation(conversation="sidekick-1")
    core.record_turn(response_id="r1", session_id=target.session_id, conversation="sidekick-1")
    rotated = core.rotate_for_compression(session_id=target.session_id)
    core.end_session(session_id=rotated.new_session_id, end_reason="user_exit")
    core.resume_session(ref=rotated.new_session_id)
    with pytest.raises(core.SessionEnded) as caught:
        core.append_message(session_id=target.session_id, role="user", content="late")
    assert caught.value.live_session_id == rotated.new_session_id


def test_an_ended_session_without_a_successor_says_so():
    ref = core.create_session(source="cli").session_id
    core.end_session(session_id=ref, end_reason="user_exit")
    with pytest.raises(core.SessionEnded) as caught:
        core.append_message(session_id=ref, role="user", content="late")
    assert caught.value.live_session_id is None
    assert "No live session" in str(caught.value)


def test_concurrent_writers_and_resets_lose_and_misplace_nothing():
    """Writers hold a cached session id while another thread resets the key.

    Every acknowledged append must exist exactly once, in a session that was
    live when it landed; every refused one must name the live session.
    """
    key = "gw:concurrent"
    core.create_session(source="telegram", session_key=key)
    stop = threading.Event()
    acknowledged: list[list[int]] = [[] for _ in range(4)]

    first_reset = threading.Event()

    def writer(i: int) -> int:
        cached = core.live_session_for_key(key)
        # Hold the id across at least one reset, as a cached agent does (on a loaded
        # machine the resetter could otherwise start only after the writers finished).
        first_reset.wait(30)
        switches = 0
        for n in range(40):
            for _ in range(20):
                try:
                    result = core.append_message(
                        session_id=cached, role="user", content=f"w{i}-{n}"
                    )
                    acknowledged[i].extend(result.message_ids)
                    time.sleep(0.002)  # a runtime's turns are not back to back
                    break
                except core.SessionEnded as ended:
                    assert ended.live_session_id, "a reset key always has a live session"
                    cached = ended.live_session_id
                    switches += 1
            else:
                raise AssertionError("writer could not land a message")
        return switches

    finished = threading.Semaphore(0)

    def resetter() -> None:
        while not stop.is_set():
            core.reset_session_key(session_key=key)
            first_reset.set()
            time.sleep(0.01)

    def job(i: int):
        if i == 4:
            return resetter()
        try:
            return writer(i)
        finally:
            finished.release()

    def stopper() -> None:
        for _ in range(4):
            finished.acquire()
        stop.set()

    threading.Thread(target=stopper, daemon=True).start()
    switches = run_threads(job, 5, timeout=120)
    acked = [mid for ids in acknowledged for mid in ids]
    assert len(acked) == 160 == len(set(acked))
    assert sum(s for s in switches if s) > 0, "the resets never caught a writer: no test"
    stored = rows("SELECT id FROM messages")
    assert sorted(r[0] for r in stored) == sorted(acked)
    # No message landed in a session after that session ended.
    late = rows(
        "SELECT m.id FROM messages m JOIN sessions s ON s.id = m.session_id "
        "WHERE s.ended_at IS NOT NULL AND m.timestamp > s.ended_at"
    )
    assert late == []
    assert counter_mismatches() == []
    live = rows("SELECT id FROM sessions WHERE session_key = %s AND ended_at IS NULL", [key])
    assert len(live) == 1
