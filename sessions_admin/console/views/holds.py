"""Legal holds: sessions (whole lineages) and users no delete may touch (support and admins).

The page lists the standing holds and the recently released ones, places a hold (on a
session, from its page or by id, or on a user id) and releases one. Every delete path
refuses held sessions by itself (core/holds.py); this page only manages the holds.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from sessions_admin.console.forms import HoldForm, HoldReleaseForm
from sessions_admin.console.http import HtmxHttpRequest, require_perm
from sessions_admin.console.refusals import Refused, attempt_form, attempt_valid
from sessions_admin.core import holds, lineage
from sessions_admin.core.ids import addressable
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditAction
from sessions_admin.signin.roles import OPERATE

TEMPLATE = "console/holds.html"


def _session_link(hold: holds.Hold) -> str | None:
    if hold.kind != holds.SESSION:
        return None
    if (
        hold.active
        and lineage.session_row(hold.subject) is None
        and holds.in_lineage_elsewhere(hold.subject)
    ):
        # Held while only in the trash: its entry is where to find it.
        return reverse("trash") + "?" + urlencode({"q": hold.subject})
    if addressable(hold.subject):
        return reverse("session_detail", args=[hold.subject])
    return None


def _render(
    request: HtmxHttpRequest, *, form_values: dict | None = None, problems=(), status: int = 200
) -> HttpResponse:
    listed = [(hold, _session_link(hold)) for hold in holds.recent_holds()]
    context = {
        "active": [(hold, link) for hold, link in listed if hold.active],
        "released": [(hold, link) for hold, link in listed if not hold.active],
        "kinds": holds.KINDS,
        "values": form_values or {"kind": request.GET.get("kind", holds.SESSION)},
        "problems": list(problems),
    }
    if not form_values:
        subject = request.GET.get("subject", "")
        context["values"]["subject"] = subject if isinstance(subject, str) else ""
    return render(request, TEMPLATE, context, status=status)


@require_GET
@require_perm(OPERATE)
def hold_list(request: HtmxHttpRequest) -> HttpResponse:
    """The holds, and the form to place one (``?kind=session&subject=<id>`` prefills it)."""
    return _render(request)


@require_POST
@require_perm(OPERATE)
def hold_place(request: HtmxHttpRequest) -> HttpResponse:
    form = HoldForm(request.POST)
    values = {
        "kind": form.shown_back("kind"),
        "subject": form.shown_back("subject"),
        "reason": form.shown_back("reason"),
    }
    hold = attempt_valid(
        request,
        AuditAction.PLACE_HOLD,
        form,
        lambda data: actions.place_hold(
            actor=request.user, kind=data["kind"], subject=data["subject"], reason=data["reason"]
        ),
    )
    if isinstance(hold, Refused):
        problems = hold.said("No hold was placed: ")
        return _render(request, form_values=values, problems=problems, status=400)
    if hold.kind == holds.USER and not holds.user_session_count(hold.subject):
        # Accepted: the hold also covers the sessions the user starts later. But an id
        # mistyped covers nothing, so the operator is told so in those words.
        messages.warning(
            request,
            f"Placed {hold.describe()}, but user {hold.subject} has no sessions in the store "
            "or the trash: it covers nothing yet, only the sessions this user starts from now "
            "on. Check the user id if you expected it to hold sessions.",
        )
        return redirect("holds")
    messages.success(request, f"Placed {hold.describe()}: no delete can remove it now.")
    return redirect("holds")


@require_POST
@require_perm(OPERATE)
def hold_release(request: HtmxHttpRequest, hold_id: int) -> HttpResponse:
    hold = attempt_form(
        request,
        AuditAction.RELEASE_HOLD,
        HoldReleaseForm(request.POST),
        lambda data: actions.release_hold(
            actor=request.user, hold_id=hold_id, reason=data["reason"]
        ),
        message=f"Hold #{hold_id} stays: ",
    )
    if isinstance(hold, Refused):
        return redirect("holds")
    messages.success(request, f"Released legal hold #{hold.id}; its sessions can be deleted again.")
    return redirect("holds")
