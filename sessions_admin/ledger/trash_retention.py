"""How long deleted rows stay restorable: the one check of a trash retention in days.

The setting ``SESSIONS_ADMIN_TRASH_DAYS`` (what the trash page shows and purges
as "expired") and a value an operator gives (``purge_trash --days``) are the
same kind of number: finite, zero or more, and small enough that "now minus
that many days" is still a date. ``retention_days`` refuses anything else with
``InvalidInput``; ``configured_days`` is the setting through it, the default
when the setting is not a valid retention.
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings

from sessions_admin.core.errors import InvalidInput

DEFAULT_DAYS = 30.0
# A thousand years: past any real retention, well before "now minus days" leaves the
# calendar (about 739,000 days back is the year 1, where dates end).
MAX_DAYS = 365_000.0
SHOWN_MAX = 40  # characters of a refused value quoted back


def retention_days(value: Any) -> float:
    """``value`` as a number of days, or ``InvalidInput`` saying why it is not one."""
    if isinstance(value, bool):
        days = math.nan  # a flag is not a number of days, though Python counts it as one
    else:
        try:
            days = float(value)
        except (TypeError, ValueError, OverflowError):
            days = math.nan
    if not math.isfinite(days) or not 0 <= days <= MAX_DAYS:
        shown = repr(value)
        if len(shown) > SHOWN_MAX:
            shown = shown[:SHOWN_MAX] + "…"
        raise InvalidInput(
            f"The trash retention must be a number of days from 0 to {MAX_DAYS:,.0f}, not {shown}."
        )
    return days


def configured_days() -> float:
    """``SESSIONS_ADMIN_TRASH_DAYS`` as a retention; ``DEFAULT_DAYS`` when it is not a valid one."""
    try:
        return retention_days(getattr(settings, "SESSIONS_ADMIN_TRASH_DAYS", DEFAULT_DAYS))
    except InvalidInput:
        return DEFAULT_DAYS
