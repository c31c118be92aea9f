"""The session page's repeated parts as HTML, built in Python: messages and lineage nodes.

A chunk is a hundred messages of some forty template nodes each, and a long lineage fifty
nodes of about as many; through the template engine they were most of the session page's
time (bench/run.py). These build the same markup the template did, every value escaped.
"""

from __future__ import annotations

import html

from django.urls import NoReverseMatch, reverse
from django.utils.safestring import SafeString, mark_safe

from sessions_admin.console.templatetags.console import end_reason_words, unixtime
from sessions_admin.store.transcripts import (
    SHOWN_CHARS,
    LineageEvent,
    ToolCall,
    TranscriptMessage,
)

# Lineage nodes show titles up to this many characters (the session page links the whole).
NODE_TITLE_SHOWN = 200


def _e(value: object) -> str:
    # The template engine's escaping (Django's escape() is html.escape behind lazy-string
    # handling); None renders as the template would render it.
    return html.escape(str(value), quote=True)


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
        f'<a href="{_e(m.raw_url)}&amp;field={field}">Show the whole {what}</a></p>'
    )


def _tool_call(call: ToolCall) -> str:
    parts = [
        f'<details class="tool-call"{" open" if call.open else ""}><summary>',
        f'<span class="tool-name">{_e(call.name)}</span>',
        f'<span class="tool-preview">{_e(call.preview)}</span>',
    ]
    if not call.result:
        parts.append('<span class="badge no-result">no result here</span>')
    elif not call.result.active:
        parts.append('<span class="badge undone">undone</span>')
    parts.append('</summary><div class="call-body"><div class="call-label">Arguments')
    if call.call_id:
        parts.append(f' <code class="hint">{_e(call.call_id)}</code>')
    parts.append(f'</div><pre class="code">{_e(call.arguments or "(none)")}</pre>')
    r = call.result
    if r:
        parts.append(
            f'<div class="tool-result{_flags(r)}" id="m{r.id}"><div class="call-label">Result '
            f'<a class="msg-id" href="{_e(r.permalink)}">#{r.id}</a>'
        )
        if not r.active:
            parts.append(' <span class="badge undone">undone</span>')
        if r.compacted:
            parts.append(' <span class="badge compacted">compacted</span>')
        parts.append(f'</div><pre class="code">{_e(r.content or "(empty)")}</pre>')
        parts.append(f"{_cut_note(r, 'content', 'result')}</div>")
    parts.append("</div></details>")
    return "".join(parts)


def message_html(m: TranscriptMessage) -> SafeString:
    parts = [
        f'<article class="msg role-{_e(m.role)}{_flags(m)}" id="m{m.id}">'
        f'<header class="msg-head"><span class="role">{_e(m.role)}</span>'
    ]
    if m.role == "tool" and m.tool_name:
        parts.append(f' <span class="tool-name">{_e(m.tool_name)}</span>')
    if m.role == "tool" and m.tool_call_id:
        parts.append(f' <span class="hint">result of <code>{_e(m.tool_call_id)}</code></span>')
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
        parts.append(f' <span class="badge" title="finish reason">{_e(m.finish_reason)}</span>')
    parts.append(
        ' <span class="spacer"></span>'
        f' <a class="msg-id" href="{_e(m.permalink)}" title="Link to this message">#{m.id}</a>'
        f' <time datetime="{_e(m.time_iso)}" title="{_e(m.time_full)}">{_e(m.time_short)}</time>'
        "</header>"
    )
    if m.reasoning:
        parts.append(
            '<details class="reasoning"><summary>Reasoning</summary>'
            f'<div class="text">{_e(m.reasoning)}</div>{_cut_note(m, "reasoning", "reasoning")}'
            "</details>"
        )
    if m.parts:
        for part in m.parts:
            if part.kind == "text":
                parts.append(f'<div class="text">{_e(part.text)}</div>')
            else:
                parts.append(f'<div class="part-other">[{_e(part.text)}]</div>')
    elif m.content:
        code = " code" if m.content_is_json else ""
        parts.append(f'<div class="text{code}">{_e(m.content)}</div>')
    parts.append(_cut_note(m, "content", "message"))
    parts.extend(_tool_call(call) for call in m.tool_calls)
    if m.tool_calls_unparsed:
        parts.append(
            '<details class="tool-call"><summary><span class="tool-name">tool calls</span> '
            '<span class="tool-preview">(not valid JSON)</span></summary>'
            f'<pre class="code">{_e(m.tool_calls_unparsed)}</pre>'
            f"{_cut_note(m, 'tool_calls', 'tool calls')}</details>"
        )
    parts.append("</article>")
    return mark_safe("".join(parts))  # noqa: S308 - every value above is escaped


def _node_html(event: LineageEvent) -> str:
    row = event.row
    node = row.node
    classes = f" edge-{_e(row.edge_kind)}" if row.edge_kind else " root"
    classes += (" is-live" if node.is_live else "") + (" current" if row.current else "")
    current = ' aria-current="page"' if row.current else ""
    parts = [f'<li class="node{classes}"{current}>']
    parts.append('<div class="node-box">')
    if row.edge_kind:
        parts.append(f'<span class="edge" title="{_e(row.edge_note)}">{_e(row.edge_kind)}</span> ')
    code = f"<code>{_e(node.session_id)}</code>"
    try:
        url = reverse("session_detail", args=[node.session_id])
        parts.append(f'<a class="node-link" href="{_e(url)}">{code}</a>')
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
        parts.append(f' <span class="node-title">{_e(title)}</span>')
    count = node.message_count
    meta = f"{_e(node.source)} · {count} message{'' if count == 1 else 's'} · "
    started = unixtime(node.started_at)
    meta += started.strftime("%Y-%m-%d %H:%M") if started else ""
    if not node.is_live:
        meta += f" · {_e(end_reason_words(node.end_reason))}"
    if row.edge_note:
        meta += f" · <em>{_e(row.edge_note)}</em>"
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
                f'<li class="node fold"><details><summary>{_e(event.note)}</summary>'
                '<ol class="line folded">'
            )
        elif event.kind == "unfold":
            parts.append("</ol></details></li>")
        else:
            parts.append(_node_html(event))
    return mark_safe("".join(parts))  # noqa: S308 - every value above is escaped
