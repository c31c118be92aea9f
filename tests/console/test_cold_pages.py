"""Cold pages (issue 16): no request computes a store-wide figure.

With the figure cache empty, the session list, the overview, its health panel and
/forks/ answer without running fork detection or the store counts in the request's
thread: each shows a placeholder that fetches itself, the figure is computed in a
background thread, and the next fetch shows it. An operator's change (forget_all)
never lets a figure computed before it show after it.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.core.cache import cache
from django.urls import reverse

from sessions_admin.core import forks as core_forks
from sessions_admin.store import cached
from sessions_admin.store import overview as store_overview
from sessions_admin.store.listing import conditions, filter_choices
from tests.builders import forked_conversation
from tests.console.test_merge_views import merge_via_views

HX = {"HX-Request": "true"}


class Computations:
    """Which threads ran each store-wide computation."""

    def __init__(self) -> None:
        self.threads: dict[str, list[threading.Thread]] = {}

    def wrap(self, name: str, function):
        def recorded(*args, **kwargs):
            self.threads.setdefault(name, []).append(threading.current_thread())
            return function(*args, **kwargs)

        return recorded

    def in_this_thread(self) -> list[str]:
        me = threading.current_thread()
        return [name for name, threads in self.threads.items() if me in threads]


@pytest.fixture
def computations(settings, monkeypatch):
    settings.SESSIONS_ADMIN_COLD_FIGURES_INLINE = False  # as a dashboard runs
    cache.clear()
    seen = Computations()
    # Fork detection (the list's marks, /forks/, the health panel) and the overview's counts.
    monkeypatch.setattr(
        core_forks, "find_fork_groups", seen.wrap("forks", core_forks.find_fork_groups)
    )
    monkeypatch.setattr(
        store_overview, "find_fork_groups", seen.wrap("forks", core_forks.find_fork_groups)
    )
    for name in ("store_totals", "sessions_per_day", "health_counts"):
        monkeypatch.setattr(store_overview, name, seen.wrap(name, getattr(store_overview, name)))
    # The filters' suggestions: three DISTINCT scans of the sessions table.
    monkeypatch.setattr(
        filter_choices, "read_choices", seen.wrap("choices", filter_choices.read_choices)
    )
    yield seen
    _wait_for_background()
    cache.clear()


def _wait_for_background() -> None:
    deadline = time.monotonic() + 30
    for thread in threading.enumerate():
        if thread.name.startswith("refresh "):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


def test_a_cold_list_shows_its_rows_and_fills_in_the_fork_marks_later(signed_in, computations):
    client = signed_in("viewer")
    forked_conversation()
    body = client.get(reverse("session_list")).content.decode()
    assert 'id="fork-marks"' in body  # the placeholder
    assert 'hx-get="/activity/fork-marks/"' in body
    # Its poller swaps only itself, not the rows its paragraph reloads (#results).
    assert 'hx-target="this" hx-swap="outerHTML"' in body
    assert "badge fork" not in body
    assert computations.in_this_thread() == []

    _wait_for_background()
    assert computations.threads["forks"] and computations.threads["choices"]  # elsewhere
    ready = client.get(reverse("fork_marks"), headers=HX)
    assert ready["HX-Trigger"] == "fork-marks-ready"
    body = client.get(reverse("session_list"), headers=HX).content.decode()
    assert body.count("badge fork") == 3
    assert 'id="fork-marks"' not in body
    assert computations.in_this_thread() == []


def test_while_fork_detection_runs_the_poll_answers_itself(signed_in, computations):
    client = signed_in("viewer")
    forked_conversation()
    # Another process holds the computation: nothing is ready yet.
    cache.add(cached.store_key("listing:forks") + ":refreshing", 1, 60)
    response = client.get(reverse("fork_marks"), headers=HX)
    assert "HX-Trigger" not in response
    assert 'hx-get="/activity/fork-marks/"' in response.content.decode()
    assert computations.in_this_thread() == []


def test_the_fork_filter_needs_the_set_and_computes_it(signed_in, computations):
    client = signed_in("viewer")
    ids = forked_conversation()
    body = client.get(reverse("session_list") + "?forks=1").content.decode()
    # A filter's answer depends on the figure: computed in the request, never guessed.
    assert all(sid in body for sid in ids)
    assert computations.in_this_thread() == ["forks"]


def test_a_cold_overview_and_health_panel_fill_in_from_the_background(signed_in, computations):
    client = signed_in("viewer")
    forked_conversation()
    body = client.get(reverse("home")).content.decode()
    assert "Counting the store" in body
    assert 'hx-trigger="load delay:1s"' in body
    assert 'class="stat-value"' not in body
    panel = client.get(reverse("health_panel"), headers=HX).content.decode()
    assert "Checking the store" in panel
    assert computations.in_this_thread() == []

    _wait_for_background()
    body = client.get(reverse("home"), headers=HX).content.decode()
    assert "Counting the store" not in body
    assert 'class="stat-value">4<' in body  # three forks and a delegate
    _wait_for_background()  # the health figure may have been started behind the forks
    panel = client.get(reverse("health_panel"), headers=HX).content.decode()
    if "Checking the store" in panel:
        _wait_for_background()
        panel = client.get(reverse("health_panel"), headers=HX).content.decode()
    assert 'data-check="forks"' in panel
    assert computations.in_this_thread() == []


def test_a_cold_forks_page_fills_in_from_the_background(signed_in, computations):
    client = signed_in("viewer")
    ids = forked_conversation()
    body = client.get(reverse("fork_list")).content.decode()
    assert "Searching the store for forks" in body
    assert ids[0] not in body
    assert computations.in_this_thread() == []

    _wait_for_background()
    body = client.get(reverse("fork_list"), headers=HX).content.decode()
    assert "1 fork group" in body
    assert all(sid in body for sid in ids)
    assert computations.in_this_thread() == []


def test_after_an_operators_change_a_figure_from_before_it_is_never_served(signed_in, computations):
    client = signed_in("support")
    ids = forked_conversation()
    client.get(reverse("fork_list"))
    client.get(reverse("session_list"))
    _wait_for_background()
    assert "1 fork group" in client.get(reverse("fork_list"), headers=HX).content.decode()
    assert "badge fork" in client.get(reverse("session_list"), headers=HX).content.decode()

    merge_via_views(client, ids)
    assert cached.stale_since() > 0
    # Not the group the merge just resolved: the placeholder, while it is found again.
    body = client.get(reverse("fork_list"), headers=HX).content.decode()
    assert "Searching the store for forks" in body
    listed = client.get(reverse("session_list"), headers=HX).content.decode()
    assert "badge fork" not in listed
    _wait_for_background()
    body = client.get(reverse("fork_list"), headers=HX).content.decode()
    assert "0 fork groups" in body
    assert computations.in_this_thread() == []


def test_warming_computes_every_figure_so_the_first_request_finds_them(
    signed_in, computations, monkeypatch
):
    client = signed_in("viewer")
    forked_conversation()
    cached.warm_once()
    assert all(cache.get(cached.store_key(name)) for name in cached.FIGURES)
    computations.threads.clear()
    assert "Counting the store" not in client.get(reverse("home")).content.decode()
    assert "Searching" not in client.get(reverse("fork_list")).content.decode()
    assert 'id="fork-marks"' not in client.get(reverse("session_list")).content.decode()
    assert computations.threads == {}

    # Fresh: nothing to do. Past half its fresh period: recomputed before it goes stale.
    assert cached.warm_once() == []
    later = time.time() + 40  # past half of every fresh period (30 s, 60 s the choices)
    monkeypatch.setattr(cached.time, "time", lambda: later)
    assert set(cached.warm_once()) == set(cached.FIGURES)


def test_a_dashboard_process_warms_the_figures_as_it_starts(signed_in, computations, monkeypatch):
    from sessions_admin import gunicorn_conf
    from sessions_admin.ledger import schedule, worker

    client = signed_in("viewer")
    forked_conversation()
    # gunicorn's hook, without the job worker, slug history and schedule it also starts.
    for module, name in (
        (worker, "ensure_worker_running"),
        (worker, "ensure_slug_history_running"),
        (schedule, "ensure_schedule_running"),
    ):
        monkeypatch.setattr(module, name, lambda: None)
    gunicorn_conf.post_worker_init(None)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
            cache.get(cached.store_key(name)) for name in cached.FIGURES
        ):
            time.sleep(0.05)
    finally:
        cached.stop_warming()
    assert all(cache.get(cached.store_key(name)) for name in cached.FIGURES)
    assert {t.name for name in computations.threads for t in computations.threads[name]} == {
        "warm figures"
    }
    assert "Counting the store" not in client.get(reverse("home")).content.decode()


def _broken(*args, **kwargs):
    raise RuntimeError("the store said no")


def test_a_figure_that_fails_in_the_background_is_shown_as_failed_not_polled_forever(
    signed_in, computations, monkeypatch
):
    client = signed_in("viewer")
    forked_conversation()
    monkeypatch.setattr(store_overview, "find_fork_groups", _broken)
    monkeypatch.setattr(store_overview, "store_totals", _broken)
    monkeypatch.setattr(conditions, "fork_id_set", _broken)
    # First asks start the computations (placeholders that ask again) ...
    assert "Searching the store for forks" in client.get(reverse("fork_list")).content.decode()
    assert "Counting the store" in client.get(reverse("home")).content.decode()
    assert 'id="fork-marks"' in client.get(reverse("session_list")).content.decode()
    assert "Checking the store" in client.get(reverse("health_panel"), headers=HX).content.decode()
    _wait_for_background()
    started = {t.name for t in threading.enumerate() if t.name.startswith("refresh ")}
    assert not started

    # ... which fail: every page now says so, with no poll left, and starts nothing again.
    forks = client.get(reverse("fork_list"), headers=HX).content.decode()
    assert "The search for forks failed: RuntimeError: the store said no" in forks
    assert "load delay" not in forks
    home = client.get(reverse("home"), headers=HX).content.decode()
    assert "could not be counted: RuntimeError: the store said no" in home
    assert "load delay" not in home
    panel = client.get(reverse("health_panel"), headers=HX).content.decode()
    assert "The health checks could not run: RuntimeError: the store said no" in panel
    assert "load delay" not in panel
    marks = client.get(reverse("fork_marks"), headers=HX).content.decode()
    assert "Fork detection failed" in marks and "fork-marks-poll" not in marks
    listing_page = client.get(reverse("session_list")).content.decode()
    assert "Fork detection failed" in listing_page and "fork-marks-poll" not in listing_page
    assert not [t for t in threading.enumerate() if t.name.startswith("refresh ")]

    # Once the failure's retry period is over (or after an operator's change), the next
    # ask computes again, and a working store shows its figures.
    monkeypatch.undo()
    cache.delete_many([cached.store_key(f"{name}") + ":failed" for name in cached.FIGURES])
    assert "Searching the store for forks" in client.get(reverse("fork_list")).content.decode()
    _wait_for_background()
    assert "1 fork group" in client.get(reverse("fork_list"), headers=HX).content.decode()


def test_an_operators_change_clears_a_failure_so_the_figure_is_tried_again(
    signed_in, computations, monkeypatch
):
    client = signed_in("viewer")
    forked_conversation()
    monkeypatch.setattr(store_overview, "find_fork_groups", _broken)
    client.get(reverse("fork_list"))
    _wait_for_background()
    assert "failed" in client.get(reverse("fork_list"), headers=HX).content.decode()
    monkeypatch.setattr(store_overview, "find_fork_groups", core_forks.find_fork_groups)
    cached.forget_all()
    assert "Searching the store for forks" in client.get(reverse("fork_list")).content.decode()
