"""Template filters shared by every console page."""

from __future__ import annotations

import datetime as dt

from django import template

from sessions_admin.core.clock import moment_of

register = template.Library()

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


@register.filter
def unixtime(value) -> dt.datetime | None:
    """A REAL unix-seconds column as an aware datetime (None stays None)."""
    return moment_of(value)


@register.filter
def end_reason_words(reason) -> str:
    if reason in END_REASON_WORDS:
        return END_REASON_WORDS[reason]
    return f"ended ({reason})"


@register.filter
def duration(seconds) -> str:
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


@register.filter
def message_html(message):
    """A transcript message's <article> (built in Python: see console/detail_html.py)."""
    from sessions_admin.console.detail_html import message_html as build

    return build(message)


@register.filter
def lineage_html(events):
    """The lineage tree's nested lists (built in Python: see console/detail_html.py)."""
    from sessions_admin.console.detail_html import lineage_html as build

    return build(events)
