"""Operator roles: Django groups holding the console's permissions.

viewer reads; support also operates (merge, resume, reset, undo); admin also deletes.
"""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission, User

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
