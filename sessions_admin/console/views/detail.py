from __future__ import annotations

from django.http import Http404
from django.shortcuts import render
from django.views.decorators.http import require_GET

from sessions_admin.console.http import HtmxHttpRequest, require_perm
from sessions_admin.console.roles import VIEW
from sessions_admin.store.models import Session


@require_GET
@require_perm(VIEW)
def session_detail(request: HtmxHttpRequest, session_id: str):
    session = Session.objects.filter(id=session_id).first()
    if session is None:
        raise Http404("No such session")
    return render(request, "console/session_detail.html", {"session": session})
