"""Export (streamed JSONL and Markdown) and import of session exports, on every backend."""

from __future__ import annotations

import io
import json
import tracemalloc

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db, portability
from sessions_admin.ledger.models import AuditEntry
from sessions_admin.ledger.trash import purge_trash
from sessions_admin.signin.roles import assign_role
from tests.helpers import counter_mismatches, messages, session

TOOL_CALLS = [
    {"id": "c1", "type": "function", "function": {"name": "web_search", "arguments": "{}"}}
]


def _conversation(title: str | None = "Trip plan") -> dict[str, str]:
    """A compression chain (with an undone turn) plus a delegate and a branch of its tip."""
    root = core.create_session(source="cli", title=title, model="m1").session_id
    core.append_messages(
        session_id=root,
        messages=[
            {"role": "user", "content": "plan the alpaca trip"},
            {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS},
            {
                "role": "tool",
                "content": "```results``` about alpacas",
                "tool_call_id": "c1",
                "tool_name": "web_search",
            },
            {"role": "assistant", "content": "Alpaca plan ready."},
            {"role": "user", "content": "a second beaver turn"},
            {"role": "assistant", "content": "Beaver reply."},
        ],
    )
    core.undo_last_turn(session_id=root)
    tip = core.rotate_for_compression(
        session_id=root, summary="Summary: alpaca trip"
    ).new_session_id
    core.append_message(session_id=tip, role="user", content="continue with the chinchilla")
    delegate = core.create_session(
        source="cli", parent_session_id=tip, model_config={"_delegate_from": tip}
    ).session_id
    core.append_message(session_id=delegate, role="user", content="delegated dingo task")
    branch = core.branch_session(session_id=tip).new_session_id
    core.append_message(session_id=branch, role="user", content="branch about emus")
    return {"root": root, "tip": tip, "delegate": delegate, "branch": branch}


def _records(lines) -> list[dict]:
    return [json.loads(line) for line in "".join(lines).splitlines()]


def _transcript(session_id: str) -> list[tuple]:
    return [
        (m["role"], m["content"], m["tool_calls"], m["tool_name"], m["active"])
        for m in messages(session_id)
    ]


def _delete(ids: list[str]) -> None:
    """Gone for good: deleted, and the trash purged (an import of sessions still in the trash
    is refused: it would keep them from being restored)."""
    plan = core.plan_cascade_delete(session_ids=ids, include_branches=True)
    core.execute_cascade_delete(
        session_ids=ids,
        include_branches=True,
        expected_fingerprint=plan.fingerprint,
        actor="t",
        reason="test",
    )
    purge_trash()


# --- export --------------------------------------------------------------------------------------


def test_jsonl_is_one_record_a_line_with_every_message_in_id_order():
    ids = _conversation()
    records = _records(
        portability.export_jsonl(portability.export_session_ids(session_id=ids["root"]))
    )
    assert records[0]["type"] == "export" and records[0]["session_ids"] == [ids["root"]]
    assert records[1]["type"] == "session" and records[1]["session"]["id"] == ids["root"]
    exported = [r["message"] for r in records[2:]]
    assert all(r["type"] == "message" for r in records[2:])
    assert [m["id"] for m in exported] == [m["id"] for m in messages(ids["root"])]
    # Undone rows are exported too, marked inactive.
    assert [m["active"] for m in exported] == [1, 1, 1, 1, 0, 0]


def test_a_lineage_export_holds_every_linked_session_root_first():
    ids = _conversation()
    lineage = portability.export_session_ids(lineage_of=ids["branch"])
    assert lineage[0] == ids["root"]
    assert set(lineage) == set(ids.values())
    records = _records(portability.export_jsonl(lineage))
    assert [r["session"]["id"] for r in records if r["type"] == "session"] == lineage


def test_a_set_of_ids_must_all_exist():
    ids = _conversation()
    with pytest.raises(core.SessionNotFound, match="nope"):
        portability.export_session_ids(ids=[ids["root"], "nope"])
    with pytest.raises(core.InvalidInput):
        portability.export_session_ids(session_id=ids["root"], ids=[ids["tip"]])


def test_markdown_reads_as_a_transcript():
    ids = _conversation()
    text = "".join(portability.export_markdown([ids["root"], ids["tip"]]))
    assert text.startswith("# Session export\n")
    assert "## Trip plan" in text and f"- id: `{ids['root']}`" in text
    assert "- ended:" in text and "(compression)" in text
    assert "plan the alpaca trip" in text and "calls `web_search`" in text
    assert "````\n```results``` about alpacas\n````" in text  # a fence longer than the content's
    assert text.count("*undone*") == 2
    assert "Summary: alpaca trip" in text


def test_a_20000_message_session_is_streamed_not_held_in_memory():
    sid = core.create_session(source="cli").session_id
    body = "x" * 1000
    for start in range(0, 20_000, 2_000):
        core.append_messages(
            session_id=sid,
            messages=[
                {"role": "user", "content": f"{n} {body}"} for n in range(start, start + 2_000)
            ],
        )
    lines = portability.export_jsonl([sid])
    tracemalloc.start()
    try:
        total = count = 0
        for line in lines:
            total += len(line)
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 20_002 and total > 20_000_000
    assert peak < 8_000_000, peak  # far below the 20 MB it produced


# --- import --------------------------------------------------------------------------------------


def test_our_jsonl_round_trips_through_import():
    ids = _conversation()
    lineage = portability.export_session_ids(lineage_of=ids["root"])
    before = {sid: _transcript(sid) for sid in lineage}
    rows = {sid: session(sid) for sid in lineage}
    exported = "".join(portability.export_jsonl(lineage))
    _delete([ids["root"]])
    assert not db.fetchone("SELECT 1 FROM sessions WHERE id = %s", [ids["root"]])
    result = portability.import_sessions(sessions=portability.read_export(exported))
    assert set(result.imported) == set(lineage) and result.detached == ()
    assert {sid: _transcript(sid) for sid in lineage} == before
    for sid in lineage:
        now = session(sid)
        for column in ("title", "source", "started_at", "model_config"):
            assert now[column] == rows[sid][column], (sid, column)
        if rows[sid]["ended_at"] is not None:
            assert (now["ended_at"], now["end_reason"]) == (
                rows[sid]["ended_at"],
                rows[sid]["end_reason"],
            )
        else:  # history, never a live conversation: ended at its last message
            assert now["end_reason"] == "imported", sid
            assert now["ended_at"] == max(
                [now["started_at"], *(m["timestamp"] for m in messages(sid))]
            )
        assert now["parent_session_id"] == rows[sid]["parent_session_id"]
        # Routing state is not imported: history, not a live channel.
        assert now["session_key"] is None
    assert counter_mismatches() == []


def _hermes_export(session_id: str, **extra) -> dict:
    """What hermes_state.SessionDB.export_session returns (decoded content and tool calls)."""
    return {
        "id": session_id,
        "source": "telegram",
        "user_id": "42",
        "session_key": "agent:main:telegram:dm:42",
        "model": "m1",
        "model_config": json.dumps({"temperature": 0.2}),
        "parent_session_id": None,
        "started_at": 1_700_000_000.0,
        "ended_at": 1_700_000_100.0,
        "end_reason": "session_reset",
        "message_count": 99,
        "tool_call_count": 7,
        "title": None,
        "handoff_state": "pending",
        "messages": [
            {
                "id": 5,
                "session_id": session_id,
                "role": "user",
                "content": "hello gnu",
                "timestamp": 1_700_000_001.0,
                "active": 1,
            },
            {
                "id": 6,
                "session_id": session_id,
                "role": "assistant",
                "content": None,
                "tool_calls": TOOL_CALLS,
                "timestamp": 1_700_000_002.0,
            },
            {
                "id": 7,
                "session_id": session_id,
                "role": "user",
                "content": [
                    {"type": "text", "text": "look at this"},
                    {"type": "image_url", "image_url": {"url": "data:..."}},
                ],
                "timestamp": 1_700_000_003.0,
            },
        ],
        **extra,
    }


def test_hermes_json_and_jsonl_exports_import():
    one = _hermes_export("h-1", title="Hermes chat")
    two = _hermes_export("h-2", parent_session_id="h-1")
    portability.import_sessions(sessions=portability.read_export(json.dumps(one)))
    jsonl = json.dumps(two) + "\n"
    # h-1 is in the store now: linking h-2 to it is a graft, made only when asked for.
    plan = portability.plan_import(portability.read_export(jsonl))
    assert [(g.session_id, g.parent_id) for g in plan.grafts] == [("h-2", "h-1")]
    result = portability.import_sessions(sessions=portability.read_export(jsonl), graft=True)
    assert result.imported == ("h-2",) and result.detached == ()
    assert result.grafted == ("h-2",)
    row = session("h-2")
    assert row["parent_session_id"] == "h-1"
    assert (row["message_count"], row["tool_call_count"]) == (3, 1)  # counted, not copied
    assert row["session_key"] is None and row["end_reason"] == "session_reset"
    stored = messages("h-1")
    assert [m["role"] for m in stored] == ["user", "assistant", "user"]
    assert json.loads(stored[1]["tool_calls"]) == TOOL_CALLS
    multimodal = stored[2]["content"]
    if db.vendor() == "sqlite":
        assert multimodal.startswith(portability.HERMES_JSON_PREFIX)  # as Hermes stores it
    assert "look at this" in portability.message_text(multimodal)
    # New ids, original order.
    assert [m["id"] for m in stored] == sorted(m["id"] for m in stored)


def test_a_hermes_lineage_export_imports_each_segment():
    first = _hermes_export("seg-1")
    second = _hermes_export("seg-2", parent_session_id="seg-1")
    lineage_export = {
        **second,
        "segments": [first, second],
        "lineage_session_ids": ["seg-1", "seg-2"],
    }
    lineage_export["messages"] = first["messages"] + second["messages"]
    result = portability.import_sessions(
        sessions=portability.read_export(json.dumps(lineage_export))
    )
    assert result.imported == ("seg-1", "seg-2")
    assert len(messages("seg-1")) == 3 and len(messages("seg-2")) == 3


def test_duplicates_are_refused_clearly_and_nothing_is_written():
    core.create_session(source="cli", session_id="h-1")
    before = db.fetchone("SELECT COUNT(*) FROM sessions")[0]
    with pytest.raises(portability.ImportRefused, match="already exist in the store \\(h-1\\)"):
        portability.import_sessions(sessions=[_hermes_export("h-1"), _hermes_export("h-9")])
    assert db.fetchone("SELECT COUNT(*) FROM sessions")[0] == before
    with pytest.raises(portability.ImportRefused, match="h-9 appears twice"):
        portability.import_sessions(sessions=[_hermes_export("h-9"), _hermes_export("h-9")])
    result = portability.import_sessions(
        sessions=[_hermes_export("h-1"), _hermes_export("h-9")], skip_existing=True
    )
    assert (result.imported, result.skipped) == (("h-9",), ("h-1",))


def test_titles_stay_unique():
    core.create_session(source="cli", title="Taken")
    with pytest.raises(portability.ImportRefused, match="'Taken' is already used"):
        portability.import_sessions(sessions=[_hermes_export("t-1", title="Taken")])
    with pytest.raises(portability.ImportRefused, match="also used by t-2"):
        portability.import_sessions(
            sessions=[_hermes_export("t-2", title="Twice"), _hermes_export("t-3", title="Twice")]
        )
    assert not db.fetchone("SELECT 1 FROM sessions WHERE id IN ('t-1', 't-2', 't-3')")


def test_parents_outside_the_store_and_cycles_are_detached():
    sessions = [
        _hermes_export("p-child", parent_session_id="p-missing"),
        _hermes_export("c-a", parent_session_id="c-b"),
        _hermes_export("c-b", parent_session_id="c-a"),
    ]
    result = portability.import_sessions(sessions=sessions)
    assert "p-child" in result.detached and len(result.detached) == 2
    assert session("p-child")["parent_session_id"] is None
    links = {session("c-a")["parent_session_id"], session("c-b")["parent_session_id"]}
    assert None in links  # the closing edge was dropped, not both
    assert (
        db.fetchall(
            "SELECT id FROM sessions WHERE parent_session_id IS NOT NULL "
            "AND parent_session_id NOT IN (SELECT id FROM sessions)"
        )
        == []
    )


def test_bad_files_are_refused_with_the_reason():
    for text, reason in (
        ("", "empty"),
        ("{not json", "line 1 is not JSON"),
        (json.dumps([{"id": "x", "messages": [{"role": "wizard"}]}]), "role must be one of"),
        (json.dumps([{"messages": []}]), "no usable id"),
    ):
        with pytest.raises(portability.ImportRefused, match=reason):
            portability.import_sessions(sessions=portability.read_export(text))


@pytest.mark.parametrize(
    "field, value",
    [
        ("estimated_cost_usd", 2e9),  # past the 1e9 USD a runtime may record
        ("input_tokens", 2**60),  # past the 2**53 - 1 a runtime may record
        ("api_call_count", 2**53),
    ],
)
def test_an_import_is_held_to_the_bounds_a_runtime_is_held_to(field, value):
    # One rule (core.rows): an import cannot store a count or cost the runtime routes refuse
    # and the reads would have to show as unknown.
    with pytest.raises(portability.ImportRefused, match=field):
        portability.import_sessions(sessions=[_hermes_export("too-big", **{field: value})])
    assert not db.fetchall("SELECT id FROM sessions WHERE id = 'too-big'")


def test_read_only_mode_refuses_imports_but_exports(settings):
    ids = _conversation()
    settings.SESSIONS_ADMIN_READ_ONLY = True
    assert list(portability.export_jsonl([ids["root"]]))
    with pytest.raises(core.ReadOnlyStore):
        portability.import_sessions(sessions=[_hermes_export("ro-1")])


# --- the console's download views ----------------------------------------------------------------


@pytest.fixture
def viewer(client):
    user = User.objects.create_user("viewer-exports", password="correct horse battery staple")
    assign_role(user, "viewer")
    client.force_login(user)
    return client


def _body(response) -> str:
    return b"".join(response.streaming_content).decode("utf-8")


def test_a_viewer_downloads_a_session_a_lineage_and_a_selection(viewer):
    ids = _conversation()
    response = viewer.get(reverse("export_session", args=[ids["root"]]))
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("application/x-ndjson")
    assert f'filename="session-{ids["root"]}.jsonl"' in response["Content-Disposition"]
    assert _records([_body(response)])[1]["session"]["id"] == ids["root"]

    response = viewer.get(
        reverse("export_session", args=[ids["tip"]]) + "?scope=lineage&format=markdown"
    )
    assert response["Content-Type"].startswith("text/markdown")
    assert "branch about emus" in _body(response)

    response = viewer.get(reverse("export_sessions") + f"?ids={ids['tip']}&ids={ids['delegate']}")
    exported = [r["session"]["id"] for r in _records([_body(response)]) if r["type"] == "session"]
    assert exported == [ids["tip"], ids["delegate"]]


def test_the_session_lists_filters_choose_what_to_export(viewer):
    _conversation()
    core.create_session(source="telegram", session_id="tg-export")
    response = viewer.get(reverse("export_sessions") + "?source=telegram")
    assert response.status_code == 200
    exported = [r["session"]["id"] for r in _records([_body(response)]) if r["type"] == "session"]
    assert exported == ["tg-export"]


def test_export_refusals(viewer, client):
    assert viewer.get(reverse("export_session", args=["nope"])).status_code == 404
    assert viewer.get(reverse("export_sessions")).status_code == 400
    assert viewer.get(reverse("export_sessions") + "?session=a&lineage=b").status_code == 400
    assert viewer.get(reverse("export_session", args=["x"]) + "?format=pdf").status_code == 400
    assert viewer.post(reverse("export_sessions") + "?session=x").status_code == 405
    client.logout()
    assert client.get(reverse("export_sessions") + "?session=x").status_code == 302


# --- the commands --------------------------------------------------------------------------------


def test_export_and_import_commands_round_trip(tmp_path):
    ids = _conversation()
    path = tmp_path / "lineage.jsonl"
    call_command(
        "export_sessions", "--lineage", ids["root"], "--output", str(path), stderr=io.StringIO()
    )
    markdown = tmp_path / "root.md"
    call_command(
        "export_sessions",
        "--session",
        ids["root"],
        "--format",
        "markdown",
        "-o",
        str(markdown),
        stderr=io.StringIO(),
    )
    assert "plan the alpaca trip" in markdown.read_text()
    before = _transcript(ids["tip"])
    _delete([ids["root"]])
    out = io.StringIO()
    call_command("import_sessions", str(path), "--dry-run", stdout=out)
    assert "Would import 4 session(s)" in out.getvalue()
    call_command("import_sessions", str(path), "--reason", "restore from backup", stdout=out)
    assert "Imported 4 session(s)" in out.getvalue()
    assert _transcript(ids["tip"]) == before
    entry = AuditEntry.objects.filter(action="import_sessions").get()
    assert entry.outcome == "ok" and entry.reason == "restore from backup"
    with pytest.raises(CommandError, match="already exist in the store"):
        call_command("import_sessions", str(path), stdout=io.StringIO())
    assert AuditEntry.objects.filter(action="import_sessions", outcome="failed").count() == 1


def test_the_export_command_selects_a_source_as_the_export_page_does(viewer, tmp_path):
    ids = _conversation()  # every segment is a cli session: root, tip, delegate, branch
    core.create_session(source="telegram", session_id="tg-export")
    page = viewer.get(reverse("export_sessions") + "?source=cli&scope=all")
    from_page = [r["session"]["id"] for r in _records([_body(page)]) if r["type"] == "session"]
    path = tmp_path / "cli.jsonl"
    call_command("export_sessions", "--source", "cli", "-o", str(path), stderr=io.StringIO())
    records = _records([path.read_text(encoding="utf-8")])
    from_command = [r["session"]["id"] for r in records if r["type"] == "session"]
    assert from_command == from_page
    assert set(from_command) == set(ids.values())


@pytest.mark.parametrize(
    ("source", "expected"),
    [(" ", "No session has source"), ("cli\x00", "NUL"), ("nobody", "No session has source")],
)
def test_the_export_command_refuses_a_source_it_cannot_select(source, expected):
    _conversation()
    with pytest.raises(CommandError, match=expected):
        call_command("export_sessions", "--source", source, stdout=io.StringIO())


def _export_file(tmp_path, ids: dict[str, str]):
    path = tmp_path / "lineage.jsonl"
    call_command(
        "export_sessions", "--lineage", ids["root"], "--output", str(path), stderr=io.StringIO()
    )
    _delete([ids["root"]])
    return path


@pytest.mark.parametrize("reason", ["restore\x00", "\ud800", "r" * 100_000])
def test_the_import_command_refuses_an_unstorable_reason_before_writing(tmp_path, reason):
    """The reason is operator text: checked once by core.text in ledger.actions, before
    the import or its audit entry is written."""
    ids = _conversation()
    path = _export_file(tmp_path, ids)
    audited = AuditEntry.objects.filter(action="import_sessions").count()
    with pytest.raises(CommandError, match="reason"):
        call_command("import_sessions", str(path), "--reason", reason, stdout=io.StringIO())
    assert session(ids["root"]) is None
    assert AuditEntry.objects.filter(action="import_sessions").count() == audited


def test_an_interrupted_import_names_what_it_kept_on_its_failed_entry(tmp_path, monkeypatch):
    path = _export_file(tmp_path, _conversation())
    kept = core.create_session(source="cli").session_id

    def interrupted(**_):
        cause = core.StoreError("the store is busy.")
        raise portability.ImportInterrupted([kept], 4, cause)

    monkeypatch.setattr(portability, "import_sessions", interrupted)
    with pytest.raises(CommandError, match="stopped after 1 of 4"):
        call_command("import_sessions", str(path), stdout=io.StringIO())
    entry = AuditEntry.objects.get(action="import_sessions")
    assert entry.outcome == "failed" and entry.completed_at is not None
    assert entry.session_ids == [kept]
    assert list(entry.sessions.values_list("session_id", flat=True)) == [kept]
