"""Fork groups, merge preview and execute, and unmerge.

Every action is validated by its form (``console/forms.py``) and goes through
``sessions_admin.ledger.actions`` (core operation plus audit entry); the views here
only read the store. The audit log is ``views/audit.py``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from sessions_admin import core
from sessions_admin.console import figures
from sessions_admin.console.forms import MergeForm, UnmergeForm
from sessions_admin.console.html import preview_text_html
from sessions_admin.console.http import (
    HtmxHttpRequest,
    fragment,
    plural,
    redirect_to,
    require_perm,
    session_url,
)
from sessions_admin.console.previews import preview_calls
from sessions_admin.console.refusals import Refused, attempt_form, refuse
from sessions_admin.core.merge import (
    MAX_MERGE_SESSIONS,
    MergeDifference,
    confirmation_problem,
    differing_words,
    first_user_messages,
    session_differences,
)
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditAction
from sessions_admin.signin.roles import OPERATE, VIEW
from sessions_admin.store.models import Session

FORKS_TEMPLATE = "console/forks.html"
PREVIEW_TEMPLATE = "console/merge_preview.html"

PREVIEW_MESSAGES = 200  # transcript rows shown in a merge preview
PREVIEW_CONTENT_CHARS = 4000  # longer message content is cut in the preview
MAX_PICKS = MAX_MERGE_SESSIONS + 1  # one more than allowed, so the core says why
MAX_ID_LENGTH = 200  # longer values are not session ids (the preview says so)


# --- helpers ----------------------------------------------------------------------------------


def _safe_next(request: HtmxHttpRequest, target: str) -> str | None:
    """``target`` if it is a page of this site (where the operator came from)."""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return None


def _status(session: Session | None) -> dict:
    if session is None:
        return {"live": False, "end_reason": None, "known": False}
    return {"live": session.ended_at is None, "end_reason": session.end_reason, "known": True}


def _sessions_by_id(ids: Iterable[str]) -> dict[str, Session]:
    wanted = list(dict.fromkeys(ids))
    found: dict[str, Session] = {}
    for start in range(0, len(wanted), 500):
        for session in Session.objects.filter(id__in=wanted[start : start + 500]).only(
            "id",
            "title",
            "source",
            "user_id",
            "session_key",
            "started_at",
            "ended_at",
            "end_reason",
            "message_count",
        ):
            found[session.id] = session
    return found


def _session_row(
    session_id: str, session: Session | None, first_messages: dict[str, str] | None = None
) -> dict:
    return {
        "id": session_id,
        "url": session_url(session_id) if session is not None else None,
        "title": session.title if session else None,
        "source": session.source if session else None,
        "user_id": session.user_id if session else None,
        "session_key": session.session_key if session else None,
        "first_message": (first_messages or {}).get(session_id),
        "started_at": session.started_at if session else None,
        "message_count": session.message_count if session else None,
        **_status(session),
    }


def _preview_url(ids: Sequence[str], target: str | None = None) -> str:
    params: list[tuple[str, str]] = [("ids", sid) for sid in ids]
    if target:
        params.append(("target", target))
    return reverse("merge_preview") + "?" + urlencode(params)


def _asked_picks(values: Iterable[str], text: str = "") -> list[str]:
    """The ids a preview was asked for, as given (repeated ``ids`` values and a free-text
    list), to show each one back: one that is not a session id is named on the preview."""
    picks: list[str] = []
    for value in values:
        value = value.strip()
        if value:
            picks.append(value)
    picks.extend(part for part in re.split(r"[\s,;]+", text) if part)
    return list(dict.fromkeys(picks))[:MAX_PICKS]


def _malformed(ids: Iterable[str]) -> list[str]:
    """Values no store could hold as a session id (and PostgreSQL would refuse to compare)."""
    return [i for i in ids if len(i) > MAX_ID_LENGTH or "\x00" in i]


def _differences(differences: Sequence[MergeDifference]) -> dict:
    """What the warning block and the ``who`` rows need of what differs."""
    return {
        "differences": differences,
        "differing": {d.column for d in differences},
        "differing_words": differing_words([d.label for d in differences]),
    }


# --- fork groups ------------------------------------------------------------------------------

KIND_LABELS = {"conversation": "conversation slug", "session_key": "session key"}


@require_GET
@require_perm(VIEW)
def fork_list(request: HtmxHttpRequest) -> HttpResponse:
    """Every fork group the core finds, with its evidence and a merge preview link.

    The groups are the overview's cached figure (console.figures): while they are being
    found in the background, the list is a placeholder that fetches itself again.
    """
    try:
        snapshot = figures.ready("forks")
    except figures.FigureFailed as failure:
        return render(
            request,
            fragment(request, FORKS_TEMPLATE, "fork-groups"),
            {"groups_error": failure.reason, "max_picks": MAX_MERGE_SESSIONS},
        )
    if snapshot is None:
        return render(
            request,
            fragment(request, FORKS_TEMPLATE, "fork-groups"),
            {"groups_pending": True, "max_picks": MAX_MERGE_SESSIONS},
        )
    # One page of groups: a store of a million sessions has tens of thousands, and rendering
    # them all took 20 s. The figure is one list in the cache, so a page is a slice of it.
    total = len(snapshot.groups)
    pages = max(1, math.ceil(total / FORK_GROUPS_PER_PAGE))
    page = min(_page_number(request.GET.get("page")), pages)
    start = (page - 1) * FORK_GROUPS_PER_PAGE
    groups = snapshot.groups[start : start + FORK_GROUPS_PER_PAGE]
    all_ids = [sid for group in groups for sid in group.session_ids]
    sessions = _sessions_by_id(all_ids)
    first_messages = first_user_messages(list(sessions))
    rows = []
    for group in groups:
        members = [
            _session_row(sid, sessions.get(sid), first_messages) for sid in group.session_ids
        ]
        rows.append(
            {
                "group": group,
                "kind_label": KIND_LABELS.get(group.kind, group.kind),
                "sessions": members,
                # The merge plan's own rule, on what the page shows of each session.
                **_differences(session_differences([m for m in members if m["known"]])),
                "preview_url": _preview_url(group.session_ids),
            }
        )
    return render(
        request,
        fragment(request, FORKS_TEMPLATE, "fork-groups"),
        {
            "groups": rows,
            "total": total,
            "first_shown": start + 1,
            "last_shown": start + len(rows),
            "page": page,
            "previous_url": _fork_page_url(page - 1) if page > 1 else None,
            "next_url": _fork_page_url(page + 1) if page < pages else None,
            "refresh_url": _fork_page_url(page),
            "forks_as_of": snapshot.as_of,
            "max_picks": MAX_MERGE_SESSIONS,
        },
    )


FORK_GROUPS_PER_PAGE = 50


def _page_number(raw: str | None) -> int:
    """``?page=``: a page number from 1; anything else is the first page."""
    text = (raw or "").strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 9:  # no sign, space or decimal
        return 1
    return max(1, int(text))


def _fork_page_url(page: int) -> str:
    base = reverse("fork_list")
    return base if page <= 1 else f"{base}?page={page}"


# --- merge preview and execute ----------------------------------------------------------------


def _preview_context(
    request: HtmxHttpRequest,
    *,
    picks: list[str],
    target: str | None,
    error: str | None = None,
    reason: str = "",
    continue_history: bool | None = None,
) -> dict:
    """What the preview page shows: the plan for ``picks`` or why there is none.

    ``continue_history`` is the operator's last choice (a re-rendered form);
    None: the default, on for API-conversation merges.
    """
    malformed = _malformed(picks)
    sessions = _sessions_by_id(p for p in picks if p not in malformed)
    plan = None
    plan_error = None
    if malformed:
        plan_error = (
            f"{malformed[0][:40]!r}… is not a session id (too long, or it holds a NUL character)."
        )
    elif target and target not in picks:
        plan_error = f"The target {target!r} is not one of the picked sessions."
    else:
        try:
            plan = core.plan_merge(session_ids=picks, target_id=target or None)
        except core.StoreError as problem:
            plan_error = str(problem)
    if plan is not None:
        target = plan.chosen_id  # the core's rule chose it when the operator did not
    elif target not in picks:
        target = None
    first_messages = first_user_messages(list(sessions))
    choices = [_session_row(sid, sessions.get(sid), first_messages) for sid in picks]
    context: dict = {
        "picks": picks,
        "choices": choices,
        # Without a plan (it was refused), what the picks show; with one, the plan's.
        **_differences(session_differences([c for c in choices if c["known"]])),
        "chosen": target,
        "plan": plan,
        "error": error,
        "plan_error": plan_error,
        "reason": reason,
        "can_operate": request.user.has_perm(OPERATE),
    }
    if plan is None:
        return context
    all_ids = [plan.target_id, *plan.absorbed_ids]
    details = _sessions_by_id([*all_ids, *plan.reparented_children])
    index = {sid: n for n, sid in enumerate(all_ids)}
    transcript = core.merge_preview(plan=plan, limit=PREVIEW_MESSAGES + 1)
    total = sum(source.messages for source in plan.sources)
    rows = []
    listed = transcript[:PREVIEW_MESSAGES]
    # Tool-call turns show their calls, each paired with its result where that is listed.
    calls = preview_calls(
        listed, lambda message_id: f"#pm{message_id}", shown=PREVIEW_CONTENT_CHARS
    )
    for message in listed:
        content = message["content"]
        cut = content is not None and len(content) > PREVIEW_CONTENT_CHARS
        rows.append(
            {
                **message,
                "content": content[:PREVIEW_CONTENT_CHARS] if cut else content,
                "content_html": preview_text_html(
                    content[:PREVIEW_CONTENT_CHARS], role=message["role"]
                )
                if content
                else "",
                "cut": cut,
                "source_index": index.get(message["session_id"], 0) % 6,
                "from_target": message["session_id"] == plan.target_id,
                "calls": calls.lines.get(message["id"], []),
                "calls_unparsed": message["id"] in calls.unparsed,
                "answers": calls.answers.get(message["id"]),
            }
        )
    context.update(
        {
            # The plan's own computation (the one the fingerprint guards) says what differs.
            **_differences(plan.differences),
            "target_rule": plan.target_rule,
            "sources": [
                {
                    "source": source,
                    "row": _session_row(source.session_id, details.get(source.session_id)),
                    "who": {
                        "user_id": source.user_id,
                        "source": source.source,
                        "session_key": source.session_key,
                        "first_message": source.first_user_message,
                    },
                    "index": index[source.session_id] % 6,
                    "picked": source.session_id in picks,
                }
                for source in plan.sources
            ],
            "target_is_tip": plan.target_id != target,
            "transcript": rows,
            "transcript_total": total,
            "transcript_more": max(total - len(rows), 0),
            "children": [_session_row(sid, details.get(sid)) for sid in plan.reparented_children],
            "absorbed_count": len(plan.absorbed_ids),
            "continue_history": (
                plan.is_api_conversation if continue_history is None else continue_history
            ),
        }
    )
    return context


@require_GET
@require_perm(VIEW)
def merge_preview(request: HtmxHttpRequest) -> HttpResponse:
    """What merging the picked sessions would change; only OPERATE gets the confirm button."""
    picks = _asked_picks(request.GET.getlist("ids"), request.GET.get("pick", ""))
    target = request.GET.get("target", "").strip() or None
    context = _preview_context(request, picks=picks, target=target)
    return render(request, fragment(request, PREVIEW_TEMPLATE, "merge-preview"), context)


def _undo_words(target: str, absorbed: Sequence[str]) -> str:
    """Whether the merge just made can be undone now: an undo moves the messages back out of
    the target, which a legal hold on the target (and not on where they go) refuses."""
    refused = core.holds.held_moves(
        moves=[(target, sid) for sid in absorbed], action="undo of the merge"
    )
    if not refused:
        return "undo available"
    named = " and ".join(
        dict.fromkeys(f"hold #{hold.id}" for refusal in refused for hold in refusal.holds)
    )
    return f"no undo while {named} on {target} stands: release it to undo the merge"


@require_POST
@require_perm(OPERATE)
def merge_execute(request: HtmxHttpRequest) -> HttpResponse:
    """Merge as previewed, or re-render the preview saying why nothing changed."""
    form = MergeForm(request.POST)
    valid = form.is_valid()
    data = form.cleaned_data
    picks = data["ids"][:MAX_PICKS] if "ids" in data else _asked_picks(form.data.getlist("ids"))
    target = data.get("target")
    fingerprint = data.get("fingerprint") or ""
    continue_history = data.get("continue_history", False)

    def again(error: str | core.StoreError, **refused: object) -> HttpResponse:
        refuse(
            request,
            AuditAction.MERGE,
            error,
            session_ids=picks,
            before={"target": target, "fingerprint": fingerprint[:200], **refused},
        )
        context = _preview_context(
            request,
            picks=picks,
            target=target,
            error=str(error),
            reason=form.shown_back("reason"),
            continue_history=continue_history,
        )
        return render(request, fragment(request, PREVIEW_TEMPLATE, "merge-preview"), context)

    if len(picks) < 2:
        return again("Pick at least two sessions to merge.")
    if not valid and not (form.has_error("ids") or form.has_error("target")):
        return again(form.problem())  # the reason or the fingerprint, in the rule's words
    if not valid or _malformed([*picks, target or ""]):
        return again("The form carried something that is not a session id.")
    if not fingerprint:
        return again(
            "The form did not carry the preview's fingerprint, so nothing was merged: "
            "review the preview below and confirm again."
        )
    try:
        plan = core.plan_merge(session_ids=picks, target_id=target)
    except core.StoreError:
        plan = None  # the merge below refuses it and the ledger audits why
    if plan is not None:
        # The plan as it is now (its fingerprint is checked again under lock): sessions
        # that differ are merged only with the typed count and a reason.
        unconfirmed = confirmation_problem(
            plan, typed_count=data.get("typed_count"), reason=data["reason"]
        )
        if unconfirmed:
            return again(
                unconfirmed,
                differences={d.label: list(d.values) for d in plan.differences},
                typed_count=data.get("typed_count"),
            )
    try:
        result = actions.merge(
            actor=request.user,
            session_ids=picks,
            target_id=target,
            expected_fingerprint=fingerprint,
            reason=data["reason"],
            continue_history=continue_history,
            typed_count=data.get("typed_count"),
            differences=(
                {d.label: list(d.values) for d in plan.differences} if plan is not None else None
            ),
        )
    except core.StoreError as problem:
        return again(problem)  # a refusal the core raised is audited already
    rewritten = len(result.rewritten_responses)
    messages.success(
        request,
        f"Merged {plural(len(result.absorbed_ids), 'session')} into {result.target_id} "
        f"(merge #{result.merge_id}; {_undo_words(result.target_id, result.absorbed_ids)}): "
        f"{plural(result.moved_messages, 'message')} moved"
        + (
            f"; the next API turn continues with the merged transcript "
            f"({plural(rewritten, 'stored response')} updated)."
            if rewritten
            else "."
        ),
    )
    return redirect_to(request, session_url(result.target_id) or reverse("fork_list"))


@require_POST
@require_perm(OPERATE)
def merge_undo(request: HtmxHttpRequest, merge_id: int) -> HttpResponse:
    """Undo a merge exactly; back to where the operator came from, or the target's page."""
    form = UnmergeForm(request.POST)
    form.is_valid()  # "next" is read from cleaned_data before the action runs
    try:
        record = core.merge_record(merge_id=merge_id)
    except core.MergeNotFound as missing:
        refuse(request, AuditAction.UNMERGE, missing, before={"merge_id": merge_id})
        raise Http404(f"No merge {merge_id}.") from missing
    back = (
        _safe_next(request, form.cleaned_data.get("next", ""))
        or session_url(record.target_id)
        or reverse("audit_log")
    )
    if record.undone_at is not None:
        messages.info(request, f"Merge #{merge_id} was already undone; nothing changed.")
        return redirect_to(request, back)
    if record.undo_lost:
        refuse(request, AuditAction.UNMERGE, record.undo_lost, before={"merge_id": merge_id})
        messages.info(request, f"{record.undo_lost} Nothing changed.")
        return redirect_to(request, back)
    result = attempt_form(
        request,
        AuditAction.UNMERGE,
        form,
        lambda data: actions.unmerge(actor=request.user, merge_id=merge_id, reason=data["reason"]),
        before={"merge_id": merge_id},
        message=f"Merge #{merge_id} was not undone: ",
    )
    if isinstance(result, Refused):
        return redirect_to(request, back)
    messages.success(
        request,
        f"Undid merge #{merge_id}: {plural(result.returned_messages, 'message')} went back to "
        f"{plural(len(result.restored_ids), 'session')}.",
    )
    return redirect_to(request, back)
