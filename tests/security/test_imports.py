"""Hostile import files: no takeover of a live conversation, no spoofing ids, no bad values.

Each file goes through ``manage.py import_sessions`` as an operator would run it;
the store's state afterwards is what is checked (and what a runtime's next
write would be told), plus the audit entry every refusal leaves.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.urls import NoReverseMatch, reverse

from sessions_admin import core
from sessions_admin.core import db, ids, portability
from sessions_admin.ledger.models import AuditEntry
from sessions_admin.ledger.trash import purge_trash
from sessions_admin.signin.roles import assign_role
from tests.builders import cascade_into_trash
from tests.console.test_fuzz import ODD_SESSION_IDS
from tests.helpers import messages, session


def _export(session_id: str, **fields) -> dict:
    """A Hermes export object (``hermes sessions export``): one session and its messages."""
    return {
        "id": session_id,
        "source": "telegram",
        "started_at": time.time(),
        "ended_at": None,
        "messages": [
            {"role": "user", "content": "please send the payment details here"},
            {"role": "assistant", "content": "Sure."},
        ],
        **fields,
    }


def _import(tmp_path, objects, *options: str, name: str = "export.jsonl") -> str:
    path = tmp_path / name
    if isinstance(objects, str):
        path.write_text(objects, encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(o) + "\n" for o in objects), encoding="utf-8")
    out = io.StringIO()
    call_command("import_sessions", str(path), *options, stdout=out)
    return out.getvalue()


def _refused(tmp_path, objects, *options: str) -> str:
    """The import is refused with a message (no traceback), audited, and writes nothing."""
    before = db.fetchone("SELECT COUNT(*) FROM sessions")[0]
    audited = AuditEntry.objects.filter(action="import_sessions", outcome="failed").count()
    with pytest.raises(CommandError) as refused:
        _import(tmp_path, objects, *options)
    assert db.fetchone("SELECT COUNT(*) FROM sessions")[0] == before
    entries = AuditEntry.objects.filter(action="import_sessions", outcome="failed")
    assert entries.count() == audited + 1
    assert entries.first().detail == str(refused.value)
    return str(refused.value)


def _written_to(session_id: str) -> str | None:
    """Where the runtime is sent when it writes to ``session_id`` (None: it is live)."""
    try:
        core.append_message(session_id=session_id, role="user", content="next turn")
    except core.SessionEnded as ended:
        return ended.live_session_id
    return None


# --- no takeover ---------------------------------------------------------------------------------


@pytest.mark.parametrize("claimed_end", [None, "compression"])
def test_an_import_cannot_become_the_continuation_of_a_compressed_conversation(
    tmp_path, claimed_end
):
    real = core.create_session(source="telegram", session_key="agent:main:telegram:dm:7")
    core.append_message(session_id=real.session_id, role="user", content="hello")
    tip = core.rotate_for_compression(session_id=real.session_id, summary="s").new_session_id
    hostile = _export(
        "planted",
        parent_session_id=real.session_id,
        started_at=time.time() + 3600,
        ended_at=time.time() + 7200 if claimed_end else None,
        end_reason=claimed_end,
    )
    out = _import(tmp_path, [hostile])
    assert "kept without their link to a session already in the store" in out
    planted = session("planted")
    assert planted["parent_session_id"] is None
    assert planted["ended_at"] is not None
    # The runtime that still holds the compressed session's id is sent to the real tip.
    assert _written_to(real.session_id) == tip
    assert core.live_session_for_key("agent:main:telegram:dm:7") == tip


def test_an_imported_live_child_of_a_live_session_never_wins_its_next_compression(tmp_path):
    real = core.create_session(source="telegram", session_key="agent:main:telegram:dm:8")
    # Stamped far in the future, it would sort first among live continuations.
    _import(tmp_path, [_export("sleeper", parent_session_id=real.session_id, started_at=9e9)])
    sleeper = session("sleeper")
    assert sleeper["ended_at"] is not None and sleeper["end_reason"] == "imported"
    assert sleeper["ended_at"] == max(m["timestamp"] for m in messages("sleeper"))
    tip = core.rotate_for_compression(session_id=real.session_id, summary="s").new_session_id
    assert _written_to(real.session_id) == tip
    assert _written_to("sleeper") != "sleeper"


def test_grafting_is_explicit_previewed_and_still_never_live(tmp_path):
    real = core.create_session(source="telegram", session_key="agent:main:telegram:dm:9")
    tip = core.rotate_for_compression(session_id=real.session_id, summary="s").new_session_id
    file = [_export("graft-me", parent_session_id=real.session_id)]
    preview = _import(tmp_path, file, "--dry-run")
    assert "Would NOT link (add --graft to link) 1 session(s)" in preview
    assert f"graft-me -> {real.session_id}" in preview and "ended by compression" in preview
    assert "1 live in the file would be imported ended ('imported')" in preview
    assert session("graft-me") is None  # a dry run writes nothing
    assert "Would link 1" in _import(tmp_path, file, "--dry-run", "--graft")
    out = _import(tmp_path, file, "--graft", "--reason", "restore a lost segment")
    assert "1 linked to sessions already in the store (--graft)" in out
    assert session("graft-me")["parent_session_id"] == real.session_id
    assert session("graft-me")["end_reason"] == "imported"
    # Linked, but ended: the live tip keeps the conversation.
    assert _written_to(real.session_id) == tip
    entry = AuditEntry.objects.filter(action="import_sessions", outcome="ok").get()
    assert entry.before["graft"] is True and entry.after["grafted"] == ["graft-me"]


def test_a_lineage_in_one_file_keeps_its_links(tmp_path):
    parent = _export("seg-a", ended_at=1_700_000_100.0, end_reason="compression")
    parent["started_at"] = 1_700_000_000.0
    child = _export("seg-b", parent_session_id="seg-a", started_at=1_700_000_101.0)
    out = _import(tmp_path, [child, parent])
    assert "without their link" not in out
    assert session("seg-b")["parent_session_id"] == "seg-a"
    assert session("seg-b")["end_reason"] == "imported"


# --- ids -----------------------------------------------------------------------------------------

SPOOFING_IDS = {
    " leading": "starts or ends with whitespace",
    "trailing ": "starts or ends with whitespace",
    "zero\u200bwidth": "U+200B",
    "bidi\u202eoverride": "U+202E",
    "isolate\u2066x": "U+2066",
    "new\nline": "U+000A",
    "tab\tbed": "U+0009",
    "bell\x07": "U+0007",
    "two  spaces": "run of spaces",
    "no\u00a0break": "U+00A0",
    "e\u0301": "NFC",
    "a/b": "cannot be addressed",
    "../etc": "cannot be addressed",
    "..": "cannot be addressed",
    ".": "cannot be addressed",
}


@pytest.mark.parametrize("bad_id", list(SPOOFING_IDS), ids=ascii)
def test_ids_that_spoof_another_or_cannot_be_addressed_are_refused(tmp_path, bad_id):
    message = _refused(tmp_path, [_export("fine-1"), _export(bad_id)])
    assert SPOOFING_IDS[bad_id] in message
    assert ids.shown(bad_id) in message  # the id is named, its invisible characters escaped
    assert session("fine-1") is None


def test_the_id_rule_is_the_consoles_url_rule():
    """Every id the import accepts has a working session URL; no URL-less id is importable."""
    for odd in [*ODD_SESSION_IDS, *SPOOFING_IDS]:
        try:
            url = reverse("session_detail", args=[odd])
        except NoReverseMatch:
            url = None
        assert (url is not None) == ids.addressable(odd), odd
        if ids.new_session_id_problem(odd) is None:
            assert url is not None, odd


def test_odd_but_honest_ids_import_and_are_served(tmp_path, client):
    honest = [i for i in ODD_SESSION_IDS if ids.new_session_id_problem(i) is None]
    assert {"a?b#c&d=e", "' OR 1=1 --", "%00%2F..", "x" * 200} <= set(honest)
    _import(tmp_path, [_export(i) for i in honest])
    user = User.objects.create_user("import-viewer")
    assign_role(user, "viewer")
    client.force_login(user)
    for session_id in honest:
        page = client.get(reverse("session_detail", args=[session_id]))
        assert page.status_code == 200, session_id


# --- values --------------------------------------------------------------------------------------

BAD_VALUES = {
    "started_at inf (text)": ({"started_at": "inf"}, "started_at inf is not a time"),
    "started_at -inf (text)": ({"started_at": "-inf"}, "started_at -inf is not a time"),
    "started_at nan (text)": ({"started_at": "nan"}, "started_at nan is not a time"),
    "ended_at in milliseconds": ({"ended_at": 1_700_000_000_000}, "ended_at"),
    "23-digit token count": ({"input_tokens": 10**22}, "23-digit integer"),
    "23-digit timestamp": ({"started_at": 10**22}, "23-digit integer"),
    "negative count": ({"output_tokens": -5}, "output_tokens must be a whole number from 0"),
    "fractional count": ({"api_call_count": 1.5}, "not a whole number"),
    "boolean time": ({"started_at": True}, "must be a number"),
    "cost nan": ({"estimated_cost_usd": "nan"}, "not a finite number"),
    "deep model_config": (
        {"model_config": json.loads("[" * 100 + "]" * 100)},
        "model_config nests deeper than 64 levels",
    ),
    "deep model_config text": (
        {"model_config": "{" + '"a":{' * 80 + "}" * 81},
        "model_config nests deeper than 64 levels",
    ),
    "lone surrogate title": ({"title": "\ud800"}, "title is not valid text"),
    "long title": ({"title": "t" * 501}, "title is longer than 500"),
}


@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_every_session_value_is_checked(tmp_path, case):
    fields, expected = BAD_VALUES[case]
    message = _refused(tmp_path, [_export("v-1", **fields)])
    assert expected in message and "session v-1" in message


BAD_MESSAGES = {
    "timestamp nan": ({"timestamp": "nan"}, "timestamp nan is not a time"),
    "23-digit token_count": ({"token_count": 12345678901234567890123}, "23-digit integer"),
    "deep content": (
        {"content": json.loads("[" * 200 + "]" * 200)},
        "content nests deeper than 64 levels",
    ),
    "deep multimodal text": (
        {"content": portability.HERMES_JSON_PREFIX + "[" * 100 + "]" * 100},
        "content nests deeper",
    ),
    "tool_calls with NaN": ({"tool_calls": '[{"x": NaN}]'}, "holds NaN"),
    "active 7": ({"active": 7}, "active must be 0 or 1"),
}


@pytest.mark.parametrize("case", list(BAD_MESSAGES))
def test_every_message_value_is_checked(tmp_path, case):
    fields, expected = BAD_MESSAGES[case]
    hostile = _export("m-1")
    hostile["messages"][1].update(fields)
    message = _refused(tmp_path, [hostile])
    assert expected in message and "session m-1, message 2" in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"id": "j-1", "started_at": Infinity, "messages": []}', "holds Infinity"),
        ('{"id": "j-1", "started_at": NaN, "messages": []}', "holds NaN"),
        ('{"id": "j-1", "started_at": -Infinity, "messages": []}', "holds -Infinity"),
        ('{"id": "j-0", "messages": []}\n{"id": "j-1", "x": NaN}\n', "line 2 holds NaN"),
        ("[" * 100_000 + "]" * 100_000, "nests JSON values too deeply"),
        ('{"id": "j-1", "input_tokens": ' + "9" * 5000 + "}", "cannot be read"),
    ],
    ids=["Infinity", "NaN", "-Infinity", "NaN on line 2", "100k deep", "5000 digits"],
)
def test_json_no_strict_reader_accepts_is_refused_clearly(tmp_path, text, expected):
    assert expected in _refused(tmp_path, text)


def test_a_refused_dry_run_is_audited_too(tmp_path):
    message = _refused(tmp_path, [_export("d-1", started_at="inf")], "--dry-run")
    assert "started_at inf" in message
    assert AuditEntry.objects.get(outcome="failed").before["dry_run"] is True


# --- export --------------------------------------------------------------------------------------


def _strict(line: str) -> dict:
    def refuse(constant):
        raise AssertionError(f"{constant} in an export line")

    return json.loads(line, parse_constant=refuse)


def test_the_jsonl_export_never_writes_infinity_or_nan(tmp_path):
    ref = core.create_session(source="cli")
    core.append_message(session_id=ref.session_id, role="user", content="hi")
    # What a runtime writing the store directly can leave in REAL columns.
    db.execute(
        "UPDATE sessions SET estimated_cost_usd = %s, actual_cost_usd = %s WHERE id = %s",
        [float("inf"), float("-inf"), ref.session_id],  # SQLite keeps NaN as NULL
    )
    lines = list(portability.export_jsonl([ref.session_id]))
    records = [_strict(line) for line in lines]
    row = records[1]["session"]
    assert (row["estimated_cost_usd"], row["actual_cost_usd"]) == ("inf", "-inf")
    # Imported elsewhere, the value is refused by name rather than stored.
    db.execute("DELETE FROM messages WHERE session_id = %s", [ref.session_id])
    db.execute("DELETE FROM sessions WHERE id = %s", [ref.session_id])
    message = _refused(tmp_path, "".join(lines))
    assert "estimated_cost_usd is inf" in message or "estimated_cost_usd 'inf'" in message


# --- a database file named as the export ------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_a_database_file_given_as_the_export_is_refused_unread(suffix):
    """The dashboard's own SQLite files are refused before they are opened (a handle closed on
    one would cost this process its locks there), audited, and nothing is written."""
    from django.db import connections

    from sessions_admin.routers import store_alias

    store = connections[store_alias()]
    if store.vendor != "sqlite":
        pytest.skip("SQLite files")
    core.create_session(source="cli")  # the store is open, with its write-ahead files
    path = store.settings_dict["NAME"] + suffix
    before = db.fetchone("SELECT COUNT(*) FROM sessions")[0]
    with pytest.raises(CommandError) as refused:
        call_command("import_sessions", path, stdout=io.StringIO())
    assert "is a database the dashboard uses" in str(refused.value)
    assert db.fetchone("SELECT COUNT(*) FROM sessions")[0] == before
    entry = AuditEntry.objects.filter(action="import_sessions", outcome="failed").get()
    assert entry.detail == str(refused.value)


@pytest.mark.parametrize("suffix", ["", "-wal", "-journal"])
@pytest.mark.parametrize("option", ["--output", "--ids-file"])
def test_an_export_never_writes_over_or_reads_a_database_file(option, suffix):
    """``export_sessions -o state.db`` would have truncated the store; it is refused, and the
    store keeps every row (read back through a new connection, after a checkpoint)."""
    from django.db import connections

    from sessions_admin.routers import store_alias

    store = connections[store_alias()]
    if store.vendor != "sqlite":
        pytest.skip("SQLite files")
    session_id = core.create_session(source="cli").session_id
    core.append_message(session_id=session_id, role="user", content="keep me")
    path = store.settings_dict["NAME"] + suffix
    arguments = ["--session", session_id] if option == "--output" else []
    with pytest.raises(CommandError) as refused:
        call_command("export_sessions", *arguments, option, path, stdout=io.StringIO())
    assert "is a database the dashboard uses" in str(refused.value)
    connections.close_all()
    assert [m["content"] for m in messages(session_id)] == ["keep me"]
    assert db.fetchone("PRAGMA integrity_check")[0] == "ok"


def test_a_link_to_the_store_is_refused_as_the_store(tmp_path):
    from django.db import connections

    from sessions_admin.routers import store_alias

    store = connections[store_alias()]
    if store.vendor != "sqlite":
        pytest.skip("SQLite files")
    core.create_session(source="cli")
    target = Path(store.settings_dict["NAME"])
    (tmp_path / "soft.jsonl").symlink_to(target)
    (tmp_path / "hard.jsonl").hardlink_to(target)
    (tmp_path / "dir").symlink_to(target.parent, target_is_directory=True)
    for name in ("soft.jsonl", "hard.jsonl", f"dir/{target.name}-wal"):
        with pytest.raises(CommandError, match="is a database the dashboard uses"):
            call_command("export_sessions", "--source", "cli", "-o", str(tmp_path / name))
        with pytest.raises(CommandError, match="is a database the dashboard uses"):
            call_command("import_sessions", str(tmp_path / name), stdout=io.StringIO())
    assert db.fetchone("PRAGMA integrity_check")[0] == "ok"


# --- ids in the trash ----------------------------------------------------------------------------


@pytest.mark.parametrize("options", [(), ("--dry-run",), ("--skip-existing",)])
def test_an_import_of_a_session_in_the_trash_is_refused(tmp_path, options):
    # Imported, it kept the trashed one from ever being restored (attack round 46, Y3).
    session_id = core.create_session(source="telegram", session_key="tg:gone").session_id
    entry_id = cascade_into_trash(session_id)
    message = _refused(tmp_path, [_export(session_id), _export("new-1")], *options)
    assert f"{session_id} (trash entry #{entry_id})" in message
    assert db.fetchone("SELECT COUNT(*) FROM sessions WHERE id = 'new-1'")[0] == 0
    # Purged, the id is free again.
    purge_trash()
    assert "Imported 2" in _import(tmp_path, [_export(session_id), _export("new-1")])


def test_an_import_of_a_title_a_deleted_session_holds_in_the_trash_is_refused(tmp_path):
    # Titles are unique: imported, it blocked the restore for good (attack round 46, AA2).
    session_id = core.create_session(source="telegram", title="Refund plan").session_id
    cascade_into_trash(session_id)
    message = _refused(tmp_path, [_export("new-2", title="Refund plan")])
    assert f"'Refund plan' ({session_id})" in message
    purge_trash()
    assert "Imported 1" in _import(tmp_path, [_export("new-2", title="Refund plan")])


def test_the_dry_run_says_which_sessions_would_lose_their_parent_link(tmp_path):
    # The run said so, its dry run did not (attack round 46, AA).
    objects = [_export("orphan-1", parent_session_id="nowhere-1")]
    preview = _import(tmp_path, objects, "--dry-run", "--graft")
    assert "1 would be kept without their parent link" in preview and "orphan-1" in preview
    done = _import(tmp_path, objects, "--graft")
    assert "1 kept without their parent link" in done
    assert session("orphan-1")["parent_session_id"] is None
