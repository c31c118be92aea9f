from __future__ import annotations

from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "sessions_admin.ledger"
    label = "ledger"
    verbose_name = "Operator ledger (audit, trash, jobs)"

    def ready(self) -> None:
        # Imported here: the trash needs the app's models, loaded only once apps are ready.
        from sessions_admin.core import deletion
        from sessions_admin.ledger.trash import LEDGER_TRASH

        # Every delete and restore in a dashboard process (views, commands, jobs, tests)
        # keeps its rows in the ledger's trash unless its caller passes another.
        deletion.set_default_trash(LEDGER_TRASH)
