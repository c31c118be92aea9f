"""Where an audited action comes from: the client address and user agent of the request.

``RequestClientMiddleware`` sets a context variable for the length of each
request; ``sessions_admin.ledger.actions.record`` reads it, so every audit entry
written while a request is handled (an action, its refusal, a failed sign-in)
carries both without each view passing them along. Outside a request (commands,
the bulk-delete worker thread, a runtime calling the core) there is no client:
the entry's address is empty and its user agent blank.

The address is the one django-axes counts sign-in failures by
(``client_address`` below, django-axes's ``AXES_CLIENT_IP_CALLABLE``: the peer, or behind the TLS
proxy the address the proxy appended), so a lockout and the audit agree.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest

USER_AGENT_MAX = 512


def _ip(value: str | None) -> str | None:
    try:
        return str(ipaddress.ip_address((value or "").strip()))
    except ValueError:
        return None


def client_address(request: HttpRequest) -> str | None:
    if getattr(settings, "SESSIONS_ADMIN_BEHIND_PROXY", False):
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        appended_by_proxy = _ip(forwarded.rsplit(",", 1)[-1]) if forwarded else None
        if appended_by_proxy:
            return appended_by_proxy
    return _ip(request.META.get("REMOTE_ADDR"))


@dataclass(frozen=True)
class Client:
    address: str | None = None
    user_agent: str = ""


NO_CLIENT = Client()
_current: ContextVar[Client] = ContextVar("sessions_admin_audit_client", default=NO_CLIENT)


def client_of(request: HttpRequest) -> Client:
    """The request's client as the audit log records it (storable, bounded)."""
    agent = request.META.get("HTTP_USER_AGENT", "") or ""
    # Headers arrive as latin-1 decoded bytes: keep them printable and bounded.
    agent = "".join(c if c.isprintable() else "\ufffd" for c in agent)[:USER_AGENT_MAX]
    return Client(address=client_address(request), user_agent=agent)


def current_client() -> Client:
    return _current.get()


def client_context(client: Client) -> AbstractContextManager[None]:
    return _bound(_current, client)


@contextmanager
def _bound(var: ContextVar, value: object) -> Iterator[None]:
    """``var`` is ``value`` in this context, until the block ends."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


class RequestClientMiddleware:
    """Every audit entry written during a request names the request's client."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with client_context(client_of(request)):
            return self.get_response(request)


# The audit entry of the action running in this context (``actions._audited`` sets it around
# the store operation): work the action records on its own (a restore's intent on its trash
# entries) names it, so a later process can complete the entry when this one died.
_audit_entry: ContextVar[int | None] = ContextVar("sessions_admin_audit_entry", default=None)


def running_audit_entry(entry_id: int) -> AbstractContextManager[None]:
    return _bound(_audit_entry, entry_id)


def current_audit_entry() -> int | None:
    return _audit_entry.get()
