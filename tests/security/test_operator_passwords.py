"""``create_operator`` refuses weak passwords with a clear message and creates nothing:
Django's standard validators (similarity to the name, minimum length, common, all digits)
and a blank check."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command


def _create(name: str, password: str) -> str:
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stdin", io.StringIO(password + "\n"))
        call_command("create_operator", name, role="admin", stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("name", "password", "why"),
    [
        ("operator-alpha", "operator-alpha", "too similar to the username"),
        ("margaret.hamilton", "margaret.hamilton1", "too similar to the username"),
        ("carol", "        ", "blank"),
        ("carol", " \t  \t   \t ", "blank"),
        ("carol", "4815162342108", "entirely numeric"),
        ("carol", "password123", "too common"),
        ("carol", "Xk9#a", "too short"),
    ],
)
def test_create_operator_refuses_a_weak_password_and_creates_nothing(name, password, why):
    with pytest.raises(CommandError) as refused:
        _create(name, password)
    message = str(refused.value)
    assert message.startswith(f"Password rejected for operator {name}:")
    assert why in message
    assert message.endswith("Nothing was created.")
    assert not User.objects.filter(username=name).exists()


def test_create_operator_accepts_a_password_that_passes_every_check():
    output = _create("operator-alpha", "violet kettle drums at noon")
    assert "created" in output
    assert User.objects.get(username="operator-alpha").check_password("violet kettle drums at noon")
