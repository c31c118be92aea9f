"""Full-text search, grouped by session.

A page walks the messages matching the query in id order from its cursor, at most
SEARCH_CANDIDATES of them (each with whether its session passes the filters), and
groups the passing ones by session in the order of each session's first hit. The
page shows PAGE_SIZE sessions; the next page starts at the first hit of the next
session. A session whose hits straddle that start has a hit before it, so it was
on an earlier page: sessions with a hit before the page's start are left out
(one probe per candidate session), and no session is listed twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sessions_admin.core import db
from sessions_admin.store.listing import conditions
from sessions_admin.store.listing.conditions import TITLE_SQL, where_sql
from sessions_admin.store.listing.fulltext_postgresql import PgSearch
from sessions_admin.store.listing.fulltext_sqlite import SqliteSearch
from sessions_admin.store.listing.name_search import FoundSession, NameMatch, search_names
from sessions_admin.store.listing.params import (
    MAX_TEXT,
    Cursor,
    Filters,
    Query,
    encode_cursor,
    parse_query,
)
from sessions_admin.store.listing.snippets import SearchHit, search_hit, snippet_ids

# A search with filters checks at most this many messages containing the words per page
# (and for its count): a common word under a selective filter otherwise read every match
# (300 ms at 20,000 sessions, growing with the store). The page says when it stopped
# there, and its next link searches on from the last message checked.
SEARCH_CANDIDATES = 10_000
# The first read of matches; each further read is four times larger.
SCAN_BATCH = 512
# A session's hit count above this shows as "100+".
SESSION_COUNT_SHOWN = 100


@dataclass(frozen=True)
class SessionHits(FoundSession):
    """One session of a search page: who it is, how many of its messages match, the best."""

    first_user_text: str | None
    # Matching messages (passing the filters) seen from the page's start: exact unless
    # ``count_more`` (over SESSION_COUNT_SHOWN, or the session goes on past the scan).
    count: int
    count_more: bool
    # Its first hit in the page's order: "more in this session" opens the transcript there.
    first_hit_id: int
    hits: tuple[SearchHit, ...]


@dataclass(frozen=True)
class SearchPage:
    sessions: tuple[SessionHits, ...]
    next_cursor: str | None
    count: int
    count_capped: bool
    terms: tuple[str, ...] = field(default=())
    # The page stopped after checking SEARCH_CANDIDATES messages containing the words
    # before it had a page of sessions (its next link searches on).
    scan_capped: bool = False
    # How many such messages a page checks at most (SEARCH_CANDIDATES when it searched).
    candidates: int = 0
    # The count covers only the first this many messages containing the words.
    count_within: int | None = None
    names: tuple[NameMatch, ...] = field(default=())

    @property
    def hits(self) -> tuple[SearchHit, ...]:
        return tuple(hit for group in self.sessions for hit in group.hits)


def search(filters: Filters, cursor: Cursor | None = None) -> SearchPage:
    """Sessions with messages matching ``filters.q``, grouped, in sessions matching the filters.

    Keyset-paginated by each session's first hit, newest first (``dir=asc``: oldest
    first). Search looks in every segment: the roots scope does not apply.
    """
    return _search(filters, cursor)


def _search(filters: Filters, cursor: Cursor | None) -> SearchPage:
    query = filters.query
    names = tuple(search_names(filters.q)) if cursor is None else ()
    if not query.include:
        return SearchPage(sessions=(), next_cursor=None, count=0, count_capped=False, names=names)
    backend = _PG if db.vendor() == "postgresql" else _SQLITE
    desc = filters.direction == "desc"
    limit = filters.per_page
    where, params = where_sql(filters, scope=False)
    start = int(cursor.values[0]) if cursor else None
    # Read matches in growing batches until the page has its sessions (and the next
    # page's first) or SEARCH_CANDIDATES matches were read: a common word stops after
    # the first batch, a rare one reads all of its few matches at once.
    scanned: list[tuple] = []
    groups: dict[str, list[tuple[int, str]]] = {}
    earlier: dict[str, bool] = {}
    # A word PostgreSQL's statistics know, unfiltered, first page: the first read takes the
    # count's COUNT_CAP + 1 matches too, in the one walk (PgSearch.common_word) or bitmap
    # read (PgSearch.first_window), not in a second that reads the word's list again.
    counted_here = (
        backend is _PG and cursor is None and where == "1 = 1" and _PG.word_share(query) is not None
    )
    batch = max(SCAN_BATCH, conditions.COUNT_CAP + 1) if counted_here else SCAN_BATCH
    more, bound = True, start
    while more and len(scanned) < SEARCH_CANDIDATES:
        take = min(batch, SEARCH_CANDIDATES - len(scanned))
        rows, more = backend.scan(query, where, params, desc, bound, take)
        if not rows:
            break
        scanned += rows
        for message_id, session_id, role, passes in rows:
            if passes:
                groups.setdefault(session_id, []).append((int(message_id), role))
        last = int(rows[-1][0])
        bound = last - 1 if desc else last + 1
        kept = _not_on_earlier_pages(backend, query, list(groups), start, desc, limit + 1, earlier)
        if len(kept) > limit:
            break
        batch *= 4
    kept = _not_on_earlier_pages(backend, query, list(groups), start, desc, limit + 1, earlier)
    next_start = None
    scan_capped = False
    if len(kept) > limit:
        next_start = groups[kept[limit]][0][0]
        kept = kept[:limit]
    elif more:
        next_start = bound  # the scan stopped at SEARCH_CANDIDATES: search on after it
        scan_capped = True
    if counted_here and (len(scanned) > conditions.COUNT_CAP or not more):
        count, capped, count_within = (
            min(len(scanned), conditions.COUNT_CAP),
            len(scanned) > conditions.COUNT_CAP,
            None,
        )
    else:
        count, capped, count_within = backend.count(
            query, where, params, desc, candidates=SEARCH_CANDIDATES
        )
    sessions = _session_hits(backend, query, groups, kept, scanned if more else None, desc)
    next_cursor = None
    if next_start is not None:
        next_cursor = encode_cursor("search", filters.direction, [next_start])
    return SearchPage(
        sessions=sessions,
        next_cursor=next_cursor,
        count=count,
        count_capped=capped,
        terms=query.include,
        scan_capped=scan_capped,
        candidates=SEARCH_CANDIDATES,
        count_within=count_within,
        names=names,
    )


def _not_on_earlier_pages(
    backend: Any,
    query: Query,
    order: list[str],
    start: int | None,
    desc: bool,
    wanted: int,
    earlier: dict[str, bool],
) -> list[str]:
    """The first ``wanted`` sessions of ``order`` with no hit before ``start``
    (``earlier`` remembers the sessions already probed)."""
    if start is None:
        return order[:wanted]
    kept: list[str] = []
    at = 0
    while len(kept) < wanted and at < len(order):
        batch = order[at : at + wanted - len(kept)]
        at += len(batch)
        probe = [session_id for session_id in batch if session_id not in earlier]
        if probe:
            found = backend.hit_before(query, probe, start, desc)
            earlier.update((session_id, session_id in found) for session_id in probe)
        kept += [session_id for session_id in batch if not earlier[session_id]]
    return kept


def _session_hits(
    backend: Any,
    query: Query,
    groups: dict[str, list[tuple[int, str]]],
    kept: list[str],
    scanned: list[tuple] | None,
    desc: bool,
) -> tuple[SessionHits, ...]:
    if not kept:
        return ()
    best = snippet_ids(groups, kept)
    wanted = sorted(i for ids in best.values() for i in ids)
    hits: dict[int, SearchHit] = {
        int(row[0]): search_hit(row) for row in backend.snippets(query, wanted, desc)
    }
    # With the scan stopped at its cap, a session may match past its last scanned
    # message: its count is exact only if it has no message beyond that one.
    beyond: set[str] = set()
    if scanned is not None:
        last = int(scanned[-1][0])
        ids_sql, ids_params = db.in_list("session_id", kept)
        edge = "MIN(id)" if desc else "MAX(id)"
        for session_id, edge_id in db.fetchall(
            f"SELECT session_id, {edge} FROM messages WHERE {ids_sql} GROUP BY session_id",
            ids_params,
        ):
            if edge_id is not None and (edge_id < last if desc else edge_id > last):
                beyond.add(session_id)
    info = _session_info(kept)
    out = []
    for session_id in kept:
        row = info.get(session_id, {})
        count = len(groups[session_id])
        out.append(
            SessionHits(
                session_id=session_id,
                title=row.get("title"),
                source=row.get("source") or "",
                user_id=row.get("user_id"),
                chat_id=row.get("chat_id"),
                display_name=row.get("display_name"),
                first_user_text=row.get("first_user_text"),
                count=min(count, SESSION_COUNT_SHOWN),
                count_more=count > SESSION_COUNT_SHOWN or session_id in beyond,
                first_hit_id=groups[session_id][0][0],
                hits=tuple(hits[i] for i in best[session_id] if i in hits),
            )
        )
    return tuple(out)


# What a session's label falls back to when it has no title, read for a page's sessions only.
FIRST_TEXT_READ = 200


def _session_info(ids: Sequence[str]) -> dict[str, dict]:
    ids_sql, ids_params = db.in_list("s.id", ids)
    first_text = (
        f"(SELECT substr(fm.content, 1, {FIRST_TEXT_READ}) FROM messages fm "
        "WHERE fm.session_id = s.id AND fm.role = 'user' AND fm.content IS NOT NULL "
        "ORDER BY fm.id LIMIT 1)"
    )
    rows = db.fetchall(
        f"SELECT s.id, {TITLE_SQL}, s.source, s.user_id, s.chat_id, "
        f"substr(s.display_name, 1, {MAX_TEXT}), "
        f"CASE WHEN s.title IS NULL THEN {first_text} END FROM sessions s WHERE {ids_sql}",
        ids_params,
    )
    keys = ("title", "source", "user_id", "chat_id", "display_name", "first_user_text")
    return {r[0]: dict(zip(keys, r[1:], strict=True)) for r in rows}


_SQLITE = SqliteSearch()
_PG = PgSearch()


# The matches a transcript's find bar lists (conversation_matches); a conversation with more
# says "N+" and its bar steps through these.
CONVERSATION_MATCHES_MAX = 2000


@dataclass(frozen=True)
class ConversationMatches:
    """The messages of one conversation (its compression chain) that a search matches, in
    the order its stitched transcript shows them (segment by segment, then by id)."""

    message_ids: tuple[int, ...]
    capped: bool  # more than CONVERSATION_MATCHES_MAX matched


def conversation_matches(
    *, q: str, chain: Sequence[str], hide_inactive: bool = False
) -> ConversationMatches:
    """Every message of the chain's sessions that the search ``q`` matches (its exclusions
    too), as the search page counted them, so a transcript opened from a hit can say
    "match 3 of 22" before the 22 are loaded."""
    query = parse_query(q)
    if not query.include or not chain:
        return ConversationMatches(message_ids=(), capped=False)
    backend = _PG if db.vendor() == "postgresql" else _SQLITE
    shown = " AND m.active = 1 AND m.compacted = 0" if hide_inactive else ""
    rows = backend.matches_in(query, list(chain), shown, CONVERSATION_MATCHES_MAX + 1)
    capped = len(rows) > CONVERSATION_MATCHES_MAX
    segment = {session_id: index for index, session_id in enumerate(chain)}
    ordered = sorted(rows[:CONVERSATION_MATCHES_MAX], key=lambda row: (segment[row[1]], row[0]))
    return ConversationMatches(message_ids=tuple(int(row[0]) for row in ordered), capped=capped)
