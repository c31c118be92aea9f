"""Actions on one session or session key: resume, reset, a transcript's undo/redo/retry, and
moving stray messages (written into an ended session) to where it continues, and back."""

from __future__ import annotations

from collections.abc import Sequence

from sessions_admin import core
from sessions_admin.core import stray
from sessions_admin.core.errors import InvalidInput, StoreError
from sessions_admin.core.lifecycle import recoverable_siblings
from sessions_admin.core.text import (
    REFERENCE_MAX,
    SUMMARY_MAX,
    operator_identifier,
    operator_text,
)
from sessions_admin.ledger.actions.audit import (
    _audit_alias,
    _audited,
    _check_fingerprint,
    _counts,
)
from sessions_admin.ledger.models import AuditAction, AuditEntry
from sessions_admin.store.models import Session


def resume(
    *, actor, ref: str, reason: str = "", expected_fingerprint: str | None = None
) -> core.ResumeResult:
    """``core.resume_session``, audited; with a ``plan_resume`` fingerprint, only as planned."""
    ref = operator_identifier(ref, field="session reference", max_length=REFERENCE_MAX)
    _check_fingerprint(expected_fingerprint)
    reason = operator_text(reason, field="reason")
    try:
        asked = [core.resolve_session_ref(ref)]
    except StoreError:
        asked = []  # the refusal is audited below, with the reference as given
    recoverable = []
    if asked:
        target = core.current_session(session_id=asked[0])
        key = _key_of(target)
        recoverable = recoverable_siblings(key, over=target)
    return _audited_reending(
        recoverable,
        "session_switch",
        actor=actor,
        action=AuditAction.RESUME,
        session_ids=asked,
        reason=reason,
        before={"ref": ref, **_counts(asked)},
        run=lambda: core.resume_session(ref=ref, expected_fingerprint=expected_fingerprint),
        after=lambda r: {"resumed": r.session_id, "switched_from": r.switched_from_session_id},
        result_ids=lambda r: [r.session_id, r.switched_from_session_id],
    )


def _key_of(session_id: str) -> str | None:

    return Session.objects.filter(id=session_id).values_list("session_key", flat=True).first()


def _audited_reending(
    recoverable: Sequence[tuple[str, str]], now: str, *, before, after, result_ids, **audit
):
    """``_audited`` for a resume or reset, which re-ends the siblings a gateway could reopen
    (``recoverable``) with the end reason ``now``: what they were before (what a gateway
    could have reopened instead), and which it closed. Absent when there were none, so a
    plain resume or reset reads as before."""

    def closed(r) -> dict:
        if not r.closed_recoverable:
            return {}
        return {
            "closed_recoverable": {
                sid: {"end_reason_before": was, "end_reason": now}
                for sid, was in r.closed_recoverable
            }
        }

    return _audited(
        before={**before, **({"recoverable_siblings": dict(recoverable)} if recoverable else {})},
        after=lambda r: {**after(r), **closed(r)},
        result_ids=lambda r: [*result_ids(r), *(sid for sid, _ in r.closed_recoverable)],
        **audit,
    )


def reset(
    *, actor, session_key: str, summary: str | None = None, reason: str = ""
) -> core.ResetResult:
    session_key = operator_identifier(session_key, field="session key")
    summary = operator_text(summary, field="summary", max_length=SUMMARY_MAX) or None
    reason = operator_text(reason, field="reason")
    live = core.live_session_for_key(session_key)
    recoverable = recoverable_siblings(session_key)
    return _audited_reending(
        recoverable,
        "session_reset",
        actor=actor,
        action=AuditAction.RESET,
        session_ids=[s for s in [live] if s],
        reason=reason,
        before={"session_key": session_key, "live": live},
        run=lambda: core.reset_session_key(session_key=session_key, summary=summary),
        after=lambda r: {
            "ended": r.ended_session_id,
            "new": r.new_session_id,
            **({"left_to_gateway": True} if r.left_to_gateway else {}),
        },
        result_ids=lambda r: [r.ended_session_id, r.new_session_id],
    )


def recount(*, actor, session_id: str, reason: str = "") -> core.RecountResult:
    """Set a session's counters from its active rows (``core.recount_session``), audited."""
    reason = operator_text(reason, field="reason")
    return _audited(
        actor=actor,
        action=AuditAction.RECOUNT,
        session_ids=[session_id],
        reason=reason,
        before={},
        run=lambda: core.recount_session(session_id=session_id),
        after=lambda r: {
            "message_count": [r.before[0], r.after[0]],
            "tool_call_count": [r.before[1], r.after[1]],
        },
    )


def rewrite(
    *,
    actor,
    session_id: str,
    action: str,
    reason: str = "",
    expected_fingerprint: str | None = None,
) -> core.RewriteResult:
    """Undo, redo or retry, audited; with a ``plan_rewrite`` fingerprint, only as planned.
    An operator's undo or retry waits for the runtime's reply (``core.TurnInProgress``)."""
    operations = {
        "undo": lambda **a: core.undo_last_turn(**a, wait_for_reply=True),
        "redo": core.redo_turn,
        "retry": lambda **a: core.retry_last_turn(**a, wait_for_reply=True),
    }
    if action not in operations:
        raise InvalidInput(f"Unknown transcript action {action!r}.")
    session_id = operator_identifier(session_id, field="session id")
    _check_fingerprint(expected_fingerprint)
    reason = operator_text(reason, field="reason")
    return _audited(
        actor=actor,
        action=action,
        session_ids=[session_id],
        reason=reason,
        before=_counts([session_id]),
        run=lambda: operations[action](
            session_id=session_id, expected_fingerprint=expected_fingerprint or None
        ),
        after=lambda r: {"message_ids": list(r.message_ids), "message_count": r.message_count},
    )


STRAY_MOVE = AuditAction.MOVE_STRAY_MESSAGES
STRAY_RETURN = AuditAction.RETURN_STRAY_MESSAGES


def move_stray_messages(
    *, actor, session_id: str, expected_fingerprint: str, reason: str = ""
) -> stray.StrayMoveResult:
    """Move what was written into an ended session to where it continues (previewed plan)."""
    session_id = operator_identifier(session_id, field="session id")
    _check_fingerprint(expected_fingerprint)
    reason = operator_text(reason, field="reason")
    return _audited(
        actor=actor,
        action=STRAY_MOVE,
        session_ids=[session_id],
        reason=reason,
        before={"fingerprint": expected_fingerprint, **_counts([session_id])},
        run=lambda: stray.move_stray_messages(
            session_id=session_id, expected_fingerprint=expected_fingerprint
        ),
        # The undo reads its plan from here: which ids went where.
        after=lambda r: {
            "from": r.session_id,
            "to": r.destination_id,
            "message_ids": list(r.message_ids),
            **_counts([r.session_id, r.destination_id]),
        },
        result_ids=lambda r: [r.destination_id],
    )


def undo_stray_move(*, actor, entry_id: int, reason: str = "") -> stray.StrayReturnResult:
    """Give the messages a ``move_stray_messages`` entry moved back to the session they left."""
    reason = operator_text(reason, field="reason")
    entry = (
        AuditEntry.objects.using(_audit_alias())
        .filter(pk=entry_id, action=STRAY_MOVE, outcome=AuditEntry.OK)
        .first()
    )
    if entry is None or not isinstance(entry.after, dict) or "message_ids" not in entry.after:
        raise InvalidInput(f"No completed move of stray messages #{entry_id}.")
    moved = entry.after
    return _audited(
        actor=actor,
        action=STRAY_RETURN,
        session_ids=[moved["from"], moved["to"]],
        reason=reason,
        before={"move_entry": entry.pk, **_counts([moved["from"], moved["to"]])},
        run=lambda: stray.return_stray_messages(
            session_id=moved["from"], destination_id=moved["to"], message_ids=moved["message_ids"]
        ),
        after=lambda r: {
            "move_entry": entry.pk,
            "returned_ids": list(r.returned_ids),
            **_counts([r.session_id, r.destination_id]),
        },
    )
