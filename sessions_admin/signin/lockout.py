"""What django-axes counts sign-in failures by, and what a locked-out visitor sees.

``client_address``: the peer address; behind the TLS proxy (``SESSIONS_ADMIN_BEHIND_PROXY=1``)
every request comes from the proxy, so the address is the last ``X-Forwarded-For`` entry,
the one the proxy appended (nginx's ``$proxy_add_x_forwarded_for``). Entries before it come
from the client and are not trusted; a value that is not an IP address is ignored.

``attempted_username``: the name tried, cut to the longest a real name can be.

``lockout_response``: the sign-in page with one message for every lockout, the same for a
real and an unknown user name, and for a lockout by name or by address (429).
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.http import url_has_allowed_host_and_scheme


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


# No user name is longer (django.contrib.auth's User); axes's columns hold 255 characters.
USERNAME_MAX = 150


def attempted_username(request: HttpRequest, credentials: dict | None = None) -> str | None:
    """The user name a sign-in tried, as axes counts and records it: cut to what a real name
    can be (the sign-in form sets no length limit of its own), so a longer one is still counted
    and fits its column."""
    source = credentials if credentials else request.POST
    username = source.get(settings.AXES_USERNAME_FORM_FIELD) if source else None
    return username[:USERNAME_MAX] if isinstance(username, str) else None


def cooloff_minutes() -> int:
    return max(1, int(settings.AXES_COOLOFF_TIME.total_seconds() // 60))


def lockout_response(request: HttpRequest, original_response=None, credentials=None):
    from sessions_admin.ledger.signin_audit import record_locked_out_sign_in

    record_locked_out_sign_in(request, attempted_username(request, credentials))
    next_url = request.POST.get("next") or request.GET.get("next") or ""
    if not url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        next_url = ""
    context = {
        "form": AuthenticationForm(request),
        "next": next_url,
        "locked_out": True,
        "cooloff_minutes": cooloff_minutes(),
    }
    response: HttpResponse = render(
        request, "console/login.html", context, status=settings.AXES_HTTP_RESPONSE_CODE
    )
    response["Retry-After"] = str(cooloff_minutes() * 60)
    return response
