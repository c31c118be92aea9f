"""Idle timeout and absolute lifetime of a signed-in session.

Signing in stamps the session with its sign-in time (``stamp_sign_in``, on Django's
``user_logged_in``). On every request of a signed-in operator the middleware signs out
a session idle for more than ``SESSIONS_ADMIN_IDLE_SECONDS``, older than
``SESSIONS_ADMIN_SESSION_MAX_SECONDS`` since its sign-in, or without a stamp (signed in
before this existed), then lets ``LoginRequiredMiddleware`` send the visitor to sign in.
The last-seen time is rewritten at most once a minute, so a busy operator does not cost a
session write per request; the session's own expiry (cookie and row) follows the same
deadline, so an expired session is gone even where this middleware never runs again.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout

# What a load balancer and Prometheus call (console/views/probes.py): never a session read
# here, so they answer while the dashboard's database does not.
PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

SIGNED_IN_AT = "sessions_admin_signed_in_at"
LAST_SEEN_AT = "sessions_admin_last_seen_at"
TOUCH_EVERY_SECONDS = 60


def _deadline_seconds(session, now: float) -> int:
    """Seconds the session may live from now: the nearer of the idle and absolute limits."""
    absolute = session[SIGNED_IN_AT] + settings.SESSIONS_ADMIN_SESSION_MAX_SECONDS - now
    return max(1, int(min(settings.SESSIONS_ADMIN_IDLE_SECONDS, absolute)))


def stamp_sign_in(sender, request, user, **kwargs) -> None:
    now = time.time()
    request.session[SIGNED_IN_AT] = now
    request.session[LAST_SEEN_AT] = now
    request.session.set_expiry(_deadline_seconds(request.session, now))


def expiry_reason(session, now: float) -> str | None:
    """Why this signed-in session is over, or None while it is valid."""
    signed_in_at = session.get(SIGNED_IN_AT)
    last_seen_at = session.get(LAST_SEEN_AT)
    if not isinstance(signed_in_at, int | float) or not isinstance(last_seen_at, int | float):
        return "expired"
    if now - signed_in_at >= settings.SESSIONS_ADMIN_SESSION_MAX_SECONDS:
        return "reached its maximum lifetime"
    if now - last_seen_at >= settings.SESSIONS_ADMIN_IDLE_SECONDS:
        return "was idle too long"
    return None


class SessionLifetimeMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path not in PROBE_PATHS and request.user.is_authenticated:
            now = time.time()
            session = request.session
            reason = expiry_reason(session, now)
            if reason:
                logout(request)
                messages.info(request, f"Your session {reason}: sign in again.")
            elif now - session[LAST_SEEN_AT] >= TOUCH_EVERY_SECONDS:
                session[LAST_SEEN_AT] = now
                session.set_expiry(_deadline_seconds(session, now))
        return self.get_response(request)
