"""``manage.py export_sessions``: sessions as JSONL or Markdown, streamed to a file or stdout.

What it exports is chosen as the export page chooses: one session, a lineage, a set of
ids (``core.portability.export_session_ids``), or a source through the session list's
filters (``store.listing``), so the command and the page select the same sessions.
"""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.core import portability
from sessions_admin.core.errors import StoreError
from sessions_admin.store import listing


def _ids_of_source(source: str) -> list[str]:
    """Every session of ``source`` (every segment, oldest first), chosen as the export page
    chooses by the session list's filters (``?source=...&scope=all``)."""
    parsed = listing.parse({"source": source, "scope": "all"})
    if parsed.problems:
        raise CommandError(" ".join(parsed.problems))
    # Beyond the maximum, export_session_ids refuses the export and names the maximum.
    ids = (
        listing.matching_session_ids(parsed.filters, limit=portability.MAX_EXPORT_SESSIONS)
        if parsed.filters.source
        else []
    )
    if not ids:
        raise CommandError(f"No session has source {source!r}.")
    return ids


class Command(BaseCommand):
    help = (
        "Export sessions as JSONL (one record a line: the session rows and every message) or "
        "Markdown, streamed: one session, its whole lineage, or a set of ids."
    )

    def add_arguments(self, parser):
        scope = parser.add_mutually_exclusive_group(required=True)
        scope.add_argument("--session", metavar="ID", help="one session")
        scope.add_argument("--lineage", metavar="ID", help="every session of ID's lineage")
        scope.add_argument("--ids", metavar="ID", nargs="+", help="these sessions")
        scope.add_argument("--ids-file", metavar="FILE", help="session ids, one a line")
        scope.add_argument("--source", help="every session of this source (cli, telegram...)")
        parser.add_argument("--format", choices=["jsonl", "markdown"], default="jsonl")
        parser.add_argument(
            "--output", "-o", default="-", help="file to write (default: standard output)"
        )

    def handle(self, *args, **options):
        ids = options["ids"]
        if options["ids_file"]:
            try:
                text = Path(options["ids_file"]).read_text(encoding="utf-8")
            except OSError as error:
                raise CommandError(f"Cannot read {options['ids_file']}: {error}") from error
            ids = [line.strip() for line in text.splitlines() if line.strip()]
        if options["source"]:
            ids = _ids_of_source(options["source"])
        try:
            session_ids = portability.export_session_ids(
                session_id=options["session"], lineage_of=options["lineage"], ids=ids
            )
        except StoreError as problem:
            raise CommandError(str(problem)) from problem
        render = (
            portability.export_markdown
            if options["format"] == "markdown"
            else portability.export_jsonl
        )
        if options["output"] == "-":
            for chunk in render(session_ids):
                sys.stdout.write(chunk)
            sys.stdout.flush()
            return
        output = Path(options["output"])
        try:
            with output.open("w", encoding="utf-8") as handle:
                for chunk in render(session_ids):
                    handle.write(chunk)
        except OSError as error:
            raise CommandError(f"Cannot write {output}: {error}") from error
        self.stderr.write(f"Exported {len(session_ids)} session(s) to {output}.")
