"""Streamed exports: one session, its lineage, a set of ids or the session list's filters.

``GET /export/?session=ID`` (or ``lineage=ID``, ``ids=A&ids=B``, or the
session list's filter parameters: every segment of each conversation the list shows) with ``format=jsonl`` (default) or
``format=markdown``; ``/sessions/<id>/export/`` is the same for one session
(``scope=lineage`` for its lineage). VIEW permission: exports only read, so
they work in read-only mode too. The body is a generator
(StreamingHttpResponse), read from the store as it is sent.
"""

from __future__ import annotations

import re
import time

from django.http import Http404, HttpResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.views.decorators.http import require_GET

from sessions_admin.console.http import HtmxHttpRequest, require_perm
from sessions_admin.core import portability
from sessions_admin.core.errors import InvalidInput, SessionNotFound
from sessions_admin.signin.roles import VIEW
from sessions_admin.store import listing

FORMATS = {
    "jsonl": ("application/x-ndjson; charset=utf-8", "jsonl", portability.export_jsonl),
    "markdown": ("text/markdown; charset=utf-8", "md", portability.export_markdown),
}
# What /export/ reads itself; every other parameter is a session list filter (``scope`` too:
# the list's "one row per conversation" or "every session").
FILTER_PARAMS = {"session", "lineage", "ids", "format"}


def _bad_request(text: str) -> HttpResponseBadRequest:
    """A 400 shown as written: plain text, so "<id>" is not taken for a tag."""
    return HttpResponseBadRequest(text, content_type="text/plain; charset=utf-8")


def _filename(stem: str, extension: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._")[:80] or "sessions"
    return f"{safe}.{extension}"


def _ids_from_list_filters(request: HtmxHttpRequest) -> list[str] | None:
    """Every session of the rows the session list shows for the request's filters (None: no
    filters given): the same rows as its count, each a whole conversation with every segment
    (``listing.conversation_session_ids``), whatever user or source the segments carry."""
    params = {k: v for k, v in request.GET.lists() if k not in FILTER_PARAMS}
    if not params:
        return None

    parsed = listing.parse(request.GET)
    if parsed.problems:
        raise InvalidInput("; ".join(parsed.problems))
    ids = listing.matching_session_ids(parsed.filters, limit=portability.MAX_EXPORT_SESSIONS)
    if len(ids) > portability.MAX_EXPORT_SESSIONS:
        raise InvalidInput(
            f"These filters match more than {portability.MAX_EXPORT_SESSIONS:,} sessions: "
            "narrow them to export."
        )
    if not ids:
        raise InvalidInput("No session matches these filters.")
    return listing.conversation_session_ids(ids)


def _stream(request: HtmxHttpRequest, *, session=None, lineage_of=None, ids=None, stem: str):
    chosen = request.GET.get("format", "jsonl")
    if chosen not in FORMATS:
        return _bad_request("format must be jsonl or markdown")
    content_type, extension, render = FORMATS[chosen]
    named = [value for value in (session, lineage_of, *(ids or ())) if value is not None]
    if any("\x00" in value for value in named):
        # No stored id holds one, and PostgreSQL refuses to compare text with it.
        return _bad_request("A session id cannot contain a NUL character.")
    try:
        if ids is None and session is None and lineage_of is None:
            ids = _ids_from_list_filters(request)
            if ids is None:
                return _bad_request(
                    "Say what to export: session=ID, lineage=ID, ids=ID (repeated) "
                    "or the session list's filters."
                )
        session_ids = portability.export_session_ids(
            session_id=session, lineage_of=lineage_of, ids=ids
        )
    except SessionNotFound as missing:
        raise Http404(str(missing)) from missing
    except InvalidInput as problem:
        return _bad_request(str(problem))
    response = StreamingHttpResponse(render(session_ids), content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{_filename(stem, extension)}"'
    response["Cache-Control"] = "no-store"
    response["X-Content-Type-Options"] = "nosniff"
    return response


@require_GET
@require_perm(VIEW)
def export(request: HtmxHttpRequest) -> HttpResponse:
    session = request.GET.get("session") or None
    lineage_of = request.GET.get("lineage") or None
    ids = [i for i in request.GET.getlist("ids") if i.strip()] or None
    if sum(x is not None for x in (session, lineage_of, ids)) > 1:
        return _bad_request("Give only one of session, lineage and ids.")
    stem = (
        f"session-{session}"
        if session
        else f"lineage-{lineage_of}"
        if lineage_of
        else f"sessions-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    )
    return _stream(request, session=session, lineage_of=lineage_of, ids=ids, stem=stem)


@require_GET
@require_perm(VIEW)
def export_session(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    if request.GET.get("scope") == "lineage":
        return _stream(request, lineage_of=session_id, stem=f"lineage-{session_id}")
    return _stream(request, session=session_id, stem=f"session-{session_id}")
