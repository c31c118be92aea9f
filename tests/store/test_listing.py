"""The session list's read queries: filters, scope, sorts, keyset pages, counts, search."""

from __future__ import annotations

import base64
import datetime as dt
import json

import pytest
from django.db import connections

from sessions_admin import core
from sessions_admin.console.views.sessions import highlight
from sessions_admin.core import db
from sessions_admin.routers import store_alias
from sessions_admin.store import listing
from sessions_admin.store.listing import (
    Filters,
    activity,
    conditions,
    fulltext,
    fulltext_postgresql,
    name_search,
)
from tests import helpers
from tests.builders import fresh_cache  # noqa: F401 - an autouse fixture


def _ts(day: str, hour: int = 12) -> float:
    d = dt.date.fromisoformat(day)
    return dt.datetime(d.year, d.month, d.day, hour, tzinfo=dt.UTC).timestamp()


def _new(source: str = "cli", *, day: str = "2024-03-01", hour: int = 12, **kwargs) -> str:
    return core.create_session(source=source, started_at=_ts(day, hour), **kwargs).session_id


def _say(session_id: str, *texts: str, role: str = "user", **fields) -> list[int]:
    result = core.append_messages(
        session_id=session_id,
        messages=[{"role": role, "content": text, **fields} for text in texts],
    )
    return list(result.message_ids)


def _walk(filters: Filters) -> list[str]:
    """Every row id over every page, following the Next cursors."""
    ids: list[str] = []
    cursor = None
    for _ in range(1000):
        page = listing.list_sessions(filters, cursor)
        ids += [row.id for row in page.rows]
        if page.next_cursor is None:
            return ids
        cursor = listing.decode_cursor(page.next_cursor, filters)
        assert cursor is not None
    raise AssertionError("the pages never ended")


def _ids(**kwargs) -> set[str]:
    ids = _walk(Filters(**kwargs))
    assert len(ids) == len(set(ids))
    return set(ids)


def _archive(session_id: str) -> None:
    db.execute("UPDATE sessions SET archived = 1 WHERE id = %s", [session_id])


# ---------------------------------------------------------------------------
# Filters


def test_each_filter_selects_exactly_the_matching_sessions():
    alpha = _new("telegram", day="2024-01-01", user_id="u1", model="gpt-a", title="Alpha Report")
    _say(alpha, "hello")
    beta = _new("cli", day="2024-01-05", user_id="u2", model="gpt-b", title="beta notes")
    core.end_session(session_id=beta, end_reason="user_exit")
    gamma = _new("telegram", day="2024-02-10", user_id="u1", model="gpt-b", title="100% done")
    _say(gamma, "hi", "there")
    core.end_session(session_id=gamma, end_reason="idle_expiry")
    delta = _new("discord", day="2024-02-11", model="gpt-a", title="100 done_x")
    _archive(delta)
    every = {alpha, beta, gamma, delta}

    assert _ids(scope="all") == every
    assert _ids(source="telegram") == {alpha, gamma}
    assert _ids(model="gpt-b") == {beta, gamma}
    assert _ids(user="u1") == {alpha, gamma}
    assert _ids(status="live") == {alpha, delta}
    assert _ids(status="ended") == {beta, gamma}
    assert _ids(status="user_exit") == {beta}
    assert _ids(status="no_such_reason") == set()
    assert _ids(started_from=dt.date(2024, 1, 5)) == {beta, gamma, delta}
    assert _ids(started_to=dt.date(2024, 1, 5)) == {alpha, beta}
    assert _ids(started_from=dt.date(2024, 1, 2), started_to=dt.date(2024, 2, 10)) == {beta, gamma}
    assert _ids(started_from=dt.date(2024, 3, 1), started_to=dt.date(2024, 1, 1)) == set()
    assert _ids(title="alpha") == {alpha}  # case-insensitive substring
    assert _ids(title="REPORT") == {alpha}
    assert _ids(title="100%") == {gamma}  # % is a character, not a wildcard
    assert _ids(title="0_") == set()  # _ too
    assert _ids(title="done_") == {delta}
    assert _ids(empty="1") == {beta, delta}
    assert _ids(empty="0") == {alpha, gamma}
    assert _ids(archived="1") == {delta}
    assert _ids(archived="0") == {alpha, beta, gamma}
    assert _ids(archived="") == every
    assert _ids(source="telegram", status="live", started_to=dt.date(2024, 1, 31)) == {alpha}


def test_fork_and_health_filters():
    first = _new("telegram", day="2024-01-01", session_key="tg:1")
    _say(first, "hi")
    core.end_session(session_id=first, end_reason="agent_close")
    second = _new("telegram", day="2024-01-02", session_key="tg:1")  # no parent link: a fork
    _say(second, "hi again")
    dangling = _new("cli", day="2024-01-03")
    _say(dangling, "x")
    core.end_session(session_id=dangling, end_reason="compression")
    plain = _new("cli", day="2024-01-04")
    _say(plain, "y")

    assert core.fork_session_ids() == {first, second}
    assert _ids(forks=True) == {first, second}
    assert _ids(health="forks") == {first, second}
    assert _ids(health="dangling_compression") == {dangling}
    assert _ids(health="empty") == set()
    page = listing.list_sessions(Filters())
    assert {row.id for row in page.rows if row.is_fork} == {first, second}


# ---------------------------------------------------------------------------
# Scope: one row per conversation


def _conversation() -> dict[str, str]:
    """A root compressed twice (live tip), a delegate of it, a branch of an older session."""
    root = _new("telegram", day="2024-01-01", user_id="u1", title="long chat")
    _say(root, "one", "two", "three")
    core.add_usage(session_id=root, input_tokens=100, output_tokens=10, cost_usd=0.5)
    middle = core.rotate_for_compression(session_id=root, summary="summary 1").new_session_id
    _say(middle, "four")
    tip = core.rotate_for_compression(session_id=middle, summary="summary 2").new_session_id
    _say(tip, "five", "six")
    core.add_usage(session_id=tip, input_tokens=7, output_tokens=3, cost_usd=0.25)
    delegate = core.create_session(
        source="telegram", parent_session_id=tip, model_config={"_delegate_from": tip}
    ).session_id
    _say(delegate, "subagent work")
    older = _new("cli", day="2023-12-01")
    _say(older, "a", "b")
    branch = core.branch_session(session_id=older).new_session_id
    _say(branch, "c")
    return {
        "root": root,
        "middle": middle,
        "tip": tip,
        "delegate": delegate,
        "older": older,
        "branch": branch,
    }


def test_roots_scope_shows_one_row_per_conversation_with_the_tips_figures():
    s = _conversation()
    assert set(_walk(Filters())) == {s["root"], s["older"], s["branch"]}
    assert set(_walk(Filters(scope="all"))) == set(s.values())

    rows = {row.id: row for row in listing.list_sessions(Filters()).rows}
    root = rows[s["root"]]
    tip = helpers.session(s["tip"])
    assert core.compression_tip(session_id=s["root"]) == s["tip"]
    assert root.tip_id == s["tip"]
    assert root.segments == 3
    assert root.is_live and root.end_reason is None
    assert root.message_count == tip["message_count"] == 3  # summary + five + six
    assert root.tokens == 10
    last_of_tip = helpers.messages(s["tip"])[-1]
    assert root.last_activity == last_of_tip["timestamp"]
    assert root.continuations == 1 and root.has_children
    assert rows[s["branch"]].branched_from == s["older"]
    assert rows[s["older"]].branches == 1
    assert rows[s["older"]].tip_id is None

    # Every segment: each row its own figures.
    all_rows = {row.id: row for row in listing.list_sessions(Filters(scope="all")).rows}
    assert all_rows[s["root"]].end_reason == "compression"
    assert all_rows[s["root"]].message_count == 3
    assert all_rows[s["root"]].tokens == 110
    assert all_rows[s["root"]].tip_id is None
    assert all_rows[s["delegate"]].delegate_from == s["tip"]
    assert all_rows[s["tip"]].delegates == 1


def test_a_child_whose_parent_is_gone_stays_visible_in_the_roots_scope():
    parent = _new("cli", day="2024-01-01")
    orphan = _new("cli", day="2024-01-02", parent_session_id=parent)
    if db.vendor() == "sqlite":
        db.execute("PRAGMA foreign_keys = OFF")
        db.execute("UPDATE sessions SET parent_session_id = 'gone' WHERE id = %s", [orphan])
        db.execute("PRAGMA foreign_keys = ON")
    else:
        db.execute("SET session_replication_role = replica")
        db.execute("UPDATE sessions SET parent_session_id = 'gone' WHERE id = %s", [orphan])
        db.execute("SET session_replication_role = DEFAULT")
    assert set(_walk(Filters())) == {parent, orphan}
    assert set(_walk(Filters(health="missing_parent"))) == {orphan}


# ---------------------------------------------------------------------------
# Sorts and keyset pages


@pytest.fixture
def ranked() -> list[str]:
    """Sessions with distinct and tied figures, messages appended in an interleaved order."""
    ids = []
    for n in range(9):
        sid = _new("cli", day="2024-01-01", hour=n % 4)  # ties on started_at
        ids.append(sid)
        core.add_usage(
            session_id=sid,
            input_tokens=(n * 37) % 5 * 10,  # ties on tokens
            output_tokens=n % 2,
            cost_usd=float((n * 7) % 4) / 10,
        )
    for n, sid in enumerate(ids[:7]):
        _say(sid, *[f"message {i}" for i in range((n * 5) % 4 + 1)])
    for sid in (ids[3], ids[0], ids[5]):  # activity in a different order than creation
        _say(sid, "later")
    return ids


def _expected(sort: str, direction: str, scope: str = "all") -> list[str]:
    rows = helpers.rows(
        "SELECT id, started_at, message_count, input_tokens + output_tokens, "
        "COALESCE(estimated_cost_usd, 0), "
        "(SELECT MAX(m.id) FROM messages m WHERE m.session_id = s.id) FROM sessions s"
    )
    desc = direction == "desc"
    if sort == "activity":
        with_messages = sorted(
            (r for r in rows if r[5] is not None), key=lambda r: r[5], reverse=desc
        )
        empty = sorted((r for r in rows if r[5] is None), key=lambda r: (r[1], r[0]), reverse=desc)
        return [r[0] for r in with_messages + empty]
    column = {"started": 1, "messages": 2, "tokens": 3, "cost": 4}[sort]
    return [r[0] for r in sorted(rows, key=lambda r: (r[column], r[0]), reverse=desc)]


ACTIVITY_PATHS = ["by-sessions", "walk", "walk-over-budget"]


@pytest.fixture(params=ACTIVITY_PATHS)
def activity_path(request, monkeypatch):
    """Run the activity sort through each of its strategies."""
    if request.param != "by-sessions":
        monkeypatch.setattr(conditions, "COUNT_CAP", 2)  # a "big" result: the walk
        monkeypatch.setattr(activity, "WALK_WINDOW", 3)
        monkeypatch.setattr(activity, "WALK_MAX_WINDOW", 8)
    if request.param == "walk-over-budget":
        monkeypatch.setattr(activity, "WALK_BUDGET", 5)
    return request.param


@pytest.mark.parametrize("direction", ["desc", "asc"])
@pytest.mark.parametrize("sort", ["started", "messages", "tokens", "cost"])
def test_each_sort_orders_rows_with_ties_broken_by_id(ranked, sort, direction):
    expected = _expected(sort, direction)
    for per_page in (2, 4, 50):
        assert (
            _walk(Filters(scope="all", sort=sort, direction=direction, per_page=per_page))
            == expected
        )


@pytest.mark.parametrize("direction", ["desc", "asc"])
def test_last_activity_orders_by_latest_message_with_empty_sessions_last(
    ranked, activity_path, direction
):
    expected = _expected("activity", direction)
    assert expected[:3] == (
        [ranked[5], ranked[0], ranked[3]] if direction == "desc" else expected[:3]
    )
    assert set(expected[-2:]) == {ranked[7], ranked[8]}  # no messages: last either way
    for per_page in (1, 2, 3, 50):
        filters = Filters(scope="all", sort="activity", direction=direction, per_page=per_page)
        assert _walk(filters) == expected
    empties = [sid for sid in expected if sid in (ranked[7], ranked[8])]
    for per_page in (1, 50):
        filters = Filters(
            scope="all", sort="activity", direction=direction, empty="1", per_page=per_page
        )
        assert _walk(filters) == empties
    for scope in ("all", "roots"):
        filters = Filters(
            scope=scope, sort="activity", direction=direction, per_page=2, source="cli"
        )
        assert _walk(filters) == expected


def test_last_activity_in_the_roots_scope_is_the_conversations(activity_path):
    s = _conversation()
    quiet = _new("cli", day="2024-06-01")
    _say(quiet, "newer than the root's own messages")
    _say(s["tip"], "the conversation goes on")  # the root's row: its latest segment's activity
    empty = _new("cli", day="2024-06-02")
    _say(quiet, "the newest message")
    for per_page in (1, 2, 50):
        ids = _walk(Filters(sort="activity", per_page=per_page))
        assert ids == [quiet, s["root"], s["branch"], s["older"], empty]
    rows = listing.list_sessions(Filters(sort="activity")).rows
    assert rows[1].last_activity == helpers.messages(s["tip"])[-1]["timestamp"]


def test_empty_rows_by_activity_put_a_compressed_root_with_a_busy_chain_first(activity_path):
    quiet = _new("cli", day="2024-01-01")
    busy_root = _new("cli", day="2024-01-02")  # no messages of its own...
    continuation = core.rotate_for_compression(session_id=busy_root).new_session_id
    _say(continuation, "...but its conversation goes on")
    talker = _new("cli", day="2024-01-03")
    _say(talker, "x")
    for per_page in (1, 50):
        assert _walk(Filters(sort="activity", empty="1", per_page=per_page)) == [busy_root, quiet]
        all_segments = Filters(sort="activity", empty="1", scope="all", per_page=per_page)
        assert _walk(all_segments) == [busy_root, quiet]  # started order: both empty


def test_keyset_pages_stay_exact_while_sessions_are_inserted(activity_path):
    originals = [_new("cli", day="2024-01-01", hour=n % 3) for n in range(11)]
    for sid in originals[:8]:
        _say(sid, "x")
    for sort in ("started", "activity"):
        filters = Filters(scope="all", sort=sort, per_page=3)
        expected = _expected(sort, "desc")
        seen: list[str] = []
        cursor = None
        for n in range(100):
            page = listing.list_sessions(filters, cursor)
            seen += [row.id for row in page.rows]
            # The runtime writes between page loads: new sessions, newer than any page so far.
            fresh = _new("cli", day="2025-01-01", hour=n % 24)
            _say(fresh, "new")
            if page.next_cursor is None:
                break
            cursor = listing.decode_cursor(page.next_cursor, filters)
        assert len(seen) == len(set(seen))
        assert [sid for sid in seen if sid in originals] == [
            sid for sid in expected if sid in originals
        ]
        assert set(originals) <= set(seen)


def test_the_count_is_exact_up_to_the_cap(monkeypatch):
    monkeypatch.setattr(conditions, "COUNT_CAP", 3)
    for n in range(3):
        _new("cli", hour=n)
    page = listing.list_sessions(Filters())
    assert (page.count, page.count_capped) == (3, False)
    _new("cli", hour=5)
    _new("telegram", hour=6)
    page = listing.list_sessions(Filters())
    assert (page.count, page.count_capped) == (3, True)
    assert len(page.rows) == 5  # the count is capped, not the page
    page = listing.list_sessions(Filters(source="telegram"))
    assert (page.count, page.count_capped) == (1, False)


# ---------------------------------------------------------------------------
# Parsing and cursors


def _parse(**params: str) -> listing.Parsed:
    return listing.parse(params)


def test_parse_round_trips_filters_through_the_querystring():
    parsed = _parse(
        source="telegram",
        status="live",
        **{"from": "2024-01-02", "to": "2024-02-03"},
        sort="cost",
        dir="asc",
    )
    assert parsed.problems == ()
    assert parsed.filters.started_from == dt.date(2024, 1, 2)
    query = parsed.filters.querystring()
    assert query == "source=telegram&status=live&from=2024-01-02&to=2024-02-03&sort=cost&dir=asc"
    from django.http import QueryDict

    assert listing.parse(QueryDict(query)).filters == parsed.filters
    assert Filters().querystring() == ""


@pytest.mark.parametrize(
    "params",
    [
        {"sort": "bogus"},
        {"dir": "sideways"},
        {"scope": "everything"},
        {"from": "2024-13-01"},
        {"to": "2024-02-30"},
        {"from": "yesterday"},
        {"from": "0001-01-01"},
        {"per": "-1"},
        {"per": "1" + "0" * 40},
        {"per": "7"},
        {"source": "tele\x00gram"},
        {"title": "x" * 5000},
        {"health": "nope"},
        {"archived": "maybe"},
        {"forks": "yes please"},
        {"q": "*** ^^^ ---"},
        {"after": "not a cursor!"},
        {"after": "eyJ4IjoxfQ"},
    ],
)
def test_bad_input_is_reported_and_ignored(params):
    parsed = listing.parse(params)
    assert parsed.problems
    assert parsed.cursor is None
    listing.list_sessions(parsed.filters, parsed.cursor)  # never raises


@pytest.mark.parametrize(
    "values",
    [
        ["started", "desc", 1e308 * 10, "x"],
        ["started", "desc", 2**80, "x"],
        ["started", "desc", "1.0", "x"],
        ["started", "desc", True, "x"],
        ["started", "desc", 1.0, 5],
        ["started", "desc", 1.0, "x\x00"],
        ["messages", "desc", 1, "x"],
        ["started", "asc", 1.0, "x"],
        ["activity", "desc", "m", 1.5],
        ["started"],
        {"started": 1},
    ],
)
def test_cursors_that_do_not_fit_are_refused(values):
    raw = json.dumps(values).replace("Infinity", "1e999")
    token = base64.urlsafe_b64encode(raw.encode()).decode()
    assert listing.decode_cursor(token, Filters()) is None
    parsed = listing.parse({"after": token})
    assert parsed.cursor is None and parsed.problems


def test_a_cursor_for_the_current_sort_is_accepted():
    token = listing.encode_cursor("started", "desc", [1700000000.25, "abc"])
    assert listing.decode_cursor(token, Filters()) == listing.Cursor(
        "started", "desc", (1700000000.25, "abc")
    )
    assert listing.decode_cursor(token, Filters(sort="messages")) is None


# ---------------------------------------------------------------------------
# Search


def _hits(q: str, **kwargs) -> list[int]:
    ids: list[int] = []
    filters = Filters(q=q, **kwargs)
    cursor = None
    for _ in range(100):
        page = listing.search(filters, cursor)
        ids += [hit.message_id for hit in page.hits]
        if page.next_cursor is None:
            return ids
        cursor = listing.decode_cursor(page.next_cursor, filters)
        assert cursor is not None
    raise AssertionError("the pages never ended")


def test_search_finds_messages_by_word_and_by_tool_name():
    a = _new("telegram")
    [pepper] = _say(a, "Salt and pepper, near the stove")
    [tool] = _say(a, "42 results", role="tool", tool_name="web_search", tool_call_id="c1")
    b = _new("cli")
    [other] = _say(b, "PEPPER again")
    assert _hits("pepper") == [other, pepper]
    assert _hits("web_search") == [tool]
    assert _hits("salt pepper") == [pepper]  # every word
    assert _hits("salt missing") == []
    assert _hits("pepper", source="telegram") == [pepper]
    assert _hits("pepper", source="cli") == [other]
    assert _hits("pepper", direction="asc") == [pepper, other]
    page = listing.search(Filters(q="pepper"))
    assert (page.count, page.count_capped) == (2, False)
    hit = page.hits[1]
    assert (hit.session_id, hit.role, page.sessions[1].source) == (a, "user", "telegram")


@pytest.mark.parametrize(
    ("q", "finds"),
    [
        ('"', False),
        ('"pepper', True),
        ("AND", True),
        ("salt AND", True),
        ("OR NOT", False),
        ("*", False),
        ("pep*", False),
        ("^salt", True),
        ("content:salt", False),
        ("-salt", False),  # exclusion only: parse() reports it, nothing is searched
        ("pepper -salt", False),
        ("pepper -stove", False),
        ("pepper -onion", True),
        ('pepper -"the stove"', False),
        ('pepper -"stove the"', True),
        ('"salt and pepper"', True),
        ('"pepper and salt"', False),
        ('"salt pepper', True),  # unbalanced: the words one by one
        ('-"', False),
        ("--salt pepper", False),
        ("salt NOT pepper", False),  # NOT is a word here, not an operator
        ("salt OR onion", False),
        ('"salt" NEAR "pepper"', True),  # NEAR is a word, and "near" is in the text
        ("x" * 500, False),
        ("(salt)", True),
        ("NEAR(", True),
        ("NEAR(salt pepper)", False),  # "near salt" as a phrase: not in the text
        ("'; DROP TABLE sessions; --", False),
        ("🧂", False),
        ("salt🧂", True),
        ("", False),
        ("   ", False),
        ("日本語", False),
    ],
)
def test_search_treats_any_query_as_plain_text(q, finds):
    sid = _new("cli")
    [mid] = _say(sid, "Salt and pepper, near the stove")
    page = listing.search(Filters(q=q))
    assert [hit.message_id for hit in page.hits] == ([mid] if finds else [])
    assert helpers.count("sessions") == 1


def test_a_session_with_many_hits_is_one_entry_on_one_page():
    sid = _new("cli")
    ids = _say(sid, *[f"needle number {n}" for n in range(7)], "haystack")
    for direction, first in (("desc", ids[6]), ("asc", ids[0])):
        [group] = _search_walk("needle", per_page=3, direction=direction)
        assert (group.count, group.first_hit_id, len(group.hits)) == (7, first, 3)


def test_search_snippets_escape_content_and_mark_only_the_match():
    sid = _new("cli", title="<b>t</b>")
    _say(
        sid,
        "<script>alert('x')</script> needle & <img src=x onerror=alert(1)> 1 < 2 "
        "\ue001 stray \ue000 end",
    )
    [hit] = listing.search(Filters(q="needle")).hits
    html = str(highlight(hit.snippet))
    assert "<script" not in html and "<img" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # PostgreSQL drops the <script> tags
    assert "1 &lt; 2" in html
    assert "<mark>needle</mark>" in html
    assert "&amp;" in html
    assert html.count("<mark>") == html.count("</mark>")
    tags = html.replace("<mark>", "").replace("</mark>", "")
    assert "<" not in tags and ">" not in tags


def test_highlight_escapes_everything_but_balanced_marks():
    s, e = listing.MARK_START, listing.MARK_END
    assert str(highlight(f"a {s}<b>{e} {e}c{s}")) == "a <mark>&lt;b&gt;</mark> c<mark></mark>"
    assert str(highlight(None)) == ""


def _search_walk(q: str, **kwargs) -> list[listing.SessionHits]:
    """Every session group over every page, following the Next cursors."""
    filters = Filters(q=q, **kwargs)
    groups: list[listing.SessionHits] = []
    cursor = None
    for _ in range(100):
        page = listing.search(filters, cursor)
        groups += page.sessions
        if page.next_cursor is None:
            return groups
        cursor = listing.decode_cursor(page.next_cursor, filters)
        assert cursor is not None
    raise AssertionError("the pages never ended")


def test_search_groups_hits_by_session_with_counts_and_best_snippets():
    a = _new("telegram", user_id="u-a")
    b = _new("cli")
    _say(b, "what about the needle?")  # b's first hit is older than a's newest
    a_ids = _say(a, *[f"needle {n}" for n in range(5)])
    [a_tool] = _say(a, '{"found": "needle"}', role="tool", tool_name="grep", tool_call_id="c1")
    page = listing.search(Filters(q="needle"))
    assert [g.session_id for g in page.sessions] == [a, b]
    group = page.sessions[0]
    assert (group.count, group.count_more, group.source, group.user_id) == (
        6,
        False,
        "telegram",
        "u-a",
    )
    assert group.first_hit_id == a_tool  # the newest hit: where "more in this session" opens
    # Text messages make the snippets before tool results; at most three.
    assert [hit.message_id for hit in group.hits] == list(reversed(a_ids))[:3]
    assert page.sessions[1].first_user_text == "what about the needle?"
    assert (page.count, page.count_capped) == (7, False)


@pytest.mark.parametrize("direction", ["desc", "asc"])
def test_search_pages_list_each_session_once(direction):
    """Sessions whose hits interleave across page boundaries are neither lost nor repeated."""
    sessions = [_new("cli") for _ in range(7)]
    for round_ in range(3):
        for n, sid in enumerate(sessions):
            if (n + round_) % 2 == 0 or round_ == 1:
                _say(sid, f"needle round {round_}")
    _say(_new("cli"), "no match here")
    groups = _search_walk("needle", per_page=2, direction=direction)
    seen = [g.session_id for g in groups]
    assert sorted(seen) == sorted(sessions) and len(seen) == len(set(seen))
    counts = {g.session_id: g.count for g in groups}
    stored = {
        sid: db.fetchone("SELECT COUNT(*) FROM messages WHERE session_id = %s", [sid])[0]
        for sid in sessions
    }
    assert counts == stored


def test_search_pages_stay_exact_when_the_scan_is_capped(monkeypatch):
    monkeypatch.setattr(fulltext, "SEARCH_CANDIDATES", 4)
    busy = _new("cli")
    quiet = _new("cli")
    _say(quiet, "needle once")
    _say(busy, *[f"needle {n}" for n in range(10)])
    _say(quiet, "needle twice")
    groups = _search_walk("needle", per_page=5)
    assert [g.session_id for g in groups] == [quiet, busy]
    # The first page's scan saw 4 of busy's 10 hits and 1 of quiet's: counts say "more".
    assert [(g.count, g.count_more) for g in groups] == [(1, True), (3, True)]


def test_search_exclusion_and_phrases_on_the_store():
    sid = _new("cli")
    [both] = _say(sid, "the red apple and the green pear")
    [apple] = _say(sid, "an apple a day")
    assert _hits("apple") == [apple, both]
    assert _hits("apple -pear") == [apple]
    assert _hits('apple -"green pear"') == [apple]
    assert _hits('apple -"pear green"') == [apple, both]
    assert _hits('"red apple"') == [both]
    assert _hits('"apple red"') == []
    assert _hits("apple -pear -day") == []
    [hit] = listing.search(Filters(q='"red apple" -day')).hits
    assert listing.MARK_START in hit.snippet and "pear" in hit.snippet


def test_parse_query_is_the_one_parse():
    q = listing.parse_query
    assert q('"exact phrase" -word -"not this" web_search') == listing.Query(
        include=("exact phrase", "web search"), exclude=("word", "not this")
    )
    assert q('"unbalanced quote -x') == listing.Query(
        include=("unbalanced", "quote"), exclude=("x",)
    )
    assert q('- -- "" NEAR(x) col:y') == listing.Query(include=("NEAR x", "col y"))
    assert len(q(" ".join(f"w{n}" for n in range(40))).include) == listing.MAX_TERMS
    assert Filters(q='"a b" -c').terms == ("a b",)
    problems = listing.parse({"q": '-salt -"pepper mill"'}).problems
    assert any("only excludes" in p for p in problems)


def test_search_finds_sessions_by_user_chat_or_display_name():
    by_user = _new("telegram", user_id="Alice42", hour=10)
    by_chat = _new("telegram", chat_id="ALICE42", hour=11)
    by_name = _new("slack", hour=12)
    db.execute("UPDATE sessions SET display_name = %s WHERE id = %s", ["alice42", by_name])
    _new("cli", user_id="alice421")  # exact match only: a longer id is another user
    page = listing.search(Filters(q=" alice42 "))
    assert [(m.session_id, m.matched) for m in page.names] == [
        (by_name, "name"),
        (by_chat, "chat"),
        (by_user, "user"),
    ]
    assert page.sessions == ()  # no message says it
    assert listing.search(Filters(q="nobody")).names == ()


def test_a_person_with_many_sessions_is_one_name_match_with_their_count():
    harriet = [_new("telegram", user_id="u-hq", hour=h) for h in (8, 9, 10, 11)]
    namesake = _new("slack", user_id="u-other", hour=7)
    for sid in [*harriet, namesake]:
        db.execute("UPDATE sessions SET display_name = %s WHERE id = %s", ["Harriet Quill", sid])
    found = listing.search_names("harriet quill")
    assert [(m.session_id, m.user_id, m.sessions) for m in found] == [
        (harriet[-1], "u-hq", 4),  # the newest of hers stands for her
        (namesake, "u-other", 1),
    ]


def test_names_are_found_without_the_lower_indexes_among_the_newest_sessions(monkeypatch):
    """A store attached without upgrade_runtime_tables lacks the lower() indexes: the
    lookup then reads only the newest NAME_SCAN_WITHOUT_INDEX sessions."""
    monkeypatch.setattr(name_search, "NAME_SCAN_WITHOUT_INDEX", 2)
    old = _new("cli", user_id="Bob", day="2024-01-01")
    new = _new("cli", user_id="bob", day="2024-02-01")
    _new("cli", day="2024-03-01")
    assert [m.session_id for m in listing.search_names("BOB")] == [new, old]
    try:
        for name in name_search.NAME_INDEXES:
            db.execute(f"DROP INDEX IF EXISTS {name}")
        assert not name_search.name_indexes_present()
        assert [m.session_id for m in listing.search_names("BOB")] == [new]
    finally:
        for _column, statement in core.schema.LOWER_INDEX_SQL:
            db.execute(statement)
    assert name_search.name_indexes_present()


@pytest.mark.skipif(
    connections[store_alias()].vendor != "postgresql", reason="PostgreSQL's full-text test"
)
@pytest.mark.parametrize(
    "q", ["ÉCOLE", "école", "the", "THE", "x2", "2026", "example", "com", "can't", "the_x", "naïve"]
)
def test_the_plain_word_prefilter_never_drops_a_full_text_match(q):
    """A one-token word is first looked for in the lower-cased text (PgSearch.matches): the
    hits are exactly the messages the full-text test alone finds."""
    sid = _new("cli")
    texts = [
        "Une ÉCOLE naïve",
        "the_x marks THE spot",
        "see https://example.com/the/path?x2=1",
        "can't stop, 2026-11-27",
        "There is nothing here",
        "X2 and x2 twice",
    ]
    ids = _say(sid, *texts)
    document = fulltext_postgresql.PgSearch.document.replace("m.", "")
    expected = {
        r[0]
        for r in db.fetchall(
            f"SELECT id FROM messages WHERE to_tsvector('simple', {document}) "
            "@@ phraseto_tsquery('simple', %s)",
            [q],
        )
    }
    assert expected <= set(ids)
    assert set(_hits(q)) == expected


def test_conversation_matches_lists_every_matching_message_in_transcript_order():
    """What a transcript's find bar counts: the conversation's (its compression chain's)
    messages the search matches, exclusions applied, as the search page matched them."""
    root = _new()
    first = _say(root, "a red parcel", "nothing here", "red parcel, crushed")
    other = _new()
    _say(other, "a red parcel elsewhere")  # another conversation: not counted
    tip = core.rotate_for_compression(session_id=root).new_session_id
    later = _say(tip, "the red parcel again")
    chain = core.compression_chain(session_id=root)

    found = listing.conversation_matches(q='"red parcel" -crushed', chain=chain)
    assert found.message_ids == (first[0], later[0])
    assert found.capped is False
    assert listing.conversation_matches(q="parcel", chain=chain).message_ids == (
        first[0],
        first[2],
        later[0],
    )
    # Its segments in the chain's order, whatever their ids.
    assert listing.conversation_matches(q="parcel", chain=[tip, root]).message_ids == (
        later[0],
        first[0],
        first[2],
    )
    # Undone messages count unless the transcript hides them.
    core.undo_last_turn(session_id=tip)
    assert later[0] in listing.conversation_matches(q="parcel", chain=chain).message_ids
    hidden = listing.conversation_matches(q="parcel", chain=chain, hide_inactive=True)
    assert hidden.message_ids == (first[0], first[2])
    assert listing.conversation_matches(q="-parcel", chain=chain).message_ids == ()


def test_conversation_matches_are_capped(monkeypatch):
    root = _new()
    ids = _say(root, *[f"needle {n}" for n in range(5)])
    monkeypatch.setattr(fulltext, "CONVERSATION_MATCHES_MAX", 3)
    found = listing.conversation_matches(q="needle", chain=[root])
    assert found.message_ids == tuple(ids[:3])
    assert found.capped is True
