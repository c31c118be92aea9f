from __future__ import annotations

import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.core import db
from sessions_admin.core.slug_history import capture_slug_history, history_table_exists
from sessions_admin.ledger.worker import poll_slug_history, slug_history_interval


class Command(BaseCommand):
    help = (
        "Record the runtime's /v1/responses slug history (which response and session each "
        "slug named, and when) for fork detection, polling until stopped; see docs/attach.md."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            help="seconds between polls (default SESSIONS_ADMIN_SLUG_HISTORY_SECONDS, or 2)",
        )
        parser.add_argument("--once", action="store_true", help="poll once and exit")

    def handle(self, *args, **options):
        if db.read_only():
            raise CommandError("Read-only mode: the slug history cannot be recorded.")
        if not history_table_exists():
            raise CommandError("The store has no slug history table yet: run init_store first.")
        if options["once"]:
            written = capture_slug_history()
            self.stdout.write(f"Recorded {written} slug change{'s' if written != 1 else ''}.")
            return
        interval = options["interval"] or slug_history_interval() or 2.0
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        self.stdout.write(f"Recording slug history every {interval:g} s; Ctrl-C stops.")
        poll_slug_history(interval=interval, stop=stop)
