"""The operator's read routes: the session list and search with the console's filters and keyset
cursors, a session with its lineage, its transcript in pages, fork groups, the audit log and its
CSV. Each answer is checked against what the store (or the ledger) holds, and a read changes
nothing."""

from __future__ import annotations

import csv
import io
from urllib.parse import urlencode

import pytest
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db, forks
from sessions_admin.ledger import actions
from sessions_admin.ledger.audit_log import EXPORT_COLUMNS
from sessions_admin.ledger.models import AuditEntry
from tests import helpers
from tests.api.conftest import ApiClient
from tests.builders import cold_start_fork, empty_slug_history, fresh_cache  # noqa: F401
from tests.console import urlmap

pytestmark = pytest.mark.usefixtures("no_worker")
PROBLEM = "application/problem+json"


@pytest.fixture
def viewer(make_token) -> ApiClient:
    return ApiClient(make_token("viewer", name="reader"))


def _invalid_fields(answer) -> set[str]:
    assert answer.status == 422, answer.body
    assert answer.headers["Content-Type"] == PROBLEM
    assert answer.body["type"].endswith("/invalid-input")
    return {error["field"] for error in answer.body["errors"]}


# --- the list ----------------------------------------------------------------------------------


def test_the_list_pages_through_exactly_the_filtered_sessions(viewer):
    for n in range(60):
        source = "telegram" if n % 2 else "cli"
        core.create_session(source=source, started_at=1000.0 + n)
    expected = [
        r[0]
        for r in db.fetchall(
            "SELECT id FROM sessions WHERE source = 'telegram' ORDER BY started_at DESC, id DESC"
        )
    ]
    seen: list[str] = []
    after = ""
    pages = 0
    before = urlmap.state()
    while True:
        answer = viewer.get(f"sessions?source=telegram&per=25&after={after}")
        assert answer.status == 200, answer.body
        assert answer.body["count"] == 30 and not answer.body["count_capped"]
        seen += [row["id"] for row in answer.body["sessions"]]
        assert {row["source"] for row in answer.body["sessions"]} == {"telegram"}
        pages += 1
        after = answer.body["next_cursor"]
        if after is None:
            break
    assert seen == expected and pages == 2
    # Oldest first, by the console's own sort parameters.
    answer = viewer.get("sessions?source=telegram&dir=asc&per=100")
    assert [row["id"] for row in answer.body["sessions"]] == expected[::-1]
    assert urlmap.state() == before


def test_a_filter_the_console_would_ignore_is_a_422_naming_it(viewer, seeded):
    before = urlmap.state()
    answer = viewer.get("sessions?per=7&from=yesterday&sort=size&scope=some&after=not-a-cursor")
    assert _invalid_fields(answer) == {"per", "from", "sort", "scope", "after"}
    assert "Page size" in answer.body["detail"]
    # "³" is a digit to str.isdigit but not to int(): a 422, not the 500 the fuzzer found.
    assert _invalid_fields(viewer.get("sessions?per=%C2%B3")) == {"per"}
    # The API lists nothing: it never says what the page does instead ("it is ignored").
    for said in (answer.body["detail"], *(e["message"] for e in answer.body["errors"])):
        assert "ignored" not in said and "showing" not in said, said
    assert _invalid_fields(viewer.get("sessions?q=quokka")) == {"q"}
    assert _invalid_fields(viewer.get("sessions?from=2026-02-01&to=2026-01-01")) == {"from"}
    assert urlmap.state() == before


def test_a_cursor_of_another_sort_is_refused(viewer):
    for n in range(30):
        core.create_session(source="cli", started_at=1000.0 + n)
    cursor = viewer.get("sessions?per=25").body["next_cursor"]
    assert cursor
    assert _invalid_fields(viewer.get(f"sessions?per=25&sort=messages&after={cursor}")) == {"after"}
    assert viewer.get(f"sessions?per=25&after={cursor}").status == 200


# --- search ------------------------------------------------------------------------------------


def test_search_finds_the_sessions_holding_the_words(viewer, seeded):
    answer = viewer.get(f"sessions/search?q={urlmap.SECRET_CONTENT}")
    assert answer.status == 200, answer.body
    holding = {
        r[0]
        for r in db.fetchall(
            "SELECT DISTINCT session_id FROM messages WHERE content LIKE %s",
            [f"%{urlmap.SECRET_CONTENT}%"],
        )
    }
    assert {group["session_id"] for group in answer.body["sessions"]} == holding
    assert {seeded.root, seeded.tip} <= holding
    for group in answer.body["sessions"]:
        for hit in group["hits"]:
            content = db.fetchone("SELECT content FROM messages WHERE id = %s", [hit["message_id"]])
            assert urlmap.SECRET_CONTENT in content[0]
            assert "\ue000" in hit["snippet"]
    assert _invalid_fields(viewer.get("sessions/search")) == {"q"}
    assert _invalid_fields(viewer.get("sessions/search?q=-only")) == {"q"}
    assert _invalid_fields(viewer.get("sessions/search?q=x&per=3")) == {"per"}


# --- a session, its lineage, its transcript ----------------------------------------------------


def test_a_session_comes_with_its_lineage_tree(viewer, seeded):
    answer = viewer.get(f"sessions/{seeded.tip}")
    assert answer.status == 200, answer.body
    body = answer.body
    row = db.fetchone(
        "SELECT source, parent_session_id, message_count, ended_at FROM sessions WHERE id = %s",
        [seeded.tip],
    )
    assert (body["source"], body["parent_session_id"], body["message_count"]) == row[:3]
    assert "model_config" in body and "model_config_" not in body
    assert body["compression_chain"] == [seeded.root, seeded.tip]
    nodes = {node["session_id"]: node for node in body["lineage"]}
    assert body["lineage"][0]["session_id"] == seeded.root
    assert nodes[seeded.root]["lineage_parent_id"] is None
    assert nodes[seeded.tip]["lineage_parent_id"] == seeded.root
    assert nodes[seeded.tip]["edge_kind"] == "compression"
    assert nodes[seeded.branch]["edge_kind"] == "branch"
    # Every session linked to the root by parent links is in the tree, and nothing else.
    linked = {seeded.root}
    for _ in range(5):
        linked |= {
            r[0]
            for r in db.fetchall("SELECT id, parent_session_id FROM sessions")
            if r[1] in linked
        }
    assert set(nodes) == linked
    root = viewer.get(f"sessions/{seeded.root}").body
    assert root["ended_at"] is not None and root["continues_in"] in linked
    assert helpers.session(root["continues_in"])["ended_at"] is None
    answer = viewer.get("sessions/no-such-session")
    assert answer.status == 404 and answer.body["type"].endswith("/not-found")


def test_the_transcript_pages_through_every_segment_in_order(viewer, seeded):
    chain = [seeded.root, seeded.tip]
    expected = [
        r[0]
        for sid in chain
        for r in db.fetchall("SELECT id FROM messages WHERE session_id = %s ORDER BY id", [sid])
    ]
    seen: list[int] = []
    handoffs = []
    after = "0:0"
    while after is not None:
        answer = viewer.get(f"sessions/{seeded.tip}/transcript?limit=1&after={after}")
        assert answer.status == 200, answer.body
        for item in answer.body["items"]:
            if item["kind"] == "handoff":
                handoffs.append((item["session_id"], item["to_session_id"]))
            else:
                assert item["session_id"] == chain[item["segment"]]
                seen.append(item["id"])
        after = answer.body["next_after"]
    assert seen == expected
    assert handoffs == [(seeded.root, seeded.tip)]
    # Without a position it starts at the session's own segment.
    own = viewer.get(f"sessions/{seeded.tip}/transcript").body["items"]
    assert own[0]["session_id"] == seeded.tip
    for bad in ("5:0", "x", "0:-1"):
        answer = viewer.get(f"sessions/{seeded.tip}/transcript?after={bad}")
        assert _invalid_fields(answer) == {"after"}


def test_the_transcript_hides_undone_messages_when_asked(viewer, runtime):
    session_id = core.create_session(source="cli").session_id
    core.append_messages(
        session_id=session_id,
        messages=[{"role": "user", "content": "kept"}, {"role": "assistant", "content": "a"}],
    )
    core.append_messages(
        session_id=session_id,
        messages=[{"role": "user", "content": "undone"}, {"role": "assistant", "content": "b"}],
    )
    core.undo_last_turn(session_id=session_id)
    shown = viewer.get(f"sessions/{session_id}/transcript?inactive=hide").body["items"]
    active = db.fetchall(
        "SELECT id FROM messages WHERE session_id = %s AND active = 1 ORDER BY id", [session_id]
    )
    assert [item["id"] for item in shown] == [r[0] for r in active]
    every = viewer.get(f"sessions/{session_id}/transcript").body["items"]
    assert len(every) == 4 and [i["active"] for i in every] == [True, True, False, False]


# --- fork groups -------------------------------------------------------------------------------


def test_fork_groups_are_the_cores_with_their_sessions(viewer):
    first = cold_start_fork("slug-one", forks=3)
    second = cold_start_fork("slug-two", forks=2)
    db.execute("UPDATE sessions SET user_id = 'u2' WHERE id = %s", [second[1]])
    alone = core.create_session(source="cli").session_id
    answer = viewer.get("forks")
    assert answer.status == 200, answer.body
    found = {group.group_id: group for group in forks.find_fork_groups()}
    assert {g["group_id"] for g in answer.body["groups"]} == set(found)
    assert answer.body["total"] == len(found) and answer.body["pages"] == 1
    for group in answer.body["groups"]:
        assert tuple(group["session_ids"]) == found[group["group_id"]].session_ids
        for member in group["sessions"]:
            row = helpers.session(member["id"])
            assert member["known"] and member["message_count"] == row["message_count"]
            assert member["user_id"] == row["user_id"]
    by_slug = {g["key"]: g for g in answer.body["groups"] if g["kind"] == "conversation"}
    assert set(by_slug["slug-one"]["session_ids"]) == set(first)
    assert by_slug["slug-one"]["differences"] == []
    assert by_slug["slug-two"]["differences"] == [
        {"column": "user_id", "label": "user", "values": ["u1", "u2"]}
    ]
    mine = viewer.get(f"sessions/{second[0]}/forks").body
    assert [g["group_id"] for g in mine["groups"]] == [
        g.group_id for g in forks.fork_groups_of_session(session_id=second[0])
    ]
    assert mine["groups"] and set(mine["groups"][0]["session_ids"]) == set(second)
    assert viewer.get(f"sessions/{alone}/forks").body["groups"] == []
    assert _invalid_fields(viewer.get("forks?page=2")) == {"page"}
    assert viewer.get("sessions/nobody/forks").status == 404


# --- the audit log -----------------------------------------------------------------------------


@pytest.fixture
def logged():
    """Entries of two actions, outcomes and actors; one whose detail is a spreadsheet formula."""
    sid = core.create_session(source="cli").session_id
    for n in range(5):
        actions.record(
            actor="api:bot" if n % 2 else "operator-ann",
            action="merge" if n < 3 else "undo",
            session_ids=[sid] if n != 4 else [],
            before={"n": n},
            after={"message_count": n},
            outcome=AuditEntry.OK if n != 2 else AuditEntry.FAILED,
            detail='=HYPERLINK("http://evil")' if n == 1 else f"entry {n}",
        )
    return sid


def test_the_audit_log_pages_through_what_the_console_filters_match(viewer, logged):
    everything = list(
        AuditEntry.objects.order_by("-created_at", "-id").values_list("pk", flat=True)
    )
    seen: list[int] = []
    after = ""
    while True:
        answer = viewer.get(f"audit?limit=2&{urlencode({'after': after})}")
        assert answer.status == 200, answer.body
        seen += [entry["id"] for entry in answer.body["entries"]]
        after = answer.body["next_cursor"]
        if after is None:
            break
    assert seen == everything
    answer = viewer.get(f"audit?action=merge&actor=bot&session={logged}")
    expected = [
        e
        for e in AuditEntry.objects.order_by("-created_at", "-id")
        if e.action == "merge" and "bot" in e.actor_name and logged in e.session_ids
    ]
    assert [e["id"] for e in answer.body["entries"]] == [e.pk for e in expected]
    assert len(expected) == 1 and answer.body["entries"][0]["before"] == {"n": 1}
    failed = viewer.get("audit?outcome=failed").body["entries"]
    assert [e["id"] for e in failed] == list(
        AuditEntry.objects.filter(outcome="failed").values_list("pk", flat=True)
    )
    before = urlmap.state()
    answer = viewer.get("audit?outcome=lost&since=yesterday&action=no-such-action")
    assert _invalid_fields(answer) == {"outcome", "since", "action"}
    assert _invalid_fields(viewer.get("audit?after=not-a-cursor")) == {"after"}
    assert urlmap.state() == before


def test_the_audit_csv_is_the_consoles_export(viewer, logged, admin_client):
    answer = viewer.get("audit/export?action=merge")
    assert answer.status == 200
    assert answer.headers["Content-Type"] == "text/csv; charset=utf-8"
    text = answer.body.decode()
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == EXPORT_COLUMNS
    assert [int(r[0]) for r in rows[1:]] == list(
        AuditEntry.objects.filter(action="merge")
        .order_by("-created_at", "-id")
        .values_list("pk", flat=True)
    )
    details = {r[0]: r[EXPORT_COLUMNS.index("detail")] for r in rows[1:]}
    assert '\'=HYPERLINK("http://evil")' in details.values()
    console = admin_client.get(reverse("audit_export") + "?action=merge")
    console_text = b"".join(console.streaming_content).decode()
    assert list(csv.reader(io.StringIO(console_text))) == rows
    assert _invalid_fields(viewer.get("audit/export?until=2026-13-01")) == {"until"}
