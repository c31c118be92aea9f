"""The dashboard serves only with a secret key of its own.

Without ``SESSIONS_ADMIN_SECRET_KEY`` anyone could forge the signed cookies (sessions,
messages): the server refuses to start (gunicorn's ``on_starting``, the WSGI module) and
``check --deploy`` reports an error. Commands and runtime processes that sign nothing
(migrate, init_store, create_operator, the store core as a library) run without one.
"""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Tags, register
from django.core.exceptions import ImproperlyConfigured

MISSING_SECRET_KEY = (
    "SESSIONS_ADMIN_SECRET_KEY is not set: the dashboard will not serve without a secret key "
    "of its own (anyone could forge its signed cookies). Generate one once, keep it secret and "
    "the same across restarts and workers:\n"
    "    export SESSIONS_ADMIN_SECRET_KEY=$(python3 -c "
    "'import secrets; print(secrets.token_urlsafe(50))')\n"
    "(python3 -m sessions_admin demo generates one into var/secret_key, which the server and\n"
    "the commands on that var directory read when the variable is not set.)"
)


def secret_key_problem() -> str | None:
    try:
        key = settings.SECRET_KEY
    except ImproperlyConfigured:  # Django refuses to hand out an empty key
        key = ""
    return None if key else MISSING_SECRET_KEY


def require_secret_key() -> None:
    """Raise ImproperlyConfigured, in words, when the server has no secret key."""
    problem = secret_key_problem()
    if problem:
        raise ImproperlyConfigured(problem)


@register(Tags.security, deploy=True)
def check_secret_key_is_set(app_configs, **kwargs):
    problem = secret_key_problem()
    return [Error(problem, id="signin.E001")] if problem else []
