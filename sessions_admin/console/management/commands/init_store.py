from __future__ import annotations

from django.core.management.base import BaseCommand

from sessions_admin.store.schema import ensure_store_schema


class Command(BaseCommand):
    help = "Create whatever the session store lacks (idempotent, additive only)."

    def handle(self, *args, **options):
        report = ensure_store_schema()
        if report.created_tables or report.added_columns:
            self.stdout.write(
                f"Store ({report.alias}): created tables {', '.join(report.created_tables) or 'none'}; "
                f"added columns {', '.join(report.added_columns) or 'none'}."
            )
        else:
            self.stdout.write(f"Store ({report.alias}) already has every table and column needed.")
