from __future__ import annotations

from django.apps import AppConfig
from django.core import checks
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


def partly_squashed_history(databases=None, **kwargs) -> list[checks.Error]:
    """A database part-way through migrations a squash replaced, whose files are gone.

    Django leaves such a database alone without a word (it plans no ledger migration at
    all), and the dashboard would then fail on its missing columns; ``migrate`` runs this
    check first and stops with what to do.
    """
    from django.db import connections
    from django.db.migrations.loader import MigrationLoader

    errors = []
    for alias in databases or ():
        loader = MigrationLoader(connections[alias])
        for key, squash in loader.replacements.items():
            applied = [name for name in squash.replaces if name in loader.applied_migrations]
            if applied and len(applied) < len(squash.replaces):
                errors.append(
                    checks.Error(
                        f"The database {alias!r} stops at migration {applied[-1][0]}."
                        f"{applied[-1][1]}, part of what {key[1]} replaces.",
                        hint="Migrate it first with a checkout from before that squash "
                        "(git log -- sessions_admin/ledger/migrations), then with this one.",
                        id="ledger.E001",
                    )
                )
    return errors


class LedgerConfig(AppConfig):
    name = "sessions_admin.ledger"
    label = "ledger"
    verbose_name = "Operator ledger (audit, trash, jobs)"

    def ready(self) -> None:
        # Imported here: the trash needs the app's models, loaded only once apps are ready.
        from sessions_admin.core import deletion, holds
        from sessions_admin.ledger.erasure import RESTORING_TRASH
        from sessions_admin.ledger.trash import trashed_lineage

        # Every delete and restore in a dashboard process (views, commands, jobs, tests)
        # keeps its rows in the ledger's trash unless its caller passes another; a restore
        # is checked against the erasures that began, in its store transaction.
        deletion.set_default_trash(RESTORING_TRASH)
        # A legal hold covers the sessions of its lineage that are in the trash too.
        holds.set_lineage_elsewhere(trashed_lineage)
        # The actions register the runners of cascade and restore jobs (``ledger.jobs``): a
        # worker thread or ``run_jobs`` finds them whichever module it imported first.
        import sessions_admin.ledger.actions  # noqa: F401

        post_migrate.connect(create_cache_table, sender=self)
        checks.register(partly_squashed_history, checks.Tags.database)
