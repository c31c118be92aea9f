"""``manage.py export_sessions``: sessions as JSONL or Markdown, streamed to a file or stdout.

What it exports is chosen as the export page chooses: one session, a lineage, a set of
ids (``core.portability.export_session_ids``), or a source through the session list's
filters (``store.listing``): the conversations the list shows for ``?source=...``, each
with every segment, so the command and the page select the same sessions.
"""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.core import portability
from sessions_admin.core.errors import StoreError
from sessions_admin.store import listing
from sessions_admin.store.attach import database_file_named


def _conversations_of_source(source: str) -> tuple[int, list[str]]:
    """The conversations the session list shows for ``?source=...`` (how many) and every
    session of them (every segment, whatever its own source), as the export page chooses."""
    parsed = listing.parse({"source": source})
    if parsed.problems:
        raise CommandError(" ".join(parsed.problems))
    # Beyond the maximum, export_session_ids refuses the export and names the maximum.
    rows = (
        listing.matching_session_ids(parsed.filters, limit=portability.MAX_EXPORT_SESSIONS)
        if parsed.filters.source
        else []
    )
    if not rows:
        raise CommandError(f"No session has source {source!r}.")
    return len(rows), listing.conversation_session_ids(rows)


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
        scope.add_argument(
            "--source",
            help="the conversations of this source (cli, telegram...), every segment of each",
        )
        parser.add_argument("--format", choices=["jsonl", "markdown"], default="jsonl")
        parser.add_argument(
            "--output", "-o", default="-", help="file to write (default: standard output)"
        )

    def handle(self, *args, **options):
        ids = options["ids"]
        if options["ids_file"]:
            _refuse_database_file(options["ids_file"])
            try:
                text = Path(options["ids_file"]).read_text(encoding="utf-8")
            except OSError as error:
                raise CommandError(f"Cannot read {options['ids_file']}: {error}") from error
            ids = [line.strip() for line in text.splitlines() if line.strip()]
        conversations = None
        if options["source"]:
            conversations, ids = _conversations_of_source(options["source"])
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
        _refuse_database_file(output)
        try:
            with output.open("w", encoding="utf-8") as handle:
                for chunk in render(session_ids):
                    handle.write(chunk)
        except OSError as error:
            raise CommandError(f"Cannot write {output}: {error}") from error
        of = f" of {conversations} conversation(s)" if conversations is not None else ""
        self.stderr.write(f"Exported {len(session_ids)} session(s){of} to {output}.")


def _refuse_database_file(path) -> None:
    """An export written over (or an id list read from) a database the dashboard uses would
    destroy it, or cost this process its locks on it: refused before it is opened."""
    alias = database_file_named(path)
    if alias is not None:
        raise CommandError(
            f"{path} is a database the dashboard uses ({alias!r}): name another file."
        )
