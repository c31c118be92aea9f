"""Every piece of HTML the console builds in Python, with its one escape helper.

Templates build the pages; what is here is what repeats too often for the template
engine: a session page's messages and lineage nodes, and the session list's rows. A
chunk is a hundred messages of some forty template nodes each, a long lineage fifty
nodes of about as many, a list page fifty rows of about a hundred; through the template
engine they were most of those pages' time (bench/run.py). These build the same markup
the templates did, every value escaped with ``escape``.

The words pages use for an end reason live here too (``end_reason_words``): the
builders need them, and the template filter of that name is this function.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass

from django.urls import NoReverseMatch, reverse
from django.utils.safestring import SafeString, mark_safe

from sessions_admin.console import markdown
from sessions_admin.console.http import plural
from sessions_admin.core.clock import moment_of
from sessions_admin.store import listing, transcripts
from sessions_admin.store.transcripts import (
    SHOWN_CHARS,
    LineageEvent,
    ToolCall,
    TranscriptMessage,
)

# Lineage nodes show titles up to this many characters (the session page links the whole).
NODE_TITLE_SHOWN = 200
# Runtime-written text a list row shows, at most (the session page has the whole of it):
# a 1 MB title made a 2 MB list page.
TITLE_SHOWN = 200
VALUE_SHOWN = 200
# A row labelled by its first user message shows this much of it, on one line.
LABEL_SHOWN = 120


def escape(value: object) -> str:
    """The template engine's escaping, without its cost.

    Django's escape() is ``html.escape`` behind lazy-string handling, which costs more
    than the escaping itself at twenty values a row; None renders as a template would.
    """
    return html.escape(str(value), quote=True)


_MARKS = re.compile(f"({listing.MARK_START}|{listing.MARK_END})")


def highlight(raw: str | None) -> SafeString:
    """Escape a snippet, then turn our markers into balanced <mark> elements.

    The snippet text is untrusted; it is escaped piece by piece and only the
    markers (never produced by escaping) become markup. A marker character
    that was in the content itself can at worst move a highlight.
    """
    out: list[str] = []
    inside = False
    for piece in _MARKS.split(raw or ""):
        if piece == listing.MARK_START:
            if not inside:
                out.append("<mark>")
                inside = True
        elif piece == listing.MARK_END:
            if inside:
                out.append("</mark>")
                inside = False
        elif piece:
            out.append(escape(piece))
    if inside:
        out.append("</mark>")
    return mark_safe("".join(out))  # noqa: S308 - every piece above is escaped


END_REASON_WORDS = {
    None: "still live",
    "": "ended, no reason recorded",
    "compression": "continued in a compressed session",
    "session_reset": "reset by the user (/new or /reset)",
    "new_session": "replaced by a new session for the same chat",
    "session_switch": "left for another session (/resume)",
    "branched": "branched into a new session",
    "merged": "merged into another session",
    "user_exit": "closed by the user",
    "agent_close": "closed by the agent (may be accidental)",
    "ws_orphan_reap": "reaped as an orphaned connection (accidental)",
    "lru_evict": "evicted from the runtime's cache (accidental)",
    "idle_expiry": "expired after being idle",
    "daily_reset": "daily reset",
    "orphaned_compression": "compression never continued",
}


def end_reason_words(reason: str | None) -> str:
    """What an end reason means, in words (unknown reasons are named as they are)."""
    if reason in END_REASON_WORDS:
        return END_REASON_WORDS[reason]
    return f"ended ({reason})"


def duration_words(seconds: object) -> str:
    """A length of time as the pages show it: "45s", "12m", "3h 5m", "4d 2h"."""
    try:
        total = int(float(seconds))
    except (TypeError, ValueError):
        return ""
    if total < 60:
        return f"{total}s"
    minutes, _ = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes}m"
    return f"{hours // 24}d {hours % 24}h"


# --- the session page: messages and the lineage tree ------------------------------------------


def _flags(m: TranscriptMessage) -> str:
    return (
        ("" if m.active else " inactive")
        + (" compacted" if m.compacted else "")
        + (" highlight" if m.highlight else "")
    )


def _cut_note(m: TranscriptMessage, field: str, what: str) -> str:
    """Where a field is shown cut: say so, and link the whole of it (the raw view)."""
    if field not in m.cut:
        return ""
    return (
        f'<p class="cut-note">Shown up to {SHOWN_CHARS:,} characters. '
        f'<a href="{escape(m.raw_url)}&amp;field={field}">Show the whole {what}</a></p>'
    )


def _call_summary(call: ToolCall) -> str:
    """What a call's collapsed line says: the tool's name and its arguments in one line."""
    return (
        f'<span class="tool-name">{escape(call.name)}</span>'
        f'<span class="tool-preview">{escape(call.preview)}</span>'
    )


def tool_call_line(
    call: ToolCall, *, result_id: int | None, result_url: str = "", shown: int | None = None
) -> SafeString:
    """A tool call as one collapsed line, for the previews that list messages (merge, undo):
    its name and arguments, and the message with its result when that is listed too.

    ``shown``: the arguments are cut at this many characters (a preview, not the transcript).
    """
    arguments = call.arguments or "(none)"
    if shown is not None and len(arguments) > shown:
        arguments = arguments[:shown] + "…"
    if result_id is None:
        answered = '<span class="badge no-result">no result here</span>'
    else:
        answered = f'<a class="call-result" href="{escape(result_url)}">result #{result_id}</a>'
    call_id = f' <code class="hint">{escape(call.call_id)}</code>' if call.call_id else ""
    return mark_safe(  # noqa: S308 - every value is escaped
        f'<details class="call-line"><summary>{_call_summary(call)}{answered}</summary>'
        f'<div class="call-body"><div class="call-label">Arguments{call_id}</div>'
        f'<pre class="code">{escape(arguments)}</pre></div></details>'
    )


@dataclass
class CallAnswered:
    """A tool result row's call, where the preview lists the message that made it."""

    message_id: int
    name: str
    url: str


@dataclass
class PreviewCalls:
    """The tool calls of the messages a preview lists, each paired with its listed result."""

    lines: dict[int, list[SafeString]]  # message id -> its calls, one line each
    unparsed: set[int]  # messages whose stored tool calls are not JSON
    answers: dict[int, CallAnswered]  # tool result message id -> the call it answers


def preview_calls(rows: list[dict], url_of: Callable[[int], str], *, shown: int) -> PreviewCalls:
    """Pair the calls and results of ``rows`` (id, role, tool_calls, tool_call_id, in order).

    ``url_of`` links a listed message; ``shown`` cuts each call's arguments.
    """
    calls = {row["id"]: transcripts.parse_tool_calls(row.get("tool_calls")) for row in rows}
    results = {
        row["tool_call_id"]: row["id"]
        for row in rows
        if row["role"] == "tool" and row.get("tool_call_id")
    }
    made: dict[str, CallAnswered] = {}
    lines: dict[int, list[SafeString]] = {}
    for message_id, parsed in calls.items():
        for call in parsed or ():
            result_id = results.get(call.call_id) if call.call_id else None
            url = url_of(result_id) if result_id is not None else ""
            lines.setdefault(message_id, []).append(
                tool_call_line(call, result_id=result_id, result_url=url, shown=shown)
            )
            if call.call_id:
                made.setdefault(
                    call.call_id, CallAnswered(message_id, call.name, url_of(message_id))
                )
    answers = {
        result_id: made[call_id] for call_id, result_id in results.items() if call_id in made
    }
    unparsed = {message_id for message_id, parsed in calls.items() if parsed is None}
    return PreviewCalls(lines=lines, unparsed=unparsed, answers=answers)


def _tool_call(call: ToolCall) -> str:
    parts = [
        f'<details class="tool-call"{" open" if call.open else ""}><summary>',
        _call_summary(call),
    ]
    if not call.result:
        parts.append('<span class="badge no-result">no result here</span>')
    elif not call.result.active:
        parts.append('<span class="badge undone">undone</span>')
    parts.append('</summary><div class="call-body"><div class="call-label">Arguments')
    if call.call_id:
        parts.append(f' <code class="hint">{escape(call.call_id)}</code>')
    parts.append(f'</div><pre class="code">{escape(call.arguments or "(none)")}</pre>')
    r = call.result
    if r:
        parts.append(
            f'<div class="tool-result{_flags(r)}" id="m{r.id}"><div class="call-label">Result '
            f'<a class="msg-id" href="{escape(r.permalink)}">#{r.id}</a>'
        )
        if not r.active:
            parts.append(' <span class="badge undone">undone</span>')
        if r.compacted:
            parts.append(' <span class="badge compacted">compacted</span>')
        parts.append(f'</div><pre class="code">{escape(r.content or "(empty)")}</pre>')
        parts.append(f"{_cut_note(r, 'content', 'result')}</div>")
    parts.append("</div></details>")
    return "".join(parts)


# ``message_html``'s mode for the source as written (the session page's ``?text=raw``).
RAW_TEXT = "raw"


def _text(text: str, raw: bool) -> str:
    """Message text: rendered Markdown (console/markdown.py), or as written in raw mode."""
    if raw:
        return f'<div class="text">{escape(text)}</div>'
    return f'<div class="text md">{markdown.render(text)}</div>'


def message_html(m: TranscriptMessage, mode: str = "") -> SafeString:
    """A transcript message; ``mode`` RAW_TEXT shows its text as written, not rendered."""
    raw = mode == RAW_TEXT
    parts = [
        f'<article class="msg role-{escape(m.role)}{_flags(m)}" id="m{m.id}">'
        f'<header class="msg-head"><span class="role">{escape(m.role)}</span>'
    ]
    if m.role == "tool" and m.tool_name:
        parts.append(f' <span class="tool-name">{escape(m.tool_name)}</span>')
    if m.role == "tool" and m.tool_call_id:
        parts.append(f' <span class="hint">result of <code>{escape(m.tool_call_id)}</code></span>')
    if not m.active:
        parts.append(
            ' <span class="badge undone" title="Inactive: taken back by undo, retry or a '
            'rewrite">undone</span>'
        )
    if m.compacted:
        parts.append(
            ' <span class="badge compacted" title="Compacted: summarised away from the '
            "model's context\">compacted</span>"
        )
    if m.unusual_finish:
        parts.append(f' <span class="badge" title="finish reason">{escape(m.finish_reason)}</span>')
    parts.append(
        ' <span class="spacer"></span>'
        f' <a class="msg-id" href="{escape(m.permalink)}" title="Link to this message">#{m.id}</a>'
        # static/js/copy_link.js: copies the permalink, made absolute, for a ticket.
        f' <button type="button" class="copy-link secondary" data-copy-link="{escape(m.permalink)}"'
        ' title="Copy a link to this message">Copy link</button>'
        f' <time datetime="{escape(m.time_iso)}" title="{escape(m.time_full)}">{escape(m.time_short)}</time>'
        "</header>"
    )
    if m.reasoning:
        parts.append(
            '<details class="reasoning"><summary>Reasoning</summary>'
            f"{_text(m.reasoning, raw)}{_cut_note(m, 'reasoning', 'reasoning')}"
            "</details>"
        )
    if m.parts:
        for part in m.parts:
            if part.kind == "text":
                parts.append(_text(part.text, raw))
            else:
                parts.append(f'<div class="part-other">[{escape(part.text)}]</div>')
    elif m.content:
        if m.content_is_json:
            parts.append(f'<div class="text code">{escape(m.content)}</div>')
        elif m.role == "tool":  # a tool's output is data, not prose: shown as written
            parts.append(f'<div class="text">{escape(m.content)}</div>')
        else:
            parts.append(_text(m.content, raw))
    parts.append(_cut_note(m, "content", "message"))
    parts.extend(_tool_call(call) for call in m.tool_calls)
    if m.tool_calls_unparsed:
        parts.append(
            '<details class="tool-call"><summary><span class="tool-name">tool calls</span> '
            '<span class="tool-preview">(not valid JSON)</span></summary>'
            f'<pre class="code">{escape(m.tool_calls_unparsed)}</pre>'
            f"{_cut_note(m, 'tool_calls', 'tool calls')}</details>"
        )
    parts.append("</article>")
    return mark_safe("".join(parts))  # noqa: S308 - every value above is escaped


def _node_html(event: LineageEvent) -> str:
    row = event.row
    node = row.node
    classes = f" edge-{escape(row.edge_kind)}" if row.edge_kind else " root"
    classes += (" is-live" if node.is_live else "") + (" current" if row.current else "")
    current = ' aria-current="page"' if row.current else ""
    parts = [f'<li class="node{classes}"{current}>']
    parts.append('<div class="node-box">')
    if row.edge_kind:
        parts.append(
            f'<span class="edge" title="{escape(row.edge_note)}">{escape(row.edge_kind)}</span> '
        )
    code = f"<code>{escape(node.session_id)}</code>"
    try:
        url = reverse("session_detail", args=[node.session_id])
        parts.append(f'<a class="node-link" href="{escape(url)}">{code}</a>')
    except NoReverseMatch:  # an id the detail route cannot address: shown, not linked
        parts.append(code)
    if node.is_live:
        parts.append(' <span class="badge live">live</span>')
    if row.current:
        parts.append(' <span class="badge here">this session</span>')
    if node.title:
        title = node.title
        if len(title) > NODE_TITLE_SHOWN:
            title = title[:NODE_TITLE_SHOWN] + "…"
        parts.append(f' <span class="node-title">{escape(title)}</span>')
    meta = f"{escape(node.source)} · {plural(node.message_count, 'message')} · "
    started = moment_of(node.started_at)
    meta += started.strftime("%Y-%m-%d %H:%M") if started else ""
    if not node.is_live:
        meta += f" · {escape(end_reason_words(node.end_reason))}"
    if row.edge_note:
        meta += f" · <em>{escape(row.edge_note)}</em>"
    parts.append(f' <span class="node-meta">{meta}</span></div>')
    return "".join(parts)


def lineage_html(events: list[LineageEvent]) -> SafeString:
    """The lineage tree as nested lists, from transcripts.lineage_drawing's events."""
    parts = []
    for event in events:
        if event.kind == "open":
            parts.append('<ol class="line">')
        elif event.kind == "close":
            parts.append("</ol>")
        elif event.kind == "end":
            parts.append("</li>")
        elif event.kind == "fold":
            parts.append(
                f'<li class="node fold"><details><summary>{escape(event.note)}</summary>'
                '<ol class="line folded">'
            )
        elif event.kind == "unfold":
            parts.append("</ol></details></li>")
        else:
            parts.append(_node_html(event))
    return mark_safe("".join(parts))  # noqa: S308 - every value above is escaped


# --- the session list: one row of the table ---------------------------------------------------


@dataclass(frozen=True)
class When:
    """A moment as a list shows it: ISO for the attribute, day and clock for the eye."""

    iso: str
    day: str
    clock: str


def when(timestamp: float | None) -> When | None:
    moment = moment_of(timestamp)
    if moment is None:
        return None
    return When(moment.isoformat(), moment.strftime("%Y-%m-%d"), moment.strftime("%H:%M:%S"))


@dataclass(frozen=True)
class ListedSession:
    """A session list row with its values formatted (50 rows through template filters
    cost more than the queries behind them)."""

    session: listing.SessionRow
    url: str | None
    tip_url: str | None
    started: When | None
    last: When | None
    status: str
    messages: str
    tokens: str
    cost: str | None
    selectable: bool = False  # the operator may act on a selection (merge, delete)

    @property
    def html(self) -> SafeString:
        return session_row_html(self)


def clip(text: str | None, limit: int = VALUE_SHOWN) -> str:
    """Runtime-written text as a row shows it: at most ``limit`` characters, then an ellipsis."""
    if not text:
        return ""
    return text if len(text) <= limit else text[:limit] + "…"


# Line breaks and other whitespace runs become one space; control characters and the
# bidirectional embeddings, overrides and isolates go (an RTL override in a customer's
# message would otherwise reverse the rest of the row). <bdi> isolates what remains.
_WHITESPACE = re.compile(r"\s+")
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def one_line(text: str | None, limit: int) -> str:
    """Runtime-written text as a one-line label: whitespace folded, controls dropped, clipped."""
    if not text:
        return ""
    # Clip first (generously) so a megabyte message costs no megabyte regex pass.
    folded = _WHITESPACE.sub(" ", text[: limit * 4])
    return clip(_CONTROLS.sub("", folded).strip(), limit)


def _row_label(row: listing.SessionRow) -> tuple[str, str]:
    """(css class, text) naming a row: its title, first user message, display name or none."""
    title = one_line(row.title, TITLE_SHOWN)
    if title:
        return "title", title
    first = one_line(row.first_message, LABEL_SHOWN)
    if first:
        return "first-message", first
    name = one_line(row.display_name, LABEL_SHOWN)
    if name:
        return "display-name", name
    if row.message_count:
        return "none", "(no user message)"
    return "none", "(no messages)"


def _time_html(moment: When) -> str:
    return (
        f'<time datetime="{escape(moment.iso)}">{escape(moment.day)} '
        f'<span class="time">{escape(moment.clock)}</span></time>'
    )


def session_row_html(item: ListedSession) -> SafeString:
    """One <tr> of the session table, built here rather than by the template engine.

    Fifty rows of about a hundred template nodes each were most of the page's time
    (bench/run.py); the markup is the same, every value escaped. The label (title, first
    user message, display name) links to the session; the id stays below it, smaller.
    A row has a selection checkbox only when the operator can act on a selection.
    """
    row = item.session
    sid = escape(row.id)
    markers = []
    if row.branched_from:
        markers.append(
            f'<span class="badge branch" title="Branched from {escape(row.branched_from)}">'
            "branch</span>"
        )
    if row.delegate_from:
        markers.append(
            f'<span class="badge delegate" title="Delegate of {escape(row.delegate_from)}">'
            "delegate</span>"
        )
    if row.is_fork:
        markers.append(
            '<span class="badge fork" title="In a fork group: unlinked sessions of one '
            'conversation">fork</span>'
        )
    if row.segments > 1:
        markers.append(
            f'<span class="badge segments" title="Compressed: {row.segments} segments">'
            f"{row.segments} segments</span>"
        )
    elif row.continuations:
        markers.append('<span class="badge segments">continued</span>')
    if row.branches:
        markers.append(
            f'<span class="badge children">{plural(row.branches, "branch", "branches")}</span>'
        )
    if row.delegates:
        markers.append(
            f'<span class="badge children">{plural(row.delegates, "delegate", "delegates")}</span>'
        )
    if row.other_children:
        markers.append(
            f'<span class="badge children">{plural(row.other_children, "child", "children")}</span>'
        )
    if row.archived:
        markers.append('<span class="badge">archived</span>')
    classes = " ".join(
        c for c in ("live" if row.is_live else "", "archived" if row.archived else "") if c
    )
    if row.is_live:
        status = '<span class="badge live">live</span>'
    else:
        status = (
            f'<span class="ended" title="{escape(row.end_reason or "")}">'
            f"{escape(item.status)}</span>"
        )
    if row.tip_id:
        tip = f"<code>{escape(row.tip_id)}</code>"
        if item.tip_url:
            tip = f'<a href="{escape(item.tip_url)}">{tip}</a>'
        status += f'<div class="tip hint">latest segment {tip}</div>'
    if row.user_id:
        user_id = escape(clip(row.user_id))
        user = f'<td class="user" title="{user_id}"><code>{user_id}</code></td>'
    else:
        user = '<td class="user"><span class="hint">—</span></td>'
    kind, text = _row_label(row)
    shown = escape(text)
    label = f'<bdi class="label {kind}" title="{shown}">{shown}</bdi>'
    if item.url:
        label = f'<a class="label-link" href="{escape(item.url)}">{label}</a>'
    pick = (
        f'<td class="pick"><input type="checkbox" name="ids" value="{sid}" '
        f'aria-label="Select {sid}"></td>'
        if item.selectable
        else ""
    )
    cost = '<span class="hint">—</span>' if item.cost is None else escape(item.cost)
    started = _time_html(item.started) if item.started else ""
    last = _time_html(item.last) if item.last else '<span class="hint">no messages</span>'
    return mark_safe(  # noqa: S308 - every value above is escaped
        f'<tr class="{classes}" data-session-id="{sid}">{pick}'
        f'<td class="session">{label}<code class="sid">{sid}</code>'
        f'<div class="markers">{"".join(markers)}</div></td>'
        f"<td>{escape(clip(row.source))}</td>"
        f"{user}"
        f'<td class="model">{escape(clip(row.model))}</td>'
        f'<td class="when">{started}</td>'
        f'<td class="when">{last}</td>'
        f'<td class="status">{status}</td>'
        f'<td class="num">{escape(item.messages)}</td>'
        f'<td class="num">{escape(item.tokens)}</td>'
        f'<td class="num">{cost}</td>'
        "</tr>"
    )
