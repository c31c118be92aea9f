"""Messages written after their session ended: preview, move (confirmed), and undo.

The health check ``written_after_end`` lists the sessions; from one of them the
operator opens the preview (``stray_move_preview``, a GET anyone may view):
which messages are stray, where the conversation continues, and a fingerprint.
The confirmed POST (``stray_move_execute``, OPERATE) executes exactly that plan
through ``ledger.actions.move_stray_messages`` or refuses if the store changed;
each completed move is listed on the preview page with its undo
(``stray_move_undo``, a POST naming the move's audit entry).
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from sessions_admin.console.forms import OptionalReasonForm, StrayMoveForm
from sessions_admin.console.http import (
    HtmxHttpRequest,
    fragment,
    plural,
    redirect_to,
    require_perm,
    session_or_404,
    session_url,
)
from sessions_admin.console.refusals import Refused, attempt_form, refuse
from sessions_admin.core import db, stray
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditAction, AuditEntry
from sessions_admin.signin.roles import OPERATE, VIEW
from sessions_admin.store.models import Session

TEMPLATE = "console/stray_move.html"
CONTENT_CHARS = 2000


def _preview_url(session_id: str) -> str:
    return reverse("stray_move_preview", args=[session_id])


def _moves_of(session_id: str) -> list[dict]:
    """Completed moves out of this session, newest first, each with whether it can be undone."""
    entries = (
        AuditEntry.objects.filter(
            action=actions.STRAY_MOVE, outcome=AuditEntry.OK, sessions__session_id=session_id
        )
        .order_by("-pk")
        .distinct()[:20]
    )
    moves = []
    for entry in entries:
        after = entry.after if isinstance(entry.after, dict) else {}
        ids = [int(m) for m in after.get("message_ids", []) if isinstance(m, int)]
        if after.get("from") != session_id or not ids:
            continue
        still_there = db.fetchone(
            f"SELECT COUNT(*) FROM messages WHERE session_id = %s "
            f"AND id IN ({db.placeholders(ids[:1000])})",
            [after.get("to"), *ids[:1000]],
        )[0]
        moves.append(
            {
                "entry": entry,
                "to": after.get("to"),
                "to_url": session_url(after.get("to")),
                "count": len(ids),
                "undoable": bool(still_there),
            }
        )
    return moves


def _page(request: HtmxHttpRequest, session: Session, *, error: str = "") -> HttpResponse:
    plan = stray.plan_stray_move(session_id=session.id)
    for row in plan.sample:
        content = row.get("content")
        if isinstance(content, str) and len(content) > CONTENT_CHARS:
            row["content"] = content[:CONTENT_CHARS] + "…"
    context = {
        "session": session,
        "session_url": session_url(session.id),
        "plan": plan,
        "destination_url": session_url(plan.destination_id),
        "moves": _moves_of(session.id),
        "can_operate": request.user.has_perm(OPERATE),
        "error": error,
    }
    # htmx swaps only 2xx answers (templates/base.html): its refusal comes as the fragment
    # with the reason in it; a plain POST keeps the 409.
    status = 409 if error and not request.htmx else 200
    return render(request, fragment(request, TEMPLATE, "stray-move"), context, status=status)


@require_GET
@require_perm(VIEW)
def stray_move_preview(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """What a move would do: the stray messages, where they would go, the plan's fingerprint."""
    return _page(request, session_or_404(session_id))


@require_POST
@require_perm(OPERATE)
def stray_move_execute(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """Execute exactly the previewed plan (its fingerprint), or show the new preview."""
    session = session_or_404(session_id)
    result = attempt_form(
        request,
        AuditAction.MOVE_STRAY_MESSAGES,
        StrayMoveForm(request.POST),
        lambda data: actions.move_stray_messages(
            actor=request.user,
            session_id=session.id,
            # No fingerprint is one that matches no plan: refused (and audited) as stale.
            expected_fingerprint=data["fingerprint"] or "",
            reason=data["reason"],
        ),
        session_ids=[session.id],
    )
    if isinstance(result, Refused):
        return _page(request, session, error=f"Nothing was moved: {result.why}")
    messages.success(
        request,
        f"Moved {plural(len(result.message_ids), 'message')} written after {session.id} ended "
        f"into {result.destination_id}. The move can be undone from this page.",
    )
    return redirect_to(request, _preview_url(session.id))


@require_POST
@require_perm(OPERATE)
def stray_move_undo(request: HtmxHttpRequest, entry_id: int) -> HttpResponse:
    """Give the messages of one move back to the session they were written in."""
    form = OptionalReasonForm(request.POST)
    entry = AuditEntry.objects.filter(
        pk=entry_id, action=actions.STRAY_MOVE, outcome=AuditEntry.OK
    ).first()
    if entry is None:
        refuse(
            request,
            AuditAction.RETURN_STRAY_MESSAGES,
            f"no completed move of stray messages #{entry_id}",
            before={"entry": entry_id},
        )
        raise Http404(f"No completed move of stray messages #{entry_id}.")
    source = entry.after.get("from") if isinstance(entry.after, dict) else None
    back = (_preview_url(source) if source and session_url(source) else None) or reverse(
        "audit_log"
    )
    result = attempt_form(
        request,
        AuditAction.RETURN_STRAY_MESSAGES,
        form,
        lambda data: actions.undo_stray_move(
            actor=request.user, entry_id=entry_id, reason=data["reason"]
        ),
        before={"entry": entry_id},
        message="The move was not undone: ",
    )
    if isinstance(result, Refused):
        return redirect_to(request, back)
    messages.success(
        request,
        f"Undid move #{entry_id}: {plural(len(result.returned_ids), 'message')} went back to "
        f"{result.session_id}.",
    )
    return redirect_to(request, back)
