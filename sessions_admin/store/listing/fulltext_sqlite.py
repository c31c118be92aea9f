"""SQLite's full-text backend: the FTS5 index ``messages_fts``."""

from __future__ import annotations

from collections.abc import Sequence

from sessions_admin.core import db
from sessions_admin.store.listing.conditions import count_capped
from sessions_admin.store.listing.params import Query
from sessions_admin.store.listing.snippets import (
    MARK_END,
    MARK_START,
    SNIPPET_ELLIPSIS,
    SNIPPET_TOKENS,
)


def fts5_query(terms: Sequence[str] | Query) -> str:
    """An FTS5 query matching every included phrase as plain text and none excluded.

    Each phrase is a quoted string: inside one only ``"`` is special (doubled), so
    operators, ``*``, ``^``, ``:``, parentheses and column filters are just characters
    there, and the tokenizer drops the punctuation exactly as it did when indexing.
    """
    query = terms if isinstance(terms, Query) else Query(include=tuple(terms))

    def quoted(phrase: str) -> str:
        return '"' + phrase.replace('"', '""') + '"'

    sql = " ".join(quoted(term) for term in query.include)
    if query.exclude:
        sql = f"({sql}) " + " ".join(f"NOT {quoted(term)}" for term in query.exclude)
    return sql


class SqliteSearch:
    """SQLite: the FTS5 index hands matches out in rowid order, so a scan is a LIMITed
    read of the index, and only those candidates are joined to their sessions."""

    @staticmethod
    def scan(
        query: Query, where: str, params: list, desc: bool, start: int | None, take: int
    ) -> tuple[list[tuple], bool]:
        """Up to ``take`` matches from ``start`` (inclusive; None: the first), each with
        whether its session passes the filters; and whether more matches follow."""
        order = "DESC" if desc else "ASC"
        bound = f" AND rowid {'<=' if desc else '>='} %s" if start is not None else ""
        rows = db.fetchall(
            f"SELECT c.id, m.session_id, m.role, CASE WHEN {where} THEN 1 ELSE 0 END FROM ("
            f"SELECT rowid AS id FROM messages_fts WHERE messages_fts MATCH %s{bound} "
            f"ORDER BY rowid {order} LIMIT %s) c JOIN messages m ON m.id = c.id "
            f"JOIN sessions s ON s.id = m.session_id ORDER BY c.id {order}",
            [
                *params,
                fts5_query(query),
                *([start] if start is not None else []),
                take + 1,
            ],
        )
        return rows[:take], len(rows) > take

    @staticmethod
    def count(
        query: Query, where: str, params: list, desc: bool, *, candidates: int
    ) -> tuple[int, bool, int | None]:
        match = fts5_query(query)
        if where == "1 = 1":
            count, capped = count_capped("FROM messages_fts WHERE messages_fts MATCH %s", [match])
            return count, capped, None
        order = "DESC" if desc else "ASC"
        first_matches = (
            "SELECT rowid AS id FROM messages_fts WHERE messages_fts MATCH %s "
            f"ORDER BY rowid {order} LIMIT {int(candidates)}"
        )
        count, capped = count_capped(
            f"FROM ({first_matches}) c JOIN messages m ON m.id = c.id "
            f"JOIN sessions s ON s.id = m.session_id WHERE {where}",
            [match, *params],
        )
        within = None
        if not capped:
            checked = db.fetchone(f"SELECT COUNT(*) FROM ({first_matches}) c", [match])[0]
            within = candidates if checked >= candidates else None
        return count, capped, within

    @staticmethod
    def hit_before(query: Query, session_ids: list[str], start: int, desc: bool) -> set[str]:
        # Driven by the sessions' messages (CROSS JOIN keeps that order), each probed in
        # the index by rowid: bounded by those sessions' sizes, not the word's frequency.
        ids_sql, ids_params = db.in_list("m.session_id", session_ids)
        rows = db.fetchall(
            "SELECT DISTINCT m.session_id FROM messages m CROSS JOIN messages_fts "
            f"ON messages_fts.rowid = m.id WHERE {ids_sql} AND m.id {'>' if desc else '<'} %s "
            "AND messages_fts MATCH %s",
            [*ids_params, start, fts5_query(query)],
        )
        return {r[0] for r in rows}

    @staticmethod
    def matches_in(query: Query, session_ids: list[str], shown: str, limit: int) -> list[tuple]:
        """(id, session_id) of the sessions' messages matching, in id order, at most ``limit``.

        Read from the index within the sessions' id range (FTS5 seeks a rowid range), then
        joined to the sessions: probing the index once per message of the sessions (as
        ``hit_before`` does for a few) took 1.4 s over a 20,000-message session."""
        ids_sql, ids_params = db.in_list("session_id", session_ids)
        low, high = db.fetchone(
            f"SELECT MIN(id), MAX(id) FROM messages WHERE {ids_sql}", ids_params
        )
        if low is None:
            return []
        ids_sql, ids_params = db.in_list("m.session_id", session_ids)
        return db.fetchall(
            "SELECT c.id, m.session_id FROM (SELECT rowid AS id FROM messages_fts "
            "WHERE messages_fts MATCH %s AND rowid >= %s AND rowid <= %s) c "
            f"JOIN messages m ON m.id = c.id WHERE {ids_sql}{shown} ORDER BY c.id LIMIT %s",
            [fts5_query(query), low, high, *ids_params, limit],
        )

    @staticmethod
    def snippets(query: Query, ids: list[int], desc: bool) -> list[tuple]:
        if not ids:
            return []
        ids_sql, ids_params = db.in_list("messages_fts.rowid", ids)
        # Read within the page's rowid range (FTS5 uses it).
        return db.fetchall(
            "SELECT messages_fts.rowid, m.session_id, m.role, m.timestamp, m.tool_name, m.active, "
            "substr(m.tool_calls, 1, 400), snippet(messages_fts, 0, %s, %s, %s, %s) "
            "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
            "WHERE messages_fts MATCH %s AND messages_fts.rowid >= %s "
            f"AND messages_fts.rowid <= %s AND {ids_sql}",
            [
                MARK_START,
                MARK_END,
                SNIPPET_ELLIPSIS,
                SNIPPET_TOKENS,
                fts5_query(query),
                min(ids),
                max(ids),
                *ids_params,
            ],
        )
