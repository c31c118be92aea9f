"""A runtime holding an old session id: every write it makes is refused or lands where it should.

Issue items 6-10: rewinds and rewrites of an ended segment, a stale transcript save after an
operator's undo, a slug whose session ended, usage and turns recorded against an ended session,
and resume's one-live-session rule. Each test checks the store after the call, not a message.
"""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.rows import parse_model_config
from sessions_admin.routers import responses_alias
from tests.helpers import conversation, messages, session


def chat(key: str = "tg:1") -> str:
    ref = core.create_session(source="telegram", session_key=key).session_id
    for n in range(2):
        core.append_message(session_id=ref, role="user", content=f"question {n}")
        core.append_message(session_id=ref, role="assistant", content=f"answer {n}")
    return ref


def snapshot(session_id: str) -> tuple:
    row = session(session_id)
    return (
        row["ended_at"],
        row["message_count"],
        row["rewind_count"],
        [(m["id"], m["active"]) for m in messages(session_id)],
    )


@pytest.mark.parametrize(
    "rewrite",
    [
        lambda sid: core.undo_last_turn(session_id=sid),
        lambda sid: core.retry_last_turn(session_id=sid),
        lambda sid: core.redo_turn(session_id=sid),
        lambda sid: core.save_transcript(  # a shorter history: drops rows only
            session_id=sid, messages=[{"role": "user", "content": "question 0"}], rewrite=True
        ),
        lambda sid: core.save_transcript(
            session_id=sid,
            messages=[
                *({"role": m["role"], "content": m["content"]} for m in messages(sid)),
                {"role": "user", "content": "one more"},
            ],
        ),
    ],
    ids=["undo", "retry", "redo", "save-rewrite", "save-append"],
)
def test_rewinding_an_ended_segment_is_refused_naming_the_live_session(rewrite):
    old = chat()
    core.undo_last_turn(session_id=old)  # something for redo to bring back
    live = core.reset_session_key(session_key="tg:1").new_session_id
    before_old, before_live = snapshot(old), snapshot(live)
    with pytest.raises(core.SessionEnded) as ended:
        rewrite(old)
    assert ended.value.live_session_id == live
    assert (snapshot(old), snapshot(live)) == (before_old, before_live)


def test_a_save_that_matches_an_ended_session_exactly_is_a_no_op():
    old = chat()
    core.end_session(session_id=old, end_reason="user_exit")
    same = [{"role": m["role"], "content": m["content"]} for m in messages(old)]
    result = core.save_transcript(session_id=old, messages=same)
    assert (result.kept, result.appended, result.deactivated) == (4, 0, 0)


def test_a_stale_save_does_not_bring_back_a_turn_an_operator_undid():
    ref = chat()
    in_memory = [{"role": m["role"], "content": m["content"]} for m in messages(ref)]
    core.undo_last_turn(session_id=ref)  # the operator, in the console
    result = core.save_transcript(session_id=ref, messages=in_memory)  # the runtime, unaware
    assert (result.appended, result.deactivated) == (0, 0)
    active = [m["content"] for m in messages(ref, active_only=True)]
    assert active == ["question 0", "answer 0"]
    assert session(ref)["message_count"] == 2
    # Its next turn, after the stale history, is appended; the undone turn stays undone.
    in_memory.append({"role": "user", "content": "question 2"})
    core.save_transcript(session_id=ref, messages=in_memory)
    active = [m["content"] for m in messages(ref, active_only=True)]
    assert active == ["question 0", "answer 0", "question 2"]
    # Redo still restores nothing out of order: the conversation moved on.
    with pytest.raises(core.NothingToUndo):
        core.redo_turn(session_id=ref)


def test_a_stale_save_after_a_retry_keeps_the_dropped_reply_dropped():
    ref = chat()
    in_memory = [{"role": m["role"], "content": m["content"]} for m in messages(ref)]
    core.retry_last_turn(session_id=ref)
    core.save_transcript(session_id=ref, messages=in_memory)
    active = [m["content"] for m in messages(ref, active_only=True)]
    assert active == ["question 0", "answer 0", "question 1"]


def test_a_message_sent_again_after_an_undo_is_a_new_turn():
    ref = chat()
    core.undo_last_turn(session_id=ref)
    history = [
        {"role": m["role"], "content": m["content"]} for m in messages(ref, active_only=True)
    ]
    # The user asks the same question again: only the reply differs from the undone turn.
    history += [
        {"role": "user", "content": "question 1"},
        {"role": "assistant", "content": "a better answer"},
    ]
    result = core.save_transcript(session_id=ref, messages=history)
    assert result.appended == 2
    active = [m["content"] for m in messages(ref, active_only=True)]
    assert active == ["question 0", "answer 0", "question 1", "a better answer"]


def test_a_slug_whose_session_ended_continues_in_a_linked_live_session():
    first = core.resolve_conversation(conversation="sidekick")
    core.append_message(session_id=first.session_id, role="user", content="hello")
    core.record_turn(response_id="r1", session_id=first.session_id, conversation="sidekick")
    core.end_session(session_id=first.session_id, end_reason="idle")

    again = core.resolve_conversation(conversation="sidekick")
    assert again.session_id != first.session_id
    assert (again.resolved_by, again.created) == ("continuation", True)
    row = session(again.session_id)
    assert row["ended_at"] is None and row["parent_session_id"] == first.session_id
    assert parse_model_config(row["model_config"])["_continued_from"] == first.session_id
    assert conversation("sidekick")[1] == again.session_id
    nodes = core.lineage_tree(session_id=again.session_id)
    assert [(n.session_id, n.edge_kind) for n in nodes] == [
        (first.session_id, None),
        (again.session_id, "continuation"),
    ]
    # Resolving again, or by the old response id, stays on the continuation.
    assert core.resolve_conversation(conversation="sidekick").session_id == again.session_id
    by_response = core.resolve_conversation(previous_response_id="r1")
    assert by_response.session_id == again.session_id
    assert db.fetchone("SELECT COUNT(*) FROM sessions")[0] == 2


def test_a_slug_whose_key_has_a_live_session_continues_there():
    old = core.create_session(source="api_server", session_key="api:k").session_id
    core.record_turn(response_id="r1", session_id=old, conversation="keyed")
    live = core.create_session(source="api_server", session_key="api:k").session_id  # a /new
    db.execute(  # the slug as a runtime left it, on the ended session
        "UPDATE conversations SET session_id = %s WHERE name = 'keyed'",
        [old],
        alias=responses_alias(),
    )
    assert core.resolve_conversation(conversation="keyed").session_id == live
    assert conversation("keyed")[1] == live


def test_usage_and_turns_recorded_against_an_ended_session_are_refused():
    old = chat()
    live = core.reset_session_key(session_key="tg:1").new_session_id
    core.record_turn(response_id="r-live", session_id=live, conversation="slug")
    with pytest.raises(core.SessionEnded) as ended:
        core.add_usage(session_id=old, input_tokens=10, cost_usd=0.5)
    assert ended.value.live_session_id == live
    assert (session(old)["input_tokens"] or 0) == 0
    with pytest.raises(core.SessionEnded) as ended:
        core.record_turn(response_id="r-stale", session_id=old, conversation="slug")
    assert ended.value.live_session_id == live
    assert conversation("slug") == ("r-live", live)
    stored = db.fetchone(
        "SELECT 1 FROM responses WHERE response_id = 'r-stale'", alias=responses_alias()
    )
    assert stored is None


def test_resume_ends_every_other_live_session_of_its_key():
    a = chat("tg:9")
    core.end_session(session_id=a, end_reason="user_exit")
    # A forking runtime left two live sessions for the key (written as it would have).
    for sid in ("fork-1", "fork-2"):
        db.execute(
            "INSERT INTO sessions (id, source, session_key, started_at) VALUES (%s, 'telegram', 'tg:9', %s)",
            [sid, 2e9 if sid == "fork-2" else 1.9e9],
        )
    result = core.resume_session(ref=a)
    assert result.session_id == a
    assert result.switched_from_session_id == "fork-2"
    assert session("fork-1")["end_reason"] == session("fork-2")["end_reason"] == "session_switch"
    live = db.fetchall("SELECT id FROM sessions WHERE session_key = 'tg:9' AND ended_at IS NULL")
    assert live == [(a,)]


def test_resuming_the_live_session_changes_nothing_and_announces_nothing():
    ref = chat()
    heard = []
    core.register_listener(lambda new_id, **kw: heard.append(new_id))
    events_before = core.read_switch_events()
    result = core.resume_session(ref=ref)
    assert result.switched_from_session_id is None
    assert core.read_switch_events() == events_before
    assert heard == []
    assert session(ref)["ended_at"] is None


def test_a_keyless_caller_names_the_session_it_leaves():
    old = core.create_session(source="cli").session_id
    core.end_session(session_id=old, end_reason="cli_close")
    current = core.create_session(source="cli").session_id
    result = core.resume_session(ref=old, current_session_id=current)
    assert result.switched_from_session_id == current
    assert session(current)["end_reason"] == "session_switch"
    assert session(old)["ended_at"] is None
    (event,) = [e for e in core.read_switch_events() if e.reason == "resume"]
    assert event.previous_session_id == current


def live_of(key: str) -> list[str]:
    return [
        r[0]
        for r in db.fetchall(
            "SELECT id FROM sessions WHERE session_key = %s AND ended_at IS NULL ORDER BY id", [key]
        )
    ]


def test_a_merge_reopening_its_target_leaves_one_live_session_and_unmerge_puts_it_back():
    old = core.create_session(source="telegram", session_key="tg:m", session_id="a-old").session_id
    current = core.create_session(source="telegram", session_key="tg:m", session_id="c-now")
    fork = core.create_session(source="api_server", session_id="b-fork").session_id
    core.append_message(session_id=fork, role="user", content="lost half")
    merged = core.merge_sessions(session_ids=[old, fork], target_id=old)
    assert live_of("tg:m") == [old]  # the target goes on; the key's other session made way
    assert session(current.session_id)["end_reason"] == "session_switch"
    core.unmerge(merge_id=merged.merge_id)
    assert live_of("tg:m") == [current.session_id]
    assert session(old)["end_reason"] == "new_session"
    assert session(fork)["ended_at"] is None


def test_an_unmerge_after_the_key_moved_on_keeps_the_new_live_session():
    a = core.create_session(source="telegram", session_key="tg:u", session_id="a1").session_id
    core.end_session(session_id=a, end_reason="user_exit")
    b = core.create_session(source="telegram", session_key="tg:u", session_id="b1").session_id
    merged = core.merge_sessions(session_ids=[a, b], target_id=a)
    newest = core.reset_session_key(session_key="tg:u").new_session_id
    core.unmerge(merge_id=merged.merge_id)
    assert live_of("tg:u") == [newest]
    assert session(b)["end_reason"] == "session_switch"


def test_a_trash_restore_does_not_take_over_the_key_of_a_runtime_that_moved_on():
    gone = core.create_session(source="telegram", session_key="tg:r").session_id
    core.append_message(session_id=gone, role="user", content="hello")
    plan = core.plan_cascade_delete(session_ids=[gone])
    deleted = core.execute_cascade_delete(
        session_ids=[gone], expected_fingerprint=plan.fingerprint, actor="t", reason="test"
    )
    now_live = core.create_session(source="telegram", session_key="tg:r").session_id
    core.restore_trash_entry(entry_id=deleted.trash_entry_ids[0], actor="t")
    assert live_of("tg:r") == [now_live]
    assert session(gone)["end_reason"] == "session_switch"
    assert len(messages(gone)) == 1


def test_a_keyless_session_that_branched_names_and_continues_in_its_live_branch():
    first = core.resolve_conversation(conversation="branchy")
    core.append_message(session_id=first.session_id, role="user", content="hello")
    core.record_turn(response_id="r1", session_id=first.session_id, conversation="branchy")
    branch = core.branch_session(session_id=first.session_id).new_session_id
    with pytest.raises(core.SessionEnded) as ended:
        core.append_message(session_id=first.session_id, role="user", content="stale")
    assert ended.value.live_session_id == branch
    again = core.resolve_conversation(conversation="branchy")
    assert (again.session_id, again.created) == (branch, False)
    assert conversation("branchy")[1] == branch
