"""``manage.py erasure_rewrite [--request N]``: rewrite the database files so that no byte
an erasure freed is left (docs/retention.md, "What it takes for no byte to be left").

SQLite: VACUUM of the store, the response store and the dashboard's database, each after
a quiet second and waiting at most ``--busy-ms`` for the write lock. PostgreSQL: VACUUM
FULL of the tables erasures touch (their indexes and TOAST tables rebuilt too): each
holds an ACCESS EXCLUSIVE lock for its length, so run it at a quiet hour (cron). Waits
at most ``--busy-ms`` for each lock and retries; a runtime that holds one keeps the
receipts pending (exit 1). Done, every pending receipt says ``file_rewrite: done``.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.core import erasure as erasure_core
from sessions_admin.ledger import actions, erasure
from sessions_admin.ledger.models import ErasureRequest


class Command(BaseCommand):
    help = "Rewrite the database files after erasures (VACUUM / VACUUM FULL), in a quiet moment."

    def add_arguments(self, parser):
        parser.add_argument(
            "--request", type=int, help="only report on this erasure request (the rewrite is whole)"
        )
        parser.add_argument(
            "--busy-ms",
            type=int,
            default=erasure_core.REWRITE_BUSY_MS,
            help="the longest wait for a lock, in milliseconds (default %(default)s)",
        )

    def handle(self, *args, **options):
        busy_ms = options["busy_ms"]
        if not 1 <= busy_ms <= 60_000:
            raise CommandError("--busy-ms: give 1 to 60000 milliseconds.")
        wanted = options["request"]
        if wanted is not None:
            request = ErasureRequest.objects.filter(pk=wanted).first()
            if request is None or request.state != ErasureRequest.DONE:
                raise CommandError(f"No finished erasure request #{wanted}.")
        actions.finish_erasure_index_merges()
        pending = erasure.requests_awaiting_rewrite()
        if wanted is not None and wanted not in pending:
            state = (request.receipt.get("file_rewrite") or {}).get("state")
            if state == erasure.REWRITE_DONE:
                self.stdout.write(f"Erasure request #{wanted}: the files were already rewritten.")
                return
            raise CommandError(
                f"Erasure request #{wanted}: its search index merge has not finished yet; "
                "the rewrite follows it."
            )
        if not pending:
            self.stdout.write("No erasure awaits a file rewrite.")
            return
        rewrite = actions.rewrite_erasure_files(busy_ms=busy_ms)
        done = rewrite.done
        if not done:
            raise CommandError(
                "The files were not rewritten; nothing changed, try again later. "
                + " ".join(f"({note})" for note in rewrite.notes)
            )
        for request_id in done:
            self.stdout.write(f"Erasure request #{request_id}: files rewritten.")
        for note in ErasureRequest.objects.get(pk=done[-1]).receipt.get("storage", [])[-3:]:
            self.stdout.write(f"  {note}")
