"""Who calls the API and what they may do: bearer tokens, signed-in sessions, scopes, throttle.

A request is authenticated by ``Authorization: Bearer sa_...`` (``ledger.models.ApiToken``,
looked up by the SHA-256 of the secret on every request, so a revocation or an expiry refuses
the very next request) or by the console's signed-in session, which must then carry its CSRF
token on every unsafe request, as a form would. Each route names the one permission it needs
(``api_auth(VIEW)``...): ``viewer``, ``support`` and ``admin`` tokens hold exactly the console
roles' permissions (``signin.roles.ROLE_PERMISSIONS``), and a signed-in operator their own;
``runtime`` tokens hold only ``RUNTIME``, the lifecycle routes', limited to their ``sources``
when the token names any (``Caller.require_source``). While the store is attached read-only no
token operates or deletes, as no operator does. A refused changing call (401, 403, invalid input)
is audited; requests are throttled per token (``TokenRateThrottle``), and refused
authentications per client address (``throttle_refused_authentication``: past its rate a 429,
not audited). A long-lived request asks ``no_longer_valid`` again before each delivery.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.http import HttpRequest
from django.utils import timezone
from ninja.security import APIKeyCookie, HttpBearer
from ninja.throttling import SimpleRateThrottle
from ninja.utils import check_csrf

from sessions_admin.api.problems import Problem, forbidden, unauthorized
from sessions_admin.core.db import read_only
from sessions_admin.ledger import actions
from sessions_admin.ledger.actions.tokens import hash_secret
from sessions_admin.ledger.context import client_address
from sessions_admin.ledger.models import ApiToken, AuditAction
from sessions_admin.signin.roles import DELETE, OPERATE, ROLE_PERMISSIONS, VIEW
from sessions_admin.signin.tokens import creator_demoted, token_state
from sessions_admin.store.attach import OPERATE_PERMISSIONS

logger = logging.getLogger(__name__)
RUNTIME = "api.runtime"  # the lifecycle routes' permission: runtime tokens only
SIGNED_IN = "api.signed_in"  # any valid token or signed-in operator (GET /me)
SWITCHES = "api.switches"  # the switch stream: runtime tokens and whoever may view
PERMISSIONS = (VIEW, OPERATE, DELETE, RUNTIME, SIGNED_IN, SWITCHES)
SCOPE_PERMISSIONS = {
    **{role: frozenset(f"console.{p}" for p in perms) for role, perms in ROLE_PERMISSIONS.items()},
    ApiToken.RUNTIME: frozenset({RUNTIME}),
}
# last_used_at is written at most this often per token, not once per request.
TOUCH_EVERY = timedelta(seconds=60)


@dataclass(frozen=True)
class Caller:
    """The token or operator a request acts for (``request.auth``)."""

    name: str
    scope: str
    permissions: frozenset[str]
    sources: tuple[str, ...] = ()
    token_key: str | None = None  # a prefix of the token's hash: the throttle's key
    token_id: int | None = None  # the token's row, read again by long-lived requests
    user: Any = None  # the signed-in operator

    @property
    def actor(self) -> Any:
        """Who audit entries name: the operator, or ``api:<token name>``."""
        return self.user if self.user is not None else f"api:{self.name}"

    def has(self, permission: str) -> bool:
        if permission == SIGNED_IN:
            return True
        if permission == SWITCHES:
            return self.has(RUNTIME) or self.has(VIEW)
        if self.user is not None:
            return bool(self.user.has_perm(permission))
        if read_only() and permission in OPERATE_PERMISSIONS:
            return False
        return permission in self.permissions

    def may_touch_source(self, source: str | None) -> bool:
        return not self.sources or source in self.sources

    def require_source(self, source: str | None, session_id: str = "") -> None:
        """403 unless this runtime token may write sessions of ``source``.

        With ``session_id`` (a session the call reads or changes, perhaps found from a key, a
        title or a merge) neither the session nor its source is named: a limited token is
        never told which session of another source a key, title or slug leads to."""
        if not self.may_touch_source(source):
            what = (
                "a session this call acts on is of a source it may not use"
                if session_id
                else f"this call names the source {source!r}"
            )
            raise forbidden(
                f"The token {self.name} is limited to the sources {', '.join(self.sources)}; "
                f"{what}. Nothing was changed."
            )

    def __str__(self) -> str:
        # ninja's throttles key on str(request.auth).
        return f"token:{self.token_key}" if self.token_key else f"user:{self.user.pk}"


def _refuse_permission(request: HttpRequest, caller: Caller, permission: str) -> Problem:
    request.api_caller = caller
    if read_only() and permission in OPERATE_PERMISSIONS:
        return Problem(
            403,
            "read-only",
            "Store attached read-only",
            "The store is attached read-only (SESSIONS_ADMIN_READ_ONLY=1): actions are "
            "switched off.",
        )
    return forbidden(f"The {caller.scope} scope does not allow this ({permission}).")


class BearerToken(HttpBearer):
    """``Authorization: Bearer <secret>`` of a token that is not revoked nor expired."""

    def __init__(self, permission: str):
        self.permission = permission
        super().__init__()

    def authenticate(self, request: HttpRequest, token: str) -> Caller:
        found = ApiToken.with_secret_hash(hash_secret(token))
        if found is None:
            raise unauthorized("This token is not known (mistyped, or never created).")
        request.api_token_name = found.name
        now = timezone.now()
        if found.revoked_at is not None:
            raise unauthorized(f"The token {found.name} was revoked.")
        if found.expires_at is not None and found.expires_at <= now:
            raise unauthorized(f"The token {found.name} expired.")
        creator_gone = found.creator_gone()
        if creator_gone:
            raise unauthorized(
                f"The token {found.name} no longer works: {creator_gone}. An active admin "
                "creates a new token."
            )
        if creator_demoted(found):
            raise unauthorized(
                f"The token {found.name} no longer works: the account of "
                f"{found.created_by_name}, who created it, is no longer an admin. An active "
                "admin creates a new token."
            )
        if found.last_used_at is None or now - found.last_used_at >= TOUCH_EVERY:
            ApiToken.objects.filter(pk=found.pk).update(last_used_at=now)
        caller = Caller(
            name=found.name,
            scope=found.scope,
            permissions=SCOPE_PERMISSIONS.get(found.scope, frozenset()),
            sources=tuple(found.sources or ()),
            token_key=found.secret_hash[:24],
            token_id=found.pk,
        )
        if not caller.has(self.permission):
            raise _refuse_permission(request, caller, self.permission)
        return caller


def no_longer_valid(request: HttpRequest) -> Problem | None:
    """The 401 a new request of this caller would get now, or None while it may still act.

    A long-lived request (a switch stream, a long poll) was authenticated once, when it began;
    it asks again before each delivery and heartbeat, so a token revoked or expired (an
    operator signed out or deactivated) meanwhile stops receiving, as its next request would.
    """
    caller = getattr(request, "auth", None)
    if caller is None:
        return unauthorized("Give a token (Authorization: Bearer sa_...) or sign in.")
    if caller.token_id is not None:
        # The token's state as every request's authentication judges it (``state_at``).
        found = ApiToken.objects.filter(pk=caller.token_id).first()
        state = "deleted" if found is None else token_state(found, timezone.now())
        if state != "active":
            return unauthorized(f"The token {caller.name} is no longer valid: {state}.")
    if caller.user is not None:
        if not get_user_model().objects.filter(pk=caller.user.pk, is_active=True).exists():
            return unauthorized(f"The operator {caller.name} was deactivated or deleted.")
        session = getattr(request, "session", None)
        key = getattr(session, "session_key", None)
        if key and not session.exists(key):
            return unauthorized(f"The operator {caller.name} signed out.")
    return None


class SignedInSession(APIKeyCookie):
    """The console's signed-in operator (its session cookie), CSRF checked on unsafe methods."""

    param_name = settings.SESSION_COOKIE_NAME

    def __init__(self, permission: str):
        self.permission = permission
        super().__init__(csrf=True)

    def __call__(self, request: HttpRequest) -> Caller | None:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        if check_csrf(request) is not None:
            raise forbidden(
                "CSRF verification failed: a signed-in browser session must send its CSRF "
                "token (X-CSRFToken) with every changing request; automation uses a token."
            )
        return self.authenticate(request, request.COOKIES.get(self.param_name))

    def authenticate(self, request: HttpRequest, key: str | None) -> Caller:
        from sessions_admin.signin.roles import role_of

        user = request.user
        caller = Caller(
            name=user.get_username(),
            scope=role_of(user) or "none",
            permissions=frozenset(),
            user=user,
        )
        if not caller.has(self.permission):
            raise _refuse_permission(request, caller, self.permission)
        return caller


def api_auth(permission: str) -> list:
    """What a route needing ``permission`` accepts: a token, else a signed-in operator."""
    if permission not in PERMISSIONS:
        raise ValueError(f"unknown API permission {permission!r}")
    return [BearerToken(permission), SignedInSession(permission)]


# The audit action a refused call of a changing route is recorded under: the one its success
# records (by the route function's name), so an auditor filtering ``cascade_delete`` sees the
# refused attempts too. A route not listed (a POST that reads: a dry run, a preview) is
# recorded as ``api_<its function>``.
REFUSED_AS = {
    "start_session": AuditAction.START_SESSION,
    "append": AuditAction.APPEND,
    "record_turn": AuditAction.TURN,
    "add_usage": AuditAction.USAGE,
    "rotate": AuditAction.ROTATE_FOR_COMPRESSION,
    "reset": AuditAction.RESET,
    "resume": AuditAction.RESUME,
    "branch": AuditAction.BRANCH,
    "undo": AuditAction.UNDO,
    "retry": AuditAction.RETRY,
    "redo": AuditAction.REDO,
    "save_transcript": AuditAction.SAVE_TRANSCRIPT,
    "resolve_conversation": AuditAction.RESOLVE_CONVERSATION,
    "merge_sessions": AuditAction.MERGE,
    "unmerge": AuditAction.UNMERGE,
    "cascade_delete": AuditAction.CASCADE_DELETE,
    "bulk_delete_start": AuditAction.BULK_DELETE,
    "job_cancel": AuditAction.CANCEL_BULK_DELETE,
    "trash_restore": AuditAction.RESTORE,
    "hold_place": AuditAction.PLACE_HOLD,
    "hold_release": AuditAction.RELEASE_HOLD,
    "retention_policy_create": AuditAction.RETENTION_POLICY_CREATE,
    "retention_policy_enable": AuditAction.RETENTION_POLICY_ENABLE,
    "retention_policy_disable": AuditAction.RETENTION_POLICY_DISABLE,
    "retention_policy_delete": AuditAction.RETENTION_POLICY_DELETE,
    "retention_run": AuditAction.RETENTION_RUN,
    "erasure_request": AuditAction.ERASURE_REQUEST,
}


def refused_action(request: HttpRequest, match: Any) -> str:
    """The action a refused call is audited under: its route's (``REFUSED_AS``), found by the
    request's method, not the URL's name, which a GET and a POST of one path share."""
    if match is None:
        return "api"
    names = getattr(match.func, "operation_names", {})
    name = names.get(request.method) or match.url_name
    if not name:
        return "api"
    return str(REFUSED_AS.get(name) or f"api_{name}")


def record_refused_call(request: HttpRequest, problem: Problem, error: BaseException) -> None:
    """Audit a refused changing call: who (as far as known), what, from where, why. An error
    the action already audited (``audited_entry``) is not recorded twice."""
    if getattr(error, "audited_entry", None) is not None:
        return
    caller = getattr(request, "auth", None) or getattr(request, "api_caller", None)
    if caller is not None:
        actor = caller.actor
    elif getattr(request, "api_token_name", None):
        actor = f"api:{request.api_token_name}"
    else:
        actor = "anonymous"
    match = getattr(request, "resolver_match", None)
    action = refused_action(request, match)
    session_id = match.kwargs.get("session_id") if match else None
    actions.record_refusal(
        request=request,
        actor=actor,
        action=action[:40],
        why=f"{problem.status} {problem.slug}: {problem.detail}",
        session_ids=[session_id] if isinstance(session_id, str) else [],
    )


class TokenRateThrottle(SimpleRateThrottle):
    """``SESSIONS_ADMIN_API_RATE`` requests per token (or operator, or address) per window.

    Fixed windows counted in the shared cache (one ``incr`` a request, every worker of the
    deployment counting together), rather than ninja's list of timestamps rewritten on every
    request; ninja answers 429 with ``Retry-After`` (the window's end) from ``wait``.
    """

    def __init__(self) -> None:
        super().__init__(rate="1/s")  # the real rate is read per request: settings can change
        self._local = threading.local()

    def allow_request(self, request: HttpRequest) -> bool:
        rate = getattr(settings, "SESSIONS_ADMIN_API_RATE", "")
        if not rate:
            return True
        allowed, period = self.parse_rate(rate)
        caller = getattr(request, "auth", None)
        ident = str(caller) if caller is not None else f"addr:{client_address(request)}"
        count, self._local.wait = _count_in_window(f"api_throttle:{ident}", period)
        return count <= allowed

    def wait(self) -> float | None:
        return max(1.0, getattr(self._local, "wait", 1.0))


def _count_in_window(ident: str, period: int) -> tuple[int, float]:
    """One more in ``ident``'s current fixed window of ``period`` seconds (the shared cache):
    the count so far, and the seconds until the window ends."""
    now = time.time()
    window = int(now // period)
    key = f"{ident}:{period}:{window}"
    cache.add(key, 0, period + 1)
    try:
        count = cache.incr(key)
    except ValueError:  # the window's entry expired between add and incr
        cache.set(key, 1, period + 1)
        count = 1
    return count, (window + 1) * period - now


_RATES = TokenRateThrottle()  # parses "N/min" as the throttle does


def throttle_refused_authentication(request: HttpRequest, problem: Problem) -> Problem:
    """A refused authentication (a 401), counted per client address: within
    ``SESSIONS_ADMIN_API_AUTH_FAIL_RATE`` it is answered (and, for a changing call, audited)
    as it is; past it the answer is a 429 with ``Retry-After``, which is not audited (the
    request log line and the requests metric count it), so a flood of requests without a valid
    token neither grows the audit log nor gets the token check answered at full speed."""
    rate = getattr(settings, "SESSIONS_ADMIN_API_AUTH_FAIL_RATE", "")
    if not rate:
        return problem
    allowed, period = _RATES.parse_rate(rate)
    address = client_address(request) or "unknown"
    count, wait = _count_in_window(f"api_auth_refused:{address}", period)
    if count <= allowed:
        return problem
    if count == allowed + 1:
        logger.warning(
            "API: %s refused authentications from %s in %s s; throttled until the window ends",
            count,
            address,
            period,
        )
    return Problem(
        429,
        "throttled",
        "Too many requests",
        "Too many requests without a valid token from this address: wait and retry.",
        headers={"Retry-After": str(max(1, math.ceil(wait)))},
    )
