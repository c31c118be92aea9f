"""What a search hit shows: its matching text around the words, which hits of a session
get one, and the tool it concerns."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Snippet highlight markers: private-use code points, turned into <mark> only after escaping
# (console/views/sessions.highlight).
MARK_START = "\ue000"
MARK_END = "\ue001"
SNIPPET_ELLIPSIS = "…"
SNIPPET_TOKENS = 24

SNIPPETS_PER_SESSION = 3
# Snippets cost (FTS5's snippet() about 0.25 ms each on a common word): every session of
# a page gets one, only the first this many up to SNIPPETS_PER_SESSION.
FULL_SNIPPET_SESSIONS = 12
# Roles whose hits make the better snippets (tool results are mostly JSON).
_TEXT_ROLES = frozenset({"user", "assistant"})
_TOOL_CALL_NAME = re.compile(r'"name"\s*:\s*"([^"\\]{1,200})"')


@dataclass(frozen=True)
class SearchHit:
    message_id: int
    session_id: str
    role: str
    timestamp: float
    # The tool a tool result answers, or the (first) tool an assistant message calls.
    tool_name: str | None
    active: bool
    # The matching text around the hit, the words between MARK_START and MARK_END (raw text:
    # console/views/sessions.highlight escapes it and marks the words).
    snippet: str


def _best(hits: list[tuple[int, str]]) -> list[int]:
    """Up to SNIPPETS_PER_SESSION hits: text messages before tool ones, then page order."""
    ranked = sorted(enumerate(hits), key=lambda p: (p[1][1] not in _TEXT_ROLES, p[0]))
    return [hits[i][0] for i, _ in ranked[:SNIPPETS_PER_SESSION]]


def snippet_ids(groups: dict[str, list[tuple[int, str]]], kept: list[str]) -> dict[str, list[int]]:
    """For each session of a page (``kept``, in order), the ids of its hits that get a snippet:
    one each, SNIPPETS_PER_SESSION for the first FULL_SNIPPET_SESSIONS."""
    budget = len(kept) + (SNIPPETS_PER_SESSION - 1) * min(len(kept), FULL_SNIPPET_SESSIONS)
    best: dict[str, list[int]] = {}
    for session_id in kept:
        share = max(1, min(SNIPPETS_PER_SESSION, budget - (len(kept) - len(best) - 1)))
        best[session_id] = _best(groups[session_id])[:share]
        budget -= len(best[session_id])
    return best


def search_hit(row: tuple) -> SearchHit:
    """A row of a backend's ``snippets``: id, session id, role, timestamp, tool name, active,
    the start of the tool calls, the snippet."""
    names = _TOOL_CALL_NAME.findall(row[6] or "")
    return SearchHit(
        message_id=int(row[0]),
        session_id=row[1],
        role=row[2],
        timestamp=float(row[3] or 0),
        tool_name=row[4] or (names[0] if names else None),
        active=bool(row[5]),
        snippet=row[7] or "",
    )
