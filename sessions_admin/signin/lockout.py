"""What django-axes counts sign-in failures by, and what a locked-out visitor sees.

``client_address`` (the ledger's, so a lockout and the audit agree): the peer address; behind the TLS proxy (``SESSIONS_ADMIN_BEHIND_PROXY=1``)
every request comes from the proxy, so the address is the last ``X-Forwarded-For`` entry,
the one the proxy appended (nginx's ``$proxy_add_x_forwarded_for``). Entries before it come
from the client and are not trusted; a value that is not an IP address is ignored.

``attempted_username``: the name tried, cut to the longest a real name can be.

``views.lockout_response``: the sign-in page with one message for every lockout, the same for a
real and an unknown user name, and for a lockout by name or by address (429).
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

from sessions_admin.ledger.context import client_address

__all__ = ["attempted_username", "client_address", "cooloff_minutes"]


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
