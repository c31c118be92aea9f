"""The overview's read queries: totals, sessions per day, and the conversations list."""

from __future__ import annotations

import datetime as dt
import json

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.routers import responses_alias
from sessions_admin.store import overview
from tests.builders import cold_start_fork

NOW = dt.datetime(2025, 3, 31, 15, 30, tzinfo=dt.UTC)
TODAY = NOW.date()


def _at(day: dt.date, seconds: float = 0.0) -> float:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp() + seconds


def _hermes_conversation(name: str, response_id: str, data: dict) -> None:
    """What Hermes itself writes: the response's data names the session, the column stays NULL."""
    alias = responses_alias()
    db.execute(
        "INSERT INTO responses (response_id, data, accessed_at) VALUES (%s, %s, 1)",
        [response_id, json.dumps(data)],
        alias=alias,
    )
    db.execute(
        "INSERT INTO conversations (name, response_id) VALUES (%s, %s)",
        [name, response_id],
        alias=alias,
    )


# --- totals -------------------------------------------------------------------------------


def test_totals_count_sessions_by_source_and_status_exactly():
    tg = [core.create_session(source="telegram").session_id for _ in range(3)]
    cli = [core.create_session(source="cli").session_id for _ in range(2)]
    api = core.create_session(source="api_server").session_id
    core.append_messages(session_id=tg[0], messages=[{"role": "user", "content": "hi"}] * 4)
    core.append_message(session_id=cli[0], role="user", content="hello")
    core.end_session(session_id=tg[1], end_reason="user_exit")
    core.end_session(session_id=tg[2], end_reason="user_exit")
    core.end_session(session_id=cli[1], end_reason="compression")
    # A runtime that ends a session without saying why.
    db.execute("UPDATE sessions SET ended_at = 5, end_reason = NULL WHERE id = %s", [api])

    totals = overview.store_totals()

    assert totals.sessions == 6
    assert totals.messages == 5
    assert totals.live == 2
    assert totals.by_source == (("telegram", 3), ("cli", 2), ("api_server", 1))
    assert [(s.live, s.end_reason, s.sessions) for s in totals.by_status] == [
        (True, None, 2),
        (False, "user_exit", 2),
        (False, "", 1),
        (False, "compression", 1),
    ]


def test_totals_of_an_empty_store_are_zero():
    totals = overview.store_totals()
    assert (totals.sessions, totals.messages, totals.live) == (0, 0, 0)
    assert totals.by_source == () and totals.by_status == ()


# --- sessions per day ------------------------------------------------------------------------


def test_per_day_covers_exactly_thirty_days_ending_today():
    days = overview.sessions_per_day(now=NOW)
    assert len(days) == 30
    assert days[0].day == TODAY - dt.timedelta(days=29)
    assert days[-1].day == TODAY
    assert all(b.day - a.day == dt.timedelta(days=1) for a, b in zip(days, days[1:], strict=False))
    assert sum(d.sessions for d in days) == 0


def test_per_day_counts_at_the_boundaries():
    first = TODAY - dt.timedelta(days=29)
    started = [
        _at(TODAY - dt.timedelta(days=31), 12 * 3600),  # 31 days ago: outside
        _at(first, -0.5),  # the last moment before the window: outside
        _at(first),  # the window's first instant: day 0
        _at(first, 86_399.5),  # the end of day 0
        _at(first + dt.timedelta(days=1)),  # day 1
        _at(TODAY),  # today's first instant
        NOW.timestamp(),  # now
        _at(TODAY, 86_399.9),  # later today (clock skew)
        _at(TODAY + dt.timedelta(days=1)),  # tomorrow: outside
    ]
    for started_at in started:
        core.create_session(source="cli", started_at=started_at)

    days = overview.sessions_per_day(now=NOW)

    counts = {d.day: d.sessions for d in days}
    assert counts[first] == 2
    assert counts[first + dt.timedelta(days=1)] == 1
    assert counts[TODAY] == 3
    assert sum(counts.values()) == 6


def test_per_day_can_cover_other_windows():
    core.create_session(source="cli", started_at=_at(TODAY - dt.timedelta(days=1), 60))
    days = overview.sessions_per_day(days=2, now=NOW)
    assert [(d.day, d.sessions) for d in days] == [
        (TODAY - dt.timedelta(days=1), 1),
        (TODAY, 0),
    ]


# --- conversations ------------------------------------------------------------------------


def test_a_conversation_continues_the_session_on_its_row():
    sid = core.create_session(source="api_server", title="Planning").session_id
    core.record_turn(response_id="resp_1", session_id=sid, conversation="planning")

    (row,) = overview.conversation_page().rows

    assert (row.name, row.response_id, row.session_id, row.recorded_by) == (
        "planning",
        "resp_1",
        sid,
        "conversation",
    )
    assert row.session_exists and row.session["title"] == "Planning"
    assert not row.has_forks


def test_a_hermes_conversation_continues_the_session_in_its_response_data():
    sid = core.create_session(source="api_server").session_id
    _hermes_conversation("hermes-chat", "resp_h", {"session_id": sid, "response": {"id": "x"}})
    _hermes_conversation("lost-chat", "resp_l", {"session_id": "sess_gone"})
    db.execute(
        "INSERT INTO conversations (name, response_id) VALUES ('evicted', 'resp_evicted')",
        alias=responses_alias(),
    )

    rows = {row.name: row for row in overview.conversation_page().rows}

    assert (rows["hermes-chat"].session_id, rows["hermes-chat"].recorded_by) == (sid, "response")
    assert rows["hermes-chat"].session_exists
    assert (rows["lost-chat"].session_id, rows["lost-chat"].session_exists) == ("sess_gone", False)
    assert (rows["evicted"].session_id, rows["evicted"].recorded_by) == (None, None)


def test_the_column_wins_over_the_response_data():
    recorded = core.create_session(source="api_server").session_id
    other = core.create_session(source="api_server").session_id
    _hermes_conversation("chat", "resp_1", {"session_id": other})
    db.execute(
        "UPDATE conversations SET session_id = %s WHERE name = 'chat'",
        [recorded],
        alias=responses_alias(),
    )
    (row,) = overview.conversation_page().rows
    assert (row.session_id, row.recorded_by) == (recorded, "conversation")


def test_keyset_pages_return_every_slug_exactly_once_in_order():
    sid = core.create_session(source="api_server").session_id
    names = [f"chat-{n:02d}" for n in range(11)]
    for n, name in enumerate(reversed(names)):
        core.record_turn(response_id=f"r{n}", session_id=sid, conversation=name)

    seen: list[str] = []
    after = None
    pages = 0
    while True:
        page = overview.conversation_page(after=after, limit=4)
        pages += 1
        seen.extend(row.name for row in page.rows)
        if page.next_after is None:
            break
        assert page.next_after == page.rows[-1].name
        after = page.next_after

    assert seen == names
    assert pages == 3


def test_an_exactly_full_last_page_has_no_next():
    sid = core.create_session(source="api_server").session_id
    for n in range(4):
        core.record_turn(response_id=f"r{n}", session_id=sid, conversation=f"c{n}")
    assert overview.conversation_page(limit=4).next_after is None
    assert overview.conversation_page(limit=3).next_after == "c2"


def test_the_slug_filter_takes_like_wildcards_literally():
    sid = core.create_session(source="api_server").session_id
    for n, name in enumerate(["a%b", "a_b", "axb", "a\\b", "Big-A%B"]):
        core.record_turn(response_id=f"r{n}", session_id=sid, conversation=name)

    def names(contains: str) -> list[str]:
        return [row.name for row in overview.conversation_page(contains=contains).rows]

    assert set(names("%")) == {"a%b", "Big-A%B"}  # name order is the database's collation
    assert names("_") == ["a_b"]
    assert names("\\") == ["a\\b"]
    assert names("x") == ["axb"]
    assert set(names("A%B")) == {"a%b", "Big-A%B"}  # case-insensitive
    assert names("nothing") == []


def test_the_fork_flag_and_the_forks_only_filter():
    forked = cold_start_fork("sidekick", 2, said=False)
    other_fork = cold_start_fork("zeta-chat", 3, said=False)
    single = core.create_session(source="api_server").session_id
    core.record_turn(response_id="solo-1", session_id=single, conversation="solo")

    rows = {row.name: row for row in overview.conversation_page().rows}
    assert rows["sidekick"].has_forks
    assert rows["sidekick"].fork_session_ids == tuple(forked)
    assert rows["sidekick"].session_id == forked[-1]
    assert rows["zeta-chat"].fork_session_ids == tuple(other_fork)
    assert not rows["solo"].has_forks

    only = overview.conversation_page(forks_only=True)
    assert [row.name for row in only.rows] == ["sidekick", "zeta-chat"]
    first = overview.conversation_page(forks_only=True, limit=1)
    assert [row.name for row in first.rows] == ["sidekick"]
    assert first.next_after == "sidekick"
    second = overview.conversation_page(forks_only=True, limit=1, after=first.next_after)
    assert [row.name for row in second.rows] == ["zeta-chat"]
    assert second.next_after is None
    assert overview.conversation_page(forks_only=True, contains="zeta").rows[0].name == "zeta-chat"
    assert overview.conversation_page(forks_only=True, contains="solo").rows == ()


def test_a_slug_whose_sessions_are_linked_by_lineage_is_not_forked():
    target = core.resolve_conversation(conversation="linked")
    core.record_turn(response_id="l1", session_id=target.session_id, conversation="linked")
    rotated = core.rotate_for_compression(session_id=target.session_id).new_session_id
    core.record_turn(response_id="l2", session_id=rotated, conversation="linked")
    (row,) = overview.conversation_page().rows
    assert row.session_id == rotated and not row.has_forks


def test_a_slug_claimed_before_its_first_turn_has_no_response_yet():
    target = core.resolve_conversation(conversation="fresh")
    (row,) = overview.conversation_page().rows
    assert (row.response_id, row.session_id, row.recorded_by) == (
        "",
        target.session_id,
        "conversation",
    )


def test_health_counts_cover_every_check_in_order():
    from sessions_admin.store import health

    cold_start_fork("forked", 2, said=False)
    dangling = core.create_session(source="cli").session_id
    core.append_message(session_id=dangling, role="user", content="hi")
    core.end_session(session_id=dangling, end_reason="compression")

    counts = {c.kind: c for c in overview.health_counts()}

    assert list(counts) == [check.kind for check in health.CHECKS]
    assert (counts["forks"].sessions, counts["forks"].groups) == (2, 1)
    assert (counts["forks"].sessions, counts["forks"].groups) == (
        health.count("forks"),
        health.fork_group_count(),
    )
    assert counts["dangling_compression"].sessions == 1
    assert counts["dangling_compression"].groups is None
    assert counts["empty"].sessions == 2  # the fork sessions have responses but no messages
