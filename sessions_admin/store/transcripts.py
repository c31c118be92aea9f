"""Read queries behind the session detail page: transcript chunks and the drawn lineage.

Read-only. A transcript is read in chunks with a keyset on the message id, never with OFFSET
and never whole, so a 20,000-message session opens as fast as a short one. What a page shows
is bounded whatever the store holds: content, reasoning and tool calls are cut at
``SHOWN_CHARS`` in SQL (a 100 MB message never reaches the process) and a chunk stops once its
messages reach ``CHUNK_CHARS``; a cut field says so, and the raw view (``raw_text``) has the
whole. A compressed conversation's transcript is stitched across its segments in chain order;
a position in it is ``(segment index, message id)``, and reading before or after one crosses
segment boundaries with a handoff item."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sessions_admin.core import db
from sessions_admin.core.clock import moment_of
from sessions_admin.core.lineage import LineageNode
from sessions_admin.core.rows import parse_model_config
from sessions_admin.core.schema import MESSAGE_FIELDS
from sessions_admin.store.models import Message, Session

# Extra rows read past a chunk's end so a tool call and its results stay together.
LOOKAHEAD = 25
# A message's content, reasoning and tool calls are shown up to this many characters each;
# a chunk takes messages until they hold CHUNK_CHARS (at least one message). With HTML
# escaping at most six bytes a character, a page stays within a few MB.
SHOWN_CHARS = 20_000
CHUNK_CHARS = 250_000
CUT_FIELDS = ("content", "reasoning", "tool_calls")
# Pretty-printed JSON may grow by its indentation: beyond this factor it is shown as stored.
PRETTY_GROWTH = 2
# JSON bigger than this is shown as stored rather than re-indented.
PRETTY_LIMIT = 200_000
PREVIEW_LENGTH = 90
# A line of conversation folds runs of at least FOLD_MIN plain segments, keeping
# FOLD_CONTEXT segments either side of the current one in view.
FOLD_MIN = 5
FOLD_CONTEXT = 2
# Edges that continue the same line of conversation (drawn in the same column).
LINEAR_EDGES = ("compression", "reset")

USUAL_FINISH_REASONS = frozenset({"stop", "tool_calls", "end_turn", "tool_use", "function_call"})

_POSITION = re.compile(r"^([0-9]{1,6}):([0-9]{1,18})$")


@dataclass(frozen=True)
class Position:
    """A place between two messages of a stitched transcript."""

    segment: int
    message_id: int

    def __str__(self) -> str:
        return f"{self.segment}:{self.message_id}"

    @classmethod
    def parse(cls, text: str | None) -> Position | None:
        """A position from ``"<segment>:<message id>"``; None when malformed."""
        match = _POSITION.match(text or "")
        if not match:
            return None
        return cls(int(match.group(1)), int(match.group(2)))


@dataclass
class ToolCall:
    call_id: str | None
    name: str
    arguments: str
    arguments_are_json: bool
    preview: str = ""
    result: TranscriptMessage | None = None
    open: bool = False


@dataclass
class ContentPart:
    kind: str
    text: str


@dataclass
class TranscriptMessage:
    kind = "message"

    id: int
    session_id: str
    segment: int
    role: str
    content: str | None
    tool_call_id: str | None
    tool_name: str | None
    timestamp: float | None
    token_count: int | None
    finish_reason: str | None
    reasoning: str | None
    active: bool
    compacted: bool
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_calls_unparsed: str | None = None
    parts: list[ContentPart] | None = None
    content_is_json: bool = False
    highlight: bool = False
    permalink: str = ""
    raw_url: str = ""  # the raw view of this message; "&field=<name>" selects the field
    cut: tuple[str, ...] = ()  # fields shown cut at SHOWN_CHARS (CUT_FIELDS names)
    with_date: bool = False  # the first message of a chunk or of a new day shows its date

    @property
    def unusual_finish(self) -> bool:
        """A finish reason worth a badge (a cut-off or a filter, not a normal stop)."""
        return bool(self.finish_reason) and self.finish_reason not in USUAL_FINISH_REASONS

    @property
    def time_iso(self) -> str:
        at = moment_of(self.timestamp)
        return at.isoformat() if at else ""

    @property
    def time_full(self) -> str:
        at = moment_of(self.timestamp)
        return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at else ""

    @property
    def time_short(self) -> str:
        at = moment_of(self.timestamp)
        if at is None:
            return ""
        return at.strftime("%Y-%m-%d %H:%M:%S" if self.with_date else "%H:%M:%S")


@dataclass(frozen=True)
class Handoff:
    """The boundary between two segments of a compression chain."""

    kind = "handoff"

    from_segment: int
    from_session_id: str
    to_session_id: str

    @property
    def to_segment(self) -> int:
        return self.from_segment + 1


@dataclass
class Chunk:
    items: list[TranscriptMessage | Handoff]
    earlier: Position | None  # read before this for the rows preceding the chunk
    later: Position | None  # read after this for the rows following it
    message_count: int
    reached_end: bool = False  # a forward read found the end of the transcript
    # With reached_end: the last position shown, where a live transcript's next rows follow.
    tail: Position | None = None


# --- messages -------------------------------------------------------------------------------


def _rows(
    session_id: str,
    *,
    after: int | None = None,
    before: int | None = None,
    limit: int,
    hide_inactive: bool,
) -> list[dict[str, Any]]:
    """One keyset page of a session's rows: ascending after ``after``, else descending before
    ``before`` (from the end when both are None). Served by the (session_id, id) index."""
    where = ["session_id = %s"]
    params: list[Any] = [session_id]
    if hide_inactive:
        where.append("active = 1 AND compacted = 0")
    if after is not None:
        where.append("id > %s")
        params.append(int(after))
    elif before is not None:
        where.append("id < %s")
        params.append(int(before))
    order = "id" if after is not None else "id DESC"
    # One character more than is shown, so _message can tell a cut field.
    columns = ", ".join(
        f"substr({name}, 1, {SHOWN_CHARS + 1}) AS {name}" if name in CUT_FIELDS else name
        for name in MESSAGE_FIELDS
    )
    if db.vendor() == "postgresql":
        # PostgreSQL may walk the primary key instead, filtering on session_id, when the
        # session holds a large share of all messages; from a segment's start (or end) that
        # walk crossed every other session's rows first (40 ms for a 20,000-message session
        # of a 10,000-session store, bench/run.py). Bounding the walk by the session's own
        # first (or last) id, an index lookup, makes either plan start at the session.
        bound = "id >= (SELECT MIN(id)" if after is not None else "id <= (SELECT MAX(id)"
        where.append(f"{bound} FROM messages WHERE session_id = %s)")
        params.append(session_id)
    return db.fetchdicts(
        f"SELECT {columns} FROM messages WHERE {' AND '.join(where)} ORDER BY {order} LIMIT %s",
        [*params, int(limit)],
    )


def _shown_size(row: dict) -> int:
    """Characters a row puts on the page (its cut fields), for the chunk's budget."""
    return sum(len(row[name]) for name in CUT_FIELDS if row.get(name))


@dataclass
class _Budget:
    """The characters a chunk may still show; its first message is always taken."""

    left: int = CHUNK_CHARS
    taken: int = 0

    def fit(self, rows: list[dict], take: int) -> int:
        """How many of the first ``take`` rows fit, charged to the budget."""
        kept = 0
        for row in rows[:take]:
            size = _shown_size(row)
            if self.taken and size > self.left:
                break
            self.left -= size
            self.taken += 1
            kept += 1
        return kept


def _extend_forward(rows: list[dict], need: int) -> int:
    """How many of ``rows`` to take: ``need``, plus the tool results that follow the last one."""
    take = min(need, len(rows))
    while take < len(rows) and rows[take]["role"] == "tool":
        take += 1
    return take


def _extend_backward(rows: list[dict], need: int) -> int:
    """Rows are newest first: take ``need``, plus earlier ones until a chunk starts past tool results."""
    take = min(need, len(rows))
    while 0 < take < len(rows) and rows[take - 1]["role"] == "tool":
        take += 1
    return take


class _Walk:
    """A chunk being read across a chain's segments, forward or back, nearest rows first."""

    def __init__(self, chain: list[str], *, limit: int, hide_inactive: bool, forward: bool):
        self.chain = chain
        self.limit = limit
        self.hide_inactive = hide_inactive
        self.forward = forward
        self.items: list[dict | Handoff] = []
        self.budget = _Budget()

    def read(self, segment: int, mark: int | None) -> tuple[int | None, bool, bool]:
        """Read on in ``segment`` past ``mark``: the new mark, more rows left, the chunk full."""
        need = self.limit - sum(1 for i in self.items if not isinstance(i, Handoff))
        fetch = need + LOOKAHEAD
        keyset = {"after": mark} if self.forward else {"before": mark}
        rows = _rows(self.chain[segment], **keyset, limit=fetch, hide_inactive=self.hide_inactive)
        extend = _extend_forward if self.forward else _extend_backward
        take = self.budget.fit(rows, extend(rows, need))
        self.items.extend(dict(row, segment=segment) for row in rows[:take])
        if take:
            mark = rows[take - 1]["id"]
        return mark, take < len(rows) or len(rows) == fetch, take >= need


def read_after(
    chain: list[str], position: Position, *, limit: int, hide_inactive: bool
) -> tuple[list[dict | Handoff], Position | None]:
    """Up to ``limit`` rows (and handoffs) following ``position``; the position to read on from."""
    walk = _Walk(chain, limit=limit, hide_inactive=hide_inactive, forward=True)
    segment, after = position.segment, position.message_id
    while segment < len(chain):
        after, more, full = walk.read(segment, after)
        if more:
            return walk.items, Position(segment, after)  # more rows in this segment
        if segment + 1 >= len(chain):
            return walk.items, None  # the end of the transcript
        if full:
            # Full, and this segment is done: the next read starts with the handoff.
            return walk.items, Position(segment, after)
        walk.items.append(Handoff(segment, chain[segment], chain[segment + 1]))
        segment, after = segment + 1, 0
    return walk.items, None


def read_before(
    chain: list[str], position: Position, *, limit: int, hide_inactive: bool
) -> tuple[list[dict | Handoff], Position | None]:
    """Up to ``limit`` rows (and handoffs) preceding ``position``, in order; where to read back from."""
    walk = _Walk(chain, limit=limit, hide_inactive=hide_inactive, forward=False)
    segment = position.segment
    before: int | None = position.message_id
    while segment >= 0:
        before, more, full = walk.read(segment, before)
        if more:
            return walk.items[::-1], Position(segment, before)  # more rows in this segment
        if segment == 0:
            return walk.items[::-1], None  # the start of the transcript
        if full:
            # Full, and this segment is done: what precedes it ends with the handoff into it.
            return walk.items[::-1], Position(segment, 0 if before is None else before)
        walk.items.append(Handoff(segment - 1, chain[segment - 1], chain[segment]))
        segment, before = segment - 1, None
    return walk.items[::-1], None


def _has_rows_before(session_id: str, message_id: int, *, hide_inactive: bool) -> bool:
    return bool(_rows(session_id, before=message_id, limit=1, hide_inactive=hide_inactive))


def chunk_after(
    chain: list[str],
    position: Position,
    *,
    limit: int,
    hide_inactive: bool,
    highlight: int | None = None,
    with_earlier: bool = False,
) -> Chunk:
    """The chunk following ``position``; ``with_earlier`` also says where the rows before it are."""
    raw, later = read_after(chain, position, limit=limit, hide_inactive=hide_inactive)
    earlier = None
    if with_earlier:
        start = Position(position.segment, position.message_id + 1)
        if position.segment > 0 or (
            position.message_id > 0
            and _has_rows_before(
                chain[position.segment], start.message_id, hide_inactive=hide_inactive
            )
        ):
            earlier = start
    chunk = _chunk(raw, earlier=earlier, later=later, highlight=highlight)
    chunk.reached_end = later is None
    if chunk.reached_end:
        chunk.tail = _last_position(raw, position)
    return chunk


def _last_position(raw: list[dict | Handoff], start: Position) -> Position:
    """Where rows read after ``start`` ended: the last row, or the segment a handoff opened."""
    if not raw:
        return start
    last = raw[-1]
    if isinstance(last, Handoff):
        return Position(last.to_segment, 0)
    return Position(last["segment"], int(last["id"]))


# Larger than any message id (a 64-bit integer column): reading before it reads from the end.
_PAST_THE_END = 2**63 - 1


def last_chunk(chain: list[str], *, limit: int, hide_inactive: bool) -> Chunk:
    """The transcript's last chunk ("jump to latest"), with where the rows before it are."""
    end = Position(len(chain) - 1, _PAST_THE_END)
    raw, earlier = read_before(chain, end, limit=limit, hide_inactive=hide_inactive)
    chunk = _chunk(raw, earlier=earlier, later=None, highlight=None)
    chunk.reached_end = True
    chunk.tail = _last_position(raw, Position(len(chain) - 1, 0))
    return chunk


@dataclass(frozen=True)
class TailState:
    """What a live transcript's poll needs to know about the segment it shows last."""

    found: bool  # the segment exists
    live: bool  # it has not ended
    end_reason: str | None
    has_new: bool  # it holds rows after the position shown


def tail_state(session_id: str, after: int, *, hide_inactive: bool) -> TailState:
    """One indexed query (the session by key, a row after ``after`` by (session_id, id)):
    the cheap answer to "anything new?" that a poll asks every few seconds."""
    shown = " AND active = 1 AND compacted = 0" if hide_inactive else ""
    row = db.fetchone(
        "SELECT ended_at, end_reason, EXISTS (SELECT 1 FROM messages "
        f"WHERE session_id = s.id AND id > %s{shown}) FROM sessions s WHERE s.id = %s",
        [int(after), session_id],
    )
    if row is None:
        return TailState(found=False, live=False, end_reason=None, has_new=False)
    ended_at, end_reason, has_new = row
    return TailState(
        found=True, live=ended_at is None, end_reason=end_reason, has_new=bool(has_new)
    )


def chunk_before(
    chain: list[str],
    position: Position,
    *,
    limit: int,
    hide_inactive: bool,
    with_later: bool = False,
) -> Chunk:
    """The chunk preceding ``position``; ``with_later`` also says where the rows after it are."""
    raw, earlier = read_before(chain, position, limit=limit, hide_inactive=hide_inactive)
    later = None
    if with_later:
        later = Position(position.segment, max(position.message_id - 1, 0))
    return _chunk(raw, earlier=earlier, later=later, highlight=None)


def start_around(
    chain: list[str], message_id: int, *, context: int, hide_inactive: bool
) -> Position | None:
    """Where a chunk showing ``message_id`` with ``context`` rows before it starts (None: not here)."""
    found = Message.objects.filter(id=message_id).values_list("session_id", flat=True).first()
    if found is None or found not in chain:
        return None
    segment = chain.index(found)
    rows = _rows(found, before=message_id, limit=context + LOOKAHEAD, hide_inactive=hide_inactive)
    take = _extend_backward(rows, context)
    first = rows[take - 1]["id"] if take else message_id
    return Position(segment, first - 1)


# --- shaping rows for display ----------------------------------------------------------------


def _json_value(text: str | None) -> Any:
    if not text or len(text) > PRETTY_LIMIT or text.lstrip()[:1] not in ("{", "["):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


def _pretty_or_none(value: Any) -> str | None:
    """``pretty_json``, unless its indentation would grow the text past what a page shows."""
    pretty = pretty_json(value)
    return pretty if len(pretty) <= PRETTY_GROWTH * SHOWN_CHARS else None


def _tool_call(raw: Any) -> ToolCall:
    if not isinstance(raw, dict):
        return ToolCall(None, "?", str(raw), False)
    function = raw.get("function") if isinstance(raw.get("function"), dict) else {}
    name = function.get("name") or raw.get("name") or "?"
    arguments = function.get("arguments", raw.get("arguments", raw.get("input")))
    if isinstance(arguments, str):
        parsed = _json_value(arguments)
        pretty = _pretty_or_none(parsed) if parsed is not None else None
        shown, is_json = (pretty, True) if pretty is not None else (arguments, False)
    elif arguments is None:
        shown, is_json = "", False
    else:
        pretty = _pretty_or_none(arguments)
        shown, is_json = (pretty, True) if pretty is not None else (json.dumps(arguments), True)
    call_id = raw.get("id")
    return ToolCall(
        call_id=call_id if isinstance(call_id, str) and call_id else None,
        name=str(name),
        arguments=shown,
        arguments_are_json=is_json,
        preview=_preview(arguments),
    )


def parse_tool_calls(stored: str | None) -> list[ToolCall] | None:
    """A message's stored ``tool_calls`` JSON as calls ([] for none); None when it is not JSON
    (or too long to parse: PRETTY_LIMIT), to be shown as stored."""
    if not stored:
        return []
    value = _json_value(stored)
    if isinstance(value, list):
        return [_tool_call(call) for call in value]
    if isinstance(value, dict):
        return [_tool_call(value)]
    return None


def _preview(arguments: Any) -> str:
    """A one-line summary of a call's arguments."""
    if isinstance(arguments, str):
        parsed = _json_value(arguments)
        arguments = parsed if parsed is not None else arguments
    if isinstance(arguments, dict):
        text = ", ".join(
            f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in arguments.items()
        )
    elif arguments is None:
        text = ""
    elif isinstance(arguments, str):
        text = arguments
    else:
        text = json.dumps(arguments, ensure_ascii=False)
    text = " ".join(text[: PREVIEW_LENGTH * 4].split())
    return text if len(text) <= PREVIEW_LENGTH else text[: PREVIEW_LENGTH - 1] + "…"


def _content_parts(content: str | None) -> list[ContentPart] | None:
    """Multimodal content (a JSON list of typed parts) as text parts and placeholders."""
    value = _json_value(content)
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in value):
        return None
    parts = []
    for part in value:
        text = part.get("text")
        if isinstance(text, str):
            parts.append(ContentPart("text", text))
        else:
            parts.append(ContentPart("other", part["type"]))
    return parts


def cut_long_fields(row: dict) -> tuple[str, ...]:
    """Cut the row's long fields to SHOWN_CHARS in place; the names of those cut."""
    cut = []
    for name in CUT_FIELDS:
        value = row.get(name)
        if isinstance(value, str | bytes) and len(value) > SHOWN_CHARS:
            row[name] = value[:SHOWN_CHARS]
            cut.append(name)
    return tuple(cut)


# The row's columns a TranscriptMessage holds as they are (its cut fields already cut).
_SHOWN_AS_STORED = ("session_id", "segment", "role", "content", "tool_call_id", "tool_name",
                    "timestamp", "token_count", "finish_reason", "reasoning")  # fmt: skip


def _message(row: dict) -> TranscriptMessage:
    row = dict(row)
    cut = cut_long_fields(row)
    message = TranscriptMessage(
        id=int(row["id"]),
        **{name: row[name] for name in _SHOWN_AS_STORED},
        active=bool(row["active"]),
        compacted=bool(row["compacted"]),
        cut=cut,
    )
    if row["tool_calls"]:
        # Cut tool calls are no longer JSON: shown as stored, up to the cut.
        calls = None if "tool_calls" in cut else parse_tool_calls(row["tool_calls"])
        if calls is not None:
            message.tool_calls = calls
        else:
            message.tool_calls_unparsed = row["tool_calls"]
    if "content" in cut:
        pass  # the cut text is no longer JSON (nor parts): shown as stored, up to the cut
    elif message.role == "tool":
        value = _json_value(message.content)
        pretty = _pretty_or_none(value) if value is not None else None
        if pretty is not None:
            message.content = pretty
            message.content_is_json = True
    else:
        message.parts = _content_parts(message.content)
    return message


def _chunk(
    raw: Iterable[dict | Handoff],
    *,
    earlier: Position | None,
    later: Position | None,
    highlight: int | None,
) -> Chunk:
    """Rows as display items: tool results folded into the call they answer."""
    items: list[TranscriptMessage | Handoff] = []
    pending: dict[str, ToolCall] = {}
    count = 0
    last_day = None
    for entry in raw:
        if isinstance(entry, Handoff):
            items.append(entry)
            pending.clear()
            continue
        message = _message(entry)
        count += 1
        message.highlight = message.id == highlight
        day = message.time_iso[:10]
        message.with_date = day != last_day
        last_day = day
        call = pending.pop(message.tool_call_id, None) if message.role == "tool" else None
        if call is not None:
            call.result = message
            call.open = call.open or message.highlight
            continue
        items.append(message)
        for call in message.tool_calls:
            if call.call_id:
                pending[call.call_id] = call
    return Chunk(items=items, earlier=earlier, later=later, message_count=count)


# --- whole values, for the raw view -----------------------------------------------------------

RAW_FIELDS = CUT_FIELDS


def raw_message_field(*, session_id: str, message_id: int, field: str) -> tuple[bool, Any]:
    """(found, value) of one field of one of the session's messages, whole."""
    if field not in RAW_FIELDS:
        raise ValueError(f"field must be one of {', '.join(RAW_FIELDS)}")
    row = db.fetchone(
        f"SELECT {field} FROM messages WHERE id = %s AND session_id = %s",
        [int(message_id), session_id],
    )
    return (False, None) if row is None else (True, row[0])


# --- lineage ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LineageRow:
    node: LineageNode
    level: int
    edge_kind: str | None
    edge_note: str
    current: bool


@dataclass(frozen=True)
class LineageEvent:
    """One step of drawing the tree as nested lists: open or close a line, a session, its end."""

    kind: str  # "open", "item", "end", "close"; "fold", "unfold" around a folded run
    row: LineageRow | None = None
    count: int = 0  # sessions in a folded run
    note: str = ""


def _folded(line: list[tuple[LineageNode, list[LineageNode]]], current: str) -> set[int]:
    """Positions of a long line to fold away: plain middle segments far from the current one.

    The first and last sessions, live ones, the current one and its neighbours,
    and sessions with side branches stay in view; runs shorter than ``FOLD_MIN``
    are not worth folding.
    """
    here = next((i for i, (node, _) in enumerate(line) if node.session_id == current), None)
    plain = [
        0 < i < len(line) - 1
        and not side
        and not node.is_live
        and (here is None or abs(i - here) > FOLD_CONTEXT)
        for i, (node, side) in enumerate(line)
    ]
    folded: set[int] = set()
    start = None
    for i, flag in enumerate([*plain, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            if i - start >= FOLD_MIN:
                folded.update(range(start, i))
            start = None
    return folded


EDGE_NOTES = {
    "compression": "continued after compression",
    "reset": "reset of the same chat",
    "branch": "branched off",
    "delegate": "delegated subagent",
    "child": "child session",
}


def _chunks(values: list[str], size: int = 500) -> Iterable[list[str]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _merge_nodes(nodes: list[LineageNode]) -> list[LineageNode]:
    """Merges, which the lineage walk does not follow, one step out from the tree.

    An absorbed session carries ``_merged_into`` (read from the tree's own rows);
    the sessions absorbed into the tree come from the store's merge records
    (``sessions_admin_merges``, small), confirmed by that same marker, so no
    scan of every session's model_config is needed.
    """
    ids = [n.session_id for n in nodes]
    known = set(ids)
    outgoing: dict[str, str] = {}  # merge target outside the tree -> the tree session absorbed
    candidates: dict[str, str] = {}  # session absorbed into a tree session -> that session
    for part in _chunks(ids):
        for session_id, text in Session.objects.filter(id__in=part).values_list(
            "id", "model_config"
        ):
            target = parse_model_config(text).get("_merged_into")
            if isinstance(target, str) and target and target not in known:
                outgoing.setdefault(target, session_id)
        for target, absorbed in db.fetchall(
            "SELECT target_session_id, absorbed_session_ids FROM sessions_admin_merges "
            f"WHERE undone_at IS NULL AND target_session_id IN ({db.placeholders(part)})",
            part,
        ):
            try:
                absorbed_ids = json.loads(absorbed)
            except ValueError:
                continue
            for session_id in absorbed_ids if isinstance(absorbed_ids, list) else ():
                if isinstance(session_id, str) and session_id not in known:
                    candidates[session_id] = target
    extra: list[LineageNode] = []
    for part in _chunks([*outgoing, *candidates]):
        for row in Session.objects.filter(id__in=part).order_by("started_at", "id"):
            if row.id in outgoing:
                parent, kind = outgoing[row.id], "merge-into"
            elif row.config.get("_merged_into") == candidates.get(row.id):
                parent, kind = candidates[row.id], "merge-from"
            else:
                continue  # the record is stale: the session no longer says it was merged there
            extra.append(
                LineageNode(
                    session_id=row.id,
                    lineage_parent_id=parent,
                    edge_kind=kind,
                    depth=0,
                    source=row.source,
                    title=row.title,
                    started_at=row.started_at,
                    ended_at=row.ended_at,
                    end_reason=row.end_reason,
                    message_count=int(row.message_count or 0),
                    is_live=row.ended_at is None,
                )
            )
    return extra


def lineage_drawing(nodes: list[LineageNode], *, current: str) -> list[LineageEvent]:
    """The lineage as nested lists to draw.

    A line of conversation (a session, then its compression continuations and
    resets) is one list, however long; the branches, delegates, merges and other
    children of a session are lines of their own nested in its item. So the
    nesting grows with side branches only, never with the length of a chain.
    """
    nodes = [*nodes, *_merge_nodes(nodes)]
    ids = {n.session_id for n in nodes}
    children: dict[str | None, list[LineageNode]] = defaultdict(list)
    for node in nodes:
        parent = node.lineage_parent_id if node.lineage_parent_id in ids else None
        children[parent].append(node)
    events: list[LineageEvent] = []
    placed: set[str] = set()

    def edge(node: LineageNode) -> tuple[str | None, str]:
        if node.lineage_parent_id is None or node.lineage_parent_id not in ids:
            return None, ""
        if node.edge_kind == "merge-into":
            return "merge", "absorbed into this session"
        if node.edge_kind == "merge-from":
            return "merge", "absorbed by a merge"
        return node.edge_kind, EDGE_NOTES.get(node.edge_kind or "", "")

    def draw_line(start: LineageNode, level: int) -> None:
        line: list[tuple[LineageNode, list[LineageNode]]] = []
        node: LineageNode | None = start
        while node is not None and node.session_id not in placed:
            placed.add(node.session_id)
            kids = [k for k in children.get(node.session_id, []) if k.session_id not in placed]
            main = next((k for k in kids if k.edge_kind in LINEAR_EDGES), None)
            line.append((node, [k for k in kids if k is not main]))
            node = main
        folded = _folded(line, current)
        events.append(LineageEvent("open"))
        for index, (node, side) in enumerate(line):
            if index in folded and index - 1 not in folded:
                run = next(i for i in range(index, len(line) + 1) if i not in folded) - index
                kinds = {edge(n)[0] for n, _ in line[index : index + run]}
                what = "compression segments" if kinds == {"compression"} else "sessions"
                events.append(LineageEvent("fold", count=run, note=f"{run} more {what}"))
            kind, note = edge(node)
            row = LineageRow(node, level, kind, note, node.session_id == current)
            events.append(LineageEvent("item", row))
            for kid in side:
                if kid.session_id not in placed:
                    draw_line(kid, level + 1)
            events.append(LineageEvent("end"))
            if index in folded and index + 1 not in folded:
                events.append(LineageEvent("unfold"))
        events.append(LineageEvent("close"))

    for node in [*children.get(None, []), *nodes]:
        if node.session_id not in placed:  # roots first, then what a cyclic lineage left over
            draw_line(node, 0)
    return events
