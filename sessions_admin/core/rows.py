"""Row primitives every core module shares: field checks, message rows, counters, slug rows.

Kept in a module of their own, importing no operation, so lifecycle, transcript and
conversations (and merge, bulk, portability) can all use them without importing one
another: lifecycle moves slugs and recounts rows, conversations creates and continues
sessions, transcript rewrites rows of live sessions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import transaction

from sessions_admin.core import clock, db
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.schema import END_MARKS_TABLE, NEW_MESSAGE_SQL
from sessions_admin.core.text import storability_problem
from sessions_admin.routers import responses_alias

MESSAGE_ROLES = frozenset({"system", "user", "assistant", "tool"})
SESSION_ID_MAX = 4000  # lookups accept any stored id; new ids are shorter (create_session)
# Seconds since the epoch: 1970 to 2286. Anything else is a caller's bug (milliseconds, NaN).
TIMESTAMP_RANGE = (0.0, 1e10)
# What a runtime may record as a count (a message's token_count, a session's token totals)
# and as a cost in USD (a session's estimated cost), per call and as a running total. Far
# above any real use, and inside what every reader carries: a count stays an integer a JSON
# parser holds exactly (a double's 2**53), a cost a finite number (docs/api.md, Bounds).
COUNT_MAX = 2**53 - 1
COST_MAX_USD = 1e9


def stored_count(value: Any) -> int | None:
    """A stored count as a reader answers it: a whole number a BIGINT holds, else None (what
    another writer may have left: a REAL past 2**63, an infinity, text)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 0 <= value < 2**63 else None


def stored_cost(value: Any) -> float | None:
    """A stored cost as a reader answers it: a finite number, else None (JSON has no
    infinity; ``Infinity`` in an answer is not JSON)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def checked_count(name: str, value: Any) -> int:
    """``value`` if it is a whole number from 0 to ``COUNT_MAX``, else ``InvalidInput``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= COUNT_MAX:
        raise InvalidInput(
            f"{name} must be a whole number from 0 to {COUNT_MAX:,}, not {value!r}.", field=name
        )
    return value


def checked_cost(name: str, value: Any) -> float:
    """``value`` as a float if it is a finite number from 0 to ``COST_MAX_USD``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= COST_MAX_USD
    ):
        raise InvalidInput(
            f"{name} must be a number of USD from 0 to {COST_MAX_USD:,.0f}, not {value!r}.",
            field=name,
        )
    return float(value)


def parse_model_config(text: str | None) -> dict:
    """model_config as a dict; a runtime may have written anything there."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


# --- where a session ended -------------------------------------------------------------------


def mark_end(session_id: str, ended_at: float) -> None:
    """Keep the end the core just wrote on ``session_id`` and the store's last message id then
    (``sessions_admin_end_marks``, in the caller's transaction, under the session's lock): a
    message in the session with a higher id was written after that end however soon (a cached
    agent writing into a session a reset ended), where its stamp, within the clock tolerance,
    cannot tell (``core.stray``). Valid while the session's ``ended_at`` is that end: reopened
    and ended again by a runtime, the mark no longer applies."""
    (last,) = db.fetchone("SELECT COALESCE(MAX(id), 0) FROM messages")
    db.execute(
        f"INSERT INTO {END_MARKS_TABLE} (session_id, ended_at, last_message_id) "
        "VALUES (%s, %s, %s) ON CONFLICT (session_id) DO UPDATE SET "
        "ended_at = excluded.ended_at, last_message_id = excluded.last_message_id",
        [session_id, float(ended_at), int(last)],
    )


# --- field checks ----------------------------------------------------------------------------


def require_text(name: str, value: Any, *, max_length: int = 4000) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{name} must be a non-empty string.")
    return check_storable(name, value, max_length=max_length)


def optional_text(name: str, value: Any, *, max_length: int = 4000) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string, not {type(value).__name__}.")
    return check_storable(name, value, max_length=max_length)


def check_storable(name: str, value: str, *, max_length: int) -> str:
    if len(value) > max_length:
        raise InvalidInput(f"{name} is longer than {max_length} characters.")
    problem = storability_problem(value)
    if problem:
        raise InvalidInput(f"{name} {problem}.")
    return value


def require_session_id(value: Any, name: str = "session_id") -> str:
    """A session id both backends can look up, or ``InvalidInput`` (never a driver error)."""
    return require_text(name, value, max_length=SESSION_ID_MAX)


def epoch_seconds(name: str, value: Any) -> float:
    """``value`` as seconds since the epoch (now when None), or ``InvalidInput``."""
    if value is None:
        return clock.now()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{name} must be a number of seconds since the epoch.")
    value = float(value)
    low, high = TIMESTAMP_RANGE
    if not math.isfinite(value) or not low <= value <= high:
        raise InvalidInput(f"{name} {value!r} is not a time between 1970 and 2286 in seconds.")
    return value


def json_text(name: str, value: Any) -> str:
    """``value`` as JSON text, or ``InvalidInput`` when it is not JSON (objects, NaN, cycles)."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidInput(f"{name} is not JSON-serialisable: {error}.") from None
    return check_storable(name, text, max_length=50_000_000)


def _calls_text_checked(text: str) -> str:
    """``text`` when it is the JSON text of a list (of tool calls), else ``InvalidInput``."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, list):
        raise InvalidInput("tool_calls is text that is not the JSON of a list of calls.")
    return text


def config_text(model_config: Mapping[str, Any] | str | None) -> str | None:
    """model_config as the text stored in its column (a mapping as JSON, text as given)."""
    if model_config is None:
        return None
    if isinstance(model_config, str):
        return check_storable("model_config", model_config, max_length=1_000_000)
    if not isinstance(model_config, Mapping):
        raise InvalidInput("model_config must be a mapping or JSON text.")
    return json_text("model_config", dict(model_config))


# --- message rows and the session's counters --------------------------------------------------

# Hermes keeps list/dict message content (multimodal parts) as this prefix and
# ``json.dumps(content)`` (``hermes_state.SessionDB._encode_content``); the NUL cannot
# start a plain text message. PostgreSQL text cannot hold a NUL, so there such
# content is plain JSON text, as the core writes it everywhere (``message_values``).
HERMES_CONTENT_PREFIX = "\x00json:"


def decoded_content(content: Any) -> Any:
    """Stored content as Hermes reads it back: the value behind its prefix, else unchanged."""
    if isinstance(content, str) and content.startswith(HERMES_CONTENT_PREFIX):
        try:
            return json.loads(content[len(HERMES_CONTENT_PREFIX) :])
        except ValueError:
            return content
    return content


def message_values(session_id: str, message: Mapping[str, Any]) -> list[Any]:
    """The values of one new message row (session_id, then ``WRITTEN_MESSAGE_COLUMNS``), checked."""
    if not isinstance(message, Mapping):
        raise InvalidInput("Each message must be a mapping with a role.")
    role = message.get("role")
    if role not in MESSAGE_ROLES:
        raise InvalidInput(f"role must be one of {sorted(MESSAGE_ROLES)}, not {role!r}.")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        content = json_text("content", content)  # multimodal parts: kept, as JSON text
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, str):
        # JSON text already (as Hermes stores it): a runtime reading it back parses it and
        # takes a list of calls, so text that is not one loses the turn's tool calls there.
        tool_calls = _calls_text_checked(tool_calls) if tool_calls else None
    elif tool_calls is not None:
        if not isinstance(tool_calls, list | tuple):
            raise InvalidInput("tool_calls must be a list of calls (or its JSON text).")
        tool_calls = json_text("tool_calls", list(tool_calls)) if tool_calls else None
    token_count = message.get("token_count")
    if token_count is not None:
        checked_count("token_count", token_count)
    values = [
        session_id,
        role,
        content,
        optional_text("tool_call_id", message.get("tool_call_id")),
        tool_calls,
        optional_text("tool_name", message.get("tool_name")),
        epoch_seconds("timestamp", message.get("timestamp")),
        token_count,
        optional_text("finish_reason", message.get("finish_reason")),
        optional_text("reasoning", message.get("reasoning"), max_length=50_000_000),
    ]
    for text in (v for v in values if isinstance(v, str)):
        # PostgreSQL text cannot hold NUL; no database can encode a lone surrogate.
        problem = storability_problem(text)
        if problem:
            raise InvalidInput(f"A message field {problem}.")
    return values


def tool_call_total(tool_calls: str | None) -> int:
    if not tool_calls:
        return 0
    try:
        value = json.loads(tool_calls)
    except ValueError:
        return 1
    return len(value) if isinstance(value, list) else 1


def insert_messages(session_id: str, messages: Iterable[Mapping[str, Any]]) -> list[int]:
    """Insert rows and bump the counters; the caller holds the transaction and checks the session."""
    return insert_counted_messages(session_id, messages)[0]


def insert_counted_messages(
    session_id: str, messages: Iterable[Mapping[str, Any]]
) -> tuple[list[int], int, int]:
    """``insert_messages``, and the session's message and tool call counts after it, read by
    the counters' own UPDATE (one round trip fewer for every append on PostgreSQL)."""
    ids: list[int] = []
    tool_calls = 0
    with db.cursor() as c:
        for message in messages:
            values = message_values(session_id, message)
            c.execute(NEW_MESSAGE_SQL + " RETURNING id", values)
            ids.append(int(c.fetchone()[0]))
            tool_calls += tool_call_total(values[4])
        if not ids:
            return ids, *counters(session_id)
        c.execute(
            "UPDATE sessions SET message_count = COALESCE(message_count, 0) + %s, "
            "tool_call_count = COALESCE(tool_call_count, 0) + %s WHERE id = %s "
            "RETURNING message_count, tool_call_count",
            [len(ids), tool_calls, session_id],
        )
        count, tools = c.fetchone()
    return ids, int(count or 0), int(tools or 0)


def counters(session_id: str) -> tuple[int, int]:
    """The session's message and tool call counts as stored."""
    row = db.fetchone(
        "SELECT message_count, tool_call_count FROM sessions WHERE id = %s", [session_id]
    )
    return int(row[0] or 0), int(row[1] or 0)


def recompute_counters(session_id: str) -> tuple[int, int]:
    """Set message_count and tool_call_count from the active rows; return them."""
    db.execute(
        f"""
        UPDATE sessions SET
          message_count = (SELECT COUNT(*) FROM messages
                           WHERE session_id = %s AND active = 1),
          tool_call_count = (SELECT COALESCE(SUM({db.json_array_length("tool_calls")}), 0)
                             FROM messages
                             WHERE session_id = %s AND active = 1 AND tool_calls IS NOT NULL)
        WHERE id = %s
        """,
        [session_id, session_id, session_id],
    )
    return counters(session_id)


# --- slug rows (``conversations`` and ``responses``, maybe in another database) ----------------


def responses_transaction():
    """A savepoint inside the store operation, or the responses database's own transaction."""
    return transaction.atomic(using=responses_alias())


def response_session(response_id: str | None) -> str | None:
    """The session a stored response names in its data, if it is stored and names one."""
    if not response_id:
        return None
    row = db.fetchone(
        "SELECT data FROM responses WHERE response_id = %s", [response_id], alias=responses_alias()
    )
    if row is None:
        return None
    session_id = parse_model_config(row[0]).get("session_id")
    return session_id if isinstance(session_id, str) and session_id else None


def conversation_row(name: str) -> tuple[str, str | None] | None:
    """(latest response id, session column) of a slug's row, if the slug is stored."""
    row = db.fetchone(
        "SELECT response_id, session_id FROM conversations WHERE name = %s",
        [name],
        alias=responses_alias(),
    )
    return (row[0], row[1]) if row else None


def conversations_naming_response(response_id: str) -> list[tuple[str, str | None]]:
    """(slug, session column) of every conversation whose latest response is ``response_id``,
    stored or not (a runtime may have evicted it)."""
    return [
        (r[0], r[1])
        for r in db.fetchall(
            "SELECT name, session_id FROM conversations WHERE response_id = %s ORDER BY name",
            [response_id],
            alias=responses_alias(),
        )
    ]


def conversation_session(name: str) -> str | None:
    """The session recorded for a slug, from its row or, failing that, its latest response."""
    row = conversation_row(name)
    if row is None:
        return None
    return row[1] or response_session(row[0])


def slugs_of_sessions(session_ids: list[str]) -> list[tuple[str, str]]:
    """(slug, session) for every conversation whose session is one of ``session_ids``, by name.

    A row's session is its ``session_id`` column or, where that is NULL, the
    session its latest response names: Hermes's ResponseStore rewrites the row
    with ``INSERT OR REPLACE (name, response_id)`` on every turn, which leaves
    the column NULL until something fills it again.
    """
    ids = [i for i in dict.fromkeys(session_ids) if i]
    if not ids:
        return []
    alias = responses_alias()
    data_session = db.json_field("r.data", "session_id", alias=alias)
    found: dict[str, str] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = db.placeholders(chunk)
        for name, column, latest in db.fetchall(
            f"SELECT c.name, c.session_id, {data_session} FROM conversations c "
            "LEFT JOIN responses r ON r.response_id = c.response_id "
            f"WHERE c.session_id IN ({marks}) OR (c.session_id IS NULL AND {data_session} IN ({marks}))",
            [*chunk, *chunk],
            alias=alias,
        ):
            found[name] = column or latest
    return sorted(found.items())


def refill_conversation_sessions(*, session_ids: list[str]) -> int:
    """Write the session back into the column of these sessions' slugs where it is NULL.

    Runs inside the caller's store operation (after Hermes's next turn the column is NULL again;
    readers fall back on the latest response, see ``slugs_of_sessions``).
    """
    missing = []
    for name, sid in slugs_of_sessions(session_ids):
        row = conversation_row(name)
        if row is not None and row[1] is None:
            missing.append((name, sid))
    with responses_transaction():
        for name, sid in missing:
            db.execute(
                "UPDATE conversations SET session_id = %s WHERE name = %s AND session_id IS NULL",
                [sid, name],
                alias=responses_alias(),
            )
    return len(missing)


def repoint_conversations(*, from_session_ids: list[str], to_session_id: str) -> int:
    """Point every slug recorded at one of ``from_session_ids`` at ``to_session_id``.

    Runs inside the caller's store operation. Slugs whose column Hermes left
    NULL are found through their latest response and get the column filled.
    """
    ids = [i for i in from_session_ids if i and i != to_session_id]
    # The target's own slugs get their column filled too: the action touched them.
    refill_conversation_sessions(session_ids=[*ids, to_session_id])
    if not ids:
        return 0
    with responses_transaction():
        return db.execute(
            f"UPDATE conversations SET session_id = %s WHERE session_id IN ({db.placeholders(ids)})",
            [to_session_id, *ids],
            alias=responses_alias(),
        )


def conversations_of_session(session_id: str) -> list[tuple[str, str | None]]:
    """Slugs that are or were recorded at ``session_id``, with their current session."""
    alias = responses_alias()
    names = {
        r[0]
        for r in db.fetchall(
            "SELECT name FROM conversations WHERE session_id = %s", [session_id], alias=alias
        )
    }
    field = db.json_field("data", "session_id", alias=alias)
    slug = db.json_field("data", "conversation", alias=alias)
    holds, holds_params = db.json_text_holds("data", session_id, alias=alias)
    for (name,) in db.fetchall(
        f"SELECT DISTINCT {slug} FROM responses WHERE {field} = %s{holds}",
        [session_id, *holds_params],
        alias=alias,
    ):
        if name:
            names.add(name)
    return [(name, conversation_session(name)) for name in sorted(names)]
