"""Erasure requests (admins): "delete everything about this person", previewed, run, receipted.

The subject travels in POST bodies only (never in a URL, the access log or the history).
The preview lists every session, moved message, slug, stored response and trash entry the
erasure removes, and what it keeps (other people's sessions mentioning the subject, held
rows of other people); confirming queues the request (``ledger.actions.request_erasure``), which a
background thread runs; its page shows the state and offers the receipt (JSON).
"""

from __future__ import annotations

from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from sessions_admin import core
from sessions_admin.console.forms import ErasureForm
from sessions_admin.console.http import HtmxHttpRequest, require_perm
from sessions_admin.console.refusals import Refused, refuse
from sessions_admin.console.views.delete import typed_confirmation, typed_count_problem
from sessions_admin.core.erasure import Subject
from sessions_admin.ledger import actions, erasure
from sessions_admin.ledger.models import AuditAction, ErasureRequest
from sessions_admin.signin.roles import DELETE
from sessions_admin.store.models import Session

TEMPLATE = "console/erasure.html"
LISTED = 200
# The refusal audit never repeats what was typed: it may be the person's identifiers.
REFUSED = "erasure form refused (the subject is not recorded)"


def _subject(form: ErasureForm) -> Subject:
    return Subject(
        user_id=form.cleaned_data["user_id"],
        chat_ids=form.cleaned_data["chat_ids"],
        session_keys=form.cleaned_data["session_keys"],
    )


def _values(form: ErasureForm) -> dict:
    return {
        name: form.shown_back(name) for name in ("user_id", "chat_ids", "session_keys", "reference")
    }


def _render(
    request, *, values=None, plan=None, problems=(), status: int = 200, verdict=None
) -> HttpResponse:
    context = {
        "values": values or {},
        "plan": plan,
        "problems": list(problems),
        "requests": ErasureRequest.objects.order_by("-pk")[:50],
        "verdict": verdict,
    }
    if plan is not None:
        full, plan = plan, plan.store
        context["plan"] = plan
        ids = list(plan.session_ids[:LISTED])
        rows = {s.id: s for s in Session.objects.filter(id__in=ids)}
        context.update(
            {
                "sessions": [(sid, rows.get(sid)) for sid in ids],
                "more_sessions": max(0, len(plan.session_ids) - LISTED),
                "other_sessions": sorted({sid for _, sid in plan.other_messages}),
                "trash_operations": len(full.trash.operations),
                "trash_purged": len(full.trash.purge),
                "trash_pruned": len(full.trash.prune),
                "trash_kept": sorted({words for _, words in full.trash.kept}),
                "fingerprint": full.fingerprint,
                "typed_confirmation": typed_confirmation(
                    sessions=len(plan.session_ids), messages=plan.message_count
                ),
                "held_holds": sorted({words for _, words in full.held}),
                "plan_held": bool(full.held),
                "plan_empty": full.empty,
            }
        )
    return render(request, TEMPLATE, context, status=status)


def _plan_or_refused(request: HtmxHttpRequest, subject: Subject) -> erasure.FullPlan | Refused:
    """The erasure's plan, or its refusal recorded without the error's words (they may name
    the person)."""
    try:
        return erasure.plan(subject)
    except core.StoreError as error:
        refuse(request, AuditAction.ERASURE_REQUEST, REFUSED)
        return Refused((str(error),), error)


@require_GET
@require_perm(DELETE)
def erasure_list(request: HtmxHttpRequest) -> HttpResponse:
    return _render(request)


@require_POST
@require_perm(DELETE)
def erasure_preview(request: HtmxHttpRequest) -> HttpResponse:
    form = ErasureForm(request.POST)
    if not form.is_valid():
        refuse(request, AuditAction.ERASURE_REQUEST, REFUSED)
        return _render(request, values=_values(form), problems=[form.problem()], status=400)
    plan = _plan_or_refused(request, _subject(form))
    if isinstance(plan, Refused):
        return _render(request, values=_values(form), problems=[str(plan.error)], status=400)
    return _render(request, values=_values(form), plan=plan)


@require_POST
@require_perm(DELETE)
def erasure_confirm(request: HtmxHttpRequest) -> HttpResponse:
    form = ErasureForm(request.POST)
    values = _values(form)
    if not form.is_valid():
        refuse(request, AuditAction.ERASURE_REQUEST, REFUSED)
        return _render(request, values=values, problems=[form.problem()], status=400)
    subject = _subject(form)
    plan = _plan_or_refused(request, subject)
    if isinstance(plan, Refused):
        return _render(request, values=values, problems=[str(plan.error)], status=400)
    problems = []
    if not form.cleaned_data["reference"]:
        problems.append("Give the request's reference (a ticket number, not the person's name).")
    asked = typed_confirmation(
        sessions=len(plan.store.session_ids), messages=plan.store.message_count
    )
    if problem := typed_count_problem(form, asked):
        problems.append(problem.replace("Nothing was deleted.", "Nothing was erased."))
    # An empty plan is still confirmed: space freed before the erasure (the runtime's own
    # deletes with secure_delete off, merges) may hold the person's bytes until the files are
    # rewritten, which the request's receipt (counts 0) then says.
    if problems:
        refuse(request, AuditAction.ERASURE_REQUEST, REFUSED)
        return _render(request, values=values, plan=plan, problems=problems, status=400)
    try:
        queued = actions.request_erasure(
            actor=request.user,
            subject=subject,
            reference=form.cleaned_data["reference"],
            expected_fingerprint=form.cleaned_data["fingerprint"] or "",
        )
    except core.StoreError as error:
        # Recorded without the error's words: they may name the person.
        refuse(request, AuditAction.ERASURE_REQUEST, REFUSED)
        message = (
            "The store changed since the preview (the runtime may still be writing): review "
            "the new preview and confirm again. Nothing was erased."
            if isinstance(error, core.PlanChanged)
            else f"Nothing was erased: {error}"
        )
        return _render(request, values=values, plan=plan, problems=[message], status=400)
    return redirect("erasure_detail", queued.pk)


# The receipt's counts (``ledger.erasure``'s "erased" keys) as the page names them; a key
# not listed here (a receipt of a later version) is shown in words made from it.
ERASED_WORDS = {
    "sessions": "Sessions",
    "messages": "Messages",
    "messages_in_other_sessions": "Their messages in other people's sessions",
    "conversation_slugs": "Conversation names",
    "stored_responses": "Stored API responses",
    "own_table_rows": "Rows of the runtime's other tables",
    "trash_operations": "Trash operations purged or pruned",
    "trash_entries": "Trash entries changed",
    "sessions_in_trash": "Their sessions in the trash",
    "messages_in_trash": "Their messages in the trash",
    "job_items": "Bulk delete job items",
    "audit_entries_redacted": "Audit entries redacted",
}


def erased_counts(receipt: dict) -> list[tuple[str, object]]:
    """The receipt's counts in words, in the receipt's order."""
    erased = receipt.get("erased") if isinstance(receipt, dict) else None
    if not isinstance(erased, dict):
        return []
    return [
        (ERASED_WORDS.get(key, str(key).replace("_", " ").capitalize()), count)
        for key, count in erased.items()
    ]


@require_GET
@require_perm(DELETE)
def erasure_detail(request: HtmxHttpRequest, request_id: int) -> HttpResponse:
    queued = ErasureRequest.objects.filter(pk=request_id).first()
    if queued is None:
        raise Http404("No such erasure request")
    if queued.pk in erasure.resumable_request_ids():
        actions.start_erasures()  # interrupted by a restart, or not picked up yet
    context = {"queued": queued, "erased": erased_counts(queued.receipt)}
    return render(request, "console/erasure_request.html", context)


@require_POST
@require_perm(DELETE)
def erasure_rewrite(request: HtmxHttpRequest, request_id: int) -> HttpResponse:
    """Rewrite the database files now (VACUUM; PostgreSQL: VACUUM FULL of the touched
    tables), for every erasure awaiting it: the operator's step on PostgreSQL."""
    request.POST  # noqa: B018 - parsed first: an oversized body is refused (400) before any work
    queued = ErasureRequest.objects.filter(pk=request_id, state=ErasureRequest.DONE).first()
    if queued is None:
        raise Http404("No finished erasure request with this number")
    actions.finish_erasure_index_merges()
    rewrite = actions.rewrite_erasure_files(actor=request.user)
    queued.refresh_from_db()
    problem = None
    if (
        queued.pk not in rewrite.done
        and (queued.receipt.get("file_rewrite") or {}).get("state") != "done"
    ):
        why = "; ".join(rewrite.notes) or "the search index merge has not finished"
        problem = f"The files were not rewritten ({why}). Nothing changed; try again later."
    return render(
        request,
        "console/erasure_request.html",
        {"queued": queued, "erased": erased_counts(queued.receipt), "rewrite_problem": problem},
        status=409 if problem else 200,
    )


@require_GET
@require_perm(DELETE)
def erasure_receipt(request: HtmxHttpRequest, request_id: int) -> HttpResponse:
    queued = ErasureRequest.objects.filter(pk=request_id, state=ErasureRequest.DONE).first()
    if queued is None:
        raise Http404("No finished erasure request with this number")
    response = HttpResponse(erasure.receipt_text(queued.receipt), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="erasure-receipt-{queued.pk}.json"'
    return response


@require_POST
@require_perm(DELETE)
def erasure_verify(request: HtmxHttpRequest) -> HttpResponse:
    """Verify a receipt pasted or uploaded (reads only): valid, or why not."""
    upload = request.FILES.get("receipt_file")
    if upload is not None:
        data = upload.read(erasure.MAX_RECEIPT_BYTES + 1)
    else:
        # A browser sends a textarea's line ends as CRLF; the receipt was issued with LF.
        data = request.POST.get("receipt_text", "").replace("\r\n", "\n").encode("utf-8", "replace")
    if not data.strip():
        verdict = erasure.ReceiptCheck(False, "Paste a receipt or choose its file.")
    else:
        verdict = erasure.verify_receipt(data)
    return _render(request, verdict=verdict, status=200 if verdict.valid else 400)
