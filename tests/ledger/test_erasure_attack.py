"""Erasure breaks found by an attacker who read only the docs (issue 25, attack b).

Each builds the store as the runtime and the console leave it, erases a subject through
the ledger (as ``erase_subject`` and the request page do) and reads the rows that are left.
"""

from __future__ import annotations

import time

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.erasure import Subject, plan_erasure
from sessions_admin.ledger import actions, erasure
from sessions_admin.ledger.models import AuditEntry, TrashEntry, TrashSession
from sessions_admin.routers import responses_alias
from tests.builders import erasures_run_inline  # noqa: F401 - an autouse fixture
from tests.helpers import conversation, messages, session


def _erase(subject: Subject) -> dict:
    plan = erasure.plan(subject)
    request = actions.request_erasure(
        actor=None, subject=subject, reference="DSR-attack", expected_fingerprint=plan.fingerprint
    )
    receipt = actions.run_erasure(request_id=request.pk)
    assert receipt is not None
    return receipt


def _session_row(sid, *, user_id, started, ended=None, parent=None, chat_id=None, key=None):
    db.execute(
        "INSERT INTO sessions (id, source, user_id, chat_id, session_key, parent_session_id, "
        "started_at, ended_at, end_reason, message_count) VALUES "
        "(%s, 'telegram', %s, %s, %s, %s, %s, %s, %s, 0)",
        [sid, user_id, chat_id, key, parent, started, ended, "done" if ended else None],
    )


def _message(sid: str, content: str) -> None:
    """A message as the runtime wrote it (the session may have ended since)."""
    db.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (%s, 'user', %s, %s)",
        [sid, content, time.time()],
    )
    db.execute("UPDATE sessions SET message_count = message_count + 1 WHERE id = %s", [sid])


def _merge_into_api(subject_session: str, api: str, *, reason: str = "one conversation"):
    plan = core.plan_merge(session_ids=[subject_session, api], target_id=api)
    actions.merge(
        actor=None,
        session_ids=[subject_session, api],
        target_id=api,
        expected_fingerprint=plan.fingerprint,
        reason=reason,
        typed_count=len(plan.absorbed_ids),  # their users differ: confirmed as the page asks
    )


@pytest.mark.parametrize("child_starts", ["with_parent", "after_parent_ended"])
def test_a_child_without_a_user_id_goes_with_the_subjects_session(child_starts):
    """B1: a child by parent_session_id with no user id and no marker is the subject's
    conversation: erased, not kept unlinked with its text naming them."""
    now = time.time()
    _session_row(
        "S_bob", user_id="bob-5521", chat_id="chat-bob", started=now - 3600, ended=now - 100
    )
    _message("S_bob", "BOBROOT secret")
    child_start = now - 3600 if child_starts == "with_parent" else now - 90
    _session_row("S_child", user_id=None, parent="S_bob", started=child_start, ended=now - 50)
    _message("S_child", "CHILDSECRET of bob-5521")
    _session_row("S_other", user_id="carol-1", started=now - 10)
    _message("S_other", "unrelated")

    plan = plan_erasure(subject=Subject(user_id="bob-5521"))
    assert set(plan.session_ids) == {"S_bob", "S_child"}
    assert "S_child" not in plan.mentions
    _erase(Subject(user_id="bob-5521"))
    assert session("S_bob") is None and session("S_child") is None
    assert messages("S_child") == []
    assert not db.fetchall("SELECT id FROM messages WHERE content LIKE %s", ["%CHILDSECRET%"])
    assert session("S_other") is not None and len(messages("S_other")) == 1


def test_a_child_of_another_user_refuses_the_erasure_and_changes_nothing():
    """B1: a descendant carrying another user's id is never unlinked silently: refused."""
    now = time.time()
    _session_row("S_bob2", user_id="bob-5522", started=now - 3600, ended=now - 100)
    _session_row("S_carol", user_id="carol-7", parent="S_bob2", started=now - 90)
    _message("S_carol", "carol's own words")
    with pytest.raises(core.InvalidInput, match="2 users"):
        plan_erasure(subject=Subject(user_id="bob-5522"))
    assert session("S_carol")["parent_session_id"] == "S_bob2"
    assert session("S_bob2") is not None


def test_an_api_continuation_without_a_user_id_goes_with_its_slug_and_responses():
    """B2: resolve_conversation's continuation (_continued_from, user id left NULL) goes,
    with its message, the slug pointing at it and its stored response."""
    first = core.resolve_conversation(conversation="dave-slug", user_id="dave-8888")
    core.append_message(session_id=first.session_id, role="user", content="DAVEAPI first turn")
    core.record_turn(
        response_id="resp_dave_1",
        session_id=first.session_id,
        conversation="dave-slug",
        data={"output": "DAVEAPI resp"},
    )
    core.end_session(session_id=first.session_id, end_reason="agent_close")
    second = core.resolve_conversation(conversation="dave-slug")
    assert second.session_id != first.session_id
    core.append_message(session_id=second.session_id, role="user", content="DAVEAPI continuation")
    core.record_turn(
        response_id="resp_dave_2",
        session_id=second.session_id,
        conversation="dave-slug",
        data={"output": "DAVEAPI resp2"},
    )
    db.execute("UPDATE sessions SET user_id = NULL WHERE id = %s", [second.session_id])
    assert session(second.session_id)["parent_session_id"] == first.session_id

    _erase(Subject(user_id="dave-8888"))
    assert session(first.session_id) is None and session(second.session_id) is None
    assert not db.fetchall("SELECT id FROM messages WHERE content LIKE %s", ["DAVEAPI%"])
    assert conversation("dave-slug") is None
    assert not db.fetchall(
        "SELECT response_id FROM responses WHERE response_id IN (%s, %s)",
        ["resp_dave_1", "resp_dave_2"],
        alias=responses_alias(),
    )
    assert not db.fetchall(
        "SELECT id FROM sessions WHERE model_config LIKE %s", [f"%{first.session_id}%"]
    )


def _subject_merged_into_api(prefix: str, user: str, key: str) -> tuple[str, str]:
    now = time.time()
    mine, api = f"{prefix}_oli", f"{prefix}_api"
    _session_row(
        mine, user_id=user, chat_id=f"chat-{user}", key=key, started=now - 7200, ended=now - 7000
    )
    _message(mine, f"{prefix}MSG secret")
    db.execute(
        "INSERT INTO sessions (id, source, user_id, started_at, message_count) "
        "VALUES (%s, 'api_server', NULL, %s, 0)",
        [api, now - 6000],
    )
    _message(api, f"{prefix}APIOTHER keep me")
    _merge_into_api(mine, api, reason=f"merge of {key} into the API session")
    assert session(api)["session_key"] == key
    return mine, api


def test_the_subjects_key_moved_by_a_merge_does_not_purge_the_api_session_whole():
    """B3: given their own key, the erasure reaches the API session the merge moved it onto;
    only their moved rows go, the API client's message and session stay."""
    key = "agent:main:telegram:dm:eve5"
    mine, api = _subject_merged_into_api("R5", "eve5-4242", key)
    subject = Subject(user_id="eve5-4242", session_keys=(key,))
    plan = plan_erasure(subject=subject)
    assert api not in plan.session_ids and plan.kept_targets == (api,)
    assert {sid for _mid, sid in plan.other_messages} == {api}
    _erase(subject)
    assert session(mine) is None
    kept = session(api)
    assert kept is not None and kept["session_key"] is None
    assert [m["content"] for m in messages(api)] == ["R5APIOTHER keep me"]


def test_an_erasure_by_user_id_takes_back_the_key_a_merge_copied_onto_a_kept_session():
    """B4: the surviving API session no longer holds the subject's key (their telegram id),
    and the operator text naming the erased session's key and chat id is redacted."""
    key = "agent:main:telegram:dm:1781900077"
    mine, api = _subject_merged_into_api("R8", "1781900077", key)
    _erase(Subject(user_id="1781900077"))
    assert session(mine) is None
    kept = session(api)
    assert kept is not None and kept["session_key"] is None
    assert [m["content"] for m in messages(api)] == ["R8APIOTHER keep me"]
    assert not db.fetchall("SELECT id FROM sessions WHERE session_key = %s", [key])
    merge_entry = AuditEntry.objects.filter(action="merge").get()
    assert key not in str(merge_entry.reason)
    assert "[erased:" in str(merge_entry.reason)


def test_the_erased_sessions_chat_id_is_redacted_from_operator_text():
    """B4: a chat id found on the erased sessions (not typed by the operator) is redacted
    from hold reasons like the values given."""
    now = time.time()
    _session_row("S_zed", user_id="zed-3131", chat_id="chat-zed-4040", started=now - 100)
    hold = actions.place_hold(
        actor=None, kind="user", subject="someone-else", reason="see chat-zed-4040 thread"
    )
    _erase(Subject(user_id="zed-3131"))
    reason = db.fetchone("SELECT reason FROM sessions_admin_holds WHERE id = %s", [hold.id])[0]
    assert "chat-zed-4040" not in reason
    assert not [
        e.reason for e in AuditEntry.objects.exclude(action="erasure") if "chat-zed-4040" in str(e)
    ]


def test_a_child_without_a_user_id_trashed_alone_goes_with_the_subjects_session():
    """A child of the subject's session that was deleted to the trash on its own (its own
    trash operation, its parent still in the store, no user id) is the subject's too: the
    erasure purges its trash rows, not only the children trashed with a parent of theirs."""
    now = time.time()
    _session_row("S_dan", user_id="dan-7071", started=now - 3600, ended=now - 100)
    _message("S_dan", "DANROOT secret")
    _session_row("S_dchild", user_id=None, parent="S_dan", started=now - 3000, ended=now - 60)
    _message("S_dchild", "DANCHILD words of dan-7071")
    _session_row("S_bystander", user_id="erin-2", started=now - 10)
    _message("S_bystander", "unrelated")
    plan = core.plan_cascade_delete(session_ids=["S_dchild"])
    actions.cascade_delete(
        actor=None,
        session_ids=["S_dchild"],
        include_branches=False,
        expected_fingerprint=plan.fingerprint,
        reason="tidy up",
    )
    assert TrashSession.objects.filter(session_id="S_dchild").exists()

    _erase(Subject(user_id="dan-7071"))

    assert not TrashSession.objects.filter(session_id="S_dchild").exists()
    assert not any("DANCHILD" in str(entry.payload) for entry in TrashEntry.objects.all())
    assert db.fetchone("SELECT COUNT(*) FROM sessions WHERE id = 'S_bystander'")[0] == 1
