"""Counts and costs a runtime may record are bounded, per call and as the session's totals
(``core.rows.COUNT_MAX``, ``COST_MAX_USD``), and every reader answers a total another writer
left out of range (an infinity, a REAL past 2**63) as null: valid JSON, never a 500."""

from __future__ import annotations

import json
import math

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.rows import COST_MAX_USD, COUNT_MAX
from tests.api.conftest import ApiClient

PROBLEM = "application/problem+json"
TOTALS = "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens"


@pytest.fixture
def live(runtime) -> str:
    answer = runtime.post("runtime/sessions", {"source": "telegram", "session_key": "tg:7"})
    assert answer.status == 201
    return answer.body["session_id"]


def _store(session_id: str) -> tuple:
    return (
        db.fetchall(
            f"SELECT {TOTALS}, estimated_cost_usd FROM sessions WHERE id = %s", [session_id]
        ),
        db.fetchall("SELECT * FROM messages WHERE session_id = %s ORDER BY id", [session_id]),
    )


def _refused(answer, field: str) -> None:
    assert answer.status == 422, answer.body
    assert answer.headers["Content-Type"] == PROBLEM
    assert field in [e["field"].split(".")[-1] for e in answer.body["errors"]], answer.body


def _strict_json(content: bytes):
    def reject(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(content, parse_constant=reject)


@pytest.mark.parametrize(
    "raw, field",
    [
        (
            b'{"messages":[{"role":"user","content":"x","token_count":9223372036854775808}]}',
            "token_count",
        ),
        (
            b'{"messages":[{"role":"user","content":"x","token_count":9007199254740992}]}',
            "token_count",
        ),
    ],
)
def test_a_token_count_out_of_range_is_a_422_naming_it(runtime, live, raw, field):
    before = _store(live)
    answer = runtime.call("POST", f"runtime/sessions/{live}/messages", raw=raw)
    _refused(answer, field)
    assert _store(live) == before


@pytest.mark.parametrize(
    "body, field",
    [
        ({"input_tokens": 2**63}, "input_tokens"),
        ({"output_tokens": COUNT_MAX + 1}, "output_tokens"),
        ({"reasoning_tokens": COUNT_MAX + 1}, "reasoning_tokens"),
        ({"cost_usd": 1e308}, "cost_usd"),
        ({"cost_usd": COST_MAX_USD * 2}, "cost_usd"),
    ],
)
def test_a_usage_figure_out_of_range_is_a_422_naming_it(runtime, live, body, field):
    before = _store(live)
    _refused(runtime.post(f"runtime/sessions/{live}/usage", body), field)
    assert _store(live) == before


@pytest.mark.parametrize(
    "body, field",
    [
        ({"input_tokens": COUNT_MAX, "output_tokens": 1}, "input_tokens"),
        ({"cache_write_tokens": COUNT_MAX}, "cache_write_tokens"),
        ({"cost_usd": COST_MAX_USD, "input_tokens": 1}, "cost_usd"),
    ],
)
def test_usage_that_would_take_a_total_past_its_bound_is_refused(runtime, live, body, field):
    first = runtime.post(f"runtime/sessions/{live}/usage", body)
    assert first.status == 200, first.body
    before = _store(live)
    _refused(runtime.post(f"runtime/sessions/{live}/usage", body), field)
    assert _store(live) == before


def test_the_core_refuses_the_same_for_a_python_runtime(live):
    core.add_usage(session_id=live, input_tokens=COUNT_MAX - 5, cost_usd=COST_MAX_USD - 1)
    before = _store(live)
    with pytest.raises(InvalidInput) as refused:
        core.add_usage(session_id=live, input_tokens=6)
    assert refused.value.field == "input_tokens"
    with pytest.raises(InvalidInput) as refused:
        core.add_usage(session_id=live, output_tokens=1, cost_usd=2.0)
    assert refused.value.field == "cost_usd"
    with pytest.raises(InvalidInput) as refused:
        core.append_message(session_id=live, role="user", content="x", token_count=COUNT_MAX + 1)
    assert refused.value.field == "token_count"
    assert _store(live) == before
    # Within the bounds, the totals add up to the bound itself.
    core.add_usage(session_id=live, input_tokens=5, cost_usd=1.0)
    totals, _messages = _store(live)
    assert totals[0][0] == COUNT_MAX and totals[0][-1] == COST_MAX_USD


def test_usage_on_a_total_another_writer_left_infinite_is_refused(runtime, live):
    db.execute("UPDATE sessions SET estimated_cost_usd = %s WHERE id = %s", [math.inf, live])
    before = _store(live)
    _refused(runtime.post(f"runtime/sessions/{live}/usage", {"cost_usd": 0.5}), "cost_usd")
    assert _store(live) == before
    # Adding nothing to the broken total leaves it alone, and the counts are still recorded.
    assert runtime.post(f"runtime/sessions/{live}/usage", {"input_tokens": 3}).status == 200


# --- reading what another writer stored ---------------------------------------------------------


def _overflowed_sessions(runtime) -> dict[str, str]:
    """Sessions whose totals a plain SQL writer took out of range (as Hermes' own += can)."""
    made = {}
    for key in ("inf", "huge"):
        answer = runtime.post(
            "runtime/sessions", {"source": "telegram", "session_key": f"tg:{key}"}
        )
        made[key] = answer.body["session_id"]
        core.append_message(session_id=made[key], role="user", content=f"about {key}")
    db.execute("UPDATE sessions SET estimated_cost_usd = %s WHERE id = %s", [math.inf, made["inf"]])
    if db.vendor() == "sqlite":  # a BIGINT of PostgreSQL cannot hold it
        db.execute(
            "UPDATE sessions SET input_tokens = %s, cache_read_tokens = %s WHERE id = %s",
            [1.8446744073709552e19, math.inf, made["huge"]],
        )
        (kind,) = db.fetchone(
            "SELECT typeof(input_tokens) FROM sessions WHERE id = %s", [made["huge"]]
        )
        assert kind == "real"
    else:
        db.execute(
            "UPDATE sessions SET estimated_cost_usd = %s WHERE id = %s",
            [-math.inf, made["huge"]],
        )
    return made


def test_totals_out_of_range_are_read_as_null(runtime, make_token):
    made = _overflowed_sessions(runtime)
    viewer = ApiClient(make_token("viewer"))
    for path in ("sessions", "sessions?sort=cost", "sessions?sort=tokens&per=200"):
        answer = viewer.get(path)
        assert answer.status == 200, answer.body
        listed = {row["id"]: row for row in _strict_json(answer.headers.content)["sessions"]}
        assert listed[made["inf"]]["cost"] is None
        if db.vendor() == "sqlite":
            assert listed[made["huge"]]["tokens"] is None
        else:
            assert listed[made["huge"]]["cost"] is None
    detail = viewer.get(f"sessions/{made['inf']}")
    assert detail.status == 200
    assert _strict_json(detail.headers.content)["estimated_cost_usd"] is None
    detail = viewer.get(f"sessions/{made['huge']}")
    assert detail.status == 200, detail.body
    read = _strict_json(detail.headers.content)
    if db.vendor() == "sqlite":
        assert read["input_tokens"] is None and read["cache_read_tokens"] is None
    assert read["output_tokens"] == 0


@pytest.mark.parametrize("direction", ["desc", "asc"])
def test_the_cost_order_pages_past_infinite_costs(runtime, make_token, direction):
    # More infinite costs than a page holds: a page ends on one, so its cursor carries it.
    made = [
        runtime.post("runtime/sessions", {"source": "telegram", "session_key": f"tg:{n}"})
        for n in range(27)
    ]
    ids = sorted(answer.body["session_id"] for answer in made)
    db.execute("UPDATE sessions SET estimated_cost_usd = %s WHERE id <> %s", [math.inf, ids[0]])
    viewer = ApiClient(make_token("viewer"))
    seen, after = [], ""
    for _page in range(5):
        answer = viewer.get(f"sessions?sort=cost&dir={direction}&per=25{after}")
        assert answer.status == 200, answer.body
        body = _strict_json(answer.headers.content)
        seen += [row["id"] for row in body["sessions"]]
        if body["next_cursor"] is None:
            break
        after = f"&after={body['next_cursor']}"
    assert sorted(seen) == ids


def test_the_console_pages_show_totals_out_of_range(runtime, admin_client):
    made = _overflowed_sessions(runtime)
    for n in range(26):  # a full page of infinite costs: the page's cursor carries one
        runtime.post("runtime/sessions", {"source": "telegram", "session_key": f"tg:{n}"})
    db.execute(
        "UPDATE sessions SET estimated_cost_usd = %s WHERE id <> %s", [math.inf, made["huge"]]
    )
    for url in (
        "/sessions/?sort=cost&per=25",
        "/sessions/?sort=cost&dir=asc&per=25",
        "/sessions/?sort=tokens&per=25",
        "/sessions/?sort=tokens&dir=asc&per=25",
    ):
        assert admin_client.get(url).status_code == 200, url
    for sid in made.values():
        assert admin_client.get(f"/sessions/{sid}/").status_code == 200
