"""Loading many finished sessions at once (seeders, loaders, benchmarks).

``insert_sessions`` writes what ``create_session`` + ``append_messages`` +
``add_usage`` + ``end_session`` would, for sessions that are complete when
loaded (one segment, no lineage), with ``executemany`` in one transaction:
counters equal the active rows, full-text search follows by the store's own
means (SQLite triggers, the PostgreSQL expression index), and each session
gets the ``new`` switch event a runtime's create_session records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import IntegrityError

from sessions_admin.core import clock, db, events
from sessions_admin.core.db import store_operation
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.rows import config_text, message_values, tool_call_total
from sessions_admin.core.schema import NEW_MESSAGE_SQL, SESSION_METADATA_COLUMNS, USAGE_COLUMNS

# What a bulk insert writes of each session, in the order of its row values.
SESSION_COLUMNS = (
    "id",
    "source",
    *SESSION_METADATA_COLUMNS,
    "model_config",
    "started_at",
    "title",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    *USAGE_COLUMNS,
)


@store_operation
def insert_sessions(*, sessions: Sequence[Mapping[str, Any]]) -> int:
    """Insert complete sessions (each a mapping with ``messages``); returns how many.

    Refused as a whole (``InvalidInput``) if any id or title is taken or any
    message is malformed.
    """
    session_rows: list[list[Any]] = []
    message_rows: list[list[Any]] = []
    for session in sessions:
        session_id = session["id"]
        rows = [message_values(session_id, m) for m in session.get("messages", ())]
        usage = session.get("usage", {})
        session_rows.append(
            [
                session_id,
                session["source"],
                *(session.get(c) for c in SESSION_METADATA_COLUMNS),
                config_text(session.get("model_config")),
                float(session["started_at"]),
                session.get("title"),
                session.get("ended_at"),
                session.get("end_reason") if session.get("ended_at") is not None else None,
                len(rows),
                sum(tool_call_total(r[4]) for r in rows),
                *(usage.get(c, 0) for c in USAGE_COLUMNS),
            ]
        )
        message_rows.extend(rows)
    if not session_rows:
        return 0
    try:
        with db.cursor() as c:
            c.executemany(
                f"INSERT INTO sessions ({', '.join(SESSION_COLUMNS)}) "
                f"VALUES ({db.placeholders(SESSION_COLUMNS)})",
                session_rows,
            )
            c.executemany(NEW_MESSAGE_SQL, message_rows)
    except IntegrityError as error:
        raise InvalidInput(f"A session id or title is already taken: {error}") from error
    events.record_new_sessions([(row[0], row[3]) for row in session_rows], at=clock.now())
    return len(session_rows)
