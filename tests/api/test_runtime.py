"""The runtime routes: problem details for every kind of bad input, idempotent appends checked in
the store, the core's refusals as problems, one audit entry per changing request."""

from __future__ import annotations

import json
import threading

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.ledger.models import AuditAction, AuditEntry
from tests.api.conftest import API, ApiClient
from tests.console import urlmap

PROBLEM = "application/problem+json"


def _messages(session_id: str) -> list[tuple]:
    return db.fetchall(
        "SELECT role, content FROM messages WHERE session_id = %s AND active = 1 ORDER BY id",
        [session_id],
    )


@pytest.fixture
def live(runtime) -> str:
    answer = runtime.post("runtime/sessions", {"source": "telegram", "session_key": "tg:42"})
    assert answer.status == 201
    return answer.body["session_id"]


def _append(client: ApiClient, session_id: str, content: str, key: str | None = None):
    headers = {"Idempotency-Key": key} if key else {}
    return client.post(
        f"runtime/sessions/{session_id}/messages",
        {"messages": [{"role": "user", "content": content}]},
        **headers,
    )


# --- problem details ---------------------------------------------------------------------------


def _assert_problem(answer, status: int, slug: str) -> None:
    assert answer.status == status, answer.body
    assert answer.headers["Content-Type"] == PROBLEM
    assert answer.body["type"] == f"https://sessions-admin.dev/problems/{slug}"
    assert answer.body["status"] == status
    assert answer.body["title"] and answer.body["detail"]


BAD_BODIES = {
    "malformed JSON": (
        b'{"messages": [{"role": "user", "content": "hi"}',
        400,
        "malformed-request",
    ),
    "not UTF-8": (b'{"messages": [{"role": "user", "content": "\xff"}]}', 400, "malformed-request"),
    # json.loads of bytes guesses these (attack 40): they were stored.
    "UTF-16 with a byte-order mark": (
        '{"messages": [{"role": "user", "content": "hi"}]}'.encode("utf-16"),
        400,
        "malformed-request",
    ),
    "UTF-32": (
        '{"messages": [{"role": "user", "content": "hi"}]}'.encode("utf-32-le"),
        400,
        "malformed-request",
    ),
    # The last value won (attack 40): a proxy or log reading the first saw another request.
    "a name given twice": (
        b'{"messages": [{"role": "user", "content": "a", "content": "b"}]}',
        400,
        "malformed-request",
    ),
    "UTF-8 with a byte-order mark": (
        b'\xef\xbb\xbf{"messages": [{"role": "user", "content": "hi"}]}',
        400,
        "malformed-request",
    ),
    "a list of the wrong type": (b'{"messages": "hello"}', 422, "invalid-input"),
    "a number for a role": (b'{"messages": [{"role": 7}]}', 422, "invalid-input"),
    "an unknown role": (
        b'{"messages": [{"role": "wizard", "content": "x"}]}',
        422,
        "invalid-input",
    ),
    "an unknown field": (
        b'{"messages": [{"role": "user", "contents": "x"}]}',
        422,
        "invalid-input",
    ),
    "no messages": (b'{"messages": []}', 422, "invalid-input"),
    "a NUL in the content": (
        b'{"messages": [{"role": "user", "content": "a\\u0000b"}]}',
        422,
        "invalid-input",
    ),
    "a lone surrogate in the content": (
        b'{"messages": [{"role": "user", "content": "a\\ud800b"}]}',
        422,
        "invalid-input",
    ),
    "a NUL in a key of a tool call": (
        b'{"messages": [{"role": "assistant", "tool_calls": [{"a\\u0000": 1}]}]}',
        422,
        "invalid-input",
    ),
    "a lone surrogate in a key": (
        b'{"messages": [{"role": "user", "\\udfff": 1}]}',
        422,
        "invalid-input",
    ),
    "a bare string": (b'"hello"', 422, "invalid-input"),
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_a_bad_body_is_a_problem_and_changes_nothing(case, runtime, live):
    raw, status, slug = BAD_BODIES[case]
    before = urlmap.state()
    answer = runtime.call("POST", f"runtime/sessions/{live}/messages", raw=raw)
    _assert_problem(answer, status, slug)
    if slug == "invalid-input":
        assert answer.body["errors"] and all("field" in e for e in answer.body["errors"])
    assert urlmap.state() == before


def test_the_field_of_unstorable_text_is_named(runtime, live):
    raw = (
        b'{"messages": [{"role": "user", "content": "ok"}, {"role": "user", "content": "\\u0000"}]}'
    )
    answer = runtime.call("POST", f"runtime/sessions/{live}/messages", raw=raw)
    assert answer.body["errors"] == [
        {"field": "messages[1].content", "message": "cannot contain a NUL character"}
    ]


def test_an_oversized_body_is_a_413_and_changes_nothing(runtime, live, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    before = urlmap.state()
    answer = _append(runtime, live, "x" * 20_000)
    _assert_problem(answer, 413, "too-large")
    assert answer.body["max_bytes"] == 10_000
    assert urlmap.state() == before


@pytest.mark.parametrize(
    "url",
    [
        "runtime/sessions/a%00b",
        "runtime/sessions/a%ED%A0%80b/messages",
        "runtime/live?session_key=a%00b",
        "runtime/sessions/x/messages?limit=0",
        "runtime/sessions/x/messages?after=-1",
        "runtime/sessions/x/messages?limit=many",
    ],
)
def test_bad_path_and_query_values_are_problems(runtime, url):
    answer = runtime.get(url)
    assert answer.status in (404, 422), answer.body
    assert answer.headers["Content-Type"] == PROBLEM


def test_a_nul_in_a_path_is_refused_before_the_database(runtime):
    answer = runtime.get("runtime/sessions/a%00b")
    _assert_problem(answer, 422, "invalid-input")
    assert answer.body["errors"][0]["field"] == "session_id"


def test_an_unknown_session_is_a_404(runtime):
    _assert_problem(runtime.get("runtime/sessions/no-such-session"), 404, "not-found")
    _assert_problem(_append(runtime, "no-such-session", "hi"), 404, "not-found")


def test_a_write_to_an_ended_session_names_the_live_one(runtime, live):
    rotated = runtime.post(f"runtime/sessions/{live}/rotate", {"summary": "so far"})
    assert rotated.status == 201
    tip = rotated.body["new_session_id"]
    before = urlmap.state()
    for answer in (
        _append(runtime, live, "late"),
        runtime.post(f"runtime/sessions/{live}/usage", {"input_tokens": 5}),
        runtime.post(f"runtime/sessions/{live}/turns", {"response_id": "r-late"}),
    ):
        _assert_problem(answer, 409, "session-ended")
        assert answer.body["live_session_id"] == tip
        assert answer.body["session_id"] == live
    assert urlmap.state()["messages"] == before["messages"]
    assert runtime.get(f"runtime/sessions/{live}").body["live_session_id"] == tip


# --- idempotency -------------------------------------------------------------------------------


def test_a_retried_append_with_its_key_is_stored_once(runtime, live):
    first = _append(runtime, live, "hello", key="k-1")
    assert first.status == 201 and first.headers["Idempotent-Replayed"] == "false"
    for _ in range(3):
        again = _append(runtime, live, "hello", key="k-1")
        assert again.status == 201 and again.body == first.body
        assert again.headers["Idempotent-Replayed"] == "true"
    assert _messages(live) == [("user", "hello")]
    assert core.active_transcript(session_id=live)[0]["id"] == first.body["message_ids"][0]
    # A new key is a new request.
    assert _append(runtime, live, "hello", key="k-2").status == 201
    assert _messages(live) == [("user", "hello"), ("user", "hello")]


def test_a_key_reused_for_another_body_is_refused_and_stores_nothing(runtime, live):
    _append(runtime, live, "hello", key="k-1")
    answer = _append(runtime, live, "something else", key="k-1")
    _assert_problem(answer, 422, "idempotency-key-reused")
    assert _messages(live) == [("user", "hello")]


def test_keys_belong_to_their_token(runtime, live, make_token):
    other = ApiClient(make_token("runtime", name="runtime-other"))
    _append(runtime, live, "hello", key="shared-key")
    assert _append(other, live, "hello", key="shared-key").headers["Idempotent-Replayed"] == "false"
    assert len(_messages(live)) == 2


def test_a_failed_append_records_no_key(runtime, live):
    """The key commits with the messages: a refused append leaves it free for the retry."""
    runtime.post(f"runtime/sessions/{live}/rotate", {})
    assert _append(runtime, live, "late", key="k-late").status == 409
    assert db.fetchall("SELECT * FROM sessions_admin_idempotency") == []


def test_concurrent_copies_of_one_request_store_it_once(runtime, live):
    answers = []

    def send() -> None:
        answers.append(_append(ApiClient(runtime.secret), live, "raced", key="k-race"))

    threads = [threading.Thread(target=send) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stored = [a for a in answers if a.status == 201]
    assert len(stored) + sum(a.status == 503 for a in answers) == 6, [a.body for a in answers]
    assert {json.dumps(a.body, sort_keys=True) for a in stored} == {
        json.dumps(stored[0].body, sort_keys=True)
    }
    assert sum(a.headers["Idempotent-Replayed"] == "false" for a in stored) == 1
    assert _messages(live) == [("user", "raced")]


# --- the lifecycle, audited --------------------------------------------------------------------


def test_each_changing_call_writes_one_audit_entry_naming_the_token(runtime, live):
    AuditEntry.objects.all().delete()
    _append(runtime, live, "hi", key="a")
    _append(runtime, live, "hi", key="a")
    runtime.post(f"runtime/sessions/{live}/usage", {"input_tokens": 5, "output_tokens": 7})
    runtime.post(f"runtime/sessions/{live}/undo")
    runtime.post(f"runtime/sessions/{live}/redo")
    runtime.get(f"runtime/sessions/{live}/messages")
    entries = list(AuditEntry.objects.order_by("pk").values_list("actor_name", "action", "outcome"))
    assert entries == [
        ("api:runtime-main", AuditAction.APPEND, "ok"),
        ("api:runtime-main", AuditAction.APPEND, "ok"),
        ("api:runtime-main", AuditAction.USAGE, "ok"),
        ("api:runtime-main", AuditAction.UNDO, "ok"),
        ("api:runtime-main", AuditAction.REDO, "ok"),
    ]
    usage = db.fetchone("SELECT input_tokens, output_tokens FROM sessions WHERE id = %s", [live])
    assert tuple(usage) == (5, 7)


def test_an_appends_audit_entry_names_exactly_the_messages_it_stored(runtime, live):
    """The audit log reads ``message_ids`` as the messages an append stored: a keyed append of
    two named only the first, an unkeyed append of one was read as two (first and last)."""
    from sessions_admin.ledger.audit_log import NoLinks, readable

    AuditEntry.objects.all().delete()
    two = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    keyed = runtime.post(f"runtime/sessions/{live}/messages", two, **{"Idempotency-Key": "k-2"})
    replay = runtime.post(f"runtime/sessions/{live}/messages", two, **{"Idempotency-Key": "k-2"})
    single = runtime.post(
        f"runtime/sessions/{live}/messages", {"messages": [{"role": "user", "content": "c"}]}
    )
    assert keyed.status == replay.status == single.status == 201
    entries = list(AuditEntry.objects.order_by("pk"))
    assert [e.after["message_ids"] for e in entries] == [
        keyed.body["message_ids"],
        keyed.body["message_ids"],
        single.body["message_ids"],
    ]
    assert [e.after.get("replayed") for e in entries] == [False, True, None]
    assert len(keyed.body["message_ids"]) == 2 and len(single.body["message_ids"]) == 1
    said = [readable(e, NoLinks()).text for e in entries]
    assert "(2 messages)" in said[0] and "(1 message)" in said[2], said


def test_a_lifecycle_over_the_routes(runtime, live):
    key = "tg:42"
    _append(runtime, live, "one")
    runtime.post(
        f"runtime/sessions/{live}/messages",
        {
            "messages": [
                {"role": "assistant", "content": "two"},
                {"role": "user", "content": "three"},
            ]
        },
    )
    page = runtime.get(f"runtime/sessions/{live}/messages?limit=2")
    assert [m["content"] for m in page.body["messages"]] == ["one", "two"]
    rest = runtime.get(f"runtime/sessions/{live}/messages?after={page.body['next_after']}&limit=2")
    assert [m["content"] for m in rest.body["messages"]] == ["three"]
    assert rest.body["next_after"] is None

    nowhere = runtime.post(f"runtime/sessions/{live}/branch", {"at_message_id": 10**9})
    assert nowhere.status == 422
    assert [e["field"] for e in nowhere.body["errors"]] == ["at_message_id"]
    branch = runtime.post(f"runtime/sessions/{live}/branch", {})
    assert branch.status == 201 and branch.body["copied_messages"] == 3
    assert (
        runtime.get(f"runtime/live?session_key={key}").body["session_id"]
        == branch.body["new_session_id"]
    )

    resumed = runtime.post("runtime/resume", {"ref": live})
    assert resumed.status == 200 and resumed.body["session_id"] == live
    reset = runtime.post("runtime/reset", {"session_key": key, "summary": "earlier: one two three"})
    assert reset.body["ended_session_id"] == live
    fresh = reset.body["new_session_id"]
    assert runtime.get(f"runtime/live?session_key={key}").body["session_id"] == fresh

    stored = runtime.get(f"runtime/sessions/{fresh}/messages").body["messages"]
    history = [{"role": m["role"], "content": m["content"]} for m in stored]
    saved = runtime.put(
        f"runtime/sessions/{fresh}/transcript",
        {
            "messages": [
                *history,
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "y"},
            ]
        },
    )
    truncated = runtime.put(f"runtime/sessions/{fresh}/transcript", {"messages": []})
    _assert_problem(truncated, 409, "truncation-refused")
    assert saved.status == 200, saved.body
    assert (saved.body["kept"], saved.body["appended"]) == (len(history), 2)

    target = runtime.post(
        "runtime/conversations/resolve", {"conversation": "slug-1", "source": "api_server"}
    )
    assert target.status == 200 and target.body["created"] is True
    turn = runtime.post(
        f"runtime/sessions/{target.body['session_id']}/turns",
        {"response_id": "resp-1", "conversation": "slug-1"},
    )
    assert turn.status == 201
    again = runtime.post(
        "runtime/conversations/resolve", {"conversation": "slug-1", "source": "api_server"}
    )
    assert again.body["session_id"] == target.body["session_id"] and again.body["created"] is False
    assert runtime.get(f"{API}/runtime/sessions/{fresh}").body["live_session_id"] == fresh


def test_keys_older_than_a_day_are_forgotten(runtime, live):
    from sessions_admin.core import idempotency

    _append(runtime, live, "old", key="k-old")
    _append(runtime, live, "new", key="k-new")
    db.execute(
        "UPDATE sessions_admin_idempotency SET created_at = created_at - %s WHERE key = 'k-old'",
        [idempotency.KEEP_SECONDS + 60],
    )
    assert idempotency.forget_idempotency_keys(older_than_seconds=idempotency.KEEP_SECONDS) == 1
    assert db.fetchall("SELECT key FROM sessions_admin_idempotency") == [("k-new",)]


def test_an_unknown_route_and_a_wrong_method_are_problems(runtime, live):
    _assert_problem(runtime.get("runtime/no-such-route"), 404, "not-found")
    _assert_problem(runtime.get("/api/v1/"), 404, "not-found")
    wrong = runtime.call("DELETE", f"runtime/sessions/{live}/messages")
    _assert_problem(wrong, 405, "method-not-allowed")
    assert set(wrong.headers["Allow"].replace(" ", "").split(",")) == {"GET", "POST"}


def test_a_refused_changing_call_is_audited_once(runtime, live):
    AuditEntry.objects.all().delete()
    runtime.call("POST", f"runtime/sessions/{live}/messages", raw=b'{"messages": "x"}')
    runtime.post(f"runtime/sessions/{live}/rotate", {})
    _append(runtime, live, "late")  # refused by the core: its own entry, failed
    runtime.get("runtime/sessions/x%00y")  # a read: not audited
    entries = list(
        AuditEntry.objects.order_by("pk").values_list("actor_name", "action", "outcome", "detail")
    )
    assert [e[:3] for e in entries] == [
        ("api:runtime-main", AuditAction.APPEND, AuditEntry.REFUSED),
        ("api:runtime-main", AuditAction.ROTATE_FOR_COMPRESSION, AuditEntry.OK),
        ("api:runtime-main", AuditAction.APPEND, AuditEntry.FAILED),
    ]
    assert entries[0][3].startswith("422 invalid-input")
    assert "has ended" in entries[2][3]
