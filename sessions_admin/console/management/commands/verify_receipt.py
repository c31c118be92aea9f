"""``manage.py verify_receipt FILE``: whether an erasure receipt is one this server issued,
unchanged to the byte (``-`` reads standard input).

Exits 0 printing "Valid: ..." or fails (exit 1) saying why: a changed byte (the signature
no longer matches), keys reordered, added or repeated, no signature, not JSON, not a
receipt, NUL bytes, a file larger than any receipt, or a receipt from before receipts were
signed (which cannot be verified). Reads only.
"""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.ledger import erasure
from sessions_admin.ledger.models import ErasureRequest


class Command(BaseCommand):
    help = "Verify an erasure receipt file (its signature, and that no byte of it changed)."

    def add_arguments(self, parser):
        parser.add_argument("file", help="the receipt (JSON) as downloaded; - for stdin")

    def handle(self, *args, **options):
        if problem := erasure.key_problem():
            raise CommandError(problem)
        name = options["file"]
        limit = erasure.MAX_RECEIPT_BYTES + 1  # never read more than a receipt can be
        try:
            if name == "-":
                data = sys.stdin.buffer.read(limit)
            else:
                path = Path(name)
                if not path.is_file():
                    raise CommandError(f"Not verified: no such file: {name}")
                with path.open("rb") as handle:
                    data = handle.read(limit)
        except OSError as error:
            raise CommandError(f"Not verified: cannot read {name}: {error.strerror}") from error
        check = erasure.verify_receipt(data)
        if not check.valid:
            raise CommandError(check.message)
        self.stdout.write(check.message)
        stored = ErasureRequest.objects.filter(pk=check.request_id).first()
        if stored is not None and stored.receipt != erasure.parse_receipt(data):
            self.stdout.write(
                "This server holds a newer version of this receipt (a later index merge or "
                "file rewrite updated it): download it again from the request's page."
            )
