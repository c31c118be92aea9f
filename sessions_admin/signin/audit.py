"""Failed sign-ins in the audit log: who tried which name, from where, when.

A ``user_login_failed`` receiver (connected in ``SigninConfig.ready``). Django
sends the signal for a wrong password, an unknown name, and an attempt django-axes
refused during a lockout (its backend's PermissionDenied ends ``authenticate``).
The entry says the same for a real and an unknown name, as the sign-in page does.
The lockout itself and its counters are django-axes's (sessions_admin.signin).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from sessions_admin.ledger.actions import record_refusal
from sessions_admin.ledger.models import AuditAction, AuditEntry
from sessions_admin.signin.lockout import client_address, cooloff_minutes

USERNAME_MAX = 150
LOCKED_OUT = "sign-in refused during a lockout after repeated failures"


def _lockout_already_recorded(request: Any, tried: str) -> bool:
    """Whether this lockout's refusals for this name and address are already in the log.

    One entry per name, address and cool-off window: a client hammering a locked-out
    name must not grow the append-only audit log at its request rate.
    """

    return AuditEntry.objects.filter(
        action=AuditAction.SIGN_IN,
        outcome=AuditEntry.REFUSED,
        detail=LOCKED_OUT,
        client_address=client_address(request) if request is not None else None,
        before__username=tried,
        created_at__gte=timezone.now() - timedelta(minutes=cooloff_minutes()),
    ).exists()


def record_failed_sign_in(sender: Any, credentials: dict, request: Any = None, **kwargs) -> None:

    tried = credentials.get("username")
    tried = tried[:USERNAME_MAX] if isinstance(tried, str) else ""
    locked = bool(getattr(request, "axes_locked_out", False))
    if locked:
        record_locked_out_sign_in(request, tried)
        return
    record_refusal(
        request=request,
        actor="anonymous",
        action=AuditAction.SIGN_IN,
        why="wrong user name or password",
        before={"username": tried},
    )


def record_locked_out_sign_in(request: Any, tried: str | None) -> None:
    """A sign-in refused because its name or address is locked out: on record once per window.

    django-axes answers these before any password is checked, so no ``user_login_failed``
    is sent for them; its lockout page calls this instead.
    """

    tried = tried[:USERNAME_MAX] if isinstance(tried, str) else ""
    if _lockout_already_recorded(request, tried):
        return
    record_refusal(
        request=request,
        actor="anonymous",
        action=AuditAction.SIGN_IN,
        why=LOCKED_OUT,
        before={"username": tried},
    )
