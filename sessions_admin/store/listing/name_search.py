"""Sessions whose user id, chat id or display name is the search text."""

from __future__ import annotations

from dataclasses import dataclass

from sessions_admin.core import db
from sessions_admin.store.listing.conditions import TITLE_SQL
from sessions_admin.store.listing.params import MAX_TEXT


@dataclass(frozen=True)
class FoundSession:
    """Who a session a search found is, as the results name it (both kinds of search)."""

    session_id: str
    title: str | None
    source: str
    user_id: str | None
    chat_id: str | None
    display_name: str | None


@dataclass(frozen=True)
class NameMatch(FoundSession):
    """A session whose user id, chat id or display name matches the search text."""

    started_at: float | None
    matched: str  # "user", "chat" or "name"
    # The person's sessions the search text names (this one, the newest, among them).
    sessions: int = 1


NAME_MATCHES = 8
_NAME_COLUMNS = (("user_id", "user"), ("chat_id", "chat"), ("display_name", "name"))
NAME_INDEXES = (
    "idx_sa_sessions_user_lower",
    "idx_sa_sessions_chat_lower",
    "idx_sa_sessions_name_lower",
)
# A store attached without upgrade_runtime_tables lacks those indexes: then only this
# many of the newest sessions are looked at (idx_sessions_started), never the whole table.
NAME_SCAN_WITHOUT_INDEX = 5000


def name_indexes_present() -> bool:
    names = ", ".join(f"'{name}'" for name in NAME_INDEXES)  # constants above
    if db.vendor() == "postgresql":
        # to_regclass is a lookup in the backend's catalog cache; the pg_indexes view joins
        # four catalogs and cost 3-4 ms of every search under load (bench/load.py --profile).
        sql = f"SELECT COUNT(to_regclass(name)) FROM unnest(ARRAY[{names}]) AS name"
    else:
        sql = f"SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name IN ({names})"
    return db.fetchone(sql)[0] == len(NAME_INDEXES)


def search_names(q: str) -> list[NameMatch]:
    """The people whose user id, chat id or display name equals the search text, ignoring
    case (the whole text, trimmed; exact, not prefix): one match per person, by their newest
    session, with how many sessions the text names; at most NAME_MATCHES, newest first.

    A person is a source and a user id; without a user id, a chat id; without either, the
    display name (lower-cased).

    Each column has an index on its lower-cased value (schema.LOWER_INDEX_SQL), so this is
    three index probes whatever the store's size. ``lower`` folds ASCII only on SQLite.
    """
    text = q.strip().lower()
    if not text or len(text) > MAX_TEXT:
        return []
    if name_indexes_present():
        # One probe per index, then the few matches sorted. As ``a = x OR b = y OR ...``
        # with ORDER BY ... LIMIT, SQLite walks the whole store in started_at order
        # instead (1.1 s at a million sessions for a word that names nobody).
        # On SQLite each probe names its index: where a column is mostly NULL (display_name
        # in many stores) ANALYZE's figures make the planner scan the table instead.
        sqlite = db.vendor() == "sqlite"
        source = "sessions s"
        matched = (
            "s.id IN ("
            + " UNION ALL ".join(
                f"SELECT id FROM sessions {f'INDEXED BY {index} ' if sqlite else ''}"
                f"WHERE lower({column}) = %s"
                for (column, _), index in zip(_NAME_COLUMNS, NAME_INDEXES, strict=True)
            )
            + ")"
        )
    else:
        source = (
            f"(SELECT * FROM sessions ORDER BY started_at DESC LIMIT {NAME_SCAN_WITHOUT_INDEX}) s"
        )
        matched = " OR ".join(f"lower(s.{column}) = %s" for column, _ in _NAME_COLUMNS)
    person = (
        "s.source, s.user_id, CASE WHEN s.user_id IS NULL THEN s.chat_id END, "
        "CASE WHEN s.user_id IS NULL AND s.chat_id IS NULL THEN lower(s.display_name) END"
    )
    rows = db.fetchall(
        "SELECT id, title, source, user_id, chat_id, name, started_at, n FROM ("
        f"SELECT s.id, {TITLE_SQL}, s.source, s.user_id, s.chat_id, "
        f"substr(s.display_name, 1, {MAX_TEXT}) AS name, s.started_at, "
        f"COUNT(*) OVER (PARTITION BY {person}) AS n, "
        f"ROW_NUMBER() OVER (PARTITION BY {person} ORDER BY s.started_at DESC, s.id) AS newest "
        f"FROM {source} WHERE {matched}) found "
        "WHERE newest = 1 ORDER BY started_at DESC, id LIMIT %s",
        [text, text, text, NAME_MATCHES],
    )
    out = []
    for r in rows:
        kind = next(
            (kind for i, (_, kind) in enumerate(_NAME_COLUMNS) if (r[3 + i] or "").lower() == text),
            "name",
        )
        out.append(NameMatch(*r[:7], matched=kind, sessions=r[7]))
    return out
