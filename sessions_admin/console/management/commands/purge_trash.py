"""``manage.py purge_trash [--days N] [--sessions N] [--dry-run]``: drop trash entries
older than the retention.

The retention is checked by ``ledger.trash_retention`` (the trash page uses the same
check) and the purge is ``ledger.actions.purge``, audited like the page's. It says what it
drops (entries, sessions, messages) before dropping it. The scheduled purge (the configured
retention, or more days) needs nothing else; a purge of entries not yet expired (``--days``
below the retention) follows the page's rule: from 20 sessions or 1,000 messages, the
number of sessions it drops is given with ``--sessions`` or nothing is purged. Entries a
legal hold keeps are named, each with a session it holds and the hold's number.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.console.views.trash import purge_size
from sessions_admin.core.errors import StoreError
from sessions_admin.ledger import actions, trash, trash_retention
from sessions_admin.ledger.trash import PurgeReport


class Command(BaseCommand):
    help = "Drop trash entries older than SESSIONS_ADMIN_TRASH_DAYS (run it daily, e.g. from cron)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--days", type=float, default=None, help="override the retention in days"
        )
        parser.add_argument(
            "--sessions",
            type=int,
            default=None,
            help="confirm a large purge of entries not yet expired: the number of sessions it drops",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="say what would be dropped; drop nothing"
        )

    def handle(self, *args, **options):
        try:
            configured = trash_retention.configured_days()
            days = (
                configured
                if options["days"] is None
                else trash_retention.retention_days(options["days"])
            )
            held = trash.held_trash()
            size = purge_size(days, held)
        except StoreError as problem:
            raise CommandError(str(problem)) from problem
        what = (
            f"{size.operations} trash entries ({size.sessions} sessions, {size.messages} "
            f"messages) older than {days:g} days"
        )
        if options["dry_run"]:
            self.stdout.write(f"Would purge {what}; nothing was purged.")
            kept = trash.kept_under_hold(older_than_days=days, held=held)
            if kept:  # the run would name them too: "Kept 1 trash entry under legal hold: ..."
                self.stdout.write(PurgeReport(purged=0, kept=kept).kept_text("Would keep"))
            return
        if days < configured and size.asked and options["sessions"] != size.sessions:
            raise CommandError(
                f"This purge drops {what}, entries the {configured:g}-day retention still "
                f"keeps restorable: to confirm, pass --sessions {size.sessions}. "
                "Nothing was purged."
            )
        self.stdout.write(f"Purging {what}.")
        try:
            report = actions.purge(
                actor=None, older_than_days=days, reason=f"retention: older than {days:g} days"
            )
        except StoreError as problem:
            raise CommandError(str(problem)) from problem
        # What it really dropped: an entry a restore took back meanwhile held nothing any more
        # (attack round 44: "Purged 1" after "Purging 1 ... 8 messages", all 8 restored).
        self.stdout.write(
            f"Purged {report.purged} trash entries ({report.sessions} sessions, "
            f"{report.messages} messages) older than {days:g} days."
        )
        if report.kept:
            # Each one with the session that made it held and the hold's number.
            self.stdout.write(report.kept_text())
