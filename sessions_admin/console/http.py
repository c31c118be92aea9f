from __future__ import annotations

import logging
from functools import wraps

from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.utils.cache import patch_vary_headers
from django.views.csrf import csrf_failure as django_csrf_failure
from django_htmx.http import HttpResponseClientRedirect
from django_htmx.middleware import HtmxDetails

from sessions_admin.console.refusals import refuse
from sessions_admin.core.db import (
    close_broken_connections,
    connection_lost,
    is_busy_error,
    read_only,
    storage_failure,
)
from sessions_admin.core.deletion import TRASH_DATABASE, DeletePartlyApplied
from sessions_admin.core.errors import StoreBusy
from sessions_admin.store.attach import OPERATE_PERMISSIONS
from sessions_admin.store.models import Session

logger = logging.getLogger(__name__)


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def require_perm(perm: str):
    """403 unless the signed-in operator holds ``perm`` (sign-in itself is the middleware's).

    While the store is attached read-only no one operates or deletes, superusers included.
    """

    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):

            if read_only() and perm in OPERATE_PERMISSIONS:
                raise _refused(
                    request,
                    view,
                    "The store is attached read-only (SESSIONS_ADMIN_READ_ONLY=1): "
                    "actions are switched off.",
                )
            if not request.user.has_perm(perm):
                raise _refused(request, view, f"Your role does not allow this ({perm}).")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def _refused(request, view, why: str) -> PermissionDenied:
    """The 403 for ``view``, recorded in the audit log first (who, what, from where, why)."""

    match = getattr(request, "resolver_match", None)
    refuse(
        request,
        match.url_name if match and match.url_name else view.__name__,
        why,
        session_ids=[v for k, v in (match.kwargs if match else {}).items() if k == "session_id"],
    )
    return PermissionDenied(why)


def csrf_failure(request, reason: str = ""):
    """Django's CSRF refusal page, after recording the attempt (a forged or stale form)."""

    match = getattr(request, "resolver_match", None)
    refuse(
        request,
        match.url_name if match and match.url_name else "csrf",
        f"CSRF verification failed ({reason or 'no reason given'})",
    )
    return django_csrf_failure(request, reason=reason)


def session_url(session_id: str | None) -> str | None:
    """A session's page, or None for an id the URL pattern cannot carry (a runtime wrote it)."""

    if not session_id:
        return None
    try:
        return reverse("session_detail", args=[session_id])
    except NoReverseMatch:
        return None


def wants_fragment(request: HtmxHttpRequest) -> bool:
    """htmx asked for a piece of the page (a history restore needs the whole page)."""
    return bool(request.htmx) and not request.htmx.history_restore_request


def fragment(request: HtmxHttpRequest, template: str, name: str) -> str:
    """The whole page for a normal request (and an htmx history restore), just the named
    partial for htmx."""
    return f"{template}#{name}" if wants_fragment(request) else template


def redirect_to(request: HtmxHttpRequest, url: str) -> HttpResponse:
    """A redirect htmx follows as a full navigation, so the next page shows the message."""

    return HttpResponseClientRedirect(url) if request.htmx else HttpResponseRedirect(url)


def plural(count: int, word: str, many: str | None = None) -> str:
    """``"1 session"``, ``"1,234 sessions"`` (``many`` for irregular plurals)."""
    return f"{count:,} {word if count == 1 else (many or word + 's')}"


class VaryOnHtmxMiddleware:
    """Every page answers htmx with a fragment and browsers with the whole page (and an htmx
    history restore with the whole page again): say so to caches, here for every view."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):

        response = self.get_response(request)
        patch_vary_headers(response, ("HX-Request", "HX-History-Restore-Request"))
        return response


BUSY_RETRY_AFTER_SECONDS = 5


def _which_database(error: BaseException) -> str:
    """The database whose write failed, in words, as the core tagged it (``error.database``:
    "store", or the trash's in the dashboard database), else "A database"."""
    database = getattr(error, "database", None)
    if database == "store":
        return "The store"
    if database == TRASH_DATABASE:
        return "The dashboard database"
    return "A database"


class StoreBusyMiddleware:
    """A busy store, or a database that cannot be written (a full disk, a read-only file), that
    a view did not turn into a message itself: a 503 saying so, never a 500.

    Views catch ``StoreError`` around their actions and show it inline; this is
    the net under them. ``StoreBusy`` comes from the core after its bounded
    retries, its transaction rolled back (nothing changed). A bare "database is
    locked" (or PostgreSQL lock/serialization failure) comes from outside the
    core's retrying transactions (a read, or the dashboard's own database), so
    its page says what is known: the request did not finish.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):

        if isinstance(exception, StoreBusy):
            message = str(exception)
        elif isinstance(exception, DatabaseError) and is_busy_error(exception):
            # Not from the core's retrying transactions, so no claim that nothing changed.
            message = (
                "A database was busy (another process holds its lock) and this request could "
                "not finish. Reload to see the current state before trying again."
            )
        elif isinstance(exception, DatabaseError | DeletePartlyApplied) and connection_lost(
            getattr(exception, "error", None) or exception
        ):
            # A database server restarted or stopped under the request: said so, never a 500.
            close_broken_connections()
            message = (
                "The database server closed the connection (it restarted or stopped), so this "
                "request did not finish"
                + (f": {exception}" if isinstance(exception, DeletePartlyApplied) else ".")
                + " Reload once it is back to see the current state before trying again."
            )
            logger.error(
                "database connection lost on %s %s: %s", request.method, request.path, exception
            )
            response = render(
                request,
                "503.html",
                {"message": message, "title": "Server gone", "heading": "A database restarted"},
                status=503,
            )
            response["Retry-After"] = str(BUSY_RETRY_AFTER_SECONDS)
            return response
        elif isinstance(exception, DatabaseError) and (storage := storage_failure(exception)):
            # A view that did not turn it into its own words: say what is known, not "error 500".
            why = (
                "its disk is full"
                if storage == "full"
                else f"{exception}: a full disk or a read-only file"
            )
            message = (
                f"{_which_database(exception)} could not be written ({why}), so this request did not "
                "finish. "
                "Free space on its disk (or make it writable), then reload to see the current "
                "state before trying again: what a delete finished before it is in the trash."
            )
            logger.error(
                "database not writable on %s %s: %s", request.method, request.path, exception
            )
            context = {
                "message": message,
                "title": "Not written",
                "heading": "A database could not be written",
            }
            response = render(request, "503.html", context, status=503)
            response["Retry-After"] = str(BUSY_RETRY_AFTER_SECONDS)
            return response
        else:
            return None
        logger.warning("store busy on %s %s: %s", request.method, request.path, exception)
        response = render(request, "503.html", {"message": message}, status=503)
        response["Retry-After"] = str(BUSY_RETRY_AFTER_SECONDS)
        return response


def session_or_404(session_id: str):
    """The session a URL names, or 404: every view about one session starts here."""

    # A NUL cannot be in a stored id, and PostgreSQL refuses to compare with one.
    if "\x00" in session_id:
        raise Http404("No such session")
    session = Session.objects.filter(id=session_id).first()
    if session is None:
        raise Http404("No such session")
    return session
