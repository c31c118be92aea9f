from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from sessions_admin.signin.roles import assign_role

PASSWORD = "correct horse battery staple"


@pytest.fixture
def operator_factory(db):
    def make(role: str | None, username: str | None = None) -> User:
        user = User.objects.create_user(username or f"op-{role or 'none'}", password=PASSWORD)
        if role:
            assign_role(user, role)
        return user

    return make


@pytest.fixture
def signed_in(client, operator_factory):
    def sign_in(role: str | None):
        client.force_login(operator_factory(role))
        return client

    return sign_in


@pytest.fixture
def admin(signed_in):
    """A client signed in as an admin."""
    return signed_in("admin")
