from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from sessions_admin.ledger import actions


class Command(BaseCommand):
    help = "Drop trash entries older than SESSIONS_ADMIN_TRASH_DAYS (run it daily, e.g. from cron)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--days", type=float, default=None, help="override the retention in days"
        )

    def handle(self, *args, **options):
        days = (
            options["days"] if options["days"] is not None else settings.SESSIONS_ADMIN_TRASH_DAYS
        )
        purged = actions.purge(
            actor=None, older_than_days=days, reason=f"retention: older than {days:g} days"
        )
        self.stdout.write(f"Purged {purged} trash entries older than {days:g} days.")
