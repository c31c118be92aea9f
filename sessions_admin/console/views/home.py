from __future__ import annotations

from django.shortcuts import render
from django.views.decorators.http import require_GET

from sessions_admin.console.http import HtmxHttpRequest, fragment, require_perm
from sessions_admin.console.roles import VIEW
from sessions_admin.store.models import Session

HOME_PAGE_SIZE = 50


@require_GET
@require_perm(VIEW)
def home(request: HtmxHttpRequest):
    sessions = list(
        Session.objects.only(
            "id",
            "source",
            "title",
            "user_id",
            "started_at",
            "ended_at",
            "end_reason",
            "message_count",
            "model",
        ).order_by("-started_at", "-id")[:HOME_PAGE_SIZE]
    )
    return render(
        request,
        fragment(request, "console/home.html", "session-rows"),
        {"sessions": sessions, "page_size": HOME_PAGE_SIZE},
    )


@require_GET
@require_perm(VIEW)
def conversation_list(request: HtmxHttpRequest):
    # Placeholder until the conversations page lands.
    return render(request, "console/home.html", {"sessions": [], "page_size": 0})
