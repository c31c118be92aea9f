"""Creating console operators: a Django user in one role group, with a checked password.

The rules live here; ``manage.py create_operator`` only reads its arguments and stdin
and prints the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from sessions_admin.signin.roles import ROLES, assign_role, role_of


class OperatorRefused(Exception):
    """Why an operator was not created (nothing was)."""


@dataclass(frozen=True)
class ExistingOperator:
    name: str
    role: str  # "no role" when the user holds none


def check_name_and_role(*, name: str, role: str) -> None:
    """``OperatorRefused`` unless ``role`` is a role and ``name`` a valid user name."""
    if role not in ROLES:
        raise OperatorRefused(f"Unknown role {role!r}: choose one of {', '.join(ROLES)}.")
    user_model = get_user_model()
    try:
        user_model._meta.get_field(user_model.USERNAME_FIELD).clean(name, None)
    except ValidationError as error:
        raise OperatorRefused(
            f"Invalid operator name {name!r}: {' '.join(error.messages)}"
        ) from error


def existing_operator(name: str) -> ExistingOperator | None:
    user_model = get_user_model()
    user = user_model._default_manager.filter(**{user_model.USERNAME_FIELD: name}).first()
    if user is None:
        return None
    return ExistingOperator(name=name, role=role_of(user) or "no role")


def create_operator(*, name: str, role: str, password: str):
    """The new operator (a user in ``role``), or ``OperatorRefused`` with nothing created.

    The password must not be blank and must pass settings.AUTH_PASSWORD_VALIDATORS (not like
    the name, long enough, not common, not all digits).
    """
    check_name_and_role(name=name, role=role)
    user_model = get_user_model()
    if not password.strip():
        raise OperatorRefused(
            f"Password rejected for operator {name}: it is blank (only whitespace). "
            "Nothing was created."
        )
    try:
        validate_password(password, user=user_model(**{user_model.USERNAME_FIELD: name}))
    except ValidationError as error:
        raise OperatorRefused(
            f"Password rejected for operator {name}: {' '.join(error.messages)} "
            "Nothing was created."
        ) from error
    try:
        with transaction.atomic(using=user_model._default_manager.db):
            user = user_model._default_manager.create_user(
                **{user_model.USERNAME_FIELD: name}, password=password
            )
            assign_role(user, role)
    except IntegrityError as error:  # created concurrently since the caller's check
        raise OperatorRefused(f"Operator {name} could not be created: {error}") from error
    return user
