"""The filter form's suggestions: the store's distinct sources, models and end reasons."""

from __future__ import annotations

from dataclasses import dataclass

from sessions_admin.core import db
from sessions_admin.store import cached

MAX_CHOICES = 200
# The filters' suggestions (three DISTINCT scans, ~15 ms at 10,000 sessions, more than
# half of the list page): a cached figure, recomputed in the background this often.
CHOICES_CACHE_SECONDS = 60


@dataclass(frozen=True)
class Choices:
    sources: tuple[str, ...]
    models: tuple[str, ...]
    end_reasons: tuple[str, ...]


def _distinct_statements() -> list[tuple[str, list]]:
    return [
        (
            f"SELECT DISTINCT {column} FROM sessions WHERE {column} IS NOT NULL "
            f"ORDER BY {column} LIMIT {MAX_CHOICES}",
            [],
        )
        for column in ("source", "model", "end_reason")
    ]


def read_choices() -> Choices:
    sources, models, end_reasons = (
        tuple(r[0] for r in rows) for rows in db.fetch_batch(_distinct_statements())
    )
    return Choices(sources=sources, models=models, end_reasons=end_reasons)


NO_CHOICES = Choices(sources=(), models=(), end_reasons=())
cached.register("listing:choices", read_choices, fresh_seconds=CHOICES_CACHE_SECONDS)


def choices() -> Choices:
    """Distinct sources, models and end reasons: the filters' suggestions, a store-wide
    figure (three scans, 20-40 ms at 10k sessions). On a cold cache, none (the fields
    work without them, and the status menu keeps a chosen reason) while they are
    computed in the background for the next page."""
    entry = cached.ready_figure_at(
        "listing:choices", read_choices, fresh_seconds=CHOICES_CACHE_SECONDS
    )
    return NO_CHOICES if entry is None else entry[1]
