"""The session detail page: metadata, the lineage drawn as a tree, the stitched transcript.

A page shows each message's long fields cut (store/transcripts.py: SHOWN_CHARS a field,
CHUNK_CHARS a chunk) and the title cut at TITLE_SHOWN; ``session_raw`` serves the
whole of any of them as plain text.
"""

from __future__ import annotations

import json
from urllib.parse import quote, urlencode

from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET
from django_htmx.http import trigger_client_event

from sessions_admin import core
from sessions_admin.console.html import RAW_TEXT
from sessions_admin.console.http import (
    HtmxHttpRequest,
    plural,
    require_perm,
    session_or_404,
    wants_fragment,
)
from sessions_admin.console.views.session_actions import PANEL, panel_context
from sessions_admin.core import being_deleted, db, holds
from sessions_admin.core.lifecycle import where_it_continues
from sessions_admin.ledger.erasure import being_erased
from sessions_admin.ledger.trash import deleted_session
from sessions_admin.signin.roles import DELETE, LEGAL_HOLD, VIEW, role_of, withheld_from
from sessions_admin.store import listing, transcripts
from sessions_admin.store.models import Session
from sessions_admin.store.transcripts import Chunk, Position

TEMPLATE = "console/session_detail.html"
# The client event a live page's header, lineage and actions panel reload on: the runtime
# moved the conversation on (the polled segment ended) while the page was open.
ENDED_EVENT = "session-ended"
CHUNK_SIZE = 100
# Messages shown before the one ``?around=`` asks for.
AROUND_CONTEXT = 5
# A title longer than this is shown cut (with a link to the whole of it).
TITLE_SHOWN = 300
MODEL_CONFIG_SHOWN = transcripts.SHOWN_CHARS


class BadCursor(ValueError):
    pass


def _bad_request(text: str) -> HttpResponseBadRequest:
    """A 400 whose message is shown as written: plain text, so "<id>" is not taken for a tag."""
    return HttpResponseBadRequest(text, content_type="text/plain; charset=utf-8")


def _message_id(text: str | None) -> int | None:
    if text and text.isascii() and text.isdigit() and len(text) <= 18:
        return int(text)
    return None


def _cursor(request: HtmxHttpRequest, name: str, chain: list[str]) -> Position | None:
    text = request.GET.get(name)
    if text is None:
        return None
    position = Position.parse(text)
    if position is None or position.segment >= len(chain):
        raise BadCursor(
            f"{name} must be a position in this transcript: a segment number and a message id, "
            f"such as {name}=0:1234."
        )
    return position


def _chunk(
    request: HtmxHttpRequest, session: Session, chain: list[str], *, hide: bool, alone: bool
) -> tuple[Chunk, int | None]:
    """The transcript chunk a request asks for, and the message to highlight.

    ``alone``: the chunk goes where a load-more (or load-earlier) link was, so
    it links on in that direction only.
    """
    at = request.GET.get("at")
    if at is not None:
        if at != "end":
            raise BadCursor("at can only be end: at=end shows the latest messages.")
        return transcripts.last_chunk(chain, limit=CHUNK_SIZE, hide_inactive=hide), None
    after = _cursor(request, "after", chain)
    before = _cursor(request, "before", chain)
    if before is not None:
        chunk = transcripts.chunk_before(
            chain, before, limit=CHUNK_SIZE, hide_inactive=hide, with_later=not alone
        )
        return chunk, None
    if after is not None:
        chunk = transcripts.chunk_after(
            chain, after, limit=CHUNK_SIZE, hide_inactive=hide, with_earlier=not alone
        )
        return chunk, None
    around = _message_id(request.GET.get("around"))
    start = None
    if around is not None:
        start = transcripts.start_around(chain, around, context=AROUND_CONTEXT, hide_inactive=hide)
    if start is None:
        around = None
        # A later segment opens at its own messages; the earlier ones are a link away.
        start = Position(chain.index(session.id) if session.id in chain else 0, 0)
    chunk = transcripts.chunk_after(
        chain, start, limit=CHUNK_SIZE, hide_inactive=hide, highlight=around, with_earlier=True
    )
    return chunk, around


def _last_segment_live(chain: list[str], session: Session) -> bool:
    """Whether the conversation's last segment is live: its transcript may still grow."""
    last = chain[-1] if chain else session.id
    if last == session.id:
        return session.ended_at is None
    return Session.objects.filter(id=last, ended_at__isnull=True).exists()


def _links(
    session: Session, chunk: Chunk, *, hide: bool, raw: bool, chain: list[str], live: bool
) -> dict[str, str]:
    """Page URLs (no JavaScript) and fragment URLs (htmx) for the chunk's neighbours.

    Every link carries the page's two view choices (undone messages hidden, text raw);
    each toggle flips its own and keeps the other.

    ``tail``: where a live transcript shown to its end polls for the rows written after it
    (the last segment's own address, so a poll needs no walk of the chain).
    """
    page = reverse("session_detail", args=[session.id])
    fragment = reverse("session_transcript", args=[session.id])

    def view(*, hide: bool, raw: bool) -> dict[str, str]:
        return {
            **({"inactive": "hide"} if hide else {}),
            **({"text": RAW_TEXT} if raw else {}),
        }

    def at(base: str, query: dict[str, str]) -> str:
        return f"{base}?{urlencode(query)}" if query else base

    extra = view(hide=hide, raw=raw)
    links: dict[str, str] = {}
    if live and chunk.reached_end and chunk.tail is not None:
        query = urlencode({"after": str(chunk.tail.message_id), **extra})
        links["tail"] = f"{reverse('session_tail', args=[chain[chunk.tail.segment]])}?{query}"
    links["latest_page"] = f"{page}?{urlencode({'at': 'end', **extra})}"
    if chunk.later is not None:
        query = {"after": str(chunk.later), **extra}
        links["later_page"] = at(page, query)
        links["later_fragment"] = at(fragment, query)
    if chunk.earlier is not None:
        query = {"before": str(chunk.earlier), **extra}
        links["earlier_page"] = at(page, query)
        links["earlier_fragment"] = at(fragment, query)
    links["toggle"] = at(page, view(hide=not hide, raw=raw))
    links["text_toggle"] = at(page, view(hide=hide, raw=not raw))
    # What the transcript reloads from when an action changes it (the same view, from the top).
    links["refresh"] = at(page, extra)
    return links


def _add_permalinks(chunk: Chunk) -> None:
    """Each message's own link (``?around=<id>#m<id>``), as search results link to it,
    and its raw view (the whole of a field shown cut)."""
    pages: dict[str, tuple[str, str]] = {}
    for item in chunk.items:
        if item.kind != "message":
            continue
        for message in (item, *(call.result for call in item.tool_calls if call.result)):
            urls = pages.get(message.session_id)
            if urls is None:
                urls = pages[message.session_id] = (
                    reverse("session_detail", args=[message.session_id]),
                    reverse("session_raw", args=[message.session_id]),
                )
            message.permalink = f"{urls[0]}?around={message.id}#m{message.id}"
            message.raw_url = f"{urls[1]}?message={message.id}"


def _meta_context(session: Session) -> dict:
    config = transcripts.pretty_json(session.config) if session.config else ""
    title = session.title or ""
    return {
        "lasted": None if session.ended_at is None else session.ended_at - session.started_at,
        "model_config_pretty": config[:MODEL_CONFIG_SHOWN],
        "model_config_cut": len(config) > MODEL_CONFIG_SHOWN,
        "title_shown": title[:TITLE_SHOWN] + ("…" if len(title) > TITLE_SHOWN else ""),
        "title_cut": len(title) > TITLE_SHOWN,
        "raw_url": reverse("session_raw", args=[session.id]),
    }


def _lineage_context(session: Session) -> dict:
    drawing = transcripts.lineage_drawing(
        core.lineage_tree(session_id=session.id), current=session.id
    )
    return {"lineage": drawing, "lineage_count": sum(1 for event in drawing if event.row)}


def _continues_in(session: Session) -> str | None:
    """For an ended session, the live session that carries its conversation on (None: none)."""
    if session.ended_at is None:
        return None
    continues_in, _how = where_it_continues(
        {
            "id": session.id,
            "end_reason": session.end_reason,
            "model_config": session.model_config,
            "session_key": session.session_key,
        }
    )
    return continues_in


def _status_context(request: HtmxHttpRequest, session: Session) -> dict:
    """The header's status line: live or ended, the hold, a delete under way, where it continues.

    A role that may not read the hold's details (``withheld_from``: a viewer) is told only
    that the session is under one (``hold_withheld``, the words why no more is shown)."""
    hold = holds.holds_on([session.id]).get(session.id)
    withheld = withheld_from(role_of(request.user), LEGAL_HOLD) if hold else None
    return {
        "hold": None if withheld else hold,
        "hold_withheld": withheld.words if withheld else "",
        "deleting": being_deleted.marks_on([session.id]).get(session.id),
        "continues_in": _continues_in(session),
    }


def _end_context(chain: list[str], session: Session, *, live: bool) -> dict:
    """Where the conversation goes on once its transcript has ended (a reset's new session,
    a merge target...), named at the transcript's end."""
    if live or not chain:
        return {}
    last = session if chain[-1] == session.id else Session.objects.filter(id=chain[-1]).first()
    return {"end_continues_in": _continues_in(last) if last is not None else None}


def _page_context(request: HtmxHttpRequest, session: Session, chain: list[str]) -> dict:
    return {
        **_lineage_context(session),
        **_status_context(request, session),
        "segment_count": len(chain),
        **_meta_context(session),
        **panel_context(request, session),
    }


def _render(request: HtmxHttpRequest, session: Session, *, partial: str) -> HttpResponse:
    hide = request.GET.get("inactive") == "hide"
    raw = request.GET.get("text") == RAW_TEXT
    as_fragment = wants_fragment(request)
    chain = core.compression_chain(session_id=session.id)
    try:
        chunk, around = _chunk(
            request,
            session,
            chain,
            hide=hide,
            alone=as_fragment and partial == "transcript-chunk",
        )
    except BadCursor as error:
        return _bad_request(str(error))
    _add_permalinks(chunk)
    live = chunk.reached_end and _last_segment_live(chain, session)
    segment = chain.index(session.id) if session.id in chain else 0
    context = {
        **(_end_context(chain, session, live=live) if chunk.reached_end else {}),
        "session": session,
        "chain": chain,
        "segment": segment,
        "segments": _segment_links(session, chain, current=segment, hide=hide, raw=raw),
        "chunk": chunk,
        "links": _links(session, chunk, hide=hide, raw=raw, chain=chain, live=live),
        "hide_inactive": hide,
        # message_html's mode: Markdown rendered, or (RAW_TEXT) the text as written.
        "text_mode": RAW_TEXT if raw else "",
        "around": around,
    }
    if as_fragment:
        return render(request, f"{TEMPLATE}#{partial}", context)
    context.update(_page_context(request, session, chain))
    context.update(_find_context(request, session, chain, hide=hide, raw=raw))
    return render(request, TEMPLATE, context)


def _find_context(
    request: HtmxHttpRequest, session: Session, chain: list[str], *, hide: bool, raw: bool
) -> dict:
    """A search hit's link carries its query (``?q=``): the words the page marks in the
    transcript (static/js/find.js), parsed as the search parsed them, and every message of
    the conversation the search matches (the bar's "match 3 of 22", loaded or not), with
    where the transcript around one of them is loaded from."""
    q = request.GET.get("q", "")
    terms = listing.search_terms(q) if len(q) <= listing.MAX_QUERY else ()
    if not terms:
        return {"find_terms": (), "find_terms_json": "[]"}
    found = listing.conversation_matches(q=q, chain=chain, hide_inactive=hide)
    view = {**({"inactive": "hide"} if hide else {}), **({"text": RAW_TEXT} if raw else {})}
    around = f"{reverse('session_detail', args=[session.id])}?{urlencode({**view, 'q': q})}"
    return {
        "find_terms": terms,
        "find_terms_json": json.dumps(list(terms)),
        "find_matches_json": json.dumps(list(found.message_ids)),
        "find_capped": found.capped,
        "find_around_url": around,
    }


@require_GET
@require_perm(VIEW)
def session_detail(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """The page; for htmx (the show/hide toggle) just the transcript section.

    ``?part=meta`` and ``?part=lineage`` for htmx are those cards alone, reloaded after an
    action changed the counts they show.
    """
    # The page asks some lineage questions more than once (where a segment continues: the
    # page, its actions panel, the stray-message check); each is read once.
    with db.memoized_reads():
        return _detail(request, session_id)


def _detail(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    session = None if "\x00" in session_id else Session.objects.filter(id=session_id).first()
    if session is None:
        return _not_in_store(request, session_id)
    as_fragment = wants_fragment(request)
    part = request.GET.get("part")
    if as_fragment and part == "meta":
        return render(request, f"{TEMPLATE}#meta", {"session": session, **_meta_context(session)})
    if as_fragment and part == "lineage":
        context = {"session": session, **_lineage_context(session)}
        return render(request, f"{TEMPLATE}#lineage", context)
    if as_fragment and part == "status":
        context = {"session": session, **_status_context(request, session)}
        return render(request, f"{TEMPLATE}#status", context)
    if as_fragment and part == "actions":
        context = {"session": session, **panel_context(request, session)}
        if not context["can_operate"]:
            return HttpResponse(status=204)
        return render(request, PANEL, context)
    return _render(request, session, partial="transcript")


def _not_in_store(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """A 404 that says what became of the session, to a role that may see the trash: deleted
    when, by whom, why, with its trash entry and restore. Anyone else, and a session purged,
    erased or never there, gets only that it is not in the store; a session an unfinished
    erasure has planned is never described (its trash rows are about to go)."""
    if wants_fragment(request) or not request.user.has_perm(DELETE):
        raise Http404("No such session")
    deleted = None if being_erased(session_id) else deleted_session(session_id)
    context = {
        "session_id": session_id,
        "deleted": deleted,
        "trash_url": f"{reverse('trash')}?{urlencode({'q': session_id})}",
    }
    return render(request, "console/session_gone.html", context, status=404)


def _segment_links(
    session: Session, chain: list[str], *, current: int, hide: bool, raw: bool
) -> list[dict[str, object]]:
    """The segment navigator: each compression segment's start in this page's transcript."""
    if len(chain) < 2:
        return []
    page = reverse("session_detail", args=[session.id])
    extra = {**({"inactive": "hide"} if hide else {}), **({"text": RAW_TEXT} if raw else {})}
    return [
        {
            "number": index + 1,
            "session_id": segment_id,
            "url": f"{page}?{urlencode({'after': str(Position(index, 0)), **extra})}",
            "current": index == current,
        }
        for index, segment_id in enumerate(chain)
    ]


@require_GET
@require_perm(VIEW)
def session_tail(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """A live transcript's poll: the rows written after ``?after=<message id>`` in this
    segment (and in the segments a compression started since), or 204 when there are none.

    Polled every few seconds by every open live page, so "nothing new" costs one indexed
    query (``transcripts.tail_state``); only an answer with something in it walks the chain.
    The answer ends with the next poller, or with the end of the transcript once the
    conversation's last segment has ended (which stops the polling).
    """
    if "\x00" in session_id:
        raise Http404("No such session")
    after = _message_id(request.GET.get("after"))
    if after is None:
        return _bad_request(
            "This address follows a live transcript: give after= the id of the last message "
            "shown in this segment, such as after=1234 (0 before its first message)."
        )
    if not wants_fragment(request):
        # Followed without JavaScript: the transcript's latest messages, as a page.
        return redirect(f"{reverse('session_detail', args=[session_id])}?at=end")
    hide = request.GET.get("inactive") == "hide"
    raw = request.GET.get("text") == RAW_TEXT
    state = transcripts.tail_state(session_id, after, hide_inactive=hide)
    if not state.found:
        raise Http404("No such session")
    if state.live and not state.has_new:
        return HttpResponse(status=204)
    session = session_or_404(session_id)
    chain = core.compression_chain(session_id=session.id)
    segment = chain.index(session.id) if session.id in chain else 0
    chunk = transcripts.chunk_after(
        chain, Position(segment, after), limit=CHUNK_SIZE, hide_inactive=hide
    )
    _add_permalinks(chunk)
    live = chunk.reached_end and _last_segment_live(chain, session)
    context = {
        "session": session,
        "chain": chain,
        "chunk": chunk,
        "links": _links(session, chunk, hide=hide, raw=raw, chain=chain, live=live),
        "hide_inactive": hide,
        "text_mode": RAW_TEXT if raw else "",
        "tail_answer": True,
        **(_end_context(chain, session, live=live) if chunk.reached_end else {}),
        # Read out by screen readers (static/js/a11y.js): the rows are added out of any live region.
        "tail_announcement": _tail_announcement(chunk, live=live),
    }
    response = render(request, f"{TEMPLATE}#transcript-chunk", context)
    if not state.live:
        # The polled segment ended (compressed, reset, ended): the page's status line, its
        # lineage and its actions were drawn while it was live, and reload on this event.
        trigger_client_event(response, ENDED_EVENT)
    return response


def _tail_announcement(chunk: Chunk, *, live: bool) -> str:
    roles = [item.role for item in chunk.items if item.kind == "message"]
    said = f"{plural(len(roles), 'new message')}" if roles else ""
    if roles:
        said += f" ({', '.join(dict.fromkeys(roles))})."
    if not live:
        said += " The conversation ended: no more messages will appear."
    return said.strip()


@require_GET
@require_perm(VIEW)
def session_transcript(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """One more chunk (``?after=`` or ``?before=``) for htmx; the whole page without JavaScript."""
    session = session_or_404(session_id)
    if "after" not in request.GET and "before" not in request.GET:
        page = reverse("session_detail", args=[session.id])
        return _bad_request(
            "This address loads more of a transcript, from a position: give after= or before= "
            "a segment number and a message id, such as after=0:1234 (the session page's "
            f'"Load more" links do). The whole session is at {page}'
        )
    return _render(request, session, partial="transcript-chunk")


RAW_FIELDS = {"title", *transcripts.RAW_FIELDS}


@require_GET
@require_perm(VIEW)
def session_raw(request: HtmxHttpRequest, session_id: str) -> HttpResponse:
    """The whole of a value a page shows cut, as plain text: ``?field=title`` (the session's),
    or ``?message=<id>&field=content|reasoning|tool_calls`` (one of its messages)."""
    field = request.GET.get("field", "content")
    if field not in RAW_FIELDS:
        return _bad_request(f"field must be one of {', '.join(sorted(RAW_FIELDS))}")
    session = session_or_404(session_id)
    if field == "title":
        value, name = session.title, "title"
    else:
        message_id = _message_id(request.GET.get("message"))
        if message_id is None:
            return _bad_request("Give the message's id: message=1234")
        found, value = transcripts.raw_message_field(
            session_id=session.id, message_id=message_id, field=field
        )
        if not found:
            raise Http404("No such message in this session")
        name = f"message-{message_id}-{field}"
    if isinstance(value, bytes):
        body, content_type = value, "application/octet-stream"
    else:
        body, content_type = ("" if value is None else str(value)), "text/plain; charset=utf-8"
    response = HttpResponse(body, content_type=content_type)
    filename = f"{session.id}-{name}.txt"
    # Shown in the browser (text/plain, nosniff: nothing in it runs); saved under this name.
    response["Content-Disposition"] = f"inline; filename*=UTF-8''{quote(filename, safe='')}"
    return response
