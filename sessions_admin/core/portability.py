"""Export sessions (streamed JSONL and Markdown) and import Hermes Agent's session exports.

Export (one session, a lineage or a set of ids) reads keyset chunks outside a transaction: a
20,000-message session never sits in memory and the runtime is never blocked. Import restores
history, never a conversation (as Hermes's ``import_sessions``): no key, chat or handoff state,
new message ids in order, counters from the active rows, a live session comes in ``imported``;
a link to a session the store holds is dropped and reported unless ``graft`` follows a
``plan_import`` that showed it. Everything is refused before anything is written
(``ImportRefused``); parents go first, whole sessions per transaction, so the same file with
``skip_existing`` finishes the rest. Formats: docs/attach.md, "Export and import".

Over 800 lines on purpose: export and import read and write the same versioned row format, and
an import's checks mirror what an export writes.
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from sessions_admin.core import clock, db, ids, lineage
from sessions_admin.core.db import store_operation
from sessions_admin.core.errors import InvalidInput, SessionNotFound, StoreError
from sessions_admin.core.rows import (
    MESSAGE_ROLES,
    checked_cost,
    checked_count,
    epoch_seconds,
    json_text,
    recompute_counters,
)
from sessions_admin.core.schema import existing_columns
from sessions_admin.core.text import storability_problem

EXPORT_FORMAT = "sessions_admin/1"
MESSAGE_CHUNK = 500
MAX_EXPORT_SESSIONS = 10_000
# One import transaction writes at most this many sessions / messages.
IMPORT_BATCH_SESSIONS = 100
IMPORT_BATCH_MESSAGES = 2_000
MAX_IMPORT_SESSIONS = 10_000
MAX_IMPORT_MESSAGES = 500_000
# Hermes stores multimodal (list/dict) message content as this prefix + JSON text.
HERMES_JSON_PREFIX = "\x00json:"

# What an import writes: conversation history, never live routing or handoff state.
IMPORTED_SESSION_COLUMNS = (
    "source",
    "user_id",
    "model",
    "model_config",
    "system_prompt",
    "started_at",
    "ended_at",
    "end_reason",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cwd",
    "git_branch",
    "git_repo_root",
    "billing_provider",
    "billing_base_url",
    "billing_mode",
    "estimated_cost_usd",
    "actual_cost_usd",
    "cost_status",
    "cost_source",
    "pricing_version",
    "title",
    "api_call_count",
    "archived",
)
IMPORTED_MESSAGE_COLUMNS = (
    "role",
    "content",
    "tool_call_id",
    "tool_calls",
    "tool_name",
    "effect_disposition",
    "timestamp",
    "token_count",
    "finish_reason",
    "reasoning",
    "reasoning_content",
    "reasoning_details",
    "codex_reasoning_items",
    "codex_message_items",
    "platform_message_id",
    "observed",
    "active",
    "compacted",
    "api_content",
)
_NUMERIC = {
    "started_at": "time",
    "ended_at": "time",
    "timestamp": "time",
    "estimated_cost_usd": "cost",
    "actual_cost_usd": "cost",
    "input_tokens": "count",
    "output_tokens": "count",
    "cache_read_tokens": "count",
    "cache_write_tokens": "count",
    "reasoning_tokens": "count",
    "api_call_count": "count",
    "token_count": "count",
    "observed": "flag",
    "active": "flag",
    "compacted": "flag",
    "archived": "flag",
}
# Text columns the console parses as JSON when they hold JSON text.
_JSON_TEXT_COLUMNS = frozenset(
    {
        "model_config",
        "tool_calls",
        "reasoning_details",
        "codex_reasoning_items",
        "codex_message_items",
        "api_content",
    }
)
# How deep a stored JSON value may nest (a Hermes message part is 4 or 5 levels deep).
MAX_JSON_DEPTH = 64
TEXT_MAX = 50_000_000  # rows.json_text's bound for a JSON value; also for any imported text
# A live session in the file is imported ended with this reason.
IMPORTED_END_REASON = "imported"


# --- what to export ----------------------------------------------------------------------------


def lineage_session_ids(session_id: str) -> list[str]:
    """Every session of ``session_id``'s lineage, root first, depth-first."""
    if lineage.session_row(session_id) is None:
        raise SessionNotFound(session_id)
    return [node.session_id for node in lineage.lineage_tree(session_id=session_id)]


def export_session_ids(
    *,
    session_id: str | None = None,
    lineage_of: str | None = None,
    ids: Sequence[str] | None = None,
) -> list[str]:
    """The sessions an export covers: one session, a lineage, or a set of ids (all must exist)."""
    given = sum(x is not None for x in (session_id, lineage_of, ids))
    if given != 1:
        raise InvalidInput("Export one session, one lineage, or a set of session ids.")
    if lineage_of is not None:
        return lineage_session_ids(lineage_of)
    wanted = [session_id] if session_id is not None else list(dict.fromkeys(i for i in ids if i))
    if not wanted:
        raise InvalidInput("No session ids to export.")
    if len(wanted) > MAX_EXPORT_SESSIONS:
        raise InvalidInput(f"Export at most {MAX_EXPORT_SESSIONS:,} sessions at once.")
    found = lineage.existing_session_ids(wanted)
    missing = [sid for sid in wanted if sid not in found]
    if missing:
        raise SessionNotFound(missing[0])
    return wanted


# --- streamed export -------------------------------------------------------------------------


def _session_row(session_id: str) -> dict | None:
    rows = db.fetchdicts("SELECT * FROM sessions WHERE id = %s", [session_id])
    return rows[0] if rows else None


def _messages(session_id: str) -> Iterator[dict]:
    """Every message of a session in id order, ``MESSAGE_CHUNK`` rows per query."""
    after = -1
    while True:
        rows = db.fetchdicts(
            "SELECT * FROM messages WHERE session_id = %s AND id > %s ORDER BY id LIMIT %s",
            [session_id, after, MESSAGE_CHUNK],
        )
        yield from rows
        if len(rows) < MESSAGE_CHUNK:
            return
        after = int(rows[-1]["id"])


def export_records(session_ids: Sequence[str]) -> Iterator[dict]:
    """The export as records: a header, then each session followed by its messages."""
    yield {
        "type": "export",
        "format": EXPORT_FORMAT,
        "exported_at": time.time(),
        "session_ids": list(session_ids),
    }
    for session_id in session_ids:
        row = _session_row(session_id)
        if row is None:
            continue  # deleted while the export ran
        yield {"type": "session", "session": row}
        for message in _messages(session_id):
            yield {"type": "message", "message": message}


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float written as text ("inf", "-inf", "nan").

    A SQLite store can hold them (REAL columns take whatever a runtime binds); JSON
    cannot, and ``json.dumps`` would write ``Infinity``, which no strict reader
    accepts. As text they survive the export, and an import refuses them by name.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def export_jsonl(session_ids: Sequence[str]) -> Iterator[str]:
    """JSONL lines (each ending in a newline), one record a line; always strict JSON."""
    for record in export_records(session_ids):
        yield (
            json.dumps(_finite(record), ensure_ascii=False, default=_json_default, allow_nan=False)
            + "\n"
        )


def _when(timestamp: Any) -> str:
    moment = clock.moment_of(timestamp)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "?"


def message_text(content: Any) -> str:
    """Readable text of a stored message content (Hermes's multimodal JSON included)."""
    if content is None:
        return ""
    if isinstance(content, str) and content.startswith(HERMES_JSON_PREFIX):
        try:
            content = json.loads(content[len(HERMES_JSON_PREFIX) :])
        except ValueError:
            return content[len(HERMES_JSON_PREFIX) :]
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else [content]
    texts = []
    for part in parts:
        if isinstance(part, dict):
            if isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                texts.append(f"[{part.get('type', 'part')}]")
        else:
            texts.append(str(part))
    return "\n".join(texts)


def _fence(text: str) -> str:
    """A code fence longer than any backtick run in ``text``."""
    return "`" * max(3, _longest_backtick_run(text) + 1)


def _longest_backtick_run(text: str) -> int:
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return longest


# Stored text is the runtime's (or an import's): in Markdown it must stay text. A line
# break in a heading or a list item would start a block of its own (a forged "#### 3.
# user" message), and HTML would be rendered. Inline values are kept to one line with
# Markdown's punctuation backslash-escaped; message bodies are fenced, where nothing is
# markup and no line can close the fence (it is longer than any backtick run inside).
_LINE_BREAKS = str.maketrans({c: " " for c in "\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029"})
_MARKDOWN_PUNCTUATION = str.maketrans({c: "\\" + c for c in "\\`*_[]<>&!|~#"})


def _one_line(value: Any) -> str:
    return str(value).translate(_LINE_BREAKS)


def _inline(value: Any) -> str:
    """Stored text as plain inline Markdown: one line, no markup, no HTML."""
    return _one_line(value).translate(_MARKDOWN_PUNCTUATION)


def _code(value: Any) -> str:
    """Stored text as an inline code span: one line, delimited past any backtick run in it."""
    text = _one_line(value)
    ticks = "`" * (_longest_backtick_run(text) + 1)
    return f"{ticks} {text} {ticks}" if "`" in text else f"{ticks}{text}{ticks}"


def _markdown_message(n: int, message: Mapping[str, Any]) -> str:
    role = message.get("role") or "?"
    head = f"#### {n}. {_inline(role)}"
    if message.get("tool_name"):
        head += f" · {_code(message['tool_name'])}"
    head += f" · {_when(message.get('timestamp'))}"
    if message.get("active") == 0:
        head += " · *undone*"
    lines = [head, ""]
    text = message_text(message.get("content"))
    if text:
        fence = _fence(text)
        lines += [fence, text, fence]
    calls = message.get("tool_calls")
    if calls:
        try:
            parsed = json.loads(calls) if isinstance(calls, str) else calls
        except ValueError:
            parsed = calls
        for call in parsed if isinstance(parsed, list) else [parsed]:
            if isinstance(call, dict):
                function = call.get("function") or {}
                name = function.get("name") or call.get("name") or "tool"
                arguments = function.get("arguments") or call.get("arguments") or ""
                lines.append(f"- calls {_code(name)} {_code(str(arguments)[:500])}")
            else:
                lines.append(f"- calls {_code(str(call)[:500])}")
    lines.append("")
    return "\n".join(lines) + "\n"


def export_markdown(session_ids: Sequence[str]) -> Iterator[str]:
    """A readable Markdown document, produced a session header and a message at a time."""
    yield (
        f"# Session export\n\n{len(session_ids)} session{'s' if len(session_ids) != 1 else ''}, "
        f"exported {_when(time.time())}.\n\n"
    )
    for session_id in session_ids:
        row = _session_row(session_id)
        if row is None:
            continue
        title = row.get("title") or session_id
        facts = [
            f"- id: {_code(session_id)}",
            f"- source: {_inline(row.get('source'))}",
            f"- started: {_when(row.get('started_at'))}",
        ]
        if row.get("ended_at") is not None:
            facts.append(
                f"- ended: {_when(row['ended_at'])} ({_inline(row.get('end_reason') or 'no reason')})"
            )
        else:
            facts.append("- live")
        if row.get("parent_session_id"):
            facts.append(f"- parent: {_code(row['parent_session_id'])}")
        if row.get("session_key"):
            facts.append(f"- session key: {_code(row['session_key'])}")
        if row.get("model"):
            facts.append(f"- model: {_inline(row['model'])}")
        facts.append(f"- messages: {_inline(row.get('message_count') or 0)}")
        yield f"## {_inline(title)}\n\n" + "\n".join(facts) + "\n\n"
        for n, message in enumerate(_messages(session_id), start=1):
            yield _markdown_message(n, message)


# --- import ------------------------------------------------------------------------------------


@dataclass
class ImportSession:
    """One session to import, normalised: a row of known columns and its messages."""

    session_id: str
    row: dict[str, Any]
    parent_id: str | None
    messages: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Graft:
    """A parent link from an imported session to a session the store already holds."""

    session_id: str
    parent_id: str
    parent_end_reason: str | None
    parent_live: bool

    @property
    def effect(self) -> str:
        """What linking would do to the existing session's conversation, for the preview."""
        if self.parent_end_reason == "compression":
            return (
                "it would continue the conversation of a session that ended by compression "
                "(writes to that session's id would be sent to the imported one)"
            )
        if self.parent_live:
            return "it would become a child of a live session"
        return f"it would become a child of a session that ended ({self.parent_end_reason})"


@dataclass(frozen=True)
class ImportPlan:
    sessions: tuple[ImportSession, ...]
    existing: tuple[str, ...]  # ids already in the store (skipped with skip_existing)
    message_count: int
    # Links to sessions already in the store: made only with ``graft=True``.
    grafts: tuple[Graft, ...] = ()
    # Live in the file: imported ended, ``end_reason`` ``imported``.
    ended_on_import: tuple[str, ...] = ()
    # Whose parent is neither in the file nor in the store: imported without the link.
    detached: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImportResult:
    imported: tuple[str, ...]
    skipped: tuple[str, ...]
    detached: tuple[str, ...]  # imported without their parent link (parent absent, or a cycle)
    messages: int
    # Imported without their link to a session the store already held (no ``graft``).
    ungrafted: tuple[str, ...] = ()
    grafted: tuple[str, ...] = ()  # linked to a session the store already held (``graft``)
    ended_on_import: tuple[str, ...] = ()


class ImportInterrupted(StoreError):
    """A later batch failed (the store got busy): the batches before it stay imported."""

    def __init__(self, imported: Sequence[str], total: int, cause: StoreError):
        self.imported = tuple(imported)
        self.cause = cause
        super().__init__(
            f"The import stopped after {len(self.imported)} of {total} session(s): {cause} "
            f"The {len(self.imported)} session(s) already imported stay, with their messages and "
            "parent links; import the same file again with skip_existing to add the rest (and "
            "graft to link them to parents this import wrote: the dry run lists those links)."
        )


class ImportRefused(InvalidInput):
    """The file cannot be imported as it is; nothing was written."""

    def __init__(self, problems: Sequence[str]):
        self.problems = tuple(problems)
        shown = "; ".join(self.problems[:10])
        more = f" (and {len(self.problems) - 10} more)" if len(self.problems) > 10 else ""
        super().__init__(f"Nothing was imported: {shown}{more}.")


class _NonFiniteConstant(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NonFiniteConstant(name)


def _loads(text: str) -> Any:
    """Strict JSON: ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON, whatever Python allows."""
    return json.loads(text, parse_constant=_refuse_constant)


def _unreadable(error: Exception, where: str) -> ImportRefused:
    """The refusal for JSON that parses in no strict reader, or not within Python's limits."""
    if isinstance(error, _NonFiniteConstant):
        return ImportRefused(
            [f"{where} holds {error}, which is not a JSON number (write finite numbers)"]
        )
    if isinstance(error, RecursionError):
        return ImportRefused([f"{where} nests JSON values too deeply to be read"])
    return ImportRefused([f"{where} holds a value that cannot be read ({error})"])


def _sessions_from_document(document: Any) -> list[Any]:
    if isinstance(document, list):
        return document
    if isinstance(document, dict):
        if isinstance(document.get("sessions"), list):
            return document["sessions"]
        if isinstance(document.get("segments"), list) and document["segments"]:
            # Hermes's lineage export: each segment is a session of its own.
            return document["segments"]
        return [document]
    raise ImportRefused(["the file holds neither a session object nor a list of them"])


def _is_record(value: Any) -> bool:
    """One of this module's own JSONL records (not a Hermes session object)."""
    return isinstance(value, dict) and value.get("type") in {"export", "session", "message"}


def read_export(stream: IO[str] | IO[bytes] | str | bytes) -> list[dict]:
    """Hermes session objects (with ``messages``) from a JSON or JSONL export, or our JSONL."""
    if isinstance(stream, bytes | str):
        stream = io.BytesIO(stream if isinstance(stream, bytes) else stream.encode("utf-8"))
    text = stream.read()
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise ImportRefused([f"the file is not UTF-8 text ({error.reason})"]) from error
    stripped = text.strip()
    if not stripped:
        raise ImportRefused(["the file is empty"])
    try:
        document = _loads(stripped)
    except json.JSONDecodeError:
        document = None  # JSONL: read line by line below
    except (ValueError, RecursionError) as error:
        raise _unreadable(error, "the file") from None
    if document is not None and not _is_record(document):
        return [*_sessions_from_document(document)]
    sessions: list[dict] = []
    ours: dict[str, dict] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = _loads(line)
        except json.JSONDecodeError as error:
            raise ImportRefused([f"line {number} is not JSON ({error.msg})"]) from error
        except (ValueError, RecursionError) as error:
            raise _unreadable(error, f"line {number}") from None
        if _is_record(record):
            if record["type"] == "session" and isinstance(record.get("session"), dict):
                current = {**record["session"], "messages": []}
                sessions.append(current)
                ours[str(current.get("id"))] = current
            elif record["type"] == "message" and isinstance(record.get("message"), dict):
                owner = ours.get(str(record["message"].get("session_id")))
                if owner is None:
                    raise ImportRefused([f"line {number}: a message before its session"])
                owner["messages"].append(record["message"])
            continue
        sessions.extend(_sessions_from_document(record))
    return sessions


# --- checking each value -----------------------------------------------------------------------

# Bounds of the session columns that name things (as core.create_session bounds them).
_TEXT_MAX = {"source": 200, "title": 500, "end_reason": 200, "user_id": 500, "model": 500}
_INT64 = 2**63


def _too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests lists/objects more than ``limit`` deep (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, dict):
            children = current.values()
        elif isinstance(current, list | tuple):
            children = current
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _json_value(name: str, value: Any) -> str:
    """A list/object (or other non-text value) as stored JSON text: bounded depth, strict JSON."""
    if _too_deep(value):
        raise InvalidInput(f"{name} nests deeper than {MAX_JSON_DEPTH} levels")
    return json_text(name, value)


def _check_json_text(name: str, text: str) -> None:
    """Text the console parses as JSON: if it is JSON, it must be strict and bounded in depth."""
    try:
        parsed = _loads(text)
    except _NonFiniteConstant as error:
        raise InvalidInput(f"{name} holds {error}, which is not a JSON number") from None
    except RecursionError:
        raise InvalidInput(f"{name} nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError:
        return  # not JSON: stored and shown as text
    if _too_deep(parsed):
        raise InvalidInput(f"{name} nests deeper than {MAX_JSON_DEPTH} levels")


def _text_value(name: str, value: Any) -> str | None:
    """A text column's value as stored, or ``InvalidInput`` saying why it cannot be."""
    if value is None:
        return None
    if isinstance(value, dict | list):
        return _json_value(name, value)
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{name} is {value!r}, not a finite number")
    if isinstance(value, bool | int | float):
        return str(value)
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be text, not {type(value).__name__}")
    problem = storability_problem(value)
    if problem:
        raise InvalidInput(f"{name} {problem}")
    limit = _TEXT_MAX.get(name, TEXT_MAX)
    if len(value) > limit:
        raise InvalidInput(f"{name} is longer than {limit:,} characters")
    if name in _JSON_TEXT_COLUMNS:
        _check_json_text(name, value)
    return value


def _as_number(name: str, value: Any) -> int | float:
    """A JSON number (or numeric text), refusing booleans and integers beyond 64 bits."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise InvalidInput(f"{name} {text[:40]!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{name} must be a number, not {type(value).__name__}")
    if isinstance(value, int) and not -_INT64 <= value < _INT64:
        raise InvalidInput(f"{name} is a {len(str(abs(value)))}-digit integer, out of range")
    return value


def _number_value(name: str, value: Any) -> int | float | None:
    """A numeric column's value as stored, or ``InvalidInput`` saying why it cannot be."""
    if value is None or value == "":
        return None
    kind = _NUMERIC[name]
    if kind == "flag" and isinstance(value, bool):
        return int(value)
    number = _as_number(name, value)
    if kind == "time":
        return epoch_seconds(name, number)  # finite, 1970 to 2286
    if isinstance(number, float) and not math.isfinite(number):
        raise InvalidInput(f"{name} is {number!r}, not a finite number")
    if kind == "cost":
        # The bound a runtime's usage is held to (core.rows), so an import cannot store what
        # the runtime routes refuse.
        return checked_cost(name, float(number))
    if number != int(number):
        raise InvalidInput(f"{name} {number!r} is not a whole number")
    number = int(number)
    if kind == "flag":
        if number not in (0, 1):
            raise InvalidInput(f"{name} must be 0 or 1, not {number}")
        return number
    return checked_count(name, number)


def _content_value(value: Any, *, sqlite: bool) -> str | None:
    """Message content as stored: Hermes keeps multimodal parts as a prefixed JSON string."""
    if value is None:
        return None
    if isinstance(value, str):
        body = value[len(HERMES_JSON_PREFIX) :] if value.startswith(HERMES_JSON_PREFIX) else None
        problem = storability_problem(value if body is None else body)
        if problem:
            raise InvalidInput(f"content {problem}")
        if len(value) > TEXT_MAX:
            raise InvalidInput(f"content is longer than {TEXT_MAX:,} characters")
        if body is None:
            return value
        _check_json_text("content", body)
        return value if sqlite else body
    text = _json_value("content", value)
    return HERMES_JSON_PREFIX + text if sqlite else text


def _imported_id(value: Any) -> str:
    """A session id from the file, or ``InvalidInput``: ``core.ids``'s rule for new ids."""
    problem = ids.new_session_id_problem(value)
    if problem:
        raise InvalidInput(f"the id {ids.shown(value)} {problem}")
    return value


def _parent_id(value: Any) -> str | None:
    """The parent a session names: any id the store could hold (it may be a runtime's odd id)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"parent_session_id must be text, not {type(value).__name__}")
    problem = storability_problem(value)
    if problem:
        raise InvalidInput(f"parent_session_id {problem}")
    if len(value) > 4000:
        raise InvalidInput("parent_session_id is longer than 4,000 characters")
    return value


def normalise(
    raw_sessions: Iterable[Any], *, sqlite: bool
) -> tuple[list[ImportSession], list[str]]:
    """Validate and normalise export objects; return the sessions and the problems found.

    Every value is checked; a problem is "where: what", the core's message without its period.
    """
    problems: list[str] = []
    found: list[ImportSession] = []
    seen: set[str] = set()
    titles: dict[str, str] = {}

    def check(where: str, run, *args, **kwargs) -> Any:
        try:
            return run(*args, **kwargs)
        except InvalidInput as error:
            problems.append(f"{where}: {str(error).rstrip('.')}")
            return None

    for index, raw in enumerate(raw_sessions):
        where = f"session #{index + 1}"
        if not isinstance(raw, dict):
            problems.append(f"{where} is not an object")
            continue
        if raw.get("id") is None:
            problems.append(f"{where} has no usable id")
            continue
        session_id = check(where, _imported_id, raw.get("id"))
        if session_id is None:
            continue
        where = f"session {session_id}"
        if session_id in seen:
            problems.append(f"{where} appears twice in the file")
            continue
        seen.add(session_id)
        before = len(problems)
        row: dict[str, Any] = {"id": session_id}
        for name in IMPORTED_SESSION_COLUMNS:
            if name in raw:
                reader = _number_value if name in _NUMERIC else _text_value
                row[name] = check(where, reader, name, raw[name])
        row["source"] = row.get("source") or "import"
        if row.get("started_at") is None:
            row["started_at"] = time.time()
        title = row.get("title")
        if title:
            if title in titles:
                problems.append(
                    f"{where}: title {title!r} is also used by {titles[title]} in the file"
                )
            titles[title] = session_id
        parent = check(where, _parent_id, raw.get("parent_session_id"))
        session = ImportSession(session_id, row, parent)
        messages = raw.get("messages") or []
        if not isinstance(messages, list):
            problems.append(f"{where}: messages is not a list")
            continue
        started = float(row["started_at"])
        for number, message in enumerate(messages, start=1):
            at = f"{where}, message {number}"
            if not isinstance(message, dict):
                problems.append(f"{at} is not an object")
                continue
            role = message.get("role")
            if role not in MESSAGE_ROLES:
                problems.append(f"{at}: role must be one of {sorted(MESSAGE_ROLES)}")
                continue
            values: dict[str, Any] = {}
            for name in IMPORTED_MESSAGE_COLUMNS:
                if name not in message:
                    continue
                value = message[name]
                if name == "content":
                    values[name] = check(at, _content_value, value, sqlite=sqlite)
                elif name in _NUMERIC:
                    values[name] = check(at, _number_value, name, value)
                else:
                    values[name] = check(at, _text_value, name, value)
            if values.get("timestamp") is None:
                values["timestamp"] = started + number * 1e-6
            values["active"] = 0 if values.get("active") == 0 else 1
            values["compacted"] = 1 if values.get("compacted") else 0
            session.messages.append(values)
        if len(problems) > before:
            continue
        if row.get("ended_at") is None:
            # History, never a live conversation: ended when its last message was written.
            row["ended_at"] = max([started, *(m["timestamp"] for m in session.messages)])
            row["end_reason"] = IMPORTED_END_REASON
        found.append(session)
    return found, problems


def plan_import(raw_sessions: Iterable[Any]) -> ImportPlan:
    """Everything that would be imported, or ``ImportRefused`` naming every problem."""
    sessions, problems = normalise(raw_sessions, sqlite=db.vendor() == "sqlite")
    if not sessions and not problems:
        problems.append("the file holds no sessions")
    total = sum(len(s.messages) for s in sessions)
    if len(sessions) > MAX_IMPORT_SESSIONS:
        problems.append(f"at most {MAX_IMPORT_SESSIONS:,} sessions per import")
    if total > MAX_IMPORT_MESSAGES:
        problems.append(f"at most {MAX_IMPORT_MESSAGES:,} messages per import")
    if problems:
        raise ImportRefused(problems)
    session_ids = [s.session_id for s in sessions]
    existing_set = lineage.existing_session_ids(session_ids)
    existing = [sid for sid in dict.fromkeys(session_ids) if sid in existing_set]
    titles = {s.row["title"]: s.session_id for s in sessions if s.row.get("title")}
    title_list = sorted(titles)
    for start in range(0, len(title_list), 500):
        chunk = title_list[start : start + 500]
        for title, owner in db.fetchall(
            f"SELECT title, id FROM sessions WHERE title IN ({db.placeholders(chunk)})", chunk
        ):
            if owner != titles[title] and titles[title] not in existing_set:
                problems.append(
                    f"session {titles[title]}: title {title!r} is already used by session {owner}"
                )
    if problems:
        raise ImportRefused(problems)
    order = {sid: n for n, sid in enumerate(session_ids)}
    written = [s for s in sessions if s.session_id not in existing_set]
    outside = sorted({s.parent_id for s in written if s.parent_id} - set(session_ids))
    parents_present = set(lineage.existing_session_ids(outside)) if outside else set()
    return ImportPlan(
        tuple(sessions),
        tuple(sorted(existing, key=order.__getitem__)),
        total,
        grafts=_grafts(written),
        ended_on_import=tuple(
            s.session_id for s in written if s.row.get("end_reason") == IMPORTED_END_REASON
        ),
        detached=tuple(
            s.session_id
            for s in written
            if s.parent_id and s.parent_id not in order and s.parent_id not in parents_present
        ),
    )


def _grafts(written: list[ImportSession]) -> tuple[Graft, ...]:
    """The links from sessions this import writes to sessions the store already holds."""
    writing = {s.session_id for s in written}
    outside = [s for s in written if s.parent_id and s.parent_id not in writing]
    parents = sorted({s.parent_id for s in outside})
    state: dict[str, tuple[str | None, bool]] = {}
    for start in range(0, len(parents), 500):
        chunk = parents[start : start + 500]
        for parent_id, ended_at, end_reason in db.fetchall(
            f"SELECT id, ended_at, end_reason FROM sessions WHERE id IN ({db.placeholders(chunk)})",
            chunk,
        ):
            state[parent_id] = (end_reason if ended_at is not None else None, ended_at is None)
    return tuple(
        Graft(s.session_id, s.parent_id, *state[s.parent_id])
        for s in outside
        if s.parent_id in state
    )


def _columns(table: str) -> set[str]:
    return existing_columns("store", table)


@dataclass(frozen=True)
class _Linking:
    """How one import links parents: the ids it writes, and whether it may graft."""

    importing: frozenset[str]
    graft: bool


@dataclass
class _Links:
    later: list[tuple[str, str]] = field(default_factory=list)  # parent comes in a later batch
    detached: list[str] = field(default_factory=list)
    ungrafted: list[str] = field(default_factory=list)
    grafted: list[str] = field(default_factory=list)


@store_operation
def _write_batch(
    batch: list[ImportSession], columns: dict[str, set[str]], linking: _Linking
) -> tuple[list[str], _Links]:
    """Insert one batch of sessions and their messages, linking the parents it may link now.

    Linking in the batch's own transaction means an import interrupted after this
    batch leaves its sessions complete, lineage included. A parent this import
    does not write is linked only with ``graft`` (read in this transaction, so a
    session the runtime created meanwhile counts as the store's, never as ours).
    """
    written = []
    for session in batch:
        if db.fetchone("SELECT 1 FROM sessions WHERE id = %s", [session.session_id]):
            raise StoreError(
                f"Session {session.session_id} appeared in the store while importing "
                "(the runtime wrote it): this batch was not imported. Import again with "
                "skip_existing to add the rest."
            )
        row = {k: v for k, v in session.row.items() if k in columns["sessions"]}
        names = list(row)
        db.execute(
            f"INSERT INTO sessions ({', '.join(names)}) VALUES ({db.placeholders(names)})",
            list(row.values()),
        )
        message_columns = [c for c in IMPORTED_MESSAGE_COLUMNS if c in columns["messages"]]
        if session.messages:
            with db.cursor() as c:
                c.executemany(
                    f"INSERT INTO messages (session_id, {', '.join(message_columns)}) "
                    f"VALUES (%s, {db.placeholders(message_columns)})",
                    [
                        [session.session_id, *(m.get(col) for col in message_columns)]
                        for m in session.messages
                    ],
                )
        recompute_counters(session.session_id)
        written.append(session.session_id)
    links = _Links()
    ready: list[tuple[str, str]] = []
    for session in batch:
        child, parent = session.session_id, session.parent_id
        if not parent:
            continue
        if parent in linking.importing:
            (ready if _exists(parent) else links.later).append((child, parent))
        elif not _exists(parent):
            links.detached.append(child)
        elif linking.graft:
            ready.append((child, parent))
            links.grafted.append(child)
        else:
            links.ungrafted.append(child)
    if ready:
        cut = _link_parents(ready)
        links.detached += cut
        links.grafted = [sid for sid in links.grafted if sid not in cut]
    return written, links


def _exists(session_id: str) -> bool:
    return db.fetchone("SELECT 1 FROM sessions WHERE id = %s", [session_id]) is not None


def _parents_first(sessions: list[ImportSession]) -> list[ImportSession]:
    """The file's sessions with each parent before its children (file order otherwise)."""
    by_id = {s.session_id: s for s in sessions}
    ordered: list[ImportSession] = []
    placed: set[str] = set()
    for session in sessions:
        chain: list[ImportSession] = []
        in_chain: set[str] = set()
        current: ImportSession | None = session
        while current is not None and current.session_id not in placed:
            if current.session_id in in_chain:  # a cycle: its members keep file order
                break
            chain.append(current)
            in_chain.add(current.session_id)
            current = by_id.get(current.parent_id) if current.parent_id else None
        for member in reversed(chain):
            if member.session_id not in placed:
                placed.add(member.session_id)
                ordered.append(member)
    return ordered


@store_operation
def _link_parents(links: list[tuple[str, str]]) -> list[str]:
    """Set the imported sessions' parents where the parent exists and no cycle results."""
    detached = []
    parent_of = dict(links)
    for child, parent in links:
        current, seen, cycle = parent, {child}, False
        while current:
            if current in seen:
                cycle = True
                break
            seen.add(current)
            if current in parent_of:
                current = parent_of[current]
                continue
            row = db.fetchone("SELECT parent_session_id FROM sessions WHERE id = %s", [current])
            current = row[0] if row else None
        exists = db.fetchone("SELECT 1 FROM sessions WHERE id = %s", [parent])
        if exists and not cycle:
            db.execute("UPDATE sessions SET parent_session_id = %s WHERE id = %s", [parent, child])
        else:
            parent_of.pop(child, None)
            detached.append(child)
    return detached


def import_sessions(
    *, sessions: Iterable[Any], skip_existing: bool = False, graft: bool = False
) -> ImportResult:
    """Import Hermes session exports (see the module docstring); refused whole on duplicates.

    ``graft``: also link sessions to parents the store already holds (``plan_import``'s
    ``grafts``, which a caller shows first); without it those links are dropped.
    """
    plan = plan_import(sessions)
    if plan.existing and not skip_existing:
        shown = ", ".join(plan.existing[:10])
        more = f" and {len(plan.existing) - 10} more" if len(plan.existing) > 10 else ""
        raise ImportRefused(
            [
                f"{len(plan.existing)} session(s) already exist in the store ({shown}{more}); "
                "remove them from the file or import with skip_existing to add only the others"
            ]
        )
    existing = set(plan.existing)
    todo = _parents_first([s for s in plan.sessions if s.session_id not in existing])
    linking = _Linking(importing=frozenset(s.session_id for s in todo), graft=graft)
    columns = {"sessions": _columns("sessions"), "messages": _columns("messages")}
    batches: list[list[ImportSession]] = [[]]
    weight = 0
    for session in todo:
        if batches[-1] and (
            len(batches[-1]) >= IMPORT_BATCH_SESSIONS
            or weight + len(session.messages) > IMPORT_BATCH_MESSAGES
        ):
            batches.append([])
            weight = 0
        batches[-1].append(session)
        weight += len(session.messages)
    imported: list[str] = []
    links = _Links()
    try:
        for batch in batches:
            if not batch:
                continue
            written, found = _write_batch(batch, columns, linking)
            imported += written
            links.later += found.later
            links.detached += found.detached
            links.ungrafted += found.ungrafted
            links.grafted += found.grafted
        # Parents that came after their children: only a cycle in the file.
        links.detached += _link_parents(links.later) if links.later else []
    except StoreError as error:
        if not imported:
            raise  # the first batch failed: nothing was written
        raise ImportInterrupted(imported, len(todo), error) from error
    ended = set(plan.ended_on_import)
    return ImportResult(
        imported=tuple(imported),
        skipped=tuple(plan.existing),
        detached=tuple(links.detached),
        messages=sum(len(s.messages) for s in todo),
        ungrafted=tuple(links.ungrafted),
        grafted=tuple(links.grafted),
        ended_on_import=tuple(sid for sid in imported if sid in ended),
    )
