"""The overview's store-wide figures (totals, fork groups, health counts), cached.

Each is computed in the background and shared by every worker (store.cached): the
overview, its health panel, the conversations page and ``/forks/`` read them. A page
that only shows one reads it with ``ready``: None while it is being computed, and the
page renders a placeholder that fetches itself again (issue 16: no request pays for a
store-wide recomputation). ``ensure_figures_warm`` starts the thread that computes them
as a dashboard process starts and keeps them fresh.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sessions_admin.store import cached, overview
from sessions_admin.store.cached import FigureFailed

__all__ = ["FigureFailed", "ensure_figures_warm", "inline", "ready"]

T = TypeVar("T")

# The overview's counts scan the whole store: recomputed (in the background) this often.
CACHE_SECONDS = overview.FORKS_FRESH_SECONDS


@dataclass(frozen=True)
class Snapshot:
    as_of: dt.datetime
    totals: overview.StoreTotals
    per_day: list[overview.DayCount]


@dataclass(frozen=True)
class HealthSnapshot:
    as_of: dt.datetime
    checks: list[overview.HealthCount]


def totals_snapshot() -> Snapshot:
    return Snapshot(
        as_of=dt.datetime.now(dt.UTC),
        totals=overview.store_totals(),
        per_day=overview.sessions_per_day(),
    )


def health_snapshot() -> HealthSnapshot:
    # Runs in a background thread (or inline where a page needs it): the fork groups too.
    forks = overview.fork_snapshot_now()
    return HealthSnapshot(as_of=forks.as_of, checks=overview.health_counts(forks.groups))


COMPUTE: dict[str, Callable[[], object]] = {
    "totals": totals_snapshot,
    "forks": overview.fork_snapshot,
    "health": health_snapshot,
}
for _name, _compute in COMPUTE.items():
    cached.register(f"overview:{_name}", _compute, fresh_seconds=CACHE_SECONDS)


def inline(name: str):
    """Figure ``name``, computed here on a cold cache: for a page whose answer depends on it."""
    return cached.cached_figure(f"overview:{name}", COMPUTE[name], fresh_seconds=CACHE_SECONDS)


def ready(name: str):
    """Figure ``name``, or None while it is computed in the background (a placeholder shows);
    ``FigureFailed`` when that computation failed a moment ago (the page says why)."""
    entry = cached.ready_figure_at(f"overview:{name}", COMPUTE[name], fresh_seconds=CACHE_SECONDS)
    return None if entry is None else entry[1]


def ensure_figures_warm() -> None:
    """Compute every store-wide figure now, in a background thread, and keep them fresh."""
    from sessions_admin.store import listing  # registers the list's fork marks

    del listing
    cached.ensure_warming_running()
