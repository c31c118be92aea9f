"""The session list in a real browser: htmx filtering with pushed URLs, search, paging, selection."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from django.core.cache import cache
from playwright.sync_api import expect

from sessions_admin import core

ROW_BOXES = 'input[name="ids"]'
# Waits go through locators: the CSP forbids eval, so page.wait_for_function(str) cannot run.


@pytest.fixture(autouse=True)
def _no_cached_forks_or_choices():
    """The list caches fork ids and dropdown choices briefly; each test starts fresh."""
    cache.clear()


def _new(source: str, started_at: float, **kwargs) -> str:
    return core.create_session(source=source, started_at=started_at, **kwargs).session_id


def _row_ids(page) -> list[str]:
    return page.eval_on_selector_all(ROW_BOXES, "boxes => boxes.map(b => b.value)")


def _query(page) -> dict[str, list[str]]:
    return parse_qs(urlparse(page.url).query)


def test_filtering_by_source_updates_rows_and_pushes_the_url(signed_in_page):
    telegram = [_new("telegram", 1_700_000_000.0 + n) for n in range(2)]
    cli = [_new("cli", 1_700_000_100.0 + n) for n in range(2)]
    page = signed_in_page("viewer")
    page.goto("/sessions/")
    assert set(_row_ids(page)) == set(telegram + cli)
    page.evaluate("window.notReloaded = true")

    page.fill('input[name="source"]', "telegram")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r"source=telegram"))
    expect(page.locator(ROW_BOXES)).to_have_count(2)
    assert set(_row_ids(page)) == set(telegram)
    assert _query(page) == {"source": ["telegram"]}  # empty fields left out of the URL
    assert page.evaluate("window.notReloaded") is True  # htmx swapped the results in place

    # The pushed URL is a real, bookmarkable page.
    page.goto(page.url)
    assert set(_row_ids(page)) == set(telegram)
    assert page.input_value('input[name="source"]') == "telegram"
    assert page.script_errors == []


def test_search_shows_highlighted_snippets_linking_to_the_message(signed_in_page):
    sid = _new("cli", 1_700_000_000.0)
    result = core.append_message(
        session_id=sid,
        role="user",
        content="find the needle <img src=x onerror=window.pwned=1> in the haystack",
    )
    page = signed_in_page("viewer")
    page.goto("/sessions/")
    page.fill('input[name="q"]', "needle")
    page.press('input[name="q"]', "Enter")
    page.wait_for_url(re.compile(r"q=needle"))
    mark = page.locator("ol.hit-sessions mark").first
    mark.wait_for()
    assert mark.inner_text() == "needle"
    snippet = page.locator("ol.hit-sessions a.snippet").first
    assert "<img src=x onerror=window.pwned=1>" in snippet.inner_text()  # shown as text
    assert page.evaluate("window.pwned") is None
    message_id = result.message_ids[0]
    assert (
        snippet.get_attribute("href")
        == f"/sessions/{sid}/?around={message_id}&q=needle#m{message_id}"
    )
    assert page.script_errors == []


def test_next_page_then_the_back_button(signed_in_page):
    ids = [_new("cli", 1_700_000_000.0 + n) for n in range(30)]
    newest_first = list(reversed(ids))
    page = signed_in_page("viewer")
    page.goto("/sessions/?per=25")
    assert _row_ids(page) == newest_first[:25]

    page.click("nav.pager a.next")
    page.wait_for_url(re.compile(r"after="))
    expect(page.locator(ROW_BOXES)).to_have_count(5)
    assert _row_ids(page) == newest_first[25:]
    assert _query(page)["per"] == ["25"]

    page.go_back()
    page.wait_for_url(lambda url: "after=" not in url)
    expect(page.locator(ROW_BOXES)).to_have_count(25)
    assert _row_ids(page) == newest_first[:25]

    page.go_forward()
    page.wait_for_url(re.compile(r"after="))
    expect(page.locator(ROW_BOXES)).to_have_count(5)
    assert _row_ids(page) == newest_first[25:]
    assert page.script_errors == []


def test_shift_click_selects_a_range_and_select_all_selects_the_page(signed_in_page):
    for n in range(6):
        _new("cli", 1_700_000_000.0 + n)
    page = signed_in_page("viewer")
    page.goto("/sessions/")
    boxes = page.locator(ROW_BOXES)
    boxes.nth(1).click()
    boxes.nth(4).click(modifiers=["Shift"])
    checked = page.eval_on_selector_all(ROW_BOXES, "boxes => boxes.map(b => b.checked)")
    assert checked == [False, True, True, True, True, False]
    assert page.inner_text("[data-selected-count]") == "4 selected"

    # Shift-clicking a checked box clears the range back to the last click, both ends included.
    boxes.nth(2).click(modifiers=["Shift"])
    checked = page.eval_on_selector_all(ROW_BOXES, "boxes => boxes.map(b => b.checked)")
    assert checked == [False, True, False, False, False, False]

    page.check("[data-select-all]")
    checked = page.eval_on_selector_all(ROW_BOXES, "boxes => boxes.map(b => b.checked)")
    assert checked == [True] * 6
    assert page.inner_text("[data-selected-count]") == "6 selected"
    page.uncheck("[data-select-all]")
    assert page.inner_text("[data-selected-count]") == "0 selected"
    assert page.script_errors == []


def test_the_demo_store_can_be_filtered_searched_and_paged(signed_in_page):
    from django.core.management import call_command

    from sessions_admin.core import db

    call_command("seed_demo", "--sessions", "60", "--long-transcript", "0", stdout=None)
    source = db.fetchone(
        "SELECT source FROM sessions GROUP BY source ORDER BY COUNT(*) DESC LIMIT 1"
    )[0]
    page = signed_in_page("viewer")
    page.goto("/sessions/?scope=all&per=25")
    first_page = _row_ids(page)
    assert len(first_page) == 25
    page.click("a.next")
    page.wait_for_url(re.compile(r"after="))
    expect(page.locator(ROW_BOXES).first).not_to_have_value(first_page[0])
    second_page = _row_ids(page)
    assert second_page and not set(second_page) & set(first_page)

    page.goto("/sessions/?scope=all")
    page.fill('input[name="source"]', source)
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(rf"source={source}"))
    shown = set(_row_ids(page))
    expected = {r[0] for r in db.fetchall("SELECT id FROM sessions WHERE source = %s", [source])}
    assert shown and shown <= expected

    content = db.fetchone(
        "SELECT m.content FROM messages m JOIN sessions s ON s.id = m.session_id "
        "WHERE s.source = %s AND m.role = 'user' AND m.active = 1 AND m.content IS NOT NULL "
        "ORDER BY m.id LIMIT 1",
        [source],
    )[0]  # a word of the filtered source's own messages, so the search has hits
    word = max(re.findall(r"[A-Za-z]{4,}", content), key=len)
    page.fill('input[name="q"]', word)
    page.press('input[name="q"]', "Enter")
    page.wait_for_url(re.compile(rf"q={word}"))
    page.locator("ol.hit-sessions mark").first.wait_for()
    assert page.script_errors == []
