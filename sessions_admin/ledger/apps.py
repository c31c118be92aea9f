from __future__ import annotations

from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "sessions_admin.ledger"
    label = "ledger"
    verbose_name = "Operator ledger (audit, trash, jobs)"
