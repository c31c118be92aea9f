"""The overview in a real browser: the health panel arrives over htmx, its checks navigate."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from sessions_admin import core
from tests.builders import (
    dangling_compression,
    fresh_cache,  # noqa: F401 - an autouse fixture
)


def test_the_health_panel_loads_after_the_page_and_its_checks_navigate(signed_in_page):
    dangling_compression()
    page = signed_in_page("viewer")
    health_requests: list[str] = []
    page.on(
        "request",
        lambda request: (
            health_requests.append(request.headers.get("hx-request", ""))
            if urlparse(request.url).path == "/health/"
            else None
        ),
    )

    health_requests.clear()  # the sign-in landed on the overview already
    response = page.goto("/")
    assert "?health=dangling_compression" not in response.text()  # not in the page as served
    page.evaluate("window.sameDocument = true")

    link = page.locator('#health-panel a[data-check="dangling_compression"]')
    link.wait_for(state="visible")
    assert link.locator(".check-count").inner_text() == "1"
    assert page.evaluate("window.sameDocument") is True  # no reload: htmx swapped it in
    assert health_requests and all(hx == "true" for hx in health_requests)
    assert page.locator("#health-panel .loading").count() == 0

    with page.expect_request(
        lambda request: (
            request.is_navigation_request() and urlparse(request.url).path == "/sessions/"
        )
    ) as navigation:
        link.click()
    assert parse_qs(urlparse(navigation.value.url).query) == {"health": ["dangling_compression"]}
    assert page.script_errors == []


def test_the_chart_is_visible_with_a_bar_per_day(signed_in_page):
    core.create_session(source="cli")
    page = signed_in_page("viewer")
    page.goto("/")
    chart = page.locator("svg.day-chart")
    assert chart.is_visible()
    box = chart.bounding_box()
    assert box["width"] > 300 and box["height"] > 80
    assert chart.locator("rect.bar").count() == 30
    today = chart.locator("g.day").last
    assert "1 session started" in today.locator("title").text_content()
    assert today.locator("rect.bar").bounding_box()["height"] > 10
    # The text alternative is in the page but not drawn.
    assert page.locator("table.visually-hidden caption").count() == 1
    assert page.script_errors == []
