"""Erasure requests: everything about one person goes, provably, and nothing else does.

The byte-level test erases a subject whose data is everywhere (sessions with a
compression continuation and a delegate, a slug and stored response, a message in
someone else's session, an earlier cascade delete in the trash, earlier audit entries
naming them) and then reads every database file, WAL included, for the subject's
distinctive strings. The rest run on both backends.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
from django.db import connections

from sessions_admin import core
from sessions_admin.core import db, holds
from sessions_admin.core.erasure import Subject, plan_erasure
from sessions_admin.core.schema import existing_tables
from sessions_admin.ledger import actions, erasure
from sessions_admin.ledger.models import AuditEntry, DeleteJob, ErasureRequest, TrashEntry
from sessions_admin.routers import responses_alias, store_alias
from tests.builders import (
    erasures_run_inline,  # noqa: F401 - an autouse fixture
    store_snapshot,
)
from tests.helpers import file_bytes

USER = "u-erase-7781"
CHAT = "chat-erase-5512"
SECRET = "zebra-quartz-9931"
TITLE = "Nightingale plan 6612"
SLUG = "slug-erase-4417"
# One token for the full-text index (unicode61 splits the others at their hyphens).
WORD = "xylophonicwombat"
DISTINCTIVE = [USER, CHAT, SECRET, TITLE, SLUG, WORD]


def subject_everywhere(*, mentioned: bool = True) -> dict[str, str]:
    """``mentioned``: a colleague's session names them (someone else's text: kept)."""
    root = core.create_session(
        source="telegram", user_id=USER, chat_id=CHAT, session_key=f"tg:{CHAT}", title=TITLE
    ).session_id
    core.append_messages(
        session_id=root,
        messages=[
            {"role": "user", "content": f"my code word is {SECRET}, or {WORD}"},
            {
                "role": "assistant",
                "content": "noted",
                "reasoning": f"the user said {SECRET}",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "remember", "arguments": f'{{"w": "{SECRET}"}}'},
                    }
                ],
            },
        ],
    )
    core.create_session(
        source="tool", parent_session_id=root, model_config={"_delegate_from": root}
    )
    tip = core.rotate_for_compression(session_id=root, summary=f"they said {SECRET}").new_session_id
    core.append_message(session_id=tip, role="user", content=f"again {SECRET}")
    core.record_turn(response_id="resp-erase-1", session_id=tip, conversation=SLUG)
    # An earlier session of theirs, already deleted: its rows are in the trash.
    old = core.create_session(source="telegram", user_id=USER).session_id
    core.append_message(session_id=old, role="user", content=f"old {SECRET}")
    core.end_session(session_id=old, end_reason="user_exit")
    plan = core.plan_cascade_delete(session_ids=[old])
    actions.cascade_delete(
        actor=None,
        session_ids=[old],
        include_branches=False,
        expected_fingerprint=plan.fingerprint,
        reason=f"user {USER} asked",
    )
    # Earlier audit entries naming them.
    hold = actions.place_hold(actor=None, kind="user", subject=USER, reason=f"case about {CHAT}")
    actions.release_hold(actor=None, hold_id=hold.id, reason="closed")
    # Someone else's conversation mentioning them, and someone unrelated.
    colleague = core.create_session(source="cli", user_id="u-colleague").session_id
    core.append_messages(
        session_id=colleague,
        messages=[
            {"role": "user", "content": f"please look up {USER if mentioned else 'them'}"},
            {"role": "assistant", "content": "done"},
        ],
    )
    other = core.create_session(source="cli", user_id="u-other").session_id
    core.append_message(session_id=other, role="user", content="nothing to see")
    return {"root": root, "tip": tip, "colleague": colleague, "other": other}


def _erase(subject: Subject) -> ErasureRequest:
    plan = erasure.plan(subject)
    request = actions.request_erasure(
        actor=None, subject=subject, reference="DSR-2026-11", expected_fingerprint=plan.fingerprint
    )
    receipt = actions.run_erasure(request_id=request.pk)
    assert receipt is not None
    request.refresh_from_db()
    return request


def _files(alias: str) -> list[Path]:
    name = Path(connections[alias].settings_dict["NAME"])
    return sorted(p for p in name.parent.glob(name.name + "*") if p.is_file())


def test_the_preview_lists_what_the_receipt_erases_and_nothing_else_goes():
    ids = subject_everywhere()
    subject = Subject(user_id=USER, chat_ids=(CHAT,))
    plan = plan_erasure(subject=subject)
    assert {ids["root"], ids["tip"]} <= set(plan.session_ids)
    assert len(plan.session_ids) == 3  # root, its delegate, its continuation
    # Someone else's session naming them is theirs: listed for review, kept.
    assert plan.other_messages == () and plan.mentions == (ids["colleague"],)
    assert SLUG in plan.conversation_names and "resp-erase-1" in plan.response_ids
    untouched = store_snapshot()
    untouched_other = [
        r for r in db.fetchall("SELECT * FROM messages WHERE session_id = %s", [ids["other"]])
    ]
    trashed = erasure.plan(subject).trash.session_ids
    assert len(trashed) == 1

    request = _erase(subject)

    assert request.state == ErasureRequest.DONE and request.subject == ""
    receipt = request.receipt
    # Every erased session: the store's and the one already in the trash.
    assert receipt["session_ids_sha256"] == sorted(
        erasure.hash_of(request.salt, sid) for sid in {*plan.session_ids, *trashed}
    )
    assert receipt["erased"]["sessions"] == 3
    assert receipt["erased"]["messages_in_other_sessions"] == 0
    assert receipt["kept"]["other_peoples_sessions_mentioning_subject"] == 1
    assert receipt["erased"]["trash_operations"] == 1
    assert receipt["reference"] == "DSR-2026-11"
    assert not set(plan.session_ids) & {r[0] for r in db.fetchall("SELECT id FROM sessions")}
    assert (
        db.fetchall("SELECT * FROM messages WHERE session_id = %s", [ids["other"]])
        == untouched_other
    )
    colleague = db.fetchall(
        "SELECT content FROM messages WHERE session_id = %s ORDER BY id", [ids["colleague"]]
    )
    assert colleague == [(f"please look up {USER}",), ("done",)]
    assert TrashEntry.objects.count() == 0
    assert (
        db.fetchone(
            "SELECT COUNT(*) FROM conversations WHERE name = %s", [SLUG], alias=responses_alias()
        )[0]
        == 0
    )
    # The erasure's own audit entries name only hashes and counts.
    for entry in AuditEntry.objects.filter(action__in=["erasure", "erasure_request"]):
        text = f"{entry.before} {entry.after} {entry.session_ids} {entry.reason} {entry.detail}"
        assert not any(value in text for value in DISTINCTIVE)
    assert AuditEntry.objects.get(action="erasure").outcome == "ok"
    assert untouched  # (the snapshot was taken; the other user's rows compared above)


def test_no_byte_of_the_subject_is_left_in_any_database_file():
    if connections[store_alias()].vendor != "sqlite":
        pytest.skip("byte-level check of the database files: SQLite")
    subject_everywhere(mentioned=False)
    files = [*_files(store_alias()), *_files(responses_alias()), *_files("default")]
    before = b"".join(file_bytes(path) for path in files)
    assert all(value.encode() in before for value in (USER, SECRET, TITLE)), "the test saw no data"

    _erase(Subject(user_id=USER, chat_ids=(CHAT,)))

    files = [*_files(store_alias()), *_files(responses_alias()), *_files("default")]
    leftovers = {
        value: [path.name for path in files if value.encode() in file_bytes(path)]
        for value in DISTINCTIVE
    }
    assert {value: names for value, names in leftovers.items() if names} == {}


def test_a_held_subject_is_refused_and_nothing_changes():
    subject_everywhere()
    holds.place_hold(kind="user", subject=USER, reason="litigation", actor="ada")
    subject = Subject(user_id=USER)
    plan = erasure.plan(subject)
    assert plan.held
    before = store_snapshot()
    with pytest.raises(holds.SessionsHeld):
        actions.request_erasure(
            actor=None, subject=subject, reference="DSR-1", expected_fingerprint=plan.fingerprint
        )
    assert store_snapshot() == before
    assert not ErasureRequest.objects.exists()


def test_a_stale_preview_or_a_vague_subject_is_refused():
    ids = subject_everywhere()
    subject = Subject(user_id=USER)
    plan = erasure.plan(subject)
    core.append_message(session_id=ids["tip"], role="user", content="one more")
    with pytest.raises(core.PlanChanged):
        actions.request_erasure(
            actor=None, subject=subject, reference="DSR-1", expected_fingerprint=plan.fingerprint
        )
    with pytest.raises(core.InvalidInput, match="user id"):
        plan_erasure(subject=Subject(user_id="  "))
    assert not ErasureRequest.objects.exists()


def test_the_command_previews_and_erases_with_yes():
    import io
    import json

    from django.core.management import call_command
    from django.core.management.base import CommandError

    ids = subject_everywhere()
    out = io.StringIO()
    call_command("erase_subject", "--user", USER, stdout=out)
    assert "3 sessions" in out.getvalue() and "Nothing was erased" in out.getvalue()
    assert ids["root"] in {r[0] for r in db.fetchall("SELECT id FROM sessions")}
    with pytest.raises(CommandError, match="reference"):
        call_command("erase_subject", "--user", USER, "--yes", stdout=io.StringIO())
    out = io.StringIO()
    call_command("erase_subject", "--user", USER, "--yes", "--reference", "DSR-9", stdout=out)
    text = out.getvalue()
    receipt = json.loads(text[text.index("\n{") + 1 :])
    assert receipt["erased"]["sessions"] == 3 and receipt["reference"] == "DSR-9"
    assert ids["root"] not in {r[0] for r in db.fetchall("SELECT id FROM sessions")}


def _leftovers(*, kept: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """``kept``: values someone else's kept text holds (a colleague's message naming them)."""
    files = [*_files(store_alias()), *_files(responses_alias()), *_files("default")]
    found = {
        value: [path.name for path in files if value.encode() in file_bytes(path)]
        for value in DISTINCTIVE
        if value not in kept
    }
    return {value: names for value, names in found.items() if names}


def test_an_index_merge_cut_short_is_finished_later_and_the_receipt_says_when(
    monkeypatch, settings
):
    """A runtime writing all along keeps the erasure's merge from finishing: the receipt
    says the index is not merged yet, and the scheduler finishes it later."""
    if connections[store_alias()].vendor != "sqlite":
        pytest.skip("full-text index segments: SQLite's FTS5")
    from sessions_admin.core.erasure import files as erasure_files
    from sessions_admin.ledger import schedule

    # Many small segments, as a busy runtime leaves them: SQLite's automerge off until the
    # erasure's own merge, so no earlier write (the erasure's deletes included) merged them.
    fts_tables = [
        t for t in ("messages_fts", "messages_fts_trigram") if t in existing_tables(store_alias())
    ]
    for fts in fts_tables:
        db.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('automerge', 0)")
    subject_everywhere()
    for n in range(30):
        sid = core.create_session(source="cli").session_id
        core.append_messages(session_id=sid, messages=[{"role": "user", "content": f"w{n}"}])
    monkeypatch.setattr(erasure_files, "FTS_MERGE_SECONDS", 0.0)  # the budget ran out at once

    try:
        request = _erase(Subject(user_id=USER, chat_ids=(CHAT,)))
    finally:
        for fts in fts_tables:
            db.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('automerge', 4)")

    assert request.receipt["search_index"] == {"merged": False, "merged_at": None}
    assert erasure.requests_awaiting_index_merge() == [request.pk]
    assert not AuditEntry.objects.filter(action="erasure_index_merged").exists()

    # The scheduler thread of a dashboard process retries it.
    monkeypatch.setattr(erasure_files, "FTS_MERGE_SECONDS", 30.0)
    settings.SESSIONS_ADMIN_ERASURE_INDEX_RETRY_SECONDS = 0
    stop = threading.Event()
    thread = threading.Thread(
        target=schedule.run_schedule, kwargs={"interval": 0.05, "stop": stop}, daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while erasure.requests_awaiting_index_merge() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(timeout=60)

    request.refresh_from_db()
    assert request.receipt["search_index"]["merged"] is True
    assert request.receipt["search_index"]["merged_at"]
    assert any("merged into one segment" in line for line in request.receipt["storage"])
    entry = AuditEntry.objects.get(action="erasure_index_merged")
    assert entry.before == {"erasure_request": request.pk}
    assert _leftovers(kept=(USER,)) == {}
    # Nothing else went: the other sessions and their words are all still searchable.
    assert db.fetchone("SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'w7'")[0] == 1
    assert AuditEntry.objects.filter(action="erasure_index_merged").count() == 1


def test_a_merge_that_finishes_at_once_leaves_nothing_to_retry():
    subject_everywhere()
    request = _erase(Subject(user_id=USER, chat_ids=(CHAT,)))
    assert request.receipt["search_index"]["merged"] is True
    assert erasure.requests_awaiting_index_merge() == []
    assert actions.finish_erasure_index_merges() == []
    assert not AuditEntry.objects.filter(action="erasure_index_merged").exists()


# --- issue 25: the subject matched exactly; holds win; complete; consistent afterwards ------

ALICE = "u-alice-4410"
VICTIM = "u-victim-3301"
VICTIM_KEY = "agent:main:telegram:dm:3301"


def _ended_session(user_id: str | None, text: str, **fields) -> str:
    sid = core.create_session(source=fields.pop("source", "telegram"), user_id=user_id, **fields)
    sid = sid.session_id
    core.append_message(session_id=sid, role="user", content=text)
    core.end_session(session_id=sid, end_reason="user_exit")
    return sid


def _cascade(session_ids: list[str], reason: str = "cleanup") -> None:
    plan = core.plan_cascade_delete(session_ids=session_ids)
    actions.cascade_delete(
        actor=None,
        session_ids=session_ids,
        include_branches=False,
        expected_fingerprint=plan.fingerprint,
        reason=reason,
    )


def _someone_else() -> dict:
    """Another person's data everywhere: a live keyed session with a stored response and a
    slug, and an older session of theirs in the trash."""
    live = core.create_session(
        source="telegram", user_id=VICTIM, chat_id="chat-3301", session_key=VICTIM_KEY
    ).session_id
    core.append_messages(
        session_id=live,
        messages=[
            {"role": "user", "content": "hello from the user side"},
            {"role": "assistant", "content": "hi"},
        ],
    )
    core.record_turn(response_id="resp-victim-1", session_id=live, conversation="user-slug-3301")
    _cascade([_ended_session(VICTIM, "old words of the user")], reason="tidy")
    return {"live": live}


def _victim_state() -> dict:
    trash = sorted(
        (e.operation, json.dumps(e.payload, sort_keys=True), e.session_count)
        for e in TrashEntry.objects.all()
    )
    return {**store_snapshot("sessions", "messages", "conversations", "responses"), "trash": trash}


def _erase_anyway(subject: Subject) -> None:
    """Erase ``subject`` through the request's doors, whatever its plan holds."""
    plan = erasure.plan(subject)
    request = actions.request_erasure(
        actor=None, subject=subject, reference="DSR-25", expected_fingerprint=plan.fingerprint
    )
    actions.run_erasure(request_id=request.pk)


@pytest.mark.parametrize(
    "user_id",
    ["user", "u-victim-330", "U-VICTIM-3301", "victim", "u-victim%", "u_victim_3301"],
    ids=["common-word", "prefix", "upper-cased", "inside", "percent", "underscores"],
)
def test_a_subject_that_is_not_exactly_someone_erases_nothing_of_theirs(user_id):
    _someone_else()
    before = _victim_state()

    _erase_anyway(Subject(user_id=user_id))

    assert _victim_state() == before


def test_a_key_prefix_matches_no_session_key():
    _someone_else()
    before = _victim_state()

    _erase_anyway(Subject(user_id="u-nobody-1", session_keys=("agent:main:",)))
    _erase_anyway(Subject(user_id="u-nobody-1", session_keys=("agent:main:telegram:dm:330",)))

    assert _victim_state() == before


@pytest.mark.parametrize(
    "values",
    [
        {"user_id": ""},
        {"user_id": "   "},
        {"user_id": "%"},
        {"user_id": "_"},
        {"user_id": "*"},
        {"user_id": f"{VICTIM} "},
        {"user_id": f" {VICTIM}"},
        {"user_id": f"{VICTIM}\u200b"},
        {"user_id": "u-nobody-1", "chat_ids": ("%",)},
        {"user_id": "u-nobody-1", "session_keys": ("*",)},
        {"user_id": "u-nobody-1", "session_keys": (f"{VICTIM_KEY} ",)},
    ],
)
def test_a_blank_wildcard_or_padded_value_is_refused_and_nothing_changes(values):
    _someone_else()
    before = _victim_state()
    with pytest.raises(core.InvalidInput):
        erasure.plan(Subject(**values))
    assert _victim_state() == before
    assert not ErasureRequest.objects.exists()


def test_a_subject_reaching_another_users_sessions_is_refused_naming_how_many():
    mine = core.create_session(source="telegram", user_id=ALICE, chat_id="group-77").session_id
    theirs = core.create_session(source="telegram", user_id=VICTIM, chat_id="group-77").session_id
    before = store_snapshot()
    for subject in (
        Subject(user_id=ALICE, chat_ids=("group-77",)),
        Subject(user_id="u-nobody-1", chat_ids=("group-77",)),
    ):
        with pytest.raises(core.InvalidInput, match=r"sessions of \d users"):
            erasure.plan(subject)
    with pytest.raises(core.InvalidInput, match="2 users"):
        erasure.plan(Subject(user_id=ALICE, chat_ids=("group-77",)))
    assert store_snapshot() == before
    assert {mine, theirs} <= {r[0] for r in db.fetchall("SELECT id FROM sessions")}


def test_a_session_the_runtime_adds_after_the_confirmation_is_not_erased():
    first = _ended_session(ALICE, "first")
    plan = erasure.plan(Subject(user_id=ALICE))
    request = actions.request_erasure(
        actor=None,
        subject=Subject(user_id=ALICE),
        reference="DSR-25",
        expected_fingerprint=plan.fingerprint,
    )
    added = core.create_session(source="telegram", user_id=ALICE).session_id

    with pytest.raises(core.PlanChanged):
        actions.run_erasure(request_id=request.pk)

    present = {r[0] for r in db.fetchall("SELECT id FROM sessions")}
    assert {first, added} <= present
    assert request.pk not in erasure.resumable_request_ids()


def test_another_persons_rows_sharing_a_trash_entry_survive_and_held_ones_are_named():
    mine = _ended_session(ALICE, "alice's words")
    held = _ended_session(VICTIM, "held words")
    other = _ended_session("u-third-5150", "third words")
    _cascade([mine, held, other], reason=f"spring clean, {ALICE} asked")
    hold = holds.place_hold(kind="user", subject=VICTIM, reason="litigation", actor="ada")
    (entry,) = TrashEntry.objects.all()

    request = _erase(Subject(user_id=ALICE))

    entry = TrashEntry.objects.get(pk=entry.pk)
    kept = {row["id"] for row in entry.payload["sessions"]}
    assert kept == {held, other}
    assert {m["content"] for m in entry.payload["messages"]} == {"held words", "third words"}
    assert set(entry.sessions.values_list("session_id", flat=True)) == {held, other}
    assert entry.session_count == 2
    assert ALICE not in entry.reason and "spring clean" in entry.reason
    assert f"#{hold.id}" in " ".join(
        request.receipt["kept"]["held_rows_of_other_people_in_shared_trash"]
    )


def test_a_hold_on_the_session_holding_their_moved_messages_stops_the_erasure():
    api = core.create_session(source="api_server", user_id=None).session_id
    core.append_message(session_id=api, role="user", content="api side")
    mine = _ended_session(ALICE, "moved words")
    core.merge_sessions(session_ids=[api, mine], target_id=api)
    hold = holds.place_hold(kind="session", subject=api, reason="audit", actor="ada")
    full = erasure.plan(Subject(user_id=ALICE))
    assert any(f"#{hold.id}" in words for _sid, words in full.held)
    before = store_snapshot()
    with pytest.raises(holds.SessionsHeld, match=f"#{hold.id}"):
        actions.request_erasure(
            actor=None,
            subject=Subject(user_id=ALICE),
            reference="DSR-25",
            expected_fingerprint=full.fingerprint,
        )
    assert store_snapshot() == before


def test_messages_a_merge_moved_into_an_api_session_are_erased_and_the_merge_says_so():
    api = core.create_session(source="api_server", user_id=None).session_id
    core.append_message(session_id=api, role="user", content="api side")
    mine = _ended_session(ALICE, "moved words of alice")
    merge = core.merge_sessions(session_ids=[api, mine], target_id=api)
    assert db.fetchone("SELECT COUNT(*) FROM messages WHERE session_id = %s", [api])[0] == 2

    request = _erase(Subject(user_id=ALICE))

    rows = db.fetchall("SELECT content FROM messages WHERE session_id = %s", [api])
    assert rows == [("api side",)]
    assert db.fetchone("SELECT message_count FROM sessions WHERE id = %s", [api])[0] == 1
    assert db.fetchone("SELECT COUNT(*) FROM sessions WHERE id = %s", [mine])[0] == 0
    record = core.merge_record(merge_id=merge.merge_id)
    assert record.closed_by_erasure and not record.undoable
    assert mine not in record.absorbed_ids
    (prior,) = db.fetchone(
        "SELECT prior_state FROM sessions_admin_merges WHERE id = %s", [merge.merge_id]
    )
    assert "moved words" not in prior and mine not in prior
    with pytest.raises(core.InvalidInput, match="can no longer be undone"):
        core.unmerge(merge_id=merge.merge_id)
    assert request.receipt["erased"]["messages_in_other_sessions"] == 1


def test_operator_text_naming_the_subject_is_redacted_as_whole_words():
    _ended_session(ALICE, "hi")
    shared = [_ended_session(ALICE, "x"), _ended_session(VICTIM, "y")]
    _cascade(shared, reason=f"asked by {ALICE}; not {ALICE}-2")
    holds.place_hold(kind="user", subject=VICTIM, reason=f"about {ALICE} and {ALICE}0", actor="ada")
    job = DeleteJob.objects.create(
        created_by="ada", reason=f"{ALICE}'s old chats", description=f"user={ALICE}, x{ALICE}"
    )
    plan = erasure.plan(Subject(user_id=ALICE))
    request = actions.request_erasure(
        actor=None,
        subject=Subject(user_id=ALICE),
        reference=f"DSR-25 for {ALICE}",
        expected_fingerprint=plan.fingerprint,
    )
    actions.run_erasure(request_id=request.pk)
    request.refresh_from_db()

    assert ALICE not in request.reference.replace(f"{ALICE}0", "")
    assert request.reference.startswith("DSR-25 for [erased:")
    (reason,) = db.fetchone("SELECT reason FROM sessions_admin_holds WHERE subject = %s", [VICTIM])
    assert reason == f"about [erased] and {ALICE}0"
    (entry,) = TrashEntry.objects.all()
    assert entry.reason.startswith("asked by [erased:") and entry.reason.endswith(f"not {ALICE}-2")
    job.refresh_from_db()
    assert job.reason.startswith("[erased:") and job.reason.endswith("]'s old chats")
    assert job.description.startswith("user=[erased:") and job.description.endswith(f"x{ALICE}")
    for audit in AuditEntry.objects.all():
        text = f"{audit.reason} {audit.detail} {audit.before} {audit.after}"
        assert not re.search(rf"(?<![\w-]){re.escape(ALICE)}(?![\w-])", text), audit.action


def test_check_consistency_reports_nothing_new_after_an_erasure():
    from sessions_admin.demo.consistency import check_store
    from sessions_admin.store import health

    subject_everywhere()
    core.create_session(source="telegram", user_id="u-after", session_key="k-after")
    api = core.create_session(source="api_server").session_id
    core.append_message(session_id=api, role="user", content="api side")
    moved = core.create_session(source="telegram", user_id=USER).session_id
    core.append_message(session_id=moved, role="user", content="moved")
    core.end_session(session_id=moved, end_reason="user_exit")
    core.merge_sessions(session_ids=[api, moved], target_id=api)
    assert check_store() == []
    panel = {check.kind: health.count(check.kind) for check in health.CHECKS}
    events_before = db.fetchone("SELECT COUNT(*) FROM sessions_admin_switch_events")[0]

    _erase(Subject(user_id=USER, chat_ids=(CHAT,)))

    assert check_store() == []
    # Nothing new on the health panel (the erased sessions' own findings may go with them).
    after = {check.kind: health.count(check.kind) for check in health.CHECKS}
    assert {kind: n for kind, n in after.items() if n > panel[kind]} == {}
    assert db.fetchone("SELECT COUNT(*) FROM sessions_admin_switch_events")[0] == events_before
    erased = db.fetchall(
        "SELECT new_session_id, session_key, origin FROM sessions_admin_switch_events "
        "WHERE new_session_id = ''"
    )
    assert erased and all(key is None and origin == "history" for _, key, origin in erased)
    follower = core.read_switch_events(after_seq=0, limit=1000)
    assert [e.seq for e in follower] == list(range(1, len(follower) + 1))


def test_a_subject_whose_session_absorbed_another_users_session_is_refused():
    mine = _ended_session(ALICE, "alice")
    theirs = _ended_session(VICTIM, "the victim's words")
    core.merge_sessions(session_ids=[mine, theirs], target_id=mine)
    before = store_snapshot()
    with pytest.raises(core.InvalidInput, match="2 users"):
        erasure.plan(Subject(user_id=ALICE))
    assert store_snapshot() == before
