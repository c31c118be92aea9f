"""The tool calls of the messages a preview lists (merge, undo, retry): each call one
collapsed line, paired with its result when the preview lists that message too."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.utils.safestring import SafeString, mark_safe

from sessions_admin.console.html import call_summary, escape
from sessions_admin.store import transcripts
from sessions_admin.store.transcripts import ToolCall


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
        f'<details class="call-line"><summary>{call_summary(call)}{answered}</summary>'
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
