"""Placing and releasing legal holds, audited (the rules are ``core.holds``)."""

from __future__ import annotations

from sessions_admin.core import holds as holds_core
from sessions_admin.core.text import operator_identifier, operator_text
from sessions_admin.ledger.actions.audit import _audited, _name
from sessions_admin.ledger.models import AuditAction


def place_hold(*, actor, kind: str, subject: str, reason: str) -> holds_core.Hold:
    """Put a session (its whole lineage) or a user under a legal hold: audited."""
    subject = operator_identifier(subject, field="session or user id")
    reason = operator_text(reason, field="reason", required=True)
    return _audited(
        actor=actor,
        action=AuditAction.PLACE_HOLD,
        session_ids=[subject] if kind == holds_core.SESSION else [],
        reason=reason,
        before={"kind": kind, "subject": subject},
        run=lambda: holds_core.place_hold(
            kind=kind, subject=subject, reason=reason, actor=_name(actor)
        ),
        after=lambda hold: {"hold": hold.id, "kind": hold.kind, "subject": hold.subject},
    )


def release_hold(*, actor, hold_id: int, reason: str) -> holds_core.Hold:
    """End a legal hold: audited, with the reason kept on the hold too."""
    reason = operator_text(reason, field="reason", required=True)
    hold = holds_core.get_hold(hold_id=hold_id)
    return _audited(
        actor=actor,
        action=AuditAction.RELEASE_HOLD,
        session_ids=[hold.subject] if hold and hold.kind == holds_core.SESSION else [],
        reason=reason,
        before={"hold": hold_id, "kind": hold.kind if hold else None},
        run=lambda: holds_core.release_hold(hold_id=hold_id, reason=reason, actor=_name(actor)),
        after=lambda released: {"hold": released.id, "released": True},
    )
