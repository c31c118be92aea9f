"""The lockout page, and failed sign-ins and current lockouts for admins (read-only: lockouts
end by themselves; ``manage.py axes_reset_username NAME`` / ``axes_reset_ip ADDRESS`` lift one
early)."""

from __future__ import annotations

from axes.models import AccessAttempt, AccessFailureLog
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Max, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET

from sessions_admin.signin.audit import record_locked_out_sign_in
from sessions_admin.signin.lockout import attempted_username, cooloff_minutes
from sessions_admin.signin.roles import role_of

PAGE_SIZE = 50
LOCKOUTS_SHOWN = 50


def _current_lockouts(field: str) -> list[dict]:
    """Names or addresses refused right now, as django-axes counts them."""
    recent = AccessAttempt.objects.filter(
        attempt_time__gte=timezone.now() - settings.AXES_COOLOFF_TIME
    ).exclude(**{f"{field}__isnull": True})
    rows = (
        recent.values(field)
        .annotate(failures=Sum("failures_since_start"), last_failure=Max("attempt_time"))
        .filter(failures__gte=settings.AXES_FAILURE_LIMIT)
        .order_by("-last_failure")[:LOCKOUTS_SHOWN]
    )
    return [
        {
            "value": row[field],
            "failures": row["failures"],
            "until": row["last_failure"] + settings.AXES_COOLOFF_TIME,
        }
        for row in rows
    ]


@require_GET
def signin_failures(request: HttpRequest) -> HttpResponse:
    # Admins read this whatever the store's mode (read-only attach withholds deleting, not this).
    if role_of(request.user) != "admin":
        raise PermissionDenied("Only admins see failed sign-ins.")
    failures = AccessFailureLog.objects.order_by("-attempt_time", "-id")
    page = Paginator(failures, PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "locked_names": _current_lockouts("username"),
        "locked_addresses": _current_lockouts("ip_address"),
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "cooloff_minutes": cooloff_minutes(),
    }
    return render(request, "console/signin_failures.html", context)


def lockout_response(request: HttpRequest, original_response=None, credentials=None):
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
