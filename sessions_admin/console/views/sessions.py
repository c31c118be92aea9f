from __future__ import annotations

from django.shortcuts import redirect
from django.views.decorators.http import require_GET

from sessions_admin.console.http import HtmxHttpRequest, require_perm
from sessions_admin.console.roles import VIEW


@require_GET
@require_perm(VIEW)
def session_list(request: HtmxHttpRequest):
    # Placeholder until the session list page lands: the home page lists sessions.
    return redirect("home")
