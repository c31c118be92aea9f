"""Store-wide figures: shared by every worker, refreshed in the background, dropped on change."""

from __future__ import annotations

import threading

import pytest
from django.core.cache import cache, caches

from sessions_admin.ledger import actions
from sessions_admin.store import cached


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()
    yield
    cache.clear()


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return self.calls


def _wait_for_refresh() -> None:
    for thread in threading.enumerate():
        if thread.name.startswith("refresh "):
            thread.join(timeout=10)


def test_it_computes_once_while_fresh():
    compute = Counter()
    assert cached.cached_figure("listing:forks", compute, fresh_seconds=60) == 1
    assert cached.cached_figure("listing:forks", compute, fresh_seconds=60) == 1
    assert compute.calls == 1


def test_it_is_shared_beyond_this_process_memory():
    cached.cached_figure("listing:forks", lambda: {"a", "b"}, fresh_seconds=60)
    # A second cache handler reads the same files, as another gunicorn worker does.
    other_worker = caches.create_connection("default")
    _computed_at, value = other_worker.get(cached.store_key("listing:forks"))
    assert value == {"a", "b"}


def test_a_stale_value_is_served_while_one_background_refresh_runs(monkeypatch):
    compute = Counter()
    cached.cached_figure("overview:totals", compute, fresh_seconds=60)
    clock = [cached.time.time() + 120]
    monkeypatch.setattr(cached.time, "time", lambda: clock[0])
    started = threading.Event()
    release = threading.Event()

    def slow():
        started.set()
        release.wait(10)
        return compute()

    assert cached.cached_figure("overview:totals", slow, fresh_seconds=60) == 1
    assert started.wait(10)
    # While it refreshes, others get the stale value and start no second refresh.
    assert cached.cached_figure("overview:totals", slow, fresh_seconds=60) == 1
    release.set()
    _wait_for_refresh()
    assert compute.calls == 2
    assert cached.cached_figure("overview:totals", compute, fresh_seconds=60) == 2
    assert compute.calls == 2


def test_a_failed_refresh_keeps_the_stale_value(monkeypatch):
    cached.cached_figure("overview:health", lambda: "old", fresh_seconds=60)
    later = cached.time.time() + 120  # stale, not yet expired from the cache
    monkeypatch.setattr(cached.time, "time", lambda: later)

    def broken():
        raise RuntimeError("store went away")

    assert cached.cached_figure("overview:health", broken, fresh_seconds=60) == "old"
    _wait_for_refresh()
    assert cache.get(cached.store_key("overview:health"))[1] == "old"
    assert cache.get(cached.store_key("overview:health") + ":refreshing") is None


def test_an_operator_action_drops_the_figures_so_it_shows_at_once(django_user_model):
    from sessions_admin import core

    for name in cached.FIGURES:
        cached.cached_figure(name, lambda: "before", fresh_seconds=60)
    session_id = core.create_session(source="cli").session_id
    core.append_message(session_id=session_id, role="user", content="hi")
    core.append_message(session_id=session_id, role="assistant", content="hello")  # answered
    actor = django_user_model.objects.create(username="op")
    actions.rewrite(actor=actor, session_id=session_id, action="undo")
    assert all(cache.get(cached.store_key(name)) is None for name in cached.FIGURES)


def test_a_refused_action_keeps_them():
    cached.cached_figure("listing:forks", lambda: "before", fresh_seconds=60)
    with pytest.raises(Exception):  # noqa: B017 - any refusal
        actions.rewrite(actor=None, session_id="no-such-session", action="undo")
    assert cache.get(cached.store_key("listing:forks"))[1] == "before"


def test_it_says_when_a_figure_was_computed(monkeypatch):
    clock = [1_000_000.0]
    monkeypatch.setattr(cached.time, "time", lambda: clock[0])
    assert cached.cached_figure_at("overview:totals", lambda: "v", fresh_seconds=60) == (
        1_000_000.0,
        "v",
    )
    clock[0] += 40
    # Served from the cache: still the time it was computed, not the time it was read.
    assert cached.cached_figure_at("overview:totals", lambda: "w", fresh_seconds=60) == (
        1_000_000.0,
        "v",
    )


def test_a_refresh_running_across_an_action_never_serves_its_older_value(monkeypatch):
    cached.cached_figure("overview:forks", lambda: "before the merge", fresh_seconds=60)
    clock = [cached.time.time() + 120]  # stale: the next read starts a background refresh
    monkeypatch.setattr(cached.time, "time", lambda: clock[0])
    started = threading.Event()
    release = threading.Event()

    def slow():
        started.set()
        release.wait(10)
        return "read before the merge committed"

    assert cached.cached_figure("overview:forks", slow, fresh_seconds=60) == "before the merge"
    assert started.wait(10)
    clock[0] += 1
    cached.forget_all()  # a merge committed while the refresh was reading
    release.set()
    _wait_for_refresh()
    clock[0] += 1
    # Neither the dropped value nor the refresh's (it started before the merge) is served.
    at, value = cached.cached_figure_at("overview:forks", lambda: "after", fresh_seconds=60)
    assert (at, value) == (clock[0], "after")


def test_a_figure_computed_while_an_action_commits_is_recomputed(monkeypatch):
    clock = [1_000_000.0]
    monkeypatch.setattr(cached.time, "time", lambda: clock[0])

    def racing():
        clock[0] += 1
        cached.forget_all()  # the store changed after this computation began
        return "racing"

    assert cached.cached_figure("overview:totals", racing, fresh_seconds=60) == "racing"
    clock[0] += 1
    assert cached.cached_figure("overview:totals", lambda: "after", fresh_seconds=60) == "after"
    assert cached.cached_figure("overview:totals", lambda: "later", fresh_seconds=60) == "after"


def test_a_bulk_delete_job_drops_the_figures_when_it_ran(django_user_model):
    from sessions_admin import core
    from sessions_admin.core import db
    from sessions_admin.ledger import jobs

    ids = []
    for n in range(3):
        sid = core.create_session(source="cli", started_at=1000.0 + n).session_id
        core.end_session(session_id=sid, end_reason="user_exit")
        ids.append(sid)
    job_id = jobs.create_bulk_delete_job(
        session_ids=ids, include_live=False, actor="op", reason="old test chats"
    )
    for name in cached.FIGURES:
        cached.cached_figure(name, lambda: "before", fresh_seconds=60)

    jobs.run_job(job_id=job_id, worker="w")

    assert db.fetchall(f"SELECT id FROM sessions WHERE id IN ({db.placeholders(ids)})", ids) == []
    assert all(cache.get(cached.store_key(name)) is None for name in cached.FIGURES)
    assert cached.cached_figure("overview:totals", lambda: "after", fresh_seconds=60) == "after"


def test_a_page_never_starts_a_second_computation_beside_one_this_process_runs(settings):
    settings.SESSIONS_ADMIN_COLD_FIGURES_INLINE = False
    started = threading.Event()
    release = threading.Event()
    calls = []

    def slow():
        calls.append(1)
        started.set()
        release.wait(10)
        return "figure"

    assert cached.ready_figure_at("overview:forks", slow, fresh_seconds=60) is None
    assert started.wait(10)
    cache.clear()  # the cross-process lock gone with the rest, as after a cache clear
    assert cached.ready_figure_at("overview:forks", slow, fresh_seconds=60) is None
    release.set()
    _wait_for_refresh()
    assert calls == [1]


def test_a_process_reads_a_big_figure_from_the_shared_cache_only_when_it_changed(monkeypatch):
    big = list(range(50_000))
    assert cached.cached_figure("overview:forks", lambda: big, fresh_seconds=60) == big
    full_reads = []
    real_get = cache.get

    def counting_get(key, *args, **kwargs):
        if key == cached.store_key("overview:forks"):
            full_reads.append(key)
        return real_get(key, *args, **kwargs)

    monkeypatch.setattr(cache, "get", counting_get)
    for _ in range(3):
        assert cached.cached_figure("overview:forks", lambda: [], fresh_seconds=60) == big
    assert full_reads == []  # only the small time stamp was read

    # Another process (another host) computes it again: this one sees the new value.
    key = cached.store_key("overview:forks")
    later = real_get(key)[0] + 1
    cache.set(key, (later, ["recomputed elsewhere"]), 600)
    cache.set(key + ":at", later, 600)
    assert cached.cached_figure("overview:forks", lambda: [], fresh_seconds=60) == [
        "recomputed elsewhere"
    ]
    assert len(full_reads) == 1
    # An operator's change drops it everywhere: computed again, not served from memory.
    cached.forget_all()
    assert cached.cached_figure("overview:forks", lambda: ["after"], fresh_seconds=60) == ["after"]


def test_a_figure_slow_to_compute_stays_fresh_longer(monkeypatch, settings):
    """Refreshes of a figure use at most 1/REFRESH_COST_FACTOR of a core: one whose last
    computation took 3 s stays fresh for 60 s although its period says 30, where a quick
    one with the same period is recomputed sooner."""
    settings.SESSIONS_ADMIN_REFRESH_IN_BACKGROUND = False
    clock = [1_000_000.0]
    monkeypatch.setattr(cached.time, "time", lambda: clock[0])
    calls = {"slow": 0, "quick": 0}

    def slow():
        calls["slow"] += 1
        clock[0] += 3.0  # the computation's own time, on the patched clock
        return calls["slow"]

    def quick():
        calls["quick"] += 1
        return calls["quick"]

    assert cached.cached_figure("listing:forks", slow, fresh_seconds=30) == 1
    assert cached.cached_figure("overview:totals", quick, fresh_seconds=30) == 1
    # The warming thread recomputes a figure halfway through its period: 20 s on, the
    # quick one (period 30 s), not the slow one (60 s).
    clock[0] += 20
    registered = {"listing:forks": (slow, 30), "overview:totals": (quick, 30)}
    assert _warmed(monkeypatch, registered) == ["overview:totals"]
    clock[0] += 20  # 43 s after the slow one started
    assert cached.cached_figure("listing:forks", slow, fresh_seconds=30) == 1
    clock[0] += 30  # 73 s after it started: past its 60 s
    assert cached.cached_figure("listing:forks", slow, fresh_seconds=30) == 2
    # A second worker process reads how long it took from the shared cache too.
    cached._took.clear()
    cached._read.clear()
    clock[0] += 40
    assert cached.cached_figure("listing:forks", slow, fresh_seconds=30) == 2


def _warmed(monkeypatch, registered: dict) -> list[str]:
    monkeypatch.setattr(cached, "_REGISTERED", registered)
    return cached.warm_once()


class Moved:
    """A figure's class as an older version of the code pickled it."""


def test_a_figure_pickled_by_another_version_of_the_code_is_computed_again(monkeypatch):
    key = cached.store_key("listing:forks")
    cache.set(key, (9e12, Moved()), 600)  # fresh for ever, were it readable
    cached._read.clear()
    # The class has moved since (a deploy): the pickled value names a class no longer there.
    monkeypatch.delattr(__import__(__name__, fromlist=["Moved"]), "Moved")

    compute = Counter()
    assert cached.cached_figure("listing:forks", compute, fresh_seconds=60) == 1
    assert compute.calls == 1
