"""Read queries behind the session list, built for a big store that the runtime writes while
we read: keyset pages, never OFFSET; counts exact only up to a cap; no transaction around a
page (a session deleted between two statements drops out of it).

params (the query string and cursors) < conditions (the WHERE, fork ids, capped counts) <
activity (the last-activity order) < page (``list_sessions``); snippets, fulltext_sqlite,
fulltext_postgresql, name_search < fulltext (``search``); filter_choices; selection (what
an export or a bulk delete takes). The names below are the list's API.
"""

from sessions_admin.store.listing.conditions import fork_marks_ready, where_sql
from sessions_admin.store.listing.filter_choices import Choices, choices
from sessions_admin.store.listing.fulltext import (
    CONVERSATION_MATCHES_MAX,
    ConversationMatches,
    SearchPage,
    SessionHits,
    conversation_matches,
    search,
)
from sessions_admin.store.listing.name_search import NameMatch, search_names
from sessions_admin.store.listing.page import (
    FIRST_MESSAGE_SCAN,
    SORT_SQL,
    SessionPage,
    SessionRow,
    list_sessions,
)
from sessions_admin.store.listing.params import (
    ARCHIVED,
    DIRECTIONS,
    EMPTY,
    MAX_INT,
    MAX_QUERY,
    MAX_TERMS,
    PAGE_SIZES,
    SCOPES,
    SORTS,
    Cursor,
    Filters,
    Parsed,
    Query,
    cursor_values,
    decode_cursor,
    encode_cursor,
    parse,
    parse_query,
    search_terms,
)
from sessions_admin.store.listing.selection import conversation_session_ids, matching_session_ids
from sessions_admin.store.listing.snippets import MARK_END, MARK_START, SearchHit

__all__ = [
    "CONVERSATION_MATCHES_MAX",
    "ConversationMatches",
    "conversation_matches",
    "ARCHIVED",
    "DIRECTIONS",
    "EMPTY",
    "FIRST_MESSAGE_SCAN",
    "MARK_END",
    "MARK_START",
    "MAX_INT",
    "MAX_QUERY",
    "MAX_TERMS",
    "PAGE_SIZES",
    "SCOPES",
    "SORTS",
    "SORT_SQL",
    "Choices",
    "Cursor",
    "Filters",
    "NameMatch",
    "Parsed",
    "Query",
    "SearchHit",
    "SearchPage",
    "SessionHits",
    "SessionPage",
    "SessionRow",
    "choices",
    "conversation_session_ids",
    "cursor_values",
    "decode_cursor",
    "encode_cursor",
    "fork_marks_ready",
    "list_sessions",
    "matching_session_ids",
    "parse",
    "parse_query",
    "search",
    "search_names",
    "search_terms",
    "where_sql",
]
