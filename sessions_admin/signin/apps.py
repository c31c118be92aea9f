from __future__ import annotations

from django.apps import AppConfig
from django.contrib.auth.signals import user_logged_in, user_login_failed


class SigninConfig(AppConfig):
    name = "sessions_admin.signin"
    label = "signin"
    verbose_name = "Sign-in"

    def ready(self) -> None:
        from sessions_admin.signin import checks  # noqa: F401 - registers the deploy check
        from sessions_admin.signin.audit import record_failed_sign_in
        from sessions_admin.signin.middleware import stamp_sign_in

        # Connected here, not in the middleware module: the test client's force_login
        # signs in before any request has loaded the middleware.
        user_logged_in.connect(stamp_sign_in, dispatch_uid="sessions_admin.signin.stamp")
        user_login_failed.connect(record_failed_sign_in, dispatch_uid="ledger.failed_sign_in")
