"""``manage.py check_consistency [--acks PATH ...]``: the store's invariants, checked.

Prints each violation (counters, search index, links, conversations, the
switch-event log, the trash against the store; see ``sessions_admin.demo.consistency``)
and exits 1 if there is any. With ``--acks``, also checks simulator acknowledgement logs against the
store and the trash. Its one write comes first: what a dead delete or restore left unmarked
in the trash is marked from the store (``actions.settle_deletes_and_restores``), as the
trash page does.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.demo.consistency import check_acks, check_store, check_trash
from sessions_admin.ledger import actions


class Command(BaseCommand):
    help = (
        "Check the store's invariants, the trash against the store (and simulator ledgers). "
        "First marks what a dead delete or restore left unmarked in the trash."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--acks",
            "--ledger",  # its older name
            dest="acks",
            type=Path,
            action="append",
            default=[],
            help="a simulate_runtime --acks log to check (repeatable)",
        )

    def handle(self, *args, **options):
        missing = [str(p) for p in options["acks"] if not p.is_file()]
        if missing:
            raise CommandError(f"No such acks file: {', '.join(missing)}")
        actions.settle_deletes_and_restores()
        problems = check_store() + check_trash()
        if options["acks"]:
            problems += check_acks(options["acks"])
        if problems:
            for problem in problems:
                self.stdout.write(f"- {problem}")
            raise CommandError(f"{len(problems)} consistency problem(s) found.")
        self.stdout.write(
            "The store is consistent" + (" with the acks." if options["acks"] else ".")
        )
