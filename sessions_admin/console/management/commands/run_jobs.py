from __future__ import annotations

import datetime as dt

from django.core.management.base import BaseCommand

from sessions_admin.ledger import actions, jobs, schedule
from sessions_admin.ledger.worker import work_until_idle


class Command(BaseCommand):
    help = "Run pending bulk-delete jobs (resuming interrupted ones) until none is left."

    def add_arguments(self, parser):
        parser.add_argument(
            "--idle-exit",
            type=float,
            default=5.0,
            help="seconds with no runnable job before exiting (default 5)",
        )
        parser.add_argument(
            "--poll",
            type=float,
            default=None,
            help="seconds between looks for jobs when no wake comes "
            "(default: SESSIONS_ADMIN_JOB_POLL_SECONDS, 5)",
        )
        parser.add_argument(
            "--schedule",
            action="store_true",
            help="keep running: start due retention policy runs too (every "
            "SESSIONS_ADMIN_RETENTION_CHECK_SECONDS, default 60), and never exit when idle",
        )

    def handle(self, *args, **options):
        if options["schedule"]:
            interval = max(1.0, schedule.check_interval())
            while True:
                actions.start_due_policies()
                work_until_idle(idle_exit_seconds=interval, poll_seconds=options["poll"])
        work_until_idle(idle_exit_seconds=options["idle_exit"], poll_seconds=options["poll"])
        held = jobs.leased_elsewhere()
        if not held:
            self.stdout.write("No delete job left to run.")
            return
        # A worker that died holds its job's lease until it runs out (attack round 43: "no job
        # left" was said while a killed command's job still sat running).
        named = "; ".join(
            f"#{job_id} until {until.astimezone(dt.UTC):%H:%M:%S} UTC" for job_id, until in held
        )
        self.stdout.write(
            f"No delete job left to run here now. Held by another worker's lease (running "
            f"there, or taken up once the lease runs out if that worker died): {named}. "
            "Run this command again after that to finish them."
        )
