"""PostgreSQL's full-text backend: the GIN expression index over ``to_tsvector('simple',
...)`` (schema.FTS_DOCUMENT_SQL)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from django.db import connections, transaction

from sessions_admin.core import db
from sessions_admin.core.schema import FTS_DOCUMENT_SQL
from sessions_admin.routers import store_alias
from sessions_admin.store.listing import conditions
from sessions_admin.store.listing.conditions import count_capped
from sessions_admin.store.listing.params import Query
from sessions_admin.store.listing.snippets import MARK_END, MARK_START, SNIPPET_ELLIPSIS

# PostgreSQL search: the first id window, then four times larger each time.
SEARCH_WINDOW = 4096
# At this share of messages or more, a word is read in id order (PgSearch.common_word):
# a match every five messages or closer; below it the GIN index's list is cheaper.
COMMON_WORD_SHARE = 0.2
WORD_SHARES_SECONDS = 600
_word_share_cache: dict[str, tuple[float, dict[str, float]]] = {}


class PgSearch:
    """PostgreSQL: matching messages in id windows from the cursor, then headlines.

    Left to itself the planner walks the primary key and computes to_tsvector for
    every message until enough match (seconds for a mid-frequency word, or with a
    narrow session filter). Here windows of ids from the cursor, growing (the first
    SEARCH_WINDOW ids), are read through the GIN index ANDed with the id range
    (bitmap scans only) until the scan has what it wants.
    """

    document = FTS_DOCUMENT_SQL.format(t="m.")

    @staticmethod
    def word_share(query: Query) -> float | None:
        """The share of messages holding the query's one word, when PostgreSQL's statistics
        for the index name it (its most common words); None otherwise."""
        if len(query.include) != 1 or query.exclude or " " in query.include[0]:
            return None
        return word_shares().get(query.include[0].lower())

    @classmethod
    def first_window(cls, query: Query, take: int) -> int:
        """How many message ids the first bitmap read covers.

        Each read of a word through the GIN index costs its whole list of messages, however
        narrow the id range ANDed with it (a word in 3% of 14.6 million messages: 117 ms a
        read). For a word the statistics know, the first window is sized from its share to
        hold ``take`` matches at once (twice that many ids: ids have gaps); for the others it
        is SEARCH_WINDOW, growing four times each read.
        """
        share = cls.word_share(query)
        if not share:
            return SEARCH_WINDOW
        return max(SEARCH_WINDOW, int((take + 1) / share * 2))

    @classmethod
    def common_word(cls, query: Query) -> bool:
        """The query is one word in at least COMMON_WORD_SHARE of the messages.

        The GIN index answers such a word with every message holding it (623,000 ids
        for "the" on a 1.5-million-message store: 100 ms a statement, whatever the id
        range ANDed with it), while reading messages in id order and testing each finds
        a page's matches, or the count's first COUNT_CAP, within a few thousand rows.
        The share is PostgreSQL's own statistic for the index (pg_stats, per ANALYZE).
        """
        return (cls.word_share(query) or 0.0) >= COMMON_WORD_SHARE

    @staticmethod
    def tsquery(query: Query) -> tuple[str, list]:
        sql = " && ".join("phraseto_tsquery('simple', %s)" for _ in query.include)
        if query.exclude:
            sql = f"({sql}) && " + " && ".join(
                "!!phraseto_tsquery('simple', %s)" for _ in query.exclude
            )
        return sql, [*query.include, *query.exclude]

    @classmethod
    def matches(cls, query: Query) -> tuple[str, list]:
        sql, params = cls.tsquery(query)
        # A one-token word can only match a message whose lower-cased text holds it: the
        # 'simple' configuration's lexemes are the text's tokens, lower-cased as lower()
        # does. Testing that first spares to_tsvector (the whole text parsed) for every
        # message without it: a common word's walk in id order, 80 -> 52 ms at 100,000
        # sessions. Other terms (phrases, "can't") are left to the full-text test alone.
        plain = [term.lower() for term in query.include if term.isalnum()]
        contains = "".join(f"strpos(lower({cls.document}), %s) > 0 AND " for _ in plain)
        return f"{contains}to_tsvector('simple', {cls.document}) @@ ({sql})", [*plain, *params]

    @classmethod
    def scan(
        cls, query: Query, where: str, params: list, desc: bool, start: int | None, take: int
    ) -> tuple[list[tuple], bool]:
        matches, match_params = cls.matches(query)
        order = "DESC" if desc else "ASC"
        low = db.fetchone("SELECT MIN(id) FROM messages")[0]
        high = db.fetchone("SELECT MAX(id) FROM messages")[0]
        out: list[tuple] = []
        if low is None:
            return out, False
        low, high = int(low), int(high)
        if start is None:
            edge = high + 1 if desc else low - 1
        else:
            edge = start + 1 if desc else start - 1  # the walk's bound is exclusive
        # Bitmap scans only, from the first window: a scan reads hundreds of matches, and a
        # freely planned window computed to_tsvector for every message until enough matched
        # (33 ms for a frequent word, 61 ms for a rarer one, against 15 and 2 ms). Except
        # for a word in a large share of messages (common_word).
        window = cls.first_window(query, take)
        with _bitmap_scans_only(not cls.common_word(query)):
            while len(out) <= take:
                if desc:
                    if edge <= low:
                        break
                    first = max(edge - window, low)
                    bounds, bound_params, next_edge = (
                        "m.id >= %s AND m.id < %s",
                        [first, edge],
                        first,
                    )
                else:
                    if edge >= high:
                        break
                    stop = min(edge + window, high)
                    bounds, bound_params, next_edge = "m.id > %s AND m.id <= %s", [edge, stop], stop
                out += db.fetchall(
                    f"SELECT m.id, m.session_id, m.role, CASE WHEN {where} THEN 1 ELSE 0 END "
                    f"FROM messages m JOIN sessions s ON s.id = m.session_id "
                    f"WHERE {bounds} AND {matches} ORDER BY m.id {order} LIMIT %s",
                    [*params, *bound_params, *match_params, take + 1 - len(out)],
                )
                edge = next_edge
                window *= 4
        return out[:take], len(out) > take

    @classmethod
    def count(
        cls, query: Query, where: str, params: list, desc: bool, *, candidates: int
    ) -> tuple[int, bool, int | None]:
        if where == "1 = 1":
            # Still bitmap-only: the capped count reads matches through the GIN index
            # (a common word's first COUNT_CAP matches are read as they come).
            matches, match_params = cls.matches(query)
            with _bitmap_scans_only(not cls.common_word(query)):
                count, capped = count_capped(
                    f"FROM messages m JOIN sessions s ON s.id = m.session_id WHERE {matches}",
                    match_params,
                )
            return count, capped, None
        rows, more = cls.scan(query, where, params, desc, None, candidates)
        passing = sum(1 for row in rows if row[3])
        capped = passing > conditions.COUNT_CAP
        return (
            min(passing, conditions.COUNT_CAP),
            capped,
            candidates if more and not capped else None,
        )

    @classmethod
    def hit_before(cls, query: Query, session_ids: list[str], start: int, desc: bool) -> set[str]:
        matches, match_params = cls.matches(query)
        ids_sql, ids_params = db.in_list("m.session_id", session_ids)
        rows = db.fetchall(
            f"SELECT DISTINCT m.session_id FROM messages m WHERE {ids_sql} "
            f"AND m.id {'>' if desc else '<'} %s AND {matches}",
            [*ids_params, start, *match_params],
        )
        return {r[0] for r in rows}

    @classmethod
    def matches_in(
        cls, query: Query, session_ids: list[str], shown: str, limit: int
    ) -> list[tuple]:
        """(id, session_id) of the sessions' messages matching, in id order, at most ``limit``."""
        matches, match_params = cls.matches(query)
        ids_sql, ids_params = db.in_list("m.session_id", session_ids)
        return db.fetchall(
            f"SELECT m.id, m.session_id FROM messages m WHERE {ids_sql}{shown} AND {matches} "
            "ORDER BY m.id LIMIT %s",
            [*ids_params, *match_params, limit],
        )

    @classmethod
    def snippets(cls, query: Query, ids: list[int], desc: bool) -> list[tuple]:
        if not ids:
            return []
        tsquery, tsquery_params = cls.tsquery(query)
        ids_sql, ids_params = db.in_list("m.id", ids)
        options = (
            f'StartSel="{MARK_START}", StopSel="{MARK_END}", MaxWords=30, MinWords=12, '
            f'MaxFragments=2, FragmentDelimiter=" {SNIPPET_ELLIPSIS} "'
        )
        return db.fetchall(
            "SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, m.active, "
            f"substr(m.tool_calls, 1, 400), ts_headline('simple', {cls.document}, "
            f"({tsquery}), %s) FROM messages m WHERE {ids_sql}",
            [*tsquery_params, options, *ids_params],
        )


@contextlib.contextmanager
def _bitmap_scans_only(wanted: bool = True) -> Iterator[None]:
    """PostgreSQL reads matches through the GIN index ANDed with the id range."""
    if not wanted:
        yield
        return
    if connections[store_alias()].in_atomic_block:  # the caller's transaction goes on after
        db.execute("SET LOCAL enable_indexscan = off; SET LOCAL enable_seqscan = off")
        try:
            yield
        finally:
            db.execute("SET LOCAL enable_indexscan = on; SET LOCAL enable_seqscan = on")
        return
    # A transaction of its own, which the settings end with: BEGIN, one message for both
    # SETs, the reads, COMMIT. The rest of a search page reads in autocommit.
    with transaction.atomic(using=store_alias()):
        db.execute("SET LOCAL enable_indexscan = off; SET LOCAL enable_seqscan = off")
        yield


def word_shares() -> dict[str, float]:
    """Share of messages holding each of the search index's most common words (pg_stats),
    read once per WORD_SHARES_SECONDS per process."""
    name = _store_name()
    read_at, shares = _word_share_cache.get(name, (0.0, {}))
    if time.monotonic() - read_at < WORD_SHARES_SECONDS:
        return shares
    shares = {
        word: float(share)
        for word, share in db.fetchall(
            "SELECT f.word, f.share FROM pg_stats st CROSS JOIN LATERAL unnest("
            "st.most_common_elems::text::text[], st.most_common_elem_freqs) AS f(word, share) "
            "WHERE st.schemaname = current_schema() AND st.tablename = 'idx_sa_messages_fts' "
            "AND f.word IS NOT NULL"
        )
    }
    _word_share_cache[name] = (time.monotonic(), shares)
    return shares


def _store_name() -> str:
    return str(connections[store_alias()].settings_dict["NAME"])
