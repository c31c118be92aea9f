"""The management commands: ``seed_demo`` (a realistic demo store), ``create_operator`` and
``purge_trash``."""

from __future__ import annotations

import io
import json
import re
import time
from collections import Counter
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from sessions_admin.core import db
from sessions_admin.ledger import trash_retention
from sessions_admin.ledger.models import AuditEntry, TrashEntry
from sessions_admin.routers import responses_alias
from sessions_admin.signin.roles import role_of

# ---------------------------------------------------------------------------
# helpers


def _rows(sql: str, params: list | None = None) -> list[tuple]:
    return db.fetchall(sql, params or [])


def _scalar(sql: str, params: list | None = None):
    return db.fetchone(sql, params or [])[0]


def _response_rows(sql: str, params: list | None = None) -> list[tuple]:
    return db.fetchall(sql, params or [], alias=responses_alias())


def _configs() -> dict[str, dict]:
    out = {}
    for session_id, text in _rows("SELECT id, model_config FROM sessions"):
        try:
            value = json.loads(text) if text else {}
        except ValueError:
            value = {}
        out[session_id] = value if isinstance(value, dict) else {}
    return out


def _is_live(session_id: str) -> bool:
    return _scalar("SELECT ended_at FROM sessions WHERE id = %s", [session_id]) is None


def _seed(*args: str) -> str:
    out = io.StringIO()
    call_command("seed_demo", *args, stdout=out)
    return out.getvalue()


def _wipe_store() -> None:
    for table in ("sessions_admin_switch_events", "messages", "sessions"):
        db.execute(f"DELETE FROM {table}")
    for table in ("conversations", "responses"):
        db.execute(f"DELETE FROM {table}", alias=responses_alias())


def _shape() -> tuple:
    """What a seed must reproduce exactly: every session's figures and every message's text."""
    sessions = sorted(
        (source, count or 0, tools or 0, reason or "", rewinds or 0, parent is not None)
        for source, count, tools, reason, rewinds, parent in _rows(
            "SELECT source, message_count, tool_call_count, end_reason, rewind_count, "
            "parent_session_id FROM sessions"
        )
    )
    messages = sorted(
        (role, content or "", tool_name or "", active)
        for role, content, tool_name, active in _rows(
            "SELECT role, content, tool_name, active FROM messages"
        )
    )
    slugs = sorted(r[0] for r in _response_rows("SELECT name FROM conversations"))
    return sessions, messages, slugs


@pytest.fixture
def seeded_40():
    return _seed("--sessions", "40")


# ---------------------------------------------------------------------------
# seed_demo


def test_seed_creates_exactly_the_sessions_asked_for_and_says_so(seeded_40):
    assert _scalar("SELECT COUNT(*) FROM sessions") == 40
    assert "Seeded 40 sessions" in seeded_40
    messages = _scalar("SELECT COUNT(*) FROM messages")
    assert f"{messages:,} messages" in seeded_40


def test_seed_writes_every_lineage_kind(seeded_40):
    configs = _configs()
    rows = {
        r[0]: r
        for r in _rows(
            "SELECT id, parent_session_id, end_reason, session_key, source, user_id FROM sessions"
        )
    }

    # Compression continuation: a plain child of a parent ended by compression.
    compression_children = [
        sid
        for sid, (_, parent, *_rest) in rows.items()
        if parent
        and rows[parent][2] == "compression"
        and "_branched_from" not in configs[sid]
        and "_delegate_from" not in configs[sid]
    ]
    assert compression_children
    # Branch: parent link and marker agree; the parent ended 'branched'.
    branches = [sid for sid, c in configs.items() if c.get("_branched_from")]
    assert branches
    for sid in branches:
        assert rows[sid][1] == configs[sid]["_branched_from"]
        assert rows[rows[sid][1]][2] == "branched"
    # Delegate: a child with _delegate_from naming its parent.
    delegates = [sid for sid, c in configs.items() if c.get("_delegate_from")]
    assert delegates
    for sid in delegates:
        assert rows[sid][1] == configs[sid]["_delegate_from"]
    # Reset: no parent, same session_key as the session it resets, which ended.
    resets = [sid for sid, c in configs.items() if c.get("_reset_from")]
    assert resets
    for sid in resets:
        origin = configs[sid]["_reset_from"]
        assert rows[sid][1] is None
        assert rows[sid][3] == rows[origin][3] is not None
        assert rows[origin][2] is not None
    assert any(rows[configs[sid]["_reset_from"]][2] == "session_reset" for sid in resets)
    # A key's second root without a reset ends the first with new_session.
    assert any(r[2] == "new_session" for r in rows.values())
    # Some gateway chats are still live, never more than one per key.
    live_keys = [r[3] for r in rows.values() if r[3] and _is_live(r[0])]
    assert live_keys
    assert max(Counter(live_keys).values()) == 1


def test_seed_reproduces_cold_start_forks_and_evictions(seeded_40):
    sessions_of_slug: dict[str, set[str]] = {}
    for name, session_id in _response_rows("SELECT name, session_id FROM conversations"):
        sessions_of_slug.setdefault(name, set()).add(session_id)
    for (data,) in _response_rows("SELECT data FROM responses"):
        payload = json.loads(data)
        if payload.get("conversation"):
            sessions_of_slug.setdefault(payload["conversation"], set()).add(payload["session_id"])
    forked = {slug: ids for slug, ids in sessions_of_slug.items() if len(ids) > 1}
    assert forked, sessions_of_slug
    for ids in forked.values():
        found = _rows(
            f"SELECT source, user_id, parent_session_id, model_config FROM sessions "
            f"WHERE id IN ({', '.join(['%s'] * len(ids))})",
            sorted(ids),
        )
        # Unlinked api_server sessions of one user: nothing ties them but the slug.
        assert len(found) == len(ids)
        assert {r[0] for r in found} == {"api_server"}
        assert len({r[1] for r in found}) == 1
        assert all(r[2] is None for r in found)
    # The slug's row follows the latest fork for some slugs and stays put for others.
    row_at_latest = []
    for name, session_id in _response_rows("SELECT name, session_id FROM conversations"):
        if name in forked:
            ids = sorted(forked[name])
            started = dict(
                _rows(
                    f"SELECT id, started_at FROM sessions WHERE id IN ({', '.join(['%s'] * len(ids))})",
                    ids,
                )
            )
            row_at_latest.append(started[session_id] == max(started.values()))
    assert True in row_at_latest and False in row_at_latest
    # Evicted: some slug's latest response is gone, and responses were evicted overall.
    kept = {r[0] for r in _response_rows("SELECT response_id FROM responses")}
    slugs = _response_rows("SELECT name, response_id FROM conversations")
    assert any(response_id not in kept for _, response_id in slugs)
    assert any(response_id in kept for _, response_id in slugs)


def test_seed_message_content_is_realistic(seeded_40):
    # Tool calls are OpenAI-style and each is answered by a tool row with its id.
    calls = _rows(
        "SELECT session_id, id, tool_calls FROM messages WHERE tool_calls IS NOT NULL ORDER BY id"
    )
    assert calls
    answered = {
        (r[0], r[1]): r[2]
        for r in _rows(
            "SELECT session_id, tool_call_id, tool_name FROM messages WHERE role = 'tool'"
        )
    }
    for session_id, _, text in calls:
        for call in json.loads(text):
            assert call["type"] == "function"
            assert set(call) == {"id", "type", "function"}
            json.loads(call["function"]["arguments"])
            assert answered[(session_id, call["id"])] == call["function"]["name"]
    assert _scalar("SELECT COUNT(*) FROM messages WHERE reasoning IS NOT NULL") > 0
    # Undone and retried turns stay as inactive rows.
    assert _scalar("SELECT COUNT(*) FROM messages WHERE active = 0") > 0
    assert _scalar("SELECT COUNT(*) FROM sessions WHERE rewind_count > 0") > 0
    # Hostile markup and unicode are stored as given.
    contents = [r[0] for r in _rows("SELECT content FROM messages WHERE content IS NOT NULL")]
    assert any("<script>alert(1)</script>" in c for c in contents)
    assert any(re.search(r"[\u4e00-\u9fff]", c) for c in contents)  # CJK
    assert any(re.search(r"[\u0590-\u06ff]", c) for c in contents)  # Hebrew / Arabic
    assert any("```" in c for c in contents)
    titles = [r[0] for r in _rows("SELECT title FROM sessions WHERE title IS NOT NULL")]
    assert any("<" in t and ">" in t for t in titles)
    assert len(titles) == len(set(titles))
    # Empty sessions, several sources and models, usage and cost.
    assert _scalar("SELECT COUNT(*) FROM sessions WHERE message_count = 0") >= 2
    sources = {r[0] for r in _rows("SELECT DISTINCT source FROM sessions")}
    assert {"telegram", "discord", "slack", "cli", "api_server"} <= sources
    assert _scalar("SELECT COUNT(DISTINCT model) FROM sessions") >= 3
    assert _scalar("SELECT SUM(estimated_cost_usd) FROM sessions") > 0
    assert _scalar("SELECT SUM(input_tokens) FROM sessions") > 0
    reasons = {r[0] for r in _rows("SELECT DISTINCT end_reason FROM sessions")}
    assert {None, "compression", "session_reset"} <= reasons
    assert reasons & {"user_exit", "agent_close", "ws_orphan_reap", "lru_evict"}
    keys = [r[0] for r in _rows("SELECT session_key FROM sessions WHERE session_key IS NOT NULL")]
    assert all(
        re.fullmatch(r"agent:main:(telegram|discord|slack):(dm|group):[^:]+(:.+)?", k) for k in keys
    )


def test_seed_counters_equal_active_rows(seeded_40):
    active = Counter()
    tool_calls = Counter()
    for session_id, text in _rows("SELECT session_id, tool_calls FROM messages WHERE active = 1"):
        active[session_id] += 1
        if text:
            tool_calls[session_id] += len(json.loads(text))
    for session_id, count, tools in _rows(
        "SELECT id, message_count, tool_call_count FROM sessions"
    ):
        assert count == active[session_id], session_id
        assert tools == tool_calls[session_id], session_id


def test_seed_times_are_spread_and_ordered(seeded_40):
    now = time.time()
    started = [r[0] for r in _rows("SELECT started_at FROM sessions")]
    assert min(started) >= now - 46 * 86_400
    assert max(started) <= now
    assert len({int((now - s) // 86_400) for s in started}) >= 10  # a per-day chart has data
    assert _scalar("SELECT COUNT(*) FROM sessions WHERE ended_at < started_at") == 0
    assert _scalar("SELECT COUNT(*) FROM sessions WHERE ended_at > %s", [now]) == 0
    assert _scalar("SELECT COUNT(*) FROM messages WHERE timestamp > %s", [now]) == 0
    # Within a session, timestamps never go backwards as ids grow.
    previous: dict[str, float] = {}
    for session_id, timestamp in _rows("SELECT session_id, timestamp FROM messages ORDER BY id"):
        assert timestamp >= previous.get(session_id, timestamp), session_id
        previous[session_id] = timestamp
    # Messages a session wrote itself are not older than the session (branches copy older ones).
    assert (
        _scalar(
            "SELECT COUNT(*) FROM messages m JOIN sessions s ON s.id = m.session_id "
            "WHERE m.timestamp < s.started_at AND s.model_config NOT LIKE %s",
            ['%"_branched_from"%'],
        )
        == 0
    )
    # The switch-event log is in time order.
    created = [
        r[0] for r in _rows("SELECT created_at FROM sessions_admin_switch_events ORDER BY seq")
    ]
    assert created == sorted(created)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_other_seeds_keep_the_invariants(seed):
    _seed("--sessions", "60", "--seed", str(seed))
    now = time.time()
    assert _scalar("SELECT COUNT(*) FROM sessions") == 60
    assert _scalar("SELECT COUNT(*) FROM sessions WHERE started_at > %s", [now]) == 0
    assert _scalar("SELECT COUNT(*) FROM messages WHERE timestamp > %s", [now]) == 0
    assert _scalar("SELECT COUNT(*) FROM sessions WHERE ended_at < started_at") == 0
    assert (
        _scalar(
            "SELECT COUNT(*) FROM sessions s WHERE message_count <> "
            "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id AND m.active = 1)"
        )
        == 0
    )
    live = _rows(
        "SELECT session_key, COUNT(*) FROM sessions WHERE ended_at IS NULL "
        "AND session_key IS NOT NULL GROUP BY session_key HAVING COUNT(*) > 1"
    )
    assert live == []


def test_seed_if_empty_does_nothing_the_second_time():
    _seed("--sessions", "12")
    before = (_scalar("SELECT COUNT(*) FROM sessions"), _scalar("SELECT COUNT(*) FROM messages"))
    output = _seed("--sessions", "12", "--if-empty")
    after = (_scalar("SELECT COUNT(*) FROM sessions"), _scalar("SELECT COUNT(*) FROM messages"))
    assert before == after
    assert before[0] == 12
    assert "nothing seeded" in output


def test_seed_if_empty_seeds_an_empty_store():
    output = _seed("--sessions", "5", "--if-empty")
    assert _scalar("SELECT COUNT(*) FROM sessions") == 5
    assert "Seeded 5 sessions" in output


def test_seed_without_if_empty_adds_to_a_store_keeping_titles_unique():
    _seed("--sessions", "30")
    _seed("--sessions", "30")
    assert _scalar("SELECT COUNT(*) FROM sessions") == 60
    titles = [r[0] for r in _rows("SELECT title FROM sessions WHERE title IS NOT NULL")]
    assert len(titles) == len(set(titles))


def test_the_same_seed_gives_the_same_store_and_another_seed_does_not():
    _seed("--sessions", "40", "--seed", "11")
    first = _shape()
    _wipe_store()
    _seed("--sessions", "40", "--seed", "11")
    second = _shape()
    _wipe_store()
    _seed("--sessions", "40", "--seed", "12")
    other = _shape()
    assert first == second
    assert len(first[0]) == len(other[0]) == 40
    assert first != other


def test_seed_bulk_path_keeps_counters_fts_and_events_in_sync():
    output = _seed("--sessions", "80", "--bulk", "on")
    assert "plain chats in bulk" in output
    assert _scalar("SELECT COUNT(*) FROM sessions") == 80
    mismatched = _scalar(
        "SELECT COUNT(*) FROM sessions s WHERE message_count <> "
        "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id AND m.active = 1)"
    )
    assert mismatched == 0
    # Every root session a runtime would announce has its 'new' event, numbered without gaps.
    seqs = [r[0] for r in _rows("SELECT seq FROM sessions_admin_switch_events ORDER BY seq")]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    roots = _scalar(
        "SELECT COUNT(*) FROM sessions WHERE parent_session_id IS NULL "
        "AND (model_config IS NULL OR model_config NOT LIKE %s)",
        ['%"_reset_from"%'],
    )
    new_events = _scalar("SELECT COUNT(*) FROM sessions_admin_switch_events WHERE reason = 'new'")
    assert new_events == roots
    if db.vendor() == "sqlite":
        assert _scalar("SELECT COUNT(*) FROM messages_fts") == _scalar(
            "SELECT COUNT(*) FROM messages"
        )
        hits = _scalar(
            "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'assistant OR the'"
        )
        assert hits > 0


def test_seed_bulk_path_writes_what_the_core_path_writes():
    _seed("--sessions", "80", "--bulk", "on")
    bulk = _shape()
    bulk_usage = _rows(
        "SELECT SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens), "
        "SUM(reasoning_tokens), COUNT(title) FROM sessions"
    )
    _wipe_store()
    _seed("--sessions", "80", "--bulk", "off")
    assert _shape() == bulk
    assert (
        _rows(
            "SELECT SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens), "
            "SUM(reasoning_tokens), COUNT(title) FROM sessions"
        )
        == bulk_usage
    )


def test_seed_long_transcript_is_optional_and_batched():
    _seed("--sessions", "20", "--long-transcript", "1200")
    longest = _rows(
        "SELECT id, message_count, title FROM sessions ORDER BY message_count DESC LIMIT 1"
    )[0]
    assert longest[1] == 1200
    assert _scalar("SELECT COUNT(*) FROM messages WHERE session_id = %s", [longest[0]]) == 1200


def test_small_seeds_have_no_long_transcript():
    _seed("--sessions", "40")
    assert _scalar("SELECT MAX(message_count) FROM sessions") < 1_000


def test_seed_refuses_bad_arguments():
    with pytest.raises(CommandError):
        _seed("--sessions", "0")
    with pytest.raises(CommandError):
        _seed("--sessions", "5", "--long-transcript", "-1")
    assert _scalar("SELECT COUNT(*) FROM sessions") == 0


# ---------------------------------------------------------------------------
# create_operator


def _create(*args: str, stdin: str = "", **options) -> str:
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stdin", io.StringIO(stdin))
        call_command("create_operator", *args, stdout=out, **options)
    return out.getvalue()


def test_create_operator_with_a_password_from_stdin():
    output = _create("alice", role="support", stdin="correct horse battery staple\nignored\n")
    user = User.objects.get(username="alice")
    assert list(user.groups.values_list("name", flat=True)) == ["support"]
    assert role_of(user) == "support"
    assert user.check_password("correct horse battery staple")
    assert user.is_active and not user.is_superuser
    assert "Operator alice (support) created" in output
    assert "correct horse" not in output


def test_create_operator_generates_and_prints_a_password_without_stdin():
    output = _create("bob", "--role", "admin")
    match = re.search(r"Operator bob \(admin\) created\. Password: (\S+)", output)
    assert match, output
    password = match.group(1)
    assert len(password) >= 20
    user = User.objects.get(username="bob")
    assert user.check_password(password)
    assert role_of(user) == "admin"


@pytest.mark.parametrize("role", ["viewer", "support", "admin"])
def test_create_operator_assigns_each_role(role):
    _create(f"op-{role}", role=role)
    assert role_of(User.objects.get(username=f"op-{role}")) == role


def test_create_operator_refuses_a_short_password_and_creates_nothing():
    with pytest.raises(CommandError, match="Password rejected"):
        _create("carol", role="viewer", stdin="short\n")
    assert not User.objects.filter(username="carol").exists()


def test_create_operator_refuses_a_common_password():
    with pytest.raises(CommandError, match="Password rejected"):
        _create("carol", role="viewer", stdin="password123\n")
    assert not User.objects.filter(username="carol").exists()


def test_create_operator_refuses_an_existing_name_and_changes_nothing():
    _create("dave", role="viewer", stdin="first very long passphrase\n")
    with pytest.raises(CommandError, match="already exists"):
        _create("dave", role="admin", stdin="second very long passphrase\n")
    user = User.objects.get(username="dave")
    assert user.check_password("first very long passphrase")
    assert role_of(user) == "viewer"
    assert User.objects.filter(username="dave").count() == 1


def test_create_operator_if_missing_leaves_an_existing_operator_alone():
    _create("erin", role="support", stdin="first very long passphrase\n")
    output = _create("erin", "--if-missing", role="admin", stdin="another long passphrase\n")
    assert "already exists" in output
    user = User.objects.get(username="erin")
    assert user.check_password("first very long passphrase")
    assert role_of(user) == "support"


def test_create_operator_if_missing_creates_a_missing_operator():
    output = _create("frank", "--if-missing", role="viewer")
    assert "Operator frank (viewer) created. Password:" in output
    assert role_of(User.objects.get(username="frank")) == "viewer"


def test_create_operator_refuses_an_unknown_role():
    with pytest.raises(CommandError, match="Unknown role"):
        _create("gina", role="root")
    assert not User.objects.filter(username="gina").exists()


def test_create_operator_refuses_an_invalid_name():
    with pytest.raises(CommandError, match="Invalid operator name"):
        _create("bad name!", role="viewer")
    assert not User.objects.exists()


def test_create_operator_requires_a_role():
    with pytest.raises(CommandError):
        _create("hank")
    assert not User.objects.filter(username="hank").exists()


# ---------------------------------------------------------------------------
# purge_trash


def _trash_entry(*, age_days: float) -> int:
    entry = TrashEntry.objects.create(
        actor_name="t", session_ids=["gone"], payload={}, state=TrashEntry.COMPLETE
    )
    TrashEntry.objects.filter(pk=entry.pk).update(
        created_at=timezone.now() - timedelta(days=age_days)
    )
    return entry.pk


def _purge(*args: str, **options) -> str:
    out = io.StringIO()
    call_command("purge_trash", *args, stdout=out, **options)
    return out.getvalue()


@pytest.mark.parametrize(
    "days",
    [
        {"days": -1.0},
        {"days": float("nan")},
        {"days": float("inf")},
        {"days": "ten"},  # call_command's keyword options skip argparse's float()
        {"days": True},
        {"days": 1e9},  # "now minus that many days" is no date
    ],
    ids=["negative", "nan", "inf", "not a number", "bool", "past the calendar"],
)
def test_purge_trash_refuses_a_bad_days_value_and_changes_nothing(days):
    old = _trash_entry(age_days=400)
    with pytest.raises(CommandError, match="must be a number of days"):
        _purge(**days)
    assert list(TrashEntry.objects.values_list("pk", flat=True)) == [old]
    assert not AuditEntry.objects.filter(action="purge_trash").exists()


@pytest.mark.parametrize("argument", ["--days=-1", "--days=nan", "--days=inf"])
def test_purge_trash_refuses_bad_days_from_the_command_line(argument):
    old = _trash_entry(age_days=400)
    with pytest.raises(CommandError, match="must be a number of days"):
        _purge(argument)
    assert list(TrashEntry.objects.values_list("pk", flat=True)) == [old]
    assert not AuditEntry.objects.exists()


def test_purge_trash_says_what_it_dropped_not_what_a_restore_took_back():
    held = _trash_entry(age_days=3)
    back = _trash_entry(age_days=3)
    TrashEntry.objects.filter(pk=held).update(session_count=2, message_count=8)
    TrashEntry.objects.filter(pk=back).update(
        session_count=3, message_count=9, state=TrashEntry.RESTORED
    )
    out = _purge("--days", "2.5")
    assert "Purged 2 trash entries (2 sessions, 8 messages) older than 2.5 days." in out
    assert not TrashEntry.objects.exists()


def test_a_purges_audit_entry_links_the_sessions_it_dropped():
    """A session's history in the audit log ends with the purge that dropped it (attack round
    44, Q2: the entry linked only the sessions a hold kept). A restored entry's sessions are
    back in the store: the purge dropped nothing of them."""
    dropped = _trash_entry(age_days=3)
    back = _trash_entry(age_days=3)
    TrashEntry.objects.filter(pk=dropped).update(session_ids=["s-dropped-1", "s-dropped-2"])
    TrashEntry.objects.filter(pk=back).update(session_ids=["s-back"], state=TrashEntry.RESTORED)
    _purge("--days", "2.5")
    entry = AuditEntry.objects.get(action="purge_trash")
    linked = set(entry.sessions.values_list("session_id", flat=True))
    assert linked == {"s-dropped-1", "s-dropped-2"}
    assert set(entry.session_ids) == linked


def test_purge_trash_purges_past_the_days_given_audited():
    old = _trash_entry(age_days=3)
    new = _trash_entry(age_days=1)
    assert "Purged 1 trash entries (0 sessions, 0 messages) older than 2.5 days." in _purge(
        "--days", "2.5"
    )
    assert list(TrashEntry.objects.values_list("pk", flat=True)) == [new]
    entry = AuditEntry.objects.get(action="purge_trash")
    assert entry.outcome == "ok" and entry.before["older_than_days"] == 2.5
    # What it dropped, recorded with its commit (a purge killed after it is completed from it).
    assert list(entry.before["purging"]["operations"].values()) == [[old]]
    assert entry.after["purged_entries"] == 1


@pytest.mark.parametrize(("setting", "days"), [(7, 7), ("nan", 30), (-3, 30), ("x", 30)])
def test_purge_trash_reads_the_setting_as_the_trash_page_does(settings, setting, days):
    """An invalid SESSIONS_ADMIN_TRASH_DAYS is the default retention, on the page and here."""
    settings.SESSIONS_ADMIN_TRASH_DAYS = setting
    assert trash_retention.configured_days() == days
    kept = _trash_entry(age_days=days - 1)
    _trash_entry(age_days=days + 1)
    assert f"older than {days} days" in _purge()
    assert list(TrashEntry.objects.values_list("pk", flat=True)) == [kept]


@pytest.mark.parametrize("value", [0, "0", 2.5, "365000"])
def test_a_retention_is_a_finite_number_of_days_from_zero(value):
    assert trash_retention.retention_days(value) == float(value)


def _trashed_sessions(count: int, *, age_days: float) -> int:
    entry = TrashEntry.objects.create(
        actor_name="t",
        session_ids=[f"gone-{n}" for n in range(count)],
        session_count=count,
        message_count=2 * count,
        payload={},
        state=TrashEntry.COMPLETE,
    )
    TrashEntry.objects.filter(pk=entry.pk).update(
        created_at=timezone.now() - timedelta(days=age_days)
    )
    return entry.pk


def test_purge_trash_needs_the_number_of_sessions_to_drop_unexpired_entries_in_bulk(settings):
    """``--days 0`` drops what the retention still keeps restorable: from 20 sessions it
    needs their number, as the page does; the scheduled purge of expired entries does not."""
    settings.SESSIONS_ADMIN_TRASH_DAYS = 30
    recent = _trashed_sessions(25, age_days=1)
    expired = _trashed_sessions(25, age_days=40)
    assert "Would purge 2 trash entries (50 sessions, 100 messages)" in _purge(
        "--days", "0", "--dry-run"
    )
    for wrong in ([], ["--sessions", "49"]):
        with pytest.raises(CommandError, match="pass --sessions 50"):
            _purge("--days", "0", *wrong)
    assert set(TrashEntry.objects.values_list("pk", flat=True)) == {recent, expired}
    assert not AuditEntry.objects.filter(action="purge_trash").exists()

    out = _purge()  # the scheduled purge: expired entries only, no number asked
    assert "Purging 1 trash entries (25 sessions, 50 messages) older than 30 days." in out
    assert list(TrashEntry.objects.values_list("pk", flat=True)) == [recent]
    _purge("--days", "0", "--sessions", "25")
    assert not TrashEntry.objects.exists()
