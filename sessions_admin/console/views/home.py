"""The overview: store totals, sessions per day, store health, and the conversations list."""

from __future__ import annotations

import datetime as dt
import logging
import math
from urllib.parse import urlencode

from django.db import DatabaseError
from django.http import HttpResponseBadRequest
from django.shortcuts import render
from django.views.decorators.http import require_GET

from sessions_admin.console import figures
from sessions_admin.console.http import (
    HtmxHttpRequest,
    fragment,
    require_perm,
    session_url,
    wants_fragment,
)
from sessions_admin.signin.roles import VIEW
from sessions_admin.store import overview

logger = logging.getLogger(__name__)

CACHE_SECONDS = figures.CACHE_SECONDS
RECENT_SESSIONS = 10
MAX_SOURCES_SHOWN = 12

# Chart geometry (SVG user units; the SVG scales to its box).
CHART_WIDTH = 960
CHART_HEIGHT = 220
CHART_LEFT = 48
CHART_RIGHT = 8
CHART_TOP = 10
CHART_BOTTOM = 28
BAR_GAP = 4


def _nice_ceiling(value: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten that is at least ``value`` (at least 1)."""
    if value <= 1:
        return 1
    power = 10 ** int(math.floor(math.log10(value)))
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return step * power
    return 10 * power


def _svg_number(value: float) -> str:
    """A coordinate as SVG wants it: never localized, at most two decimals."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _chart(days: list[overview.DayCount]) -> dict:
    """Bar geometry for the per-day chart, computed here so the template stays declarative.

    Coordinates are preformatted strings: template localization must never turn
    ``12.5`` into ``12,5`` inside an SVG attribute.
    """
    n = _svg_number
    plot_width = CHART_WIDTH - CHART_LEFT - CHART_RIGHT
    plot_height = CHART_HEIGHT - CHART_TOP - CHART_BOTTOM
    baseline = CHART_TOP + plot_height
    top = _nice_ceiling(max((d.sessions for d in days), default=0))
    slot = plot_width / max(len(days), 1)
    bars = []
    for i, day in enumerate(days):
        height = plot_height * day.sessions / top
        x = CHART_LEFT + i * slot
        bars.append(
            {
                "day": day.day,
                "sessions": day.sessions,
                "slot_x": n(x),
                "slot_width": n(slot),
                "x": n(x + BAR_GAP / 2),
                "width": n(max(slot - BAR_GAP, 1)),
                "y": n(baseline - height),
                "height": n(height),
                # A date under today's bar and every seventh before it, so labels never collide.
                "label": (len(days) - 1 - i) % 7 == 0,
                "label_x": n(x + slot / 2),
            }
        )
    ticks = [
        {"value": value, "y": n(baseline - plot_height * value / top)}
        for value in sorted({0, top // 2 if top % 2 == 0 else top, top})
    ]
    return {
        "width": n(CHART_WIDTH),
        "height": n(CHART_HEIGHT),
        "left": n(CHART_LEFT),
        "right": n(CHART_WIDTH - CHART_RIGHT),
        "top": n(CHART_TOP),
        "plot_height": n(plot_height),
        "baseline": n(baseline),
        "label_y": n(baseline + 16),
        "tick_label_x": n(CHART_LEFT - 6),
        "bars": bars,
        "ticks": ticks,
        "total": sum(d.sessions for d in days),
        "first": days[0].day if days else None,
        "last": days[-1].day if days else None,
    }


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def computed_ago(as_of: dt.datetime, now: dt.datetime | None = None) -> str:
    """How long ago a cached figure was computed, in words ("40 s ago"); static/js/
    computed_ago.js keeps the same words current while the page stays open."""
    seconds = max(0, int(((now or _now()) - as_of).total_seconds()))
    if seconds < 2:
        return "just now"
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


def _health_context() -> dict:
    try:
        snapshot = figures.ready("health")
    except DatabaseError as error:
        # A busy or broken store should not take the overview down with it.
        logger.exception("store health checks failed")
        return {"health": None, "health_error": str(error) or error.__class__.__name__}
    except figures.FigureFailed as failure:
        # Failed in the background: say why, and stop asking until someone tries again.
        return {"health": None, "health_error": failure.reason}
    if snapshot is None:
        # Being computed in the background: the panel fetches itself again shortly.
        return {"health": None, "health_error": None, "health_pending": True}
    # as_of is its fork groups' time: the oldest figure the panel shows.
    return {"health": snapshot, "health_ago": computed_ago(snapshot.as_of), "health_error": None}


def _home_context(*, with_health: bool) -> dict:
    context: dict = {
        "cache_seconds": CACHE_SECONDS,
        "recent": [
            {**row, "url": session_url(row["id"])}
            for row in overview.recent_sessions(RECENT_SESSIONS)
        ],
        "health_inline": with_health,
    }
    if with_health:
        context.update(_health_context())
    try:
        snapshot = figures.ready("totals")
    except figures.FigureFailed as failure:
        context["totals_error"] = failure.reason
        return context
    if snapshot is None:
        # Being counted in the background: the overview fetches itself again shortly.
        context["totals_pending"] = True
        return context
    by_source = list(snapshot.totals.by_source)
    shown, rest = by_source[:MAX_SOURCES_SHOWN], by_source[MAX_SOURCES_SHOWN:]
    context.update(
        {
            "snapshot": snapshot,
            "snapshot_ago": computed_ago(snapshot.as_of),
            "totals": snapshot.totals,
            "sources": shown,
            "other_sources": {"count": len(rest), "sessions": sum(n for _s, n in rest)},
            "chart": _chart(snapshot.per_day),
        }
    )
    return context


@require_GET
@require_perm(VIEW)
def home(request: HtmxHttpRequest):
    """Totals, the per-day chart and recent sessions; the health panel loads after the page."""
    return render(
        request,
        fragment(request, "console/home.html", "overview"),
        _home_context(with_health=False),
    )


@require_GET
@require_perm(VIEW)
def health_panel(request: HtmxHttpRequest):
    """The health panel: just the fragment for htmx, the overview with it inline otherwise."""
    if wants_fragment(request):
        return render(request, "console/home.html#health-panel", _health_context())
    return render(request, "console/home.html", _home_context(with_health=True))


def _conversation_query(*, contains: str, forks_only: bool, after: str | None = None) -> str:
    params: dict[str, str] = {}
    if contains:
        params["q"] = contains
    if forks_only:
        params["forks"] = "1"
    if after is not None:
        params["after"] = after
    return urlencode(params)


@require_GET
@require_perm(VIEW)
def conversation_list(request: HtmxHttpRequest):
    """One row per conversation slug, keyset-paginated by name."""
    contains = request.GET.get("q", "").strip()[:500]
    forks_only = request.GET.get("forks", "") not in ("", "0")
    after = request.GET.get("after") or None
    if "\x00" in contains or "\x00" in (after or ""):
        # No slug holds one, and PostgreSQL refuses to compare text with it.
        return HttpResponseBadRequest(
            "The search and the page link cannot contain a NUL character."
        )
    # The fork filter and each row's fork links need the groups: computed here when cold.
    forks = figures.inline("forks")
    page = overview.conversation_page(
        after=after, contains=contains, forks_only=forks_only, fork_groups=forks.groups
    )
    next_query = (
        _conversation_query(contains=contains, forks_only=forks_only, after=page.next_after)
        if page.next_after is not None
        else None
    )
    first_query = (
        _conversation_query(contains=contains, forks_only=forks_only) if after is not None else None
    )
    rows = [
        {
            "conversation": row,
            "session_url": session_url(row.session_id),
            "forks": [
                {"id": sid, "url": session_url(sid), "current": sid == row.session_id}
                for sid in row.fork_session_ids
            ],
        }
        for row in page.rows
    ]
    return render(
        request,
        fragment(request, "console/conversations.html", "conversation-results"),
        {
            "rows": rows,
            "page": page,
            "forks_as_of": forks.as_of,
            "contains": contains,
            "forks_only": forks_only,
            "after": after,
            "next_query": next_query,
            "first_query": first_query,
            "page_size": overview.CONVERSATION_PAGE_SIZE,
        },
    )
