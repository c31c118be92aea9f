"""``manage.py api_token``: create, list and revoke API tokens (docs/api.md).

    manage.py api_token create --name NAME --scope runtime|viewer|support|admin
                               [--source SOURCE ...] [--expires-days N]
    manage.py api_token list
    manage.py api_token revoke --name NAME

The same audited doors as the console's API tokens page (``ledger.actions.create_api_token``
/ ``revoke_api_token``). ``create`` prints the secret once, on its own line, last.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.core.errors import StoreError
from sessions_admin.ledger import actions
from sessions_admin.ledger.actions.tokens import SCOPES
from sessions_admin.ledger.models import ApiToken
from sessions_admin.signin.tokens import token_state


class Command(BaseCommand):
    help = "Create, list or revoke API tokens (the secret is printed once, at creation)."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="command", required=True)
        create = commands.add_parser("create", help="a new token; prints its secret once")
        create.add_argument("--name", required=True)
        create.add_argument("--scope", required=True, choices=SCOPES)
        create.add_argument(
            "--source",
            action="append",
            default=[],
            help="runtime scope: limit the token to sessions of this source (repeatable)",
        )
        create.add_argument("--expires-days", type=int, default=None)
        commands.add_parser("list", help="every token: name, scope, state, dates")
        revoke = commands.add_parser("revoke", help="refuse the token from its next request on")
        revoke.add_argument("--name", required=True)

    def handle(self, *args, **options):
        from django.utils import timezone

        try:
            if options["command"] == "create":
                created = actions.create_api_token(
                    actor=None,
                    name=options["name"],
                    scope=options["scope"],
                    sources=options["source"],
                    expires_days=options["expires_days"],
                )
                token = created.token
                expires = (
                    f", expires {token.expires_at:%Y-%m-%d %H:%M} UTC" if token.expires_at else ""
                )
                self.stderr.write(
                    f"Created API token {token.name} ({token.scope}{expires}). "
                    "Its secret, shown only now:"
                )
                self.stdout.write(created.secret)
            elif options["command"] == "revoke":
                token = actions.revoke_api_token(actor=None, name=options["name"])
                self.stdout.write(f"Revoked API token {token.name}.")
            else:
                now = timezone.now()
                for token in ApiToken.objects.all():
                    used = f"{token.last_used_at:%Y-%m-%d %H:%M}" if token.last_used_at else "never"
                    expires = f"{token.expires_at:%Y-%m-%d %H:%M}" if token.expires_at else "never"
                    sources = ",".join(token.sources) or "-"
                    self.stdout.write(
                        f"{token.name}\t{token.scope}\t{token_state(token, now)}\t{sources}\t"
                        f"created {token.created_at:%Y-%m-%d %H:%M} by {token.created_by_name}\t"
                        f"expires {expires}\tlast used {used}"
                    )
        except StoreError as problem:
            raise CommandError(str(problem)) from problem
