from __future__ import annotations

from django.apps import AppConfig


class StoreConfig(AppConfig):
    name = "sessions_admin.store"
    label = "store"
    verbose_name = "Session store"
