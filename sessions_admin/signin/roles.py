"""Operator roles: Django groups holding the console's permissions.

viewer reads; support also operates (merge, resume, reset, undo); admin also deletes.

``withheld_from`` is the one rule of what a role reads of legal holds and erasures, wherever
they show (a session's page and its API read, the audit log, its CSV, the API's audit): the
roles that open their pages (/holds/: support and admin; /erasure/: admin) see everything; a
viewer sees that a session is under a legal hold, and of a hold's audit entries only who did
what when, and with what outcome, to which sessions; support and viewers see no erasure's
reference. By role, not permission: a store attached read-only hides nothing more.
"""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission, User

from sessions_admin.ledger.audit_log import NOTHING_WITHHELD, Withheld, WithheldFor
from sessions_admin.ledger.models import AuditAction

ROLE_PERMISSIONS = {
    "viewer": ["view_store"],
    "support": ["view_store", "operate_sessions"],
    "admin": ["view_store", "operate_sessions", "delete_sessions"],
}
ROLES = tuple(ROLE_PERMISSIONS)

VIEW = "console.view_store"
OPERATE = "console.operate_sessions"
DELETE = "console.delete_sessions"


def ensure_roles() -> None:
    from django.apps import apps
    from django.contrib.auth.management import create_permissions

    create_permissions(apps.get_app_config("console"), verbosity=0)
    for role, codenames in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        perms = Permission.objects.filter(content_type__app_label="console", codename__in=codenames)
        group.permissions.set(perms)


def ensure_roles_after_migrate(sender, **kwargs) -> None:
    if kwargs.get("using", "default") == "default":
        ensure_roles()


def role_of(user: User) -> str | None:
    """The strongest role the user holds (superusers count as admin)."""
    if not user.is_authenticated:
        return None
    if user.is_superuser:
        return "admin"
    names = set(user.groups.values_list("name", flat=True))
    for role in reversed(ROLES):
        if role in names:
            return role
    return None


def assign_role(user: User, role: str) -> None:
    if role not in ROLE_PERMISSIONS:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    ensure_roles()
    user.groups.set([Group.objects.get(name=role)])


# --- what a role is shown of legal holds and erasures -----------------------------------------

LEGAL_HOLD = "legal_hold"  # a session's hold (its page, ``GET /api/v1/sessions/{id}``)
_HOLD_DETAILS = "details shown to support and admins"
_ERASURE_DETAILS = "reference shown to admins"
_HOLD_ENTRY = Withheld(frozenset({"before", "after", "reason", "detail"}), _HOLD_DETAILS)
# An erasure's entry keeps only the subject's keyed hash and counts: its reference (the
# operator's words, ``reason``) and any failure's words (``detail``) are withheld.
_ERASURE_ENTRY = Withheld(frozenset({"reason", "detail"}), _ERASURE_DETAILS)
# What is withheld (of a hold, or of an audit entry by its action) from a role below the one
# named, the least that sees it whole.
DETAILS_FOR = {
    LEGAL_HOLD: (
        "support",
        Withheld(frozenset({"id", "kind", "subject", "reason"}), _HOLD_DETAILS),
    ),
    AuditAction.PLACE_HOLD: ("support", _HOLD_ENTRY),
    AuditAction.RELEASE_HOLD: ("support", _HOLD_ENTRY),
    AuditAction.ERASURE: ("admin", _ERASURE_ENTRY),
    AuditAction.ERASURE_REQUEST: ("admin", _ERASURE_ENTRY),
    AuditAction.ERASURE_FILES_REWRITTEN: ("admin", _ERASURE_ENTRY),
    AuditAction.ERASURE_INDEX_MERGED: ("admin", _ERASURE_ENTRY),
}


def withheld_from(role: str | None, what: str) -> Withheld:
    """What a reader of ``role`` (a console role or an API token's scope; None: none) is not
    shown of ``what``: ``LEGAL_HOLD`` (a session's hold), or an audit entry's action. Nothing
    withheld from the roles that open the page of what it is about, everything the rule names
    from any other (a runtime token, an unknown scope)."""
    needed, withheld = DETAILS_FOR.get(str(what), (None, NOTHING_WITHHELD))
    if needed is None or (role in ROLES and ROLES.index(role) >= ROLES.index(needed)):
        return NOTHING_WITHHELD
    return withheld


def withheld_for(role: str | None) -> WithheldFor:
    """``withheld_from`` for one reader: what the audit log's doors are given."""
    return lambda action: withheld_from(role, action)
