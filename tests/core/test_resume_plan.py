"""plan_resume: what a resume would do, and resume_session acting only on the plan shown."""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.errors import ResumePlanChanged
from sessions_admin.core.lifecycle import plan_resume
from tests.helpers import session


def snapshot() -> list[tuple]:
    return db.fetchall("SELECT id, ended_at, end_reason FROM sessions ORDER BY id")


def compressed_then_replaced(key: str = "tg:dm:1") -> tuple[str, str, str]:
    """root -> tip by compression, the tip evicted, then a newer live session of the key."""
    root = core.create_session(source="telegram", session_key=key).session_id
    core.append_message(session_id=root, role="user", content="question")
    tip = core.rotate_for_compression(session_id=root, summary="summary").new_session_id
    core.end_session(session_id=tip, end_reason="lru_evict")
    newer = core.create_session(source="telegram", session_key=key).session_id
    return root, tip, newer


def test_the_plan_names_the_tip_and_the_live_session_it_switches_from():
    root, tip, newer = compressed_then_replaced()
    before = snapshot()
    plan = plan_resume(ref=root)
    assert (plan.asked_id, plan.target_id, plan.followed) == (root, tip, "compression")
    assert (plan.switch_from_id, plan.ending_ids) == (newer, (newer,))
    assert (plan.target_end_reason, plan.already_live, plan.nothing_to_do) == (
        "lru_evict",
        False,
        False,
    )
    assert plan.chain_length == 2
    assert snapshot() == before  # planning writes nothing


def test_a_matching_fingerprint_resumes_as_planned():
    root, tip, newer = compressed_then_replaced()
    plan = plan_resume(ref=root)
    result = core.resume_session(ref=root, expected_fingerprint=plan.fingerprint)
    assert (result.session_id, result.switched_from_session_id) == (tip, newer)
    assert session(tip)["ended_at"] is None
    assert session(newer)["end_reason"] == "session_switch"


def test_the_plan_goes_stale_when_another_session_of_the_key_starts():
    root, tip, newer = compressed_then_replaced()
    plan = plan_resume(ref=root)
    newest = core.create_session(source="telegram", session_key="tg:dm:1").session_id
    before = snapshot()
    with pytest.raises(ResumePlanChanged) as stale:
        core.resume_session(ref=root, expected_fingerprint=plan.fingerprint)
    assert snapshot() == before  # nothing resumed, nothing switched
    assert stale.value.plan.switch_from_id == newest
    assert stale.value.plan.fingerprint != plan.fingerprint
    assert stale.value.plan == plan_resume(ref=root)  # the plan read under the locks


def test_the_plan_goes_stale_when_the_target_is_resumed_meanwhile():
    root, tip, _ = compressed_then_replaced()
    plan = plan_resume(ref=root)
    core.resume_session(ref=tip)
    with pytest.raises(ResumePlanChanged):
        core.resume_session(ref=root, expected_fingerprint=plan.fingerprint)


def test_without_a_fingerprint_resume_acts_on_what_it_finds():
    root, tip, newer = compressed_then_replaced()
    plan_resume(ref=root)
    core.create_session(source="telegram", session_key="tg:dm:1")
    assert core.resume_session(ref=root).session_id == tip


def test_a_live_session_alone_on_its_key_has_nothing_to_do():
    ref = core.create_session(source="cli", session_key="cli:me").session_id
    plan = plan_resume(ref=ref)
    assert plan.nothing_to_do and plan.followed is None and plan.switch_from_id is None
    result = core.resume_session(ref=ref, expected_fingerprint=plan.fingerprint)
    assert result.previous_end_reason is None
