"""Failed sign-ins and current lockouts, for admins (read-only: lockouts end by themselves;
``manage.py axes_reset_username NAME`` / ``axes_reset_ip ADDRESS`` lift one early)."""

from __future__ import annotations

from axes.models import AccessAttempt, AccessFailureLog
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Max, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from sessions_admin.console.roles import role_of
from sessions_admin.signin.lockout import cooloff_minutes

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
