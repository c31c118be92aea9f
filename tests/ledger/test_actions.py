"""Every operator action leaves an audit entry, including refused ones."""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditEntry, AuditSession


def test_a_successful_action_is_audited_with_before_and_after(ada):
    sid = core.create_session(source="cli").session_id
    core.append_messages(
        session_id=sid,
        messages=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a"},
        ],
    )
    actions.rewrite(actor=ada, session_id=sid, action="undo", reason="user asked")
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.actor_name, entry.action, entry.outcome) == (
        ada,
        "ada",
        "undo",
        "ok",
    )
    assert entry.before[sid]["messages"] == 2
    assert entry.after["message_count"] == 0
    assert entry.reason == "user asked"
    assert list(AuditSession.objects.values_list("session_id", flat=True)) == [sid]


def test_a_refused_action_is_audited_as_failed(ada):
    sid = core.create_session(source="cli").session_id
    with pytest.raises(core.NothingToUndo):
        actions.rewrite(actor=ada, session_id=sid, action="undo")
    entry = AuditEntry.objects.get()
    assert entry.outcome == "failed" and "no turn to undo" in entry.detail


def test_destructive_actions_need_a_reason_and_change_nothing_without_one(ada):
    sid = core.create_session(source="cli").session_id
    core.end_session(session_id=sid, end_reason="user_exit")
    plan = core.plan_cascade_delete(session_ids=[sid])
    with pytest.raises(core.InvalidInput):
        actions.cascade_delete(
            actor=ada,
            session_ids=[sid],
            include_branches=False,
            expected_fingerprint=plan.fingerprint,
            reason="",
        )
    assert core.lineage.session_row(sid) is not None
    with pytest.raises(core.InvalidInput):
        actions.purge(actor=ada, older_than_days=None, reason=" ")
    actions.cascade_delete(
        actor=ada,
        session_ids=[sid],
        include_branches=False,
        expected_fingerprint=plan.fingerprint,
        reason="cleanup",
    )
    entry = AuditEntry.objects.get(action="cascade_delete")
    assert entry.after["deleted_sessions"] == 1 and entry.reason == "cleanup"


def test_resume_and_reset_link_every_session_they_touch(ada):
    old = core.create_session(source="telegram", session_key="tg:a", title="Trip").session_id
    tip = core.rotate_for_compression(session_id=old).new_session_id
    core.end_session(session_id=tip, end_reason="user_exit")
    other = core.create_session(source="telegram", session_key="tg:a").session_id
    actions.resume(actor=ada, ref="Trip")
    resumed = AuditEntry.objects.get(action="resume")
    assert set(resumed.sessions.values_list("session_id", flat=True)) == {old, tip, other}
    reset = actions.reset(actor=ada, session_key="tg:a")
    entry = AuditEntry.objects.get(action="reset")
    assert set(entry.sessions.values_list("session_id", flat=True)) == {tip, reset.new_session_id}


def test_a_nul_character_is_refused_clearly_on_every_backend(ada):
    sid = core.create_session(source="cli").session_id
    with pytest.raises(core.InvalidInput):
        core.append_message(session_id=sid, role="user", content="a\x00b")
    with pytest.raises(core.InvalidInput):
        core.append_message(session_id=sid, role="tool", content="ok", tool_name="x\x00")
    assert core.lineage.session_row(sid)["message_count"] == 0
