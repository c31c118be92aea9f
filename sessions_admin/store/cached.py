"""Store-wide figures that are slow to compute (fork detection, overview counts), cached.

The cache is shared by every worker process (settings: a file cache under the
var directory), so a gunicorn with four workers computes a figure once per
period, not four times. A figure older than its fresh period is still served
while one process recomputes it in a background thread (guarded by a cache
lock across processes), so after the first computation no request waits for
a recomputation: a stale value is at most ``fresh + compute`` seconds old.
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
    key = store_key(name)
    entry = cache.get(key)
    now = time.time()
    if entry is not None:
        computed_at, value = entry
        if now - computed_at < fresh_seconds:
            return value
        if cache.add(f"{key}:refreshing", 1, REFRESH_LOCK_SECONDS):
            if getattr(settings, "SESSIONS_ADMIN_REFRESH_IN_BACKGROUND", True):
                threading.Thread(
                    target=_refresh, args=(key, compute), name=f"refresh {name}", daemon=True
                ).start()
            else:
                _refresh(key, compute, close_connections=False)
                return cache.get(key, entry)[1]
        return value
    value = compute()
    cache.set(key, (now, value), STALE_SECONDS)
    return value


def _refresh(key: str, compute: Callable[[], T], *, close_connections: bool = True) -> None:
    try:
        computed_at = time.time()
        cache.set(key, (computed_at, compute()), STALE_SECONDS)
    except Exception:
        # The stale value stays until it expires; the next request recomputes then.
        log.exception("Refreshing %s failed", key)
    finally:
        cache.delete(f"{key}:refreshing")
        if close_connections:
            # This thread's own database connections; the request's are untouched.
            connections.close_all()


# Every figure cached through cached_figure, by name.
FIGURES = ("listing:forks", "overview:forks", "overview:health", "overview:totals")


def forget_all() -> None:
    """Drop this store's figures: an operator's change (a merge, a delete) shows at once."""
    cache.delete_many([store_key(name) for name in FIGURES])
