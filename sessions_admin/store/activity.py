"""Recent activity for pages left open: how many sessions started since a moment.

Polled every few seconds by every open session list, so it is one query on the
``started_at`` index, bounded both ways: by time (only what started after the page
was opened) and by a cap on the rows counted.
"""

from __future__ import annotations

from sessions_admin.core import db

# Beyond this many, a page says "more than" rather than counting on.
COUNT_CAP = 1000


def sessions_started_since(since: float, *, cap: int = COUNT_CAP) -> tuple[int, bool]:
    """How many sessions started after ``since`` (a Unix time), and whether ``cap`` cut it."""
    (count,) = db.fetchone(
        "SELECT COUNT(*) FROM (SELECT 1 FROM sessions WHERE started_at > %s LIMIT %s) AS recent",
        [float(since), int(cap) + 1],
    )
    return min(int(count), cap), int(count) > cap
