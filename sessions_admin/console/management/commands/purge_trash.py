"""``manage.py purge_trash [--days N]``: drop trash entries older than the retention.

The retention is checked by ``ledger.trash_retention`` (the trash page uses the same
check) and the purge is ``ledger.actions.purge``, audited like the page's. Entries a legal
hold keeps are named, each with a session it holds and the hold's number.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.core.errors import StoreError
from sessions_admin.ledger import actions, trash_retention


class Command(BaseCommand):
    help = "Drop trash entries older than SESSIONS_ADMIN_TRASH_DAYS (run it daily, e.g. from cron)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--days", type=float, default=None, help="override the retention in days"
        )

    def handle(self, *args, **options):
        try:
            days = (
                trash_retention.configured_days()
                if options["days"] is None
                else trash_retention.retention_days(options["days"])
            )
            report = actions.purge(
                actor=None, older_than_days=days, reason=f"retention: older than {days:g} days"
            )
        except StoreError as problem:
            raise CommandError(str(problem)) from problem
        self.stdout.write(f"Purged {report.purged} trash entries older than {days:g} days.")
        if report.kept:
            # Each one with the session that made it held and the hold's number.
            self.stdout.write(report.kept_text())
