"""Bulk-delete presets never take what an operator would lose by a preset: merge husks, live sessions."""

from __future__ import annotations

from sessions_admin import core


def _ended(source: str, *, messages: int = 1, key: str | None = None) -> str:
    sid = core.create_session(source=source, session_key=key).session_id
    for n in range(messages):
        core.append_message(session_id=sid, role="user", content=f"{sid} {n}")
    core.end_session(session_id=sid, end_reason="user_exit")
    return sid


def test_no_presets_dry_run_takes_the_husk_of_an_undoable_merge():
    kept, absorbed = _ended("cli"), _ended("cli")
    plan = core.plan_merge(session_ids=[kept, absorbed], target_id=kept)
    merge = core.merge_sessions(
        session_ids=[kept, absorbed], target_id=kept, expected_fingerprint=plan.fingerprint
    )
    # The husk is empty now; deleting it would make the merge impossible to undo: the dry run
    # (what a job deletes) leaves it out, and the target too, saying why
    # (tests/core/test_bulk_undo_guard.py).
    for preset in (
        {"preset": "empty"},
        {"preset": "ended_older_than", "days": 0},
        {"preset": "by_source", "source": "cli"},
    ):
        preview = core.preview_bulk_delete(session_ids=core.preset_session_ids(**preset))
        assert absorbed not in preview.session_ids
        assert kept not in preview.session_ids

    core.unmerge(merge_id=merge.merge_id)
    preview = core.preview_bulk_delete(
        session_ids=core.preset_session_ids(preset="by_source", source="cli")
    )
    assert {kept, absorbed} <= set(preview.session_ids)


def test_the_empty_preset_never_selects_the_session_a_reset_just_started():
    key = "agent:main:telegram:dm:9"
    _ended("telegram", key=key)
    fresh = core.reset_session_key(session_key=key).new_session_id
    leftover = _ended("telegram", messages=0)

    selected = core.preset_session_ids(preset="empty")
    assert selected == [leftover]
    # Ticking "include live sessions" does not bring it back: a live session is picked by id.
    preview = core.preview_bulk_delete(session_ids=selected, include_live=True)
    assert fresh not in preview.session_ids
    assert core.preview_bulk_delete(session_ids=[fresh], include_live=True).session_ids == (fresh,)
