"""Cold pages in a real browser (issue 16): a page served before its store-wide figure
was computed fills the figure in by itself, without a reload and within the CSP."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from tests.builders import forked_conversation


@pytest.fixture(autouse=True)
def _as_a_dashboard_runs(settings):
    settings.SESSIONS_ADMIN_COLD_FIGURES_INLINE = False
    cache.clear()
    yield
    cache.clear()


def _signed_in_then_cold(signed_in_page):
    """Signed in (the login lands on the overview, which starts the figures' computation);
    once the overview has them, the cache is emptied, as at a dashboard's start."""
    page = signed_in_page("viewer")
    page.locator("#overview .stat-value").first.wait_for(state="visible")
    page.locator('#health-panel a[data-check="forks"]').wait_for(state="visible")
    cache.clear()
    return page


def test_a_cold_list_gets_its_fork_marks_without_a_reload(signed_in_page):
    ids = forked_conversation()
    page = _signed_in_then_cold(signed_in_page)
    response = page.goto("/sessions/")
    served = response.text()
    assert 'id="fork-marks"' in served and "badge fork" not in served
    page.evaluate("window.sameDocument = true")

    page.locator("#results .badge.fork").first.wait_for(state="visible")
    assert page.locator("#results .badge.fork").count() == len(ids)
    assert page.locator("#fork-marks").count() == 0
    assert page.evaluate("window.sameDocument") is True  # htmx swapped the rows in
    assert page.script_errors == []


def test_a_cold_overview_and_forks_page_fill_in(signed_in_page):
    forked_conversation()
    page = _signed_in_then_cold(signed_in_page)
    response = page.goto("/")
    assert "Counting the store" in response.text()
    page.locator("#overview .stat-value").first.wait_for(state="visible")
    page.locator('#health-panel a[data-check="forks"]').wait_for(state="visible")

    cache.clear()
    response = page.goto("/forks/")
    assert "Searching the store for forks" in response.text()
    page.locator("#fork-groups .fork-group").first.wait_for(state="visible")
    assert page.locator("#fork-groups .fork-group").count() == 1
    assert page.script_errors == []
