"""``manage.py holds``: list, place and release legal holds from the command line.

    manage.py holds list
    manage.py holds place --session ID --reason TEXT
    manage.py holds place --user ID --reason TEXT
    manage.py holds release HOLD_ID --reason TEXT

The same audited doors as the holds page (``ledger.actions.place_hold`` / ``release_hold``).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.core import holds
from sessions_admin.core.clock import moment_of
from sessions_admin.core.errors import StoreError
from sessions_admin.ledger import actions


class Command(BaseCommand):
    help = "List, place or release legal holds (held sessions cannot be deleted)."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="command", required=True)
        commands.add_parser("list", help="the standing holds and the recently released ones")
        place = commands.add_parser("place", help="hold a session (its lineage) or a user")
        subject = place.add_mutually_exclusive_group(required=True)
        subject.add_argument("--session", help="a session id: the hold covers its whole lineage")
        subject.add_argument("--user", help="a user id: the hold covers every session of theirs")
        place.add_argument("--reason", required=True)
        release = commands.add_parser("release", help="end a hold")
        release.add_argument("hold_id", type=int)
        release.add_argument("--reason", required=True)

    def handle(self, *args, **options):
        try:
            if options["command"] == "place":
                kind = holds.SESSION if options["session"] else holds.USER
                hold = actions.place_hold(
                    actor=None,
                    kind=kind,
                    subject=options["session"] or options["user"],
                    reason=options["reason"],
                )
                self.stdout.write(f"Placed {hold.describe()}.")
            elif options["command"] == "release":
                hold = actions.release_hold(
                    actor=None, hold_id=options["hold_id"], reason=options["reason"]
                )
                self.stdout.write(f"Released legal hold #{hold.id}.")
            else:
                for hold in holds.recent_holds():
                    placed = moment_of(hold.placed_at)
                    state = "standing" if hold.active else "released"
                    self.stdout.write(
                        f"#{hold.id}\t{state}\t{hold.kind}\t{hold.subject}\t"
                        f"{placed:%Y-%m-%d %H:%M}\t{hold.placed_by}\t{hold.reason}"
                    )
        except StoreError as problem:
            raise CommandError(str(problem)) from problem
