"""Store-wide figures that are slow to compute (fork detection, overview counts), cached.

The cache is shared by every worker process (settings: a file cache under the
var directory), so a gunicorn with four workers computes a figure once per
period, not four times. A figure older than its fresh period is still served
while one process recomputes it in a background thread (guarded by a cache
lock across processes), so after the first computation no request waits for
a recomputation: a stale value is at most ``fresh + compute`` seconds old.

An operator's change marks every figure stale (``forget_all``): a figure whose
computation started before the mark is never served again, not even one a
refresh that was already running writes afterwards, so the overview's health
panel and ``/forks/`` agree as soon as the action returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from django.core.cache import cache
from django.db import connections

from sessions_admin.routers import store_alias

T = TypeVar("T")
log = logging.getLogger(__name__)

# How long a stale value may still be served while it is recomputed; past it,
# the next request computes it itself.
STALE_SECONDS = 600
REFRESH_LOCK_SECONDS = 120


def store_key(name: str) -> str:
    """A cache key for ``name`` on the current store (tests and demos use other stores)."""
    store = connections[store_alias()].settings_dict.get("NAME")
    return f"sessions_admin:{name}:{store}"


def cached_figure(name: str, compute: Callable[[], T], *, fresh_seconds: float) -> T:
    """``compute()``'s value for this store, at most ``fresh_seconds`` old unless refreshing."""
    return cached_figure_at(name, compute, fresh_seconds=fresh_seconds)[1]


def cached_figure_at(
    name: str, compute: Callable[[], T], *, fresh_seconds: float
) -> tuple[float, T]:
    """``(computed_at, value)``: ``cached_figure``, with when its computation started
    (a Unix time), so a page can say how old the figure it shows is."""
    key = store_key(name)
    entry = cache.get(key)
    now = time.time()
    if entry is not None and entry[0] <= stale_since():
        entry = None  # computed before an operator's change: recompute it now
    if entry is not None:
        computed_at, value = entry
        if now - computed_at < fresh_seconds:
            return entry
        if cache.add(f"{key}:refreshing", 1, REFRESH_LOCK_SECONDS):
            if getattr(settings, "SESSIONS_ADMIN_REFRESH_IN_BACKGROUND", True):
                threading.Thread(
                    target=_refresh, args=(key, compute), name=f"refresh {name}", daemon=True
                ).start()
            else:
                _refresh(key, compute, close_connections=False)
                return cache.get(key, entry)
        return entry
    value = compute()
    # Taken before computing: a change committed meanwhile leaves this value stale.
    cache.set(key, (now, value), STALE_SECONDS)
    return now, value


def _refresh(key: str, compute: Callable[[], T], *, close_connections: bool = True) -> None:
    try:
        computed_at = time.time()
        value = compute()
        # An operator's change while this ran: its value may predate the change. (Reads
        # check the mark too; this only spares them a value they would throw away.)
        if computed_at > stale_since():
            cache.set(key, (computed_at, value), STALE_SECONDS)
    except Exception:
        # The stale value stays until it expires; the next request recomputes then.
        log.exception("Refreshing %s failed", key)
    finally:
        cache.delete(f"{key}:refreshing")
        if close_connections:
            # This thread's own database connections; the request's are untouched.
            connections.close_all()


def stale_since() -> float:
    """When an operator last changed this store (a Unix time; 0 if never): a figure
    computed before it is stale whatever its age."""
    return cache.get(store_key(STALE_MARK), 0.0)


# Every figure cached through cached_figure, by name.
FIGURES = ("listing:forks", "overview:forks", "overview:health", "overview:totals")
# When this store last changed under an operator's hand; kept until the cache is cleared.
STALE_MARK = "figures-stale-since"


def forget_all() -> None:
    """Mark this store's figures stale and drop them: an operator's change (a merge, a
    delete, a restore) shows at once, even where a refresh was already computing."""
    cache.set(store_key(STALE_MARK), time.time(), None)
    cache.delete_many([store_key(name) for name in FIGURES])
