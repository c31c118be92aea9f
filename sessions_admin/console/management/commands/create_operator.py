"""``manage.py create_operator NAME --role viewer|support|admin [--if-missing]``.

Creates a console operator: a Django user in one role group. The password is
the first line of stdin when stdin is piped in with content, otherwise a
strong one is generated and printed once. A piped password must pass Django's
password validators (settings.AUTH_PASSWORD_VALIDATORS) and not be blank;
otherwise nothing is created.
"""

from __future__ import annotations

import secrets
import select
import sys

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.signin import operators
from sessions_admin.signin.roles import ROLES

# How long to wait for a piped password that has not arrived yet. Without a
# bound, a stdin that is an open pipe nobody writes to would hang the command
# (and ``python -m sessions_admin demo`` with it).
STDIN_WAIT_SECONDS = 1.0


def _stdin_password() -> str | None:
    """The first line of stdin when it is not a terminal and has content, else None."""
    stream = sys.stdin
    if stream is None or stream.closed:
        return None
    try:
        if stream.isatty():
            return None
    except ValueError:  # closed underneath us
        return None
    try:
        fileno = stream.fileno()
    except (OSError, ValueError, AttributeError):
        fileno = None  # an in-memory stream (tests): it has whatever it has
    if fileno is not None:
        try:
            ready, _, _ = select.select([fileno], [], [], STDIN_WAIT_SECONDS)
        except (OSError, ValueError):
            ready = [fileno]
        if not ready:
            return None
    try:
        line = stream.readline()
    except (OSError, ValueError):  # unreadable (a test runner's captured stdin, a closed fd)
        return None
    password = line.rstrip("\r\n")
    return password or None


class Command(BaseCommand):
    help = (
        "Create a console operator with a role (viewer reads; support also operates; admin "
        "also deletes). The password is read from stdin when piped in, else generated and printed."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="Username of the operator.")
        parser.add_argument(
            "--role", required=True, help=f"One of: {', '.join(ROLES)}.", metavar="ROLE"
        )
        parser.add_argument(
            "--if-missing",
            action="store_true",
            help="If the operator already exists, say so and change nothing (exit 0).",
        )

    def handle(self, *args, **options):
        name: str = options["name"]
        role: str = options["role"]
        try:
            operators.check_name_and_role(name=name, role=role)
        except operators.OperatorRefused as refused:
            raise CommandError(str(refused)) from refused
        existing = operators.existing_operator(name)
        if existing is not None:
            if options["if_missing"]:
                self.stdout.write(
                    f"Operator {name} already exists (role: {existing.role}); nothing changed."
                )
                return
            raise CommandError(
                f"Operator {name} already exists (role: {existing.role}); nothing changed. "
                "Use --if-missing to accept an existing operator."
            )

        piped = _stdin_password()
        password = piped if piped is not None else secrets.token_urlsafe(18)
        try:
            operators.create_operator(name=name, role=role, password=password)
        except operators.OperatorRefused as refused:
            raise CommandError(str(refused)) from refused

        if piped is not None:
            self.stdout.write(
                f"Operator {name} ({role}) created with the password read from stdin."
            )
        else:
            self.stdout.write(f"Operator {name} ({role}) created. Password: {password}")
            self.stdout.write("Store it now: it is not shown again.")
