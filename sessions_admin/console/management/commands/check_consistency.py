"""``manage.py check_consistency [--ledger PATH ...]``: the store's invariants, checked (reads only).

Prints each violation (counters, search index, links, conversations, the
switch-event log; see ``sessions_admin.demo.consistency``) and exits 1 if
there is any. With ``--ledger``, also checks simulator ledgers against the
store and the trash.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.demo.consistency import check_ledger, check_store


class Command(BaseCommand):
    help = "Check the store's invariants (and simulator ledgers); reads only."

    def add_arguments(self, parser):
        parser.add_argument(
            "--ledger",
            type=Path,
            action="append",
            default=[],
            help="a simulate_runtime ledger to check (repeatable)",
        )

    def handle(self, *args, **options):
        missing = [str(p) for p in options["ledger"] if not p.is_file()]
        if missing:
            raise CommandError(f"No such ledger file: {', '.join(missing)}")
        problems = check_store()
        if options["ledger"]:
            problems += check_ledger(options["ledger"])
        if problems:
            for problem in problems:
                self.stdout.write(f"- {problem}")
            raise CommandError(f"{len(problems)} consistency problem(s) found.")
        self.stdout.write(
            "The store is consistent" + (" with the ledgers." if options["ledger"] else ".")
        )
