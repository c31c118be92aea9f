from __future__ import annotations

from django.core.checks.registry import registry
from django.core.management.base import BaseCommand, CommandError

from sessions_admin.core.conversations import refill_all_conversation_sessions
from sessions_admin.core.errors import ReadOnlyStore
from sessions_admin.core.schema import ensure_store_schema
from sessions_admin.store import attach


class Command(BaseCommand):
    help = (
        "Create whatever the session store lacks (idempotent, additive only). On an existing "
        "runtime store only sessions_admin's own tables and conversations.session_id are added "
        "(docs/attach.md)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--upgrade-runtime-tables",
            action="store_true",
            help="also add missing columns, indexes and a full-text index to the runtime's own "
            "sessions/messages tables (never needed for a current Hermes Agent store)",
        )

    # The store check runs in handle(): --upgrade-runtime-tables repairs some of its errors.
    requires_system_checks: list[str] = []

    def handle(self, *args, **options):
        upgrading = options["upgrade_runtime_tables"]
        if not options.get("skip_checks"):
            self.check(tags=[t for t in registry.tags_available() if t != attach.CHECK_TAG])
        problems = attach.blocking_problems(upgrading=upgrading)
        if problems:
            raise CommandError(
                "The store cannot be used; nothing was written:\n" + "\n".join(problems)
            )
        try:
            report = ensure_store_schema(upgrade_runtime_tables=upgrading)
        except ReadOnlyStore as refused:
            raise CommandError(str(refused)) from refused
        if report.created_tables or report.added_columns:
            self.stdout.write(
                f"Store ({report.alias}): created tables {', '.join(report.created_tables) or 'none'}; "
                f"added columns {', '.join(report.added_columns) or 'none'}."
            )
        else:
            self.stdout.write(f"Store ({report.alias}) already has every table and column needed.")
        refilled = refill_all_conversation_sessions()
        if refilled:
            self.stdout.write(
                f"Recorded the session of {refilled} conversation slug(s) the runtime had left blank."
            )
        if report.problems:
            self.stdout.write(
                "The runtime's own tables were left as they are; they lack: "
                + ", ".join(report.problems)
                + ". Run with --upgrade-runtime-tables to add them."
            )
