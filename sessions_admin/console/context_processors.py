from __future__ import annotations

from sessions_admin.signin.roles import role_of


def operator(request) -> dict:
    from django.conf import settings

    user = getattr(request, "user", None)
    return {
        "operator_role": role_of(user) if user is not None else None,
        "store_read_only": bool(getattr(settings, "SESSIONS_ADMIN_READ_ONLY", False)),
    }
