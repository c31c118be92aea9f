"""Loading finished sessions in bulk writes what the one-by-one operations would."""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core import bulk_insert, db
from tests.helpers import count, counter_mismatches, session

CALL = [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]


def _session(sid: str, **extra) -> dict:
    return {
        "id": sid,
        "source": "telegram",
        "session_key": f"k-{sid}",
        "started_at": 10.0,
        "ended_at": 20.0,
        "end_reason": "user_exit",
        "usage": {"input_tokens": 7},
        "messages": [
            {"role": "user", "content": "zebra question", "timestamp": 11.0},
            {"role": "assistant", "content": None, "tool_calls": CALL, "timestamp": 12.0},
            {
                "role": "tool",
                "content": "found",
                "tool_call_id": "c1",
                "tool_name": "lookup",
                "timestamp": 13.0,
            },
        ],
        **extra,
    }


def test_it_writes_rows_counters_events_and_search():
    assert bulk_insert.insert_sessions(sessions=[_session("b1"), _session("b2", title="T")]) == 2
    row = session("b1")
    assert (row["message_count"], row["tool_call_count"], row["input_tokens"]) == (3, 1, 7)
    assert (row["ended_at"], row["end_reason"]) == (20.0, "user_exit")
    assert counter_mismatches() == []
    assert [(e.new_session_id, e.reason) for e in core.read_switch_events()] == [
        ("b1", "new"),
        ("b2", "new"),
    ]
    if db.vendor() == "sqlite":
        hits = db.fetchall("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'zebra'")
        assert len(hits) == 2


def test_a_taken_id_or_a_bad_message_refuses_the_whole_batch():
    core.create_session(source="cli", session_id="taken")
    with pytest.raises(core.InvalidInput):
        bulk_insert.insert_sessions(sessions=[_session("fresh"), _session("taken")])
    bad = _session("nul")
    bad["messages"][0]["content"] = "a\x00b"
    with pytest.raises(core.InvalidInput):
        bulk_insert.insert_sessions(sessions=[_session("fresh2"), bad])
    assert count("sessions") == 1 and count("messages") == 0
