from __future__ import annotations

from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "sessions_admin.api"
    label = "api"
    verbose_name = "HTTP API"
