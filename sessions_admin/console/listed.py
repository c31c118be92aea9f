"""A session list row and a moment, formatted in Python for the list and search pages:
the values ``html.session_row_html`` puts in a row."""

from __future__ import annotations

from dataclasses import dataclass

from sessions_admin.core.clock import moment_of
from sessions_admin.store import listing


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
    """A session list row with its values formatted, for console/html.session_row_html
    (50 rows through template filters cost more than the queries behind them)."""

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
