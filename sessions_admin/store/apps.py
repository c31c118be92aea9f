from __future__ import annotations

from django.apps import AppConfig


class StoreConfig(AppConfig):
    name = "sessions_admin.store"
    label = "store"
    verbose_name = "Session store"

    def ready(self) -> None:
        from django.core import checks
        from django.db.backends.signals import connection_created

        from sessions_admin.store import attach

        # Runs with every manage.py command that checks (runserver, migrate, init_store, check):
        # an unusable store stops start-up with a message, before anything is written.
        checks.register(attach.check_store, attach.CHECK_TAG)
        connection_created.connect(
            attach.prepare_connection, dispatch_uid="sessions_admin_read_only"
        )
