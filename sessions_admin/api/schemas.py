"""Field types every router's schemas share.

``Text`` is a string both databases can store (no NUL, no lone surrogate: ``core.text``),
checked by pydantic so a bad query or path parameter is a 422 naming the field before any
route runs; a JSON body is checked whole by ``app.StrictJSONParser`` already.
"""

from __future__ import annotations

from typing import Annotated

from ninja import Schema
from pydantic import AfterValidator, StringConstraints

from sessions_admin.core.text import IDENTIFIER_MAX, storability_problem


def _storable(value: str) -> str:
    problem = storability_problem(value)
    if problem:
        raise ValueError(f"the value {problem}")
    return value


Text = Annotated[str, AfterValidator(_storable)]
Identifier = Annotated[
    str, StringConstraints(min_length=1, max_length=IDENTIFIER_MAX), AfterValidator(_storable)
]


class SessionSummary(Schema):
    """A session as a dry run or a retention preview lists it."""

    id: str
    source: str | None
    title: str | None
    started_at: float | None
    ended_at: float | None
    end_reason: str | None
    message_count: int | None
