from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class ConsoleConfig(AppConfig):
    name = "sessions_admin.console"
    label = "console"
    verbose_name = "Operator console"

    def ready(self) -> None:
        from sessions_admin.console.metrics import watch_store_busy
        from sessions_admin.signin.roles import ensure_roles_after_migrate

        post_migrate.connect(ensure_roles_after_migrate, sender=self)
        watch_store_busy()  # /metrics counts this process's waits on a busy store
