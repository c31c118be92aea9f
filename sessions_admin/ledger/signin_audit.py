"""Failed sign-ins in the audit log: who tried which name, from where, when.

A ``user_login_failed`` receiver (connected in ``LedgerConfig.ready``). Django
sends the signal for a wrong password, an unknown name, and an attempt django-axes
refused during a lockout (its backend's PermissionDenied ends ``authenticate``).
The entry says the same for a real and an unknown name, as the sign-in page does.
The lockout itself and its counters are django-axes's (sessions_admin.signin).
"""

from __future__ import annotations

from typing import Any

USERNAME_MAX = 150


def record_failed_sign_in(sender: Any, credentials: dict, request: Any = None, **kwargs) -> None:
    from sessions_admin.ledger.actions import record_refusal

    tried = credentials.get("username")
    tried = tried[:USERNAME_MAX] if isinstance(tried, str) else ""
    locked = bool(getattr(request, "axes_locked_out", False))
    record_refusal(
        request=request,
        actor="anonymous",
        action="sign_in",
        why=(
            "sign-in refused during a lockout after repeated failures"
            if locked
            else "wrong user name or password"
        ),
        before={"username": tried},
    )
