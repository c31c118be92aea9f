"""What an operator reads: sessions (listed, searched, one with its lineage and transcript),
fork groups, and the audit log (paged, or as the console's CSV).

Read-only, viewer scope (the console's ``VIEW``). Each route reads what its console page
reads and validates what that page validates: the session list's query string goes through
``store.listing.parse`` (a problem the page would show and ignore is a 422 naming the
parameter here: a program should hear that its filter was not applied), transcript positions
through ``store.transcripts.Position``, the audit log's filters through
``ledger.audit_log.AuditFilterForm``. Fork groups are the console's cached figure
(``store.overview.fork_snapshot_now``). Pages are keyset cursors (fork groups excepted: pages
of the cached list, as on /forks/): pass an answer's ``next_cursor`` (a transcript's
``next_after``) as ``after`` for the next page.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from datetime import datetime
from typing import Any, Literal

from django.db.models import Q
from django.http import HttpRequest, StreamingHttpResponse
from django.utils import timezone
from ninja import Field, Query, Router, Schema

from sessions_admin import core
from sessions_admin.api.problems import invalid_input, not_found
from sessions_admin.api.schemas import Identifier, Text
from sessions_admin.core import being_deleted, holds
from sessions_admin.core.lifecycle import where_it_continues
from sessions_admin.core.lineage import LineageNode
from sessions_admin.core.merge import MergeDifference, session_differences
from sessions_admin.core.rows import parse_model_config, stored_cost, stored_count
from sessions_admin.ledger import audit_log
from sessions_admin.ledger.models import AuditEntry
from sessions_admin.signin.roles import LEGAL_HOLD, withheld_for, withheld_from
from sessions_admin.store import listing, overview, transcripts
from sessions_admin.store.listing.fulltext import SessionHits
from sessions_admin.store.listing.name_search import NameMatch
from sessions_admin.store.listing.page import SessionRow
from sessions_admin.store.models import Session
from sessions_admin.store.transcripts import Handoff, Position

router = Router(tags=["sessions"])

TRANSCRIPT_PAGE = 100  # the console's chunk
TRANSCRIPT_PAGE_MAX = 500
FORK_GROUPS_PER_PAGE = 50  # the console's /forks/ page
AUDIT_PAGE = 50  # the console's audit page
AUDIT_PAGE_MAX = 500
AUDIT_FILTERS = {
    "action": "An action's name (the console's choices: the actions recorded so far).",
    "actor": "The actor's name contains (an operator's, or api:<token name>).",
    "session": "Entries naming this session id.",
    "outcome": f"One of {', '.join(o for o, _label in AuditEntry.OUTCOMES)}.",
    "since": "Created on or after this day (YYYY-MM-DD).",
    "until": "Created on or before this day.",
}
TOKEN_TOTALS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
MEMBER_FIELDS = (
    "id title source user_id session_key started_at ended_at end_reason message_count".split()
)


# --- schemas -----------------------------------------------------------------------------------


class SessionList(Schema):
    # The console list's rows as the store reads them (``listing.SessionRow``).
    sessions: list[SessionRow]
    next_cursor: str | None = Field(description="Pass as `after` for the next page.")
    count: int
    count_capped: bool = Field(description="`count` is a lower bound (the count stops there).")
    fork_marks_pending: bool = Field(
        description="Fork detection is still running: `is_fork` is false for every row."
    )


class SearchResults(Schema):
    sessions: list[SessionHits]
    names: list[NameMatch]
    terms: list[str]
    next_cursor: str | None = Field(description="Pass as `after` for the next page.")
    count: int
    count_capped: bool
    scan_capped: bool = Field(
        description="The page stopped after checking its maximum of matching messages."
    )


class SessionHoldOut(Schema):
    """The session's legal hold; to a viewer only that it stands (``details_withheld``)."""

    id: int | None = Field(description="The hold's number; null when withheld.")
    kind: str | None = Field(description="session or user; null when withheld.")
    subject: str | None = Field(description="The held session or user id; null when withheld.")
    reason: str | None = Field(description="Why it was placed; null when withheld.")
    details_withheld: bool = Field(
        False, description="True for a viewer: the hold's details are shown to support and admins."
    )


class SessionDetail(Schema):
    id: str
    source: str
    user_id: str | None
    session_key: str | None
    chat_id: str | None
    chat_type: str | None
    thread_id: str | None
    model: str | None
    model_config_: Any = Field(None, alias="model_config")
    parent_session_id: str | None
    started_at: float
    ended_at: float | None
    end_reason: str | None
    message_count: int
    tool_call_count: int
    # null: a total another writer left out of range (core.rows.stored_count, stored_cost).
    input_tokens: int | None
    output_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    reasoning_tokens: int | None
    estimated_cost_usd: float | None
    title: str | None
    archived: bool
    continues_in: str | None = Field(description="Where an ended session's conversation went on.")
    compression_chain: list[str] = Field(description="The transcript's segments, in order.")
    hold: SessionHoldOut | None
    being_deleted: bool
    lineage: list[LineageNode] = Field(
        description="The conversation's tree, root first, depth first (`lineage_parent_id`)."
    )


class TranscriptItem(Schema):
    kind: Literal["message", "handoff"]
    segment: int
    session_id: str = Field(description="The segment's session (a handoff: the one it leaves).")
    to_session_id: str | None = None
    id: int | None = None
    role: str | None = None
    content: str | None = None
    tool_call_id: str | None = None
    tool_calls: str | None = None
    tool_name: str | None = None
    timestamp: float | None = None
    token_count: int | None = None
    finish_reason: str | None = None
    reasoning: str | None = None
    active: bool | None = None
    compacted: bool | None = None
    cut: list[str] = Field(
        default_factory=list,
        description=f"Fields cut at {transcripts.SHOWN_CHARS:,} characters (as the console).",
    )


class TranscriptPage(Schema):
    session_id: str
    compression_chain: list[str]
    items: list[TranscriptItem]
    next_after: str | None = Field(
        description="Pass as `after` for the next page (`<segment>:<message id>`); null at the end."
    )


class ForkMember(Schema):
    id: str
    known: bool = Field(description="false: the session is no longer in the store.")
    title: str | None = None
    source: str | None = None
    user_id: str | None = None
    session_key: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    message_count: int | None = None


class ForkGroupOut(Schema):
    group_id: str = Field(description="`<kind>:<key>`.")
    kind: str = Field(description="conversation (one slug) or session_key.")
    key: str
    session_ids: list[str] = Field(description="Oldest first.")
    evidence: list[str]
    sessions: list[ForkMember]
    differences: list[MergeDifference] = Field(
        description="Identity columns not the same for all its sessions (a merge warns of them)."
    )


class ForkGroupPage(Schema):
    groups: list[ForkGroupOut]
    total: int
    page: int
    pages: int
    as_of: datetime = Field(description="When the fork groups were found (a cached figure).")


class SessionForkGroups(Schema):
    session_id: str
    groups: list[ForkGroupOut]
    as_of: datetime


class AuditEntryOut(Schema):
    id: int
    created_at: datetime
    completed_at: datetime | None
    actor: str
    client_address: str | None
    action: str
    outcome: str
    session_ids: list[Any]
    reason: str | None = Field(description="null when withheld (`details_withheld`).")
    detail: str | None = Field(description="null when withheld (`details_withheld`).")
    before: Any
    after: Any
    changes: str = Field(description="The entry in words (the console's, and the CSV's column).")
    details_withheld: bool = Field(
        False,
        description="True when the caller's scope may not read some of this entry: of a legal "
        "hold's entry (place_hold, release_hold) a viewer gets no before, after, reason nor "
        "detail; of an erasure's, all but admin get no reason (its reference) nor detail.",
    )


class AuditPage(Schema):
    entries: list[AuditEntryOut]
    next_cursor: str | None = Field(description="Pass as `after` for the next (older) page.")


# --- helpers -----------------------------------------------------------------------------------


def _parsed(request: HttpRequest) -> listing.Parsed:
    """The console list's own parsing; what it would show as a problem is a 422 here."""
    parsed = listing.parse(request.GET)
    if parsed.field_problems:
        raise invalid_input(
            " ".join(message for _name, message in parsed.field_problems) + " Nothing was listed.",
            [{"field": name, "message": message} for name, message in parsed.field_problems],
        )
    return parsed


def _session_or_404(session_id: str) -> Session:
    session = Session.objects.filter(id=session_id).first()
    if session is None:
        raise not_found(f"No session has the id {session_id!r}.")
    return session


# Shared query parameters of the list and the search (documented; read by listing.parse).
FILTER_DOC = {
    "source": "Sessions of this source.",
    "model": "Sessions of this model.",
    "user": "Sessions of this user id.",
    "status": "live, ended, or an end reason.",
    "from": "Started on or after this day (YYYY-MM-DD, UTC).",
    "to": "Started on or before this day.",
    "title": "Title contains.",
    "forks": "1: only sessions of a fork group.",
    "empty": "1: no messages; 0: at least one.",
    "archived": "1: archived only; 0: not archived.",
    "health": "A health check's kind: sessions it flags.",
    "scope": "roots (conversations, the default) or all (every segment).",
    "per": f"Page size: one of {', '.join(map(str, listing.PAGE_SIZES))}.",
    "after": "The previous page's next_cursor.",
    "sort": f"One of {', '.join(listing.SORTS)} (default started).",
}


# --- routes: sessions --------------------------------------------------------------------------


class SessionFilters(Schema):
    """The console list's filters (documented for the schema; ``listing.parse`` reads them)."""

    source: Text = Field("", description=FILTER_DOC["source"])
    model: Text = Field("", description=FILTER_DOC["model"])
    user: Text = Field("", description=FILTER_DOC["user"])
    status: Text = Field("", description=FILTER_DOC["status"])
    started_from: Text = Field("", alias="from", description=FILTER_DOC["from"])
    started_to: Text = Field("", alias="to", description=FILTER_DOC["to"])
    title: Text = Field("", description=FILTER_DOC["title"])
    forks: Text = Field("", description=FILTER_DOC["forks"])
    empty: Text = Field("", description=FILTER_DOC["empty"])
    archived: Text = Field("", description=FILTER_DOC["archived"])
    health: Text = Field("", description=FILTER_DOC["health"])
    direction: Text = Field("", alias="dir", description="desc (default: newest first) or asc.")
    per: Text = Field("", description=FILTER_DOC["per"])
    after: Text = Field("", description=FILTER_DOC["after"])


class ListFilters(SessionFilters):
    scope: Text = Field("", description=FILTER_DOC["scope"])
    sort: Text = Field("", description=FILTER_DOC["sort"])


@router.get("/sessions", response=SessionList)
def sessions_list(request: HttpRequest, filters: Query[ListFilters]):
    """Sessions matching the console list's filters, a keyset page at a time."""
    parsed = _parsed(request)
    if parsed.filters.is_search:
        raise invalid_input(
            "The list takes no q: search with GET /sessions/search?q=...",
            [{"field": "q", "message": "Search with GET /sessions/search."}],
        )
    page = listing.list_sessions(parsed.filters, parsed.cursor)
    return SessionList(
        sessions=[asdict(row) for row in page.rows],
        next_cursor=page.next_cursor,
        count=page.count,
        count_capped=page.count_capped,
        fork_marks_pending=page.fork_marks_pending,
    )


@router.get("/sessions/search", response=SearchResults)
def sessions_search(
    request: HttpRequest,
    filters: Query[SessionFilters],
    q: Text = Query(
        ...,
        description='Words to find in messages: "exact phrase", -word, -"phrase"; also matches '
        "user ids, chat ids and display names (`names`).",
    ),
):
    """Sessions whose messages hold the words, grouped by session with their best snippets
    (the console's search), in sessions matching the filters; a keyset page at a time."""
    parsed = _parsed(request)
    if not parsed.filters.is_search:
        raise invalid_input(
            "Give q: the words to search for.", [{"field": "q", "message": "empty"}]
        )
    found = listing.search(parsed.filters, parsed.cursor)
    return SearchResults(
        sessions=[asdict(group) for group in found.sessions],
        names=[asdict(match) for match in found.names],
        terms=list(found.terms),
        next_cursor=found.next_cursor,
        count=found.count,
        count_capped=found.count_capped,
        scan_capped=found.scan_capped,
    )


@router.get("/sessions/{session_id}", response=SessionDetail, by_alias=True)
def session_read(request: HttpRequest, session_id: Identifier):
    """A session: its columns, where it continues, its hold, and its lineage as a tree."""
    session = _session_or_404(session_id)
    continues_in = None
    if session.ended_at is not None:
        continues_in, _how = where_it_continues(
            {
                "id": session.id,
                "end_reason": session.end_reason,
                "model_config": session.model_config,
                "session_key": session.session_key,
            }
        )
    hold = holds.holds_on([session.id]).get(session.id)
    withheld = withheld_from(request.auth.scope, LEGAL_HOLD) if hold else None
    totals = {name: stored_count(getattr(session, name)) for name in TOKEN_TOTALS}
    return {
        **{
            name: getattr(session, name)
            for name in SessionDetail.model_fields
            if name not in ("model_config_", "archived", "parent_session_id")
            and hasattr(session, name)
        },
        **totals,
        "estimated_cost_usd": stored_cost(session.estimated_cost_usd),
        "model_config": parse_model_config(session.model_config) if session.model_config else None,
        "parent_session_id": session.parent_id,
        "archived": bool(session.archived),
        "continues_in": continues_in,
        "compression_chain": core.compression_chain(session_id=session.id),
        "hold": None
        if hold is None
        else {
            "id": None if "id" in withheld.fields else hold.id,
            "kind": None if "kind" in withheld.fields else hold.kind,
            "subject": None if "subject" in withheld.fields else hold.subject,
            "reason": None if "reason" in withheld.fields else hold.reason,
            "details_withheld": bool(withheld),
        },
        "being_deleted": bool(being_deleted.marks_on([session.id]).get(session.id)),
        "lineage": [asdict(node) for node in core.lineage_tree(session_id=session.id)],
    }


@router.get("/sessions/{session_id}/transcript", response=TranscriptPage)
def session_transcript(
    request: HttpRequest,
    session_id: Identifier,
    after: Text = Query(
        "",
        description="A position `<segment>:<message id>` (the previous page's next_after); "
        "default: the start of this session's own segment.",
    ),
    limit: int = Query(TRANSCRIPT_PAGE, ge=1, le=TRANSCRIPT_PAGE_MAX),
    inactive: Literal["show", "hide"] = Query(
        "show", description="hide: leave out undone and compacted messages (as the console)."
    ),
):
    """The conversation's transcript stitched across its compression segments (the console's),
    a page at a time; a ``handoff`` item marks where one segment continues in the next."""
    session = _session_or_404(session_id)
    chain = core.compression_chain(session_id=session.id)
    if after:
        start = Position.parse(after)
        if start is None or start.segment >= len(chain):
            raise invalid_input(
                "after must be a position in this transcript: a segment number and a message "
                "id, such as after=0:1234.",
                [{"field": "after", "message": "not a position in this transcript"}],
            )
    else:
        start = Position(chain.index(session.id) if session.id in chain else 0, 0)
    raw, later = transcripts.read_after(chain, start, limit=limit, hide_inactive=inactive == "hide")
    return TranscriptPage(
        session_id=session.id,
        compression_chain=chain,
        items=[_transcript_item(entry) for entry in raw],
        next_after=None if later is None else str(later),
    )


def _transcript_item(entry: dict | Handoff) -> dict:
    if isinstance(entry, Handoff):
        return {
            "kind": "handoff",
            "segment": entry.from_segment,
            "session_id": entry.from_session_id,
            "to_session_id": entry.to_session_id,
        }
    row = dict(entry)
    cut = list(transcripts.cut_long_fields(row))
    for name in ("tool_calls", "content", "reasoning"):
        if isinstance(row.get(name), bytes):
            row[name] = row[name].decode("utf-8", "replace")
    return {
        **{name: row.get(name) for name in TranscriptItem.model_fields if name in row},
        "kind": "message",
        "active": bool(row.get("active")),
        "compacted": bool(row.get("compacted")),
        "cut": cut,
    }


# --- routes: fork groups -----------------------------------------------------------------------


def _fork_groups_out(groups: list) -> list[dict]:
    """The groups with what the console's /forks/ shows of each session, read in one query."""
    ids = list(dict.fromkeys(sid for group in groups for sid in group.session_ids))
    found: dict[str, dict] = {}
    for start in range(0, len(ids), 500):
        for row in Session.objects.filter(id__in=ids[start : start + 500]).values(*MEMBER_FIELDS):
            found[row["id"]] = {**row, "known": True}
    out = []
    for group in groups:
        members = [found.get(sid, {"id": sid, "known": False}) for sid in group.session_ids]
        out.append(
            {
                "group_id": group.group_id,
                "kind": group.kind,
                "key": group.key,
                "session_ids": list(group.session_ids),
                "evidence": list(group.evidence),
                "sessions": members,
                "differences": [
                    asdict(d) for d in session_differences([m for m in members if m["known"]])
                ],
            }
        )
    return out


@router.get("/forks", response=ForkGroupPage)
def fork_groups(request: HttpRequest, page: int = Query(1, ge=1, lt=2**31)):
    """Every fork group (unlinked sessions of one conversation) with its evidence, a page of
    50 at a time (the console's /forks/). Found store-wide and cached for 30 seconds."""
    snapshot = overview.fork_snapshot_now()
    total = len(snapshot.groups)
    pages = max(1, -(-total // FORK_GROUPS_PER_PAGE))
    if page > pages:
        raise invalid_input(
            f"There are {pages} pages of fork groups.",
            [{"field": "page", "message": f"at most {pages}"}],
        )
    start = (page - 1) * FORK_GROUPS_PER_PAGE
    return ForkGroupPage(
        groups=_fork_groups_out(snapshot.groups[start : start + FORK_GROUPS_PER_PAGE]),
        total=total,
        page=page,
        pages=pages,
        as_of=snapshot.as_of,
    )


@router.get("/sessions/{session_id}/forks", response=SessionForkGroups)
def session_fork_groups(request: HttpRequest, session_id: Identifier):
    """The fork groups a session belongs to (none: an empty list)."""
    session = _session_or_404(session_id)
    snapshot = overview.fork_snapshot_now()
    groups = [group for group in snapshot.groups if session.id in group.session_ids]
    return SessionForkGroups(
        session_id=session.id, groups=_fork_groups_out(groups), as_of=snapshot.as_of
    )


# --- routes: the audit log ---------------------------------------------------------------------


def _audit_filtered(request: HttpRequest) -> audit_log.Filtered:
    """The console's audit filters (its form); one it would show as an error is a 422 here."""
    found = audit_log.filtered(request.GET)
    if found.form.is_bound and found.form.errors:
        errors = [
            {"field": name, "message": " ".join(messages)}
            for name, messages in found.form.errors.items()
        ]
        raise invalid_input(
            "; ".join(f"{e['field']}: {e['message']}" for e in errors) + " Nothing was read.",
            errors,
        )
    return found


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def _audit_cursor(entry: AuditEntry) -> str:
    """``<microseconds since 1970>-<id>`` of the last entry shown: digits, safe in a URL."""
    return f"{(entry.created_at - _EPOCH) // _MICROSECOND}-{entry.pk}"


def _after_audit_cursor(entries, after: str):
    """The entries older than the cursor's (newest first: created_at, then id, descending)."""
    micros, _sep, pk = after.partition("-")
    moment = None
    if micros.isascii() and micros.isdigit() and pk.isascii() and pk.isdigit():
        if len(micros) <= 17 and len(pk) <= 18:
            try:
                moment = _EPOCH + int(micros) * _MICROSECOND
            except OverflowError:
                moment = None
    if moment is None:
        raise invalid_input(
            "after must be a page's next_cursor.",
            [{"field": "after", "message": "not a cursor of this log"}],
        )
    return entries.filter(Q(created_at__lt=moment) | Q(created_at=moment, pk__lt=int(pk)))


class AuditFilters(Schema):
    """The audit page's filters (documented for the schema; its form reads them)."""

    action: Text = Field("", description=AUDIT_FILTERS["action"])
    actor: Text = Field("", description=AUDIT_FILTERS["actor"])
    session: Text = Field("", description=AUDIT_FILTERS["session"])
    outcome: Text = Field("", description=AUDIT_FILTERS["outcome"])
    since: Text = Field("", description=AUDIT_FILTERS["since"])
    until: Text = Field("", description=AUDIT_FILTERS["until"])


@router.get("/audit", response=AuditPage)
def audit_entries(
    request: HttpRequest,
    filters: Query[AuditFilters],
    after: Text = Query("", description="The previous page's next_cursor."),
    limit: int = Query(AUDIT_PAGE, ge=1, le=AUDIT_PAGE_MAX),
):
    """The audit log, newest first, with the console's filters; a keyset page at a time."""
    entries = _audit_filtered(request).entries
    if after:
        entries = _after_audit_cursor(entries, after)
    page = list(entries[: limit + 1])
    links = audit_log.NoLinks()
    withheld = withheld_for(request.auth.scope)
    return AuditPage(
        entries=[_audit_entry(entry, links, withheld(entry.action)) for entry in page[:limit]],
        next_cursor=_audit_cursor(page[limit - 1]) if len(page) > limit else None,
    )


def _audit_entry(entry: AuditEntry, links: audit_log.NoLinks, withheld: audit_log.Withheld) -> dict:
    """The entry as the caller's scope is shown it: what it may not read null."""
    words = audit_log.readable(audit_log.as_shown(entry, withheld), links).text

    def shown(name: str):
        return None if name in withheld.fields else getattr(entry, name)

    return {
        "id": entry.pk,
        "created_at": entry.created_at,
        "completed_at": entry.completed_at,
        "actor": entry.actor_name,
        "client_address": entry.client_address,
        "action": entry.action,
        "outcome": entry.outcome,
        "session_ids": list(entry.session_ids or []),
        "reason": shown("reason"),
        "detail": shown("detail"),
        "before": shown("before"),
        "after": shown("after"),
        "changes": words,
        "details_withheld": bool(withheld),
    }


@router.get(
    "/audit/export",
    openapi_extra={
        "responses": {
            200: {
                "description": "The console's CSV export (its columns: "
                + ", ".join(audit_log.EXPORT_COLUMNS)
                + ").",
                "content": {"text/csv": {"schema": {"type": "string"}}},
            }
        }
    },
)
def audit_export(request: HttpRequest, filters: Query[AuditFilters]):
    """Every entry the filters match, newest first, as the console's CSV (streamed; a cell a
    spreadsheet would run as a formula starts with a quote)."""
    found = _audit_filtered(request)
    answer = StreamingHttpResponse(
        audit_log.csv_lines(found.entries, withheld_for=withheld_for(request.auth.scope)),
        content_type="text/csv; charset=utf-8",
    )
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    answer["Content-Disposition"] = f'attachment; filename="audit-{stamp}.csv"'
    return answer
