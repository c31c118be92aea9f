"""Support actions on one session: resume (with a preflight), reset, undo, redo and retry.

The views only read the store to show what an action would do (the resume preflight is the
core's ``plan_resume``); every POST is validated by its form and every change goes through
``ledger.actions``. Actions are POST-only and need OPERATE. A refused or failed action is a
message, never a 500, and changes nothing.

Undo, redo and retry are offered on the live session only, behind a preview of the messages
they would change (the core's ``plan_rewrite``, whose fingerprint the form posts back, so a
turn the runtime changed meanwhile is refused, not rewound blind). They answer htmx with the
actions panel and a ``session-changed`` event, on which the page reloads its transcript,
counters and history; without JavaScript they redirect back with a message."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlencode

from django.contrib import messages
from django.db.models.functions import Substr
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import trigger_client_event

from sessions_admin import core
from sessions_admin.console.forms import OptionalReasonForm, ResetForm, ResumeForm, RewriteForm
from sessions_admin.console.http import (
    HtmxHttpRequest,
    plural,
    redirect_to,
    require_perm,
    session_or_404,
    wants_fragment,
)
from sessions_admin.console.previews import CallAnswered, preview_calls
from sessions_admin.console.refusals import Refused, attempt, attempt_form, refuse
from sessions_admin.console.words import end_reason_words
from sessions_admin.core import db, fingerprints, lineage, stray
from sessions_admin.core.lifecycle import ResumePlan, plan_resume, where_it_continues
from sessions_admin.core.text import REFERENCE_MAX, operator_identifier, shown_back
from sessions_admin.core.transcript import RewritePlan, RewritePlanChanged, plan_rewrite
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditAction
from sessions_admin.signin.roles import DELETE, OPERATE, VIEW
from sessions_admin.store import health
from sessions_admin.store.models import Message, Session

TEMPLATE = "console/session_actions.html"
PANEL = f"{TEMPLATE}#actions-panel"
# The client event the detail page's transcript, counters and history listen for.
CHANGED_EVENT = "session-changed"
REF_MAX = REFERENCE_MAX

REWRITE_WORDS = {
    "undo": "Undo last turn",
    "redo": "Redo",
    "retry": "Retry",
}
PREVIEW_MESSAGES = 8  # messages listed in a rewind's preview before "and N more"
PREVIEW_CHARS = 160  # of each message's text


@dataclass(frozen=True)
class Notice:
    """An outcome shown in the actions panel (htmx) instead of a flash message."""

    level: str  # success, info, error
    text: str
    link: str | None = None
    link_text: str = ""


# --- helpers ----------------------------------------------------------------------------------


def _detail_url(session_id: str, **query: str) -> str:
    try:
        url = reverse("session_detail", args=[session_id])
    except NoReverseMatch:
        return reverse("session_list")
    return f"{url}?{urlencode(query)}" if query else url


@dataclass(frozen=True)
class PreviewedMessage:
    id: int
    role: str
    text: str  # the start of its content
    url: str
    calls: list[SafeString] = field(default_factory=list)  # its tool calls, one line each
    answers: CallAnswered | None = None  # the listed call a tool result answers
    tool_call_id: str | None = None


@dataclass(frozen=True)
class RewritePreview:
    """One of undo, redo, retry as the panel offers it: the core's plan and the rows it names."""

    action: str
    plan: RewritePlan | None
    nothing: str = ""  # why there is nothing to do (no plan)
    shown: list[PreviewedMessage] = field(default_factory=list)
    more: int = 0


def _previewed(session_id: str, ids: tuple[int, ...]) -> list[PreviewedMessage]:
    rows = list(
        Message.objects.filter(session_id=session_id, id__in=list(ids[:PREVIEW_MESSAGES]))
        .annotate(start=Substr("content", 1, PREVIEW_CHARS + 1))
        .values("id", "role", "start", "tool_calls", "tool_call_id", "tool_name")
        .order_by("id")
    )

    def url_of(message_id: int) -> str:
        return _detail_url(session_id, around=str(message_id)) + f"#m{message_id}"

    # A tool-call turn shows its calls, each paired with its result where that is listed.
    calls = preview_calls(rows, url_of, shown=PREVIEW_CHARS)
    shown = []
    for row in rows:
        text = " ".join((row["start"] or "").split())
        if len(text) > PREVIEW_CHARS:
            text = text[:PREVIEW_CHARS] + "…"
        lines = calls.lines.get(row["id"], [])
        if not text and not lines:
            text = "(tool calls, not valid JSON)" if row["id"] in calls.unparsed else "(no text)"
        role = row["role"] + (f" · {row['tool_name']}" if row["tool_name"] else "")
        shown.append(
            PreviewedMessage(
                row["id"],
                role,
                text,
                url_of(row["id"]),
                calls=lines,
                answers=calls.answers.get(row["id"]),
                tool_call_id=row["tool_call_id"] if row["role"] == "tool" else None,
            )
        )
    return shown


def rewrite_previews(session_id: str) -> list[RewritePreview]:
    """Undo, redo and retry of a live session, each with what it would change now."""
    previews = []
    for action in ("undo", "redo", "retry"):
        try:
            plan = plan_rewrite(session_id=session_id, action=action, wait_for_reply=True)
        except core.StoreError as nothing:  # nothing to undo, mid-turn, or it ended meanwhile
            previews.append(RewritePreview(action, None, str(nothing)))
            continue
        ids = plan.message_ids
        shown = _previewed(session_id, ids)
        previews.append(RewritePreview(action, plan, "", shown, max(len(ids) - len(shown), 0)))
    return previews


def _counted(session_id: str) -> tuple[int, int] | None:
    """(stored message_count, active rows) when the health check "Counters that disagree with
    the rows" holds for the session (a recount is offered), else None."""
    mismatch, params = health.predicate("counter_mismatch", "s")
    row = db.fetchone(
        "SELECT s.message_count, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id "
        f"AND m.active = 1) FROM sessions s WHERE s.id = %s AND {mismatch}",
        [session_id, *params],
    )
    return (int(row[0] or 0), int(row[1])) if row else None


def panel_context(request: HtmxHttpRequest, session: Session) -> dict:
    """What the actions panel on the detail page needs (empty for operators who cannot act)."""
    can_operate = request.user.has_perm(OPERATE)
    context: dict = {"can_operate": can_operate}
    if not can_operate:
        return context
    key_live = core.live_session_for_key(session.session_key) if session.session_key else None
    # The core rewinds live sessions only: an ended segment links to the live session that
    # continues it (named on the panel), where undo, redo and retry are offered.
    live = session.ended_at is None
    continues_in = None
    if not live:
        row = lineage.session_row(session.id)
        continues_in = where_it_continues(row)[0] if row else None
    context.update(
        {
            "can_delete": request.user.has_perm(DELETE),
            "key_live": key_live,
            "rewrites": rewrite_previews(session.id) if live else [],
            "continues_in": continues_in,
            "continues_in_url": (
                _detail_url(continues_in) + "#session-actions" if continues_in else None
            ),
            # Counters a runtime left disagreeing with the rows: the repair is a recount.
            "counted": _counted(session.id),
            # Messages a stale runtime wrote after the end: the repair is a previewed move.
            "stray_count": (
                len(stray.plan_stray_move(session_id=session.id).message_ids) if not live else 0
            ),
        }
    )
    return context


# --- undo, redo, retry ------------------------------------------------------------------------


def _rewrite_notice(session: Session, result: core.RewriteResult) -> Notice:
    ids = list(result.message_ids)
    span = f"#{ids[0]}" if len(ids) == 1 else f"#{ids[0]}–#{ids[-1]}"
    count = plural(len(ids), "message")
    remaining = f"{session.id} now has {plural(result.message_count, 'active message')}."
    if result.action == "undo":
        text = f"Undid the last turn: {count} ({span}) marked undone; redo brings them back. "
    elif result.action == "retry":
        text = f"Dropped the last reply for a retry: {count} ({span}) marked undone. "
    else:
        text = f"Redid: {count} ({span}) active again. "
    link = _detail_url(session.id, around=str(ids[0])) + f"#m{ids[0]}" if ids else None
    return Notice("success", text + remaining, link, "Show in the transcript")


def _rewrite(request: HtmxHttpRequest, session_id: str, action: str) -> HttpResponse:
    session = session_or_404(session_id)
    form = RewriteForm(request.POST)
    result = None

    def failed(problem: str | core.StoreError) -> Notice:
        refuse(request, action, problem, session_ids=[session.id])
        return Notice("error", f"{REWRITE_WORDS[action]} failed, nothing changed: {problem}")

    if not form.is_valid():
        notice = failed(form.problem())
    else:
        try:
            result = actions.rewrite(
                actor=request.user,
                session_id=session.id,
                action=action,
                reason=form.cleaned_data["reason"],
                # Checked under the session's lock: the rows previewed, or nothing.
                expected_fingerprint=form.cleaned_data["fingerprint"] or None,
            )
        except RewritePlanChanged:  # audited as failed by the action
            notice = Notice(
                "error",
                f"{REWRITE_WORDS[action]} refused, nothing changed: the transcript changed "
                "since the preview (the runtime is still writing). Check the new preview "
                "and confirm again.",
            )
        except core.NothingToUndo as nothing:
            notice = Notice("info", f"Nothing changed: {nothing}")
        except core.TurnInProgress as answering:  # audited as failed by the action
            notice = Notice(
                "error", f"{REWRITE_WORDS[action]} refused, nothing changed: {answering}"
            )
        except core.SessionEnded as ended:
            live = ended.live_session_id
            notice = Notice(
                "error",
                f"{REWRITE_WORDS[action]} refused, nothing changed: {ended}",
                _detail_url(live) if live else None,
                "Open the live session",
            )
        except core.StoreError as problem:
            notice = failed(problem)
        else:
            notice = _rewrite_notice(session, result)

    if wants_fragment(request):
        session = Session.objects.filter(id=session.id).first() or session
        context = {"session": session, "notice": notice, **panel_context(request, session)}
        response = render(request, PANEL, context)
        if result is not None:
            trigger_client_event(
                response,
                CHANGED_EVENT,
                {"session": session.id, "action": action, "messages": list(result.message_ids)},
            )
        return response

    level = {"success": messages.SUCCESS, "info": messages.INFO}.get(notice.level, messages.ERROR)
    messages.add_message(request, level, notice.text)
    if result is not None and result.message_ids:
        first = result.message_ids[0]
        return redirect_to(request, _detail_url(session.id, around=str(first)) + f"#m{first}")
    return redirect_to(request, _detail_url(session.id))


@require_POST
@require_perm(OPERATE)
def session_undo(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """Mark the last turn (the last active user message and what follows) undone."""
    return _rewrite(request, session_id, "undo")


@require_POST
@require_perm(OPERATE)
def session_redo(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """Bring back the earliest undone turn after the last active message."""
    return _rewrite(request, session_id, "redo")


@require_POST
@require_perm(OPERATE)
def session_retry(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """Mark the reply to the last user message undone, so the runtime can answer again."""
    return _rewrite(request, session_id, "retry")


# --- recount ----------------------------------------------------------------------------------


@require_POST
@require_perm(OPERATE)
def session_recount(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """Set the session's counters from its active rows (the health finding "Counters that
    disagree with the rows": a runtime's own rewind keeps ``message_count``)."""
    session = session_or_404(session_id)
    back = _detail_url(session.id)
    result = attempt_form(
        request,
        AuditAction.RECOUNT,
        OptionalReasonForm(request.POST),
        lambda data: actions.recount(
            actor=request.user, session_id=session.id, reason=data["reason"]
        ),
        session_ids=[session.id],
        message="Nothing was recounted: ",
    )
    if isinstance(result, Refused):
        return redirect_to(request, back)
    messages.success(
        request,
        f"Recounted {session.id} from its active rows: message_count {result.before[0]:,} → "
        f"{result.after[0]:,}, tool_call_count {result.before[1]:,} → {result.after[1]:,}.",
    )
    return redirect_to(request, back)


# --- reset ------------------------------------------------------------------------------------


@require_POST
@require_perm(OPERATE)
def session_reset(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """End the live session of this session's key (``session_reset``) and start a fresh one."""
    session = session_or_404(session_id)
    back = _detail_url(session.id)
    key = session.session_key
    if not key:
        messages.error(
            request,
            f"{session.id} has no session key, so there is no chat to reset. Nothing changed.",
        )
        return redirect_to(request, back)
    form = ResetForm(request.POST)
    if not form.is_valid():
        refuse(request, AuditAction.RESET, form.problem(), session_ids=[session.id])
        messages.error(request, f"{form.problem()} Nothing changed.")
        return redirect_to(request, back)
    summary = form.cleaned_data["summary"]
    live = core.live_session_for_key(key)
    # The live session the page showed ("" for none); a form without it resets what is live.
    if "live" in form.data and (form.cleaned_data["live"] or "") != (live or ""):
        now = f"now {live}" if live else "now none"
        refuse(
            request,
            AuditAction.RESET,
            f"the live session of key {key} changed since the page was shown ({now})",
            session_ids=[session.id],
        )
        messages.error(
            request,
            f"The live session of key {key} changed since the page was shown ({now}). "
            "Nothing was reset: check the page and reset again.",
        )
        return redirect_to(request, back)
    result = attempt(
        request,
        AuditAction.RESET,
        lambda: actions.reset(
            actor=request.user,
            session_key=key,
            summary=summary or None,
            reason=form.cleaned_data["reason"],
        ),
        session_ids=[session.id],
        message="Reset failed, nothing changed: ",
    )
    if isinstance(result, Refused):
        return redirect_to(request, back)
    if result.left_to_gateway:
        ended = result.ended_session_id or ", ".join(s for s, _ in result.closed_recoverable)
        messages.success(
            request,
            (f"Reset: ended {ended} (session_reset). " if ended else "Reset: nothing was live. ")
            + f"Hermes's gateway routes {key}: it starts the next session on the chat's next "
            "message, as after its own /reset.",
        )
        return redirect_to(request, back)
    if result.ended_session_id:
        text = f"Reset: ended {result.ended_session_id} (session_reset), started {result.new_session_id}"
    else:
        text = f"Reset: no session of key {key} was live; started {result.new_session_id}"
    messages.success(
        request, text + (" with the summary as its first message." if summary else ".")
    )
    return redirect_to(request, _detail_url(result.new_session_id))


# --- resume -----------------------------------------------------------------------------------


def _row(session_id: str | None) -> Session | None:
    if not session_id:
        return None
    return Session.objects.filter(id=session_id).first()


def _shown_plan(session: Session, plan: ResumePlan) -> dict:
    """The core's resume plan with the sessions it names, as the preflight shows them."""
    return {
        "asked": session,
        "target": _row(plan.target_id) or session,
        "why": plan.followed,
        "chain_length": plan.chain_length,
        "switch_from": _row(plan.switch_from_id),
        "already_live": plan.already_live,
        "nothing_to_do": plan.nothing_to_do,
        "fingerprint": plan.fingerprint,
    }


def _preflight(
    request: HtmxHttpRequest,
    session: Session,
    *,
    form: ResumeForm | None = None,
    error: str | None = None,
    ref: str = "",
    ref_error: str | None = None,
    candidates: list[Session] | None = None,
) -> HttpResponse:
    try:
        plan = _shown_plan(session, plan_resume(ref=session.id))
    except core.StoreError as problem:  # nothing to show but why
        plan, error = None, error or str(problem)
    context = {
        "session": session,
        "plan": plan,
        "error": error,
        "ref": ref,
        "ref_error": ref_error,
        "candidates": candidates or [],
        "can_operate": request.user.has_perm(OPERATE),
        "reason": form.shown_back("reason") if form is not None else "",
    }
    return render(request, TEMPLATE, context)


def _changed_since_shown(form: ResumeForm, plan: ResumePlan) -> tuple[str, str] | None:
    """(why, for the audit log; what to tell the operator) when the plan is no longer the one
    the preflight showed: the session it reopens, the one it switches from, its fingerprint.
    A form without them resumes what the plan is now (``resume_session`` checks that)."""
    shown = form.cleaned_data
    if "target" in form.data and shown["target"] != plan.target_id:
        return (
            f"the lineage changed since the preflight (now {plan.target_id})",
            f"The lineage changed since the preflight: {plan.target_id} would be reopened "
            f"now, not {shown['target']}. Nothing was resumed: check below and confirm again.",
        )
    if "switch_from" in form.data and (shown["switch_from"] or "") != (plan.switch_from_id or ""):
        now = plan.switch_from_id or "none"
        return (
            f"the live session of this chat changed since the preflight (now {now})",
            f"The live session of this chat changed since the preflight (now {now}). "
            "Nothing was resumed: check below and confirm again.",
        )
    if shown["fingerprint"] and not fingerprints.matches(shown["fingerprint"], plan.fingerprint):
        return (
            "the resume plan changed since the preflight",
            "The sessions of this chat changed since the preflight. "
            "Nothing was resumed: check below and confirm again.",
        )
    return None


def _resume_preflight(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    session = session_or_404(session_id)
    ref = request.GET.get("ref", "").strip()
    if not ref:
        return _preflight(request, session)
    try:
        operator_identifier(ref, field="session reference", max_length=REF_MAX)
    except core.InvalidInput:
        return _preflight(
            request,
            session,
            ref=shown_back(ref, max_length=REF_MAX),
            ref_error="That is not a session id, title or id prefix.",
        )
    try:
        found = core.resolve_session_ref(ref)
    except core.AmbiguousSessionRef as ambiguous:
        rows = Session.objects.filter(id__in=ambiguous.candidates).order_by("id")
        text = (
            f"{ref!r} is the start of more than one session id"
            f"{' (the first few are listed)' if len(ambiguous.candidates) > 5 else ''}: "
            "pick one, or give more of the id."
        )
        return _preflight(request, session, ref=ref, ref_error=text, candidates=list(rows))
    except core.SessionNotFound:
        text = (
            f"No session has the id or title {ref!r}"
            + (", and no id starts with it." if len(ref) >= 4 else ".")
            + (" Give at least 4 characters of an id." if len(ref) < 4 else "")
        )
        return _preflight(request, session, ref=ref, ref_error=text)
    except core.StoreError as problem:
        return _preflight(request, session, ref=ref, ref_error=str(problem))
    return HttpResponseRedirect(reverse("session_resume", args=[found]))


def _resume_execute(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    session = session_or_404(session_id)
    form = ResumeForm(request.POST)

    def refused(why: str | core.StoreError, error: str) -> HttpResponse:
        refuse(request, AuditAction.RESUME, why, session_ids=[session.id])
        return _preflight(request, session, form=form, error=error)

    if not form.is_valid():
        return refused(form.problem(), form.problem())
    try:
        plan = plan_resume(ref=session.id)
    except core.StoreError as problem:
        return _preflight(request, session, form=form, error=str(problem))
    changed = _changed_since_shown(form, plan)
    if changed:
        return refused(*changed)
    try:
        result = actions.resume(
            actor=request.user,
            ref=session.id,
            reason=form.cleaned_data["reason"],
            # Checked again under the resume's locks: what the operator saw, or nothing.
            expected_fingerprint=form.cleaned_data["fingerprint"] or plan.fingerprint,
        )
    except core.StoreError as problem:  # ResumePlanChanged too: the page shows the new plan
        return refused(problem, f"Resume failed, nothing changed: {problem}")
    if result.previous_end_reason is None:
        text = f"{result.session_id} was already live"
    else:
        text = (
            f"Resumed {result.session_id}: live again "
            f"(it had ended: {end_reason_words(result.previous_end_reason)})"
        )
    if result.session_id != session.id:
        text += f"; it is the latest session of {session.id}'s conversation"
    if result.switched_from_session_id:
        text += f". {result.switched_from_session_id} was switched away from (session_switch)"
    messages.success(request, text + f". {plural(result.message_count, 'message')}.")
    return redirect_to(request, _detail_url(result.session_id))


@require_GET
@require_perm(VIEW)
def resume_preflight(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """What a resume would reopen and switch away from; ``?ref=`` finds a session by title or prefix."""
    return _resume_preflight(request, session_id)


@require_POST
@require_perm(OPERATE)
def resume_execute(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """Resume as the preflight showed, or show it again saying why nothing changed."""
    return _resume_execute(request, session_id)


@require_http_methods(["GET", "POST"])
def session_resume(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """One URL: GET is the preflight page (VIEW), POST the confirmed resume (OPERATE)."""
    if request.method == "POST":
        return resume_execute(request, session_id)
    return resume_preflight(request, session_id)
