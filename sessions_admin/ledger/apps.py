from __future__ import annotations

from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "sessions_admin.ledger"
    label = "ledger"
    verbose_name = "Operator ledger (audit, trash, jobs)"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed

        from sessions_admin.ledger.signin_audit import record_failed_sign_in

        user_login_failed.connect(record_failed_sign_in, dispatch_uid="ledger.failed_sign_in")
