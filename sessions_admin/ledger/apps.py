from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def create_cache_table(using: str = "default", **kwargs) -> None:
    """The database cache's table (SESSIONS_ADMIN_CACHE_URL=db://), made by migrate too."""
    from django.core.management import call_command
    from django.core.management.base import CommandError

    # Does nothing for a file or Redis cache, or a table that exists already.
    try:
        call_command("createcachetable", database=using, verbosity=0)
    except CommandError:
        # Two hosts starting together both saw no table and both created it: the loser's
        # second look finds the winner's table and does nothing (a real failure fails again).
        call_command("createcachetable", database=using, verbosity=0)


class LedgerConfig(AppConfig):
    name = "sessions_admin.ledger"
    label = "ledger"
    verbose_name = "Operator ledger (audit, trash, jobs)"

    def ready(self) -> None:
        # Imported here: the trash needs the app's models, loaded only once apps are ready.
        from sessions_admin.core import deletion, holds
        from sessions_admin.ledger.trash import LEDGER_TRASH, trashed_lineage

        # Every delete and restore in a dashboard process (views, commands, jobs, tests)
        # keeps its rows in the ledger's trash unless its caller passes another.
        deletion.set_default_trash(LEDGER_TRASH)
        # A legal hold covers the sessions of its lineage that are in the trash too.
        holds.set_lineage_elsewhere(trashed_lineage)
        post_migrate.connect(create_cache_table, sender=self)
