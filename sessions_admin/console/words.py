"""The words and clipped text the console's pages show: end reasons, durations, and
runtime-written text cut to fit a row or a label. The template filters of those names
(templatetags/console.py) are these functions."""

from __future__ import annotations

import re

# Runtime-written text a list row shows, at most (the session page has the whole of it):
# a 1 MB title made a 2 MB list page.
TITLE_SHOWN = 200
VALUE_SHOWN = 200


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
