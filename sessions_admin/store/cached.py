"""Store-wide figures that are slow to compute (fork detection, overview counts), cached.

The cache is shared by every worker process (a file cache), so a figure is computed once per
period, not once per worker. A stale figure is still served while one process recomputes it
in the background (a cache lock across processes): no request waits, and a value is at most
``fresh + compute`` seconds old. An operator's change marks every figure stale
(``forget_all``): a figure whose computation started before the mark is never served again,
so the health panel and ``/forks/`` agree as soon as the action returns.

A page that only shows a figure reads ``ready_figure_at``: with no usable value it starts the
computation and answers None, and the page renders a placeholder that fetches itself again
(issue 16). Each dashboard process keeps the registered figures warm
(``ensure_warming_running``, from gunicorn's post_worker_init)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from django.conf import settings
from django.core.cache import cache
from django.db import connections

from sessions_admin.core import threads
from sessions_admin.routers import store_alias

T = TypeVar("T")
log = logging.getLogger(__name__)

# How long a stale value may still be served while it is recomputed; past it,
# the next request computes it itself.
STALE_SECONDS = 600
REFRESH_LOCK_SECONDS = 120
# After a background computation fails, pages say so (FigureFailed) and nothing computes
# the figure again for this long: a broken query is not run again every second by every
# open page's placeholder.
FAILED_RETRY_SECONDS = 60
# A figure is kept fresh for at least this many times as long as its last computation took:
# fork detection takes 6-7 s at a million sessions, and recomputing it every 30 s (its
# period on smaller stores) kept a core a fifth busy; this way a figure's refreshes use at
# most a twentieth of one core, whatever the store's size.
REFRESH_COST_FACTOR = 20


class FigureFailed(Exception):
    """The figure's last background computation failed (``reason`` says how); it is tried
    again once ``FAILED_RETRY_SECONDS`` have passed since."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _failed_key(key: str) -> str:
    return f"{key}:failed"


# Each process keeps the last value it read of each figure, with the time it was computed;
# the shared cache also holds that time under a small key of its own. A read fetches the
# small key and only fetches (and unpickles) the figure when the time differs: at a million
# sessions the fork groups are megabytes, and reading them from the file cache took 140 ms
# of every conversations page. Figures are never changed in place by their readers.
_read: dict[str, tuple[float, object]] = {}
# How long each figure's computation took (seconds), as the shared cache says: read with it.
_took: dict[str, float] = {}


def _stamp_key(key: str) -> str:
    return f"{key}:at"


def _get_entry(key: str):
    stamp = cache.get(_stamp_key(key))
    if stamp is not None:
        known = _read.get(key)
        if known is not None and known[0] == stamp:
            return known
    entry = cache.get(key)
    if entry is not None:
        _read[key] = entry
        _took[key] = cache.get(_took_key(key), 0.0)
    else:
        _read.pop(key, None)
    return entry


def _took_key(key: str) -> str:
    return f"{key}:took"


def _set_entry(key: str, entry: tuple[float, object], *, took: float = 0.0) -> None:
    cache.set(key, entry, STALE_SECONDS)
    cache.set(_took_key(key), took, STALE_SECONDS)
    cache.set(_stamp_key(key), entry[0], STALE_SECONDS)
    _read[key] = entry
    _took[key] = took


def fresh_period(key: str, fresh_seconds: float) -> float:
    """How long the figure under ``key`` stays fresh: ``fresh_seconds``, or longer for a
    figure slow to compute (``REFRESH_COST_FACTOR``)."""
    return max(fresh_seconds, _took.get(key, 0.0) * REFRESH_COST_FACTOR)


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
    entry = _get_entry(key)
    now = time.time()
    if entry is not None and entry[0] <= stale_since():
        entry = None  # computed before an operator's change: recompute it now
    if entry is not None:
        computed_at, value = entry
        if now - computed_at < fresh_period(key, fresh_seconds):
            return entry
        if cache.add(f"{key}:refreshing", 1, REFRESH_LOCK_SECONDS):
            if getattr(settings, "SESSIONS_ADMIN_REFRESH_IN_BACKGROUND", True):
                threading.Thread(
                    target=_refresh, args=(key, compute), name=f"refresh {name}", daemon=True
                ).start()
            else:
                _refresh(key, compute, close_connections=False)
                return _get_entry(key) or entry
        return entry
    value = compute()
    # Taken before computing: a change committed meanwhile leaves this value stale.
    _set_entry(key, (now, value), took=time.time() - now)
    return now, value


def ready_figure_at(
    name: str, compute: Callable[[], T], *, fresh_seconds: float
) -> tuple[float, T] | None:
    """``cached_figure_at`` for a page that can do without the figure: None, with its
    computation started in a background thread, when there is no usable value.

    With ``SESSIONS_ADMIN_COLD_FIGURES_INLINE`` (the tests' default, so a page test sees
    its figures on the first GET) it computes a missing figure inline as before.

    Raises ``FigureFailed`` when there is no usable value and the last computation failed
    less than ``FAILED_RETRY_SECONDS`` ago: the page shows why instead of a placeholder
    that would ask again forever.
    """
    if getattr(settings, "SESSIONS_ADMIN_COLD_FIGURES_INLINE", False):
        return cached_figure_at(name, compute, fresh_seconds=fresh_seconds)
    key = store_key(name)
    entry = _get_entry(key)
    failure = cache.get(_failed_key(key))
    if entry is not None and entry[0] > stale_since():
        if failure is None and time.time() - entry[0] >= fresh_period(key, fresh_seconds):
            _start_refresh(name, key, compute)
        return entry
    if failure is not None:
        raise FigureFailed(failure)
    _start_refresh(name, key, compute)
    return None


# A computation a page starts waits this long first: the page that started it is still
# rendering in this process, and the two would take turns on the GIL (the profile of a
# cold list at 10k sessions showed it paying 10-25 ms of the computation that way).
# Its placeholder asks again after a second.
REFRESH_START_DELAY = 0.2


# The figures this process is computing now: never a second one beside them, even if the
# cache lost its lock (cleared, or evicted), as they would share this process's GIL.
_computing: set[str] = set()
_computing_lock = threading.Lock()


def _start_refresh(name: str, key: str, compute: Callable[[], T]) -> None:
    with _computing_lock:
        if key in _computing:
            return
        # One computation at a time across every process sharing the cache.
        if not cache.add(f"{key}:refreshing", 1, REFRESH_LOCK_SECONDS):
            return
        _computing.add(key)
    threading.Thread(
        target=_refresh_later, args=(key, compute), name=f"refresh {name}", daemon=True
    ).start()


def _refresh_later(key: str, compute: Callable[[], T]) -> None:
    try:
        time.sleep(REFRESH_START_DELAY)
        _refresh(key, compute)
    finally:
        with _computing_lock:
            _computing.discard(key)


def _refresh(key: str, compute: Callable[[], T], *, close_connections: bool = True) -> None:
    try:
        computed_at = time.time()
        value = compute()
        # An operator's change while this ran: its value may predate the change. (Reads
        # check the mark too; this only spares them a value they would throw away.)
        if computed_at > stale_since():
            _set_entry(key, (computed_at, value), took=time.time() - computed_at)
        cache.delete(_failed_key(key))
    except Exception as error:
        # The stale value stays until it expires; pages without one say why (FigureFailed)
        # until the failure's retry period is over, and the next request recomputes then.
        log.exception("Refreshing %s failed", key)
        reason = f"{error.__class__.__name__}: {error}".strip().rstrip(":")[:300]
        cache.set(_failed_key(key), reason, FAILED_RETRY_SECONDS)
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
FIGURES = (
    "listing:choices",
    "listing:forks",
    "overview:forks",
    "overview:health",
    "overview:totals",
)
# When this store last changed under an operator's hand; kept until the cache is cleared.
STALE_MARK = "figures-stale-since"


@dataclass(frozen=True)
class FigureState:
    """What the shared cache holds of one figure, for the metrics (console/metrics.py)."""

    name: str
    age_seconds: float | None  # since its computation started; None: none cached
    stale: bool  # computed before an operator's last change: recomputed before it is shown
    failing: bool  # its last background computation failed (FigureFailed)


def figure_states() -> list[FigureState]:
    """Every figure of this store as the shared cache holds it now: small reads only (each
    figure's time stamp, never its value), cheap enough for every metrics scrape."""
    now = time.time()
    since = stale_since()
    states = []
    for name in FIGURES:
        key = store_key(name)
        stamp = cache.get(_stamp_key(key))
        states.append(
            FigureState(
                name=name,
                age_seconds=None if stamp is None else max(0.0, now - stamp),
                stale=stamp is not None and stamp <= since,
                failing=cache.get(_failed_key(key)) is not None,
            )
        )
    return states


# name -> (compute, fresh_seconds): the figures a dashboard process keeps warm.
_REGISTERED: dict[str, tuple[Callable[[], object], float]] = {}
# The warming thread looks this often; a figure is recomputed once it is older than
# its fresh period less WARM_AHEAD_FRACTION of it, so a request never finds it stale.
WARM_CHECK_SECONDS = 5.0
WARM_AHEAD_FRACTION = 0.5
WARMING_THREAD = "warm figures"
# Held while the thread is stopped: asked for meanwhile, it starts again only once that is done.
_warming_lock = threading.Lock()
_warming_stop = threading.Event()


def register(name: str, compute: Callable[[], object], *, fresh_seconds: float) -> None:
    """Keep figure ``name`` warm in every dashboard process that runs the warming thread."""
    _REGISTERED[name] = (compute, fresh_seconds)


def warm_once() -> list[str]:
    """Recompute, here and now, every registered figure that is missing, stale after an
    operator's change, or about to go stale; the names it recomputed."""
    done = []
    for name, (compute, fresh_seconds) in list(_REGISTERED.items()):
        key = store_key(name)
        entry = _get_entry(key)
        usable = entry is not None and entry[0] > stale_since()
        ahead = fresh_period(key, fresh_seconds) * (1 - WARM_AHEAD_FRACTION)
        if usable and time.time() - entry[0] < ahead:
            continue
        if cache.get(_failed_key(key)) is not None:
            continue  # failed a moment ago: tried again once its retry period is over
        if cache.add(f"{key}:refreshing", 1, REFRESH_LOCK_SECONDS):
            _refresh(key, compute, close_connections=False)
            done.append(name)
    return done


def _keep_warm() -> None:
    while not _warming_stop.is_set():
        try:
            warm_once()
        except Exception:
            log.exception("Warming the store-wide figures failed")
        finally:
            connections.close_all()
        _warming_stop.wait(WARM_CHECK_SECONDS)


def ensure_warming_running() -> None:
    """Start this process's warming thread (once): the figures are computed as the
    dashboard starts and kept fresh, so neither a first request nor one after a quiet
    spell waits for them."""
    with _warming_lock:
        running = threads.started(WARMING_THREAD)
        if running is None or not running.is_alive():
            _warming_stop.clear()
        threads.ensure_running(WARMING_THREAD, _keep_warm)


def stop_warming() -> None:
    """Stop this process's warming thread and wait for it (tests)."""
    with _warming_lock:
        _warming_stop.set()
        if (warming := threads.started(WARMING_THREAD)) is not None:
            warming.join(timeout=60)


def forget_all() -> None:
    """Mark this store's figures stale and drop them: an operator's change (a merge, a
    delete, a restore) shows at once, even where a refresh was already computing."""
    cache.set(store_key(STALE_MARK), time.time(), None)
    drop_figures()


def drop_figures() -> None:
    """Drop this store's figures from the shared cache and from this process's memory."""
    keys = [store_key(name) for name in FIGURES]
    # A figure that failed is tried again at once too: the change may be what it needed.
    cache.delete_many(
        [
            *keys,
            *(_failed_key(key) for key in keys),
            *(_stamp_key(key) for key in keys),
            *(_took_key(key) for key in keys),
        ]
    )
    for key in keys:
        _read.pop(key, None)
        _took.pop(key, None)
