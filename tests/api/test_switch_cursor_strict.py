"""One cursor syntax and one bound for both doors of the switch log (``api/switches.py``).

Attack round 42 (r5): ``GET /switches?after=1_0`` was read as 10 and ``after=+3`` as 3 (what
``int()`` takes), which the stream's ``Last-Event-ID`` refused; and a cursor past the end of
the log was taken as it was, so the subscriber silently missed every switch until the log
reached it. Now both doors read a cursor with ``parse_cursor`` (1 to 18 ASCII digits, else
the same 422) and refuse one past the newest seq ever issued, naming it.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from django.core.management import call_command

from sessions_admin.api.switches import CURSOR_RULE
from sessions_admin.core import db
from tests.api.conftest import ApiClient
from tests.api.test_switches import delivered_by_the_core, end_of_log, read_stream, some_switches

pytestmark = pytest.mark.usefixtures("no_worker")

MALFORMED = ["1_0", "+3", " 3", "3 ", "3.0", "-1", "\uff11", "\u0663", "0x3", "", "1" * 19]


def the_three_doors(client: ApiClient, cursor: str) -> dict[str, object]:
    """The answers to one cursor: long poll ``after``, stream ``after``, stream
    ``Last-Event-ID`` (each door bounded: a stream that is accepted ends at once)."""
    return {
        "after": client.get(f"switches?after={quote(cursor, safe='')}"),
        "stream after": client.get(f"switches/stream?seconds=0&after={quote(cursor, safe='')}"),
        "Last-Event-ID": client.get("switches/stream?seconds=0", **{"Last-Event-ID": cursor}),
    }


@pytest.fixture
def client(make_token) -> ApiClient:
    some_switches()  # a log with a few switches, so that 1_0 (10) or 3 would be a cursor in it
    return ApiClient(make_token("runtime"))


@pytest.mark.parametrize("bad", MALFORMED)
def test_a_cursor_that_is_not_plain_ascii_digits_is_refused_alike_by_both_doors(client, bad):
    answers = the_three_doors(client, bad)
    for door, answer in answers.items():
        assert answer.status == 422, (door, answer.body)
        assert answer.headers["Content-Type"].startswith("application/problem+json"), door
        assert answer.body["type"].endswith("/invalid-input"), door
        assert answer.body["detail"] == CURSOR_RULE, door
        field = "Last-Event-ID" if door == "Last-Event-ID" else "after"
        assert answer.body["errors"] == [{"field": field, "message": "not a sequence number"}]


def test_a_malformed_after_is_refused_even_when_last_event_id_wins(client):
    answer = client.get("switches/stream?seconds=0&after=1_0", **{"Last-Event-ID": "1"})
    assert answer.status == 422 and answer.body["errors"][0]["field"] == "after"


BEYOND = [
    pytest.param(lambda newest: newest + 1, id="newest+1"),
    pytest.param(lambda newest: newest + 7, id="newest+7"),
    pytest.param(lambda newest: 999_999, id="999999"),
    pytest.param(lambda newest: 10**18 - 1, id="18-nines"),
]


@pytest.mark.parametrize("beyond", BEYOND)
def test_a_cursor_past_the_newest_seq_is_refused_naming_it(client, beyond):
    newest = end_of_log()
    assert 4 <= newest < 999_999
    cursor = str(beyond(newest))
    for door, answer in the_three_doors(client, cursor).items():
        assert answer.status == 422, (door, answer.body)
        assert answer.body["type"].endswith("/invalid-input"), door
        assert f"the newest seq is {newest}." in answer.body["detail"], door
        assert answer.body["newest_seq"] == newest, door
        field = "Last-Event-ID" if door == "Last-Event-ID" else "after"
        assert answer.body["errors"] == [
            {"field": field, "message": f"past the newest seq, {newest}"}
        ]


def test_a_cursor_at_the_newest_seq_is_valid_and_later_switches_are_delivered(client):
    newest = end_of_log()
    for door, answer in the_three_doors(client, str(newest)).items():
        assert answer.status == 200, (door, answer.body)
    assert client.get(f"switches?after={newest}").body == {"events": [], "next_after": newest}
    # Leading zeros are still ASCII digits: the same cursor.
    assert client.get(f"switches?after=000{newest}").body["next_after"] == newest

    some_switches(key="tg:later", user="u-later")
    later = delivered_by_the_core(newest)
    assert later and all(e["seq"] > newest for e in later)
    assert client.get(f"switches?after={newest}").body == {
        "events": later,
        "next_after": later[-1]["seq"],
    }
    streamed = read_stream(client, "?seconds=0", **{"Last-Event-ID": str(newest)})
    assert [json.loads(b["data"]) for b in streamed if b.get("event") == "switch"] == later


def test_the_cursor_zero_is_valid_on_an_empty_log(make_token):
    # An empty log: 0 is its newest seq, so the cursor 0 (and only 0) is valid.
    db.execute("DELETE FROM sessions_admin_switch_events")
    client = ApiClient(make_token("runtime"))
    for door, answer in the_three_doors(client, "0").items():
        assert answer.status == 200, (door, answer.body)
    assert client.get("switches?after=1").body["newest_seq"] == 0


def test_a_cursor_stays_valid_after_an_erasure_tombstones_the_newest_events(client):
    some_switches(key="tg:erased-newest", user="u-erased-newest")
    newest = end_of_log()
    call_command("erase_subject", user="u-erased-newest", reference="T-42", yes=True, stdout=None)
    # The erasure leaves tombstones that keep their seq: the high-water mark does not move.
    assert end_of_log() == newest
    tomb = db.fetchone(
        "SELECT new_session_id FROM sessions_admin_switch_events WHERE seq = %s", [newest]
    )
    assert tomb == ("",)
    for door, answer in the_three_doors(client, str(newest)).items():
        assert answer.status == 200, (door, answer.body)
    some_switches(key="tg:after-erasure", user="u-after-erasure")
    later = delivered_by_the_core(newest)
    assert later and client.get(f"switches?after={newest}").body["events"] == later


def test_a_cursor_past_a_deleted_newest_row_is_refused_as_its_seq_will_be_issued_again(client):
    """The log has no counter beside its rows: ``record_switch`` numbers ``MAX(seq) + 1``.
    Nothing in the project deletes a row of it (an erasure tombstones), but were the newest
    row removed (a store restored from an older backup), its seq would be issued again: a
    cursor at it would skip that next switch, so it is refused, naming the seq to resume
    from, after which the next switch is delivered."""
    deleted = end_of_log()
    db.execute("DELETE FROM sessions_admin_switch_events WHERE seq = %s", [deleted])
    newest = end_of_log()
    assert newest == deleted - 1
    for door, answer in the_three_doors(client, str(deleted)).items():
        assert answer.status == 422, (door, answer.body)
        assert answer.body["newest_seq"] == newest, door
    # Resumed from the seq the refusal named, the client misses nothing.
    assert client.get(f"switches?after={newest}").status == 200
    some_switches(key="tg:after-delete", user="u-after-delete")
    later = delivered_by_the_core(newest)
    assert later[0]["seq"] == deleted  # the deleted row's seq, issued again
    assert client.get(f"switches?after={newest}").body["events"] == later
