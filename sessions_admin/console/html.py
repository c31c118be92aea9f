"""The HTML the console builds in Python, with its one escape helper.

Only what repeats too often for the template engine is here: a session page's messages
and lineage nodes, and the session list's rows. A chunk is a hundred messages of some
forty template nodes each, a long lineage fifty nodes of about as many, a list page fifty
rows of about a hundred; through the template engine they were most of those pages' time
(bench/run.py). These build the same markup the templates did, every value escaped with
``escape``.
"""

from __future__ import annotations

import html

from django.urls import NoReverseMatch, reverse
from django.utils.safestring import SafeString, mark_safe

from sessions_admin.console import markdown
from sessions_admin.console.http import plural
from sessions_admin.console.listed import ListedSession, When
from sessions_admin.console.words import TITLE_SHOWN, clip, end_reason_words, one_line
from sessions_admin.core.clock import moment_of
from sessions_admin.store import listing
from sessions_admin.store.transcripts import (
    SHOWN_CHARS,
    LineageEvent,
    ToolCall,
    TranscriptMessage,
)

# Lineage nodes show titles up to this many characters (the session page links the whole).
NODE_TITLE_SHOWN = 200
# A row labelled by its first user message shows this much of it, on one line.
LABEL_SHOWN = 120


def escape(value: object) -> str:
    """The template engine's escaping, without its cost.

    Django's escape() is ``html.escape`` behind lazy-string handling, which costs more
    than the escaping itself at twenty values a row; None renders as a template would.
    """
    return html.escape(str(value), quote=True)


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


def call_summary(call: ToolCall) -> str:
    """What a call's collapsed line says: the tool's name and its arguments in one line."""
    return (
        f'<span class="tool-name">{escape(call.name)}</span>'
        f'<span class="tool-preview">{escape(call.preview)}</span>'
    )


def _tool_call(call: ToolCall) -> str:
    parts = [
        f'<details class="tool-call"{" open" if call.open else ""}><summary>',
        call_summary(call),
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


def preview_text_html(text: str, *, role: str) -> SafeString:
    """A message's text where a preview (the merge's) lists it, as the transcript shows it:
    a tool's output as written (data, not prose), any other as rendered Markdown."""
    return mark_safe(_text(text, raw=role == "tool"))


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
    """One <tr> of the session table. The label (title, first user message, display name)
    links to the session, the id below it; a selection checkbox only for an operator who can
    act on a selection."""
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
