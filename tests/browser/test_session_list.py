"""The session list in a real browser: htmx filtering with pushed URLs, search, paging, selection."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

from django.contrib.auth.models import User
from playwright.sync_api import expect

from sessions_admin import core
from sessions_admin.signin.roles import assign_role
from tests.browser.conftest import PASSWORD
from tests.builders import fresh_cache  # noqa: F401 - an autouse fixture

ROWS = "tr[data-session-id]"
ROW_BOXES = 'input[name="ids"]'
# Waits go through locators: the CSP forbids eval, so page.wait_for_function(str) cannot run.


def _new(source: str, started_at: float, **kwargs) -> str:
    return core.create_session(source=source, started_at=started_at, **kwargs).session_id


def _row_ids(page) -> list[str]:
    """The sessions the table lists (every role sees rows; only operators get checkboxes)."""
    return page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.sessionId)")


def _show_filters(page) -> None:
    """Open the "Filters" control (closed unless a filter is active on a wide screen)."""
    details = page.locator("form.filters details.more-filters")
    if details.get_attribute("open") is None:
        details.locator("summary").click()


def _query(page) -> dict[str, list[str]]:
    return parse_qs(urlparse(page.url).query)


def test_filtering_by_source_updates_rows_and_pushes_the_url(signed_in_page):
    telegram = [_new("telegram", 1_700_000_000.0 + n) for n in range(2)]
    cli = [_new("cli", 1_700_000_100.0 + n) for n in range(2)]
    page = signed_in_page("viewer")
    page.goto("/sessions/")
    assert set(_row_ids(page)) == set(telegram + cli)
    page.evaluate("window.notReloaded = true")

    _show_filters(page)
    page.fill('input[name="source"]', "telegram")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r"source=telegram"))
    expect(page.locator(ROWS)).to_have_count(2)
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
    expect(page.locator(ROWS)).to_have_count(5)
    assert _row_ids(page) == newest_first[25:]
    assert _query(page)["per"] == ["25"]

    page.go_back()
    page.wait_for_url(lambda url: "after=" not in url)
    expect(page.locator(ROWS)).to_have_count(25)
    assert _row_ids(page) == newest_first[:25]

    page.go_forward()
    page.wait_for_url(re.compile(r"after="))
    expect(page.locator(ROWS)).to_have_count(5)
    assert _row_ids(page) == newest_first[25:]
    assert page.script_errors == []


def test_shift_click_selects_a_range_and_select_all_selects_the_page(signed_in_page):
    for n in range(6):
        _new("cli", 1_700_000_000.0 + n)
    page = signed_in_page("support")  # viewers get no checkboxes
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
    expect(page.locator(ROWS).first).not_to_have_attribute("data-session-id", first_page[0])
    second_page = _row_ids(page)
    assert second_page and not set(second_page) & set(first_page)

    page.goto("/sessions/?scope=all")
    _show_filters(page)
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


def test_on_a_phone_the_filters_fold_behind_one_control(signed_in_page):
    ids = [_new("telegram" if n % 2 else "cli", 1_700_000_000.0 + n) for n in range(4)]
    page = signed_in_page("viewer")
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/sessions/")
    details = page.locator("form.filters details.more-filters")
    assert details.get_attribute("open") is None
    expect(page.locator('input[name="q"]')).to_be_visible()
    expect(page.locator("form.filters button[type=submit]")).to_be_visible()
    expect(page.locator('input[name="source"]')).to_be_hidden()
    expect(details.locator("summary")).to_have_text("Filters")
    # The results start high on the first screen (the filters alone took 1,200 px here).
    assert page.locator("#results").bounding_box()["y"] < 400
    assert page.locator("table.sessions").bounding_box()["y"] < 600
    assert set(_row_ids(page)) == set(ids)

    details.locator("summary").click()
    page.fill('input[name="source"]', "telegram")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r"source=telegram"))
    expect(page.locator(ROWS)).to_have_count(2)
    expect(details.locator("summary")).to_have_text("Filters · 1 active")

    # Loaded with a filter active, a phone still starts with them folded.
    page.goto(page.url)
    expect(details.locator("summary")).to_have_text("Filters · 1 active")
    assert details.get_attribute("open") is None
    assert page.locator("#results").bounding_box()["y"] < 400
    assert page.script_errors == []


def test_on_a_wide_screen_active_filters_start_open_and_still_apply(signed_in_page):
    telegram = [_new("telegram", 1_700_000_000.0 + n) for n in range(2)]
    _new("cli", 1_700_000_100.0)
    page = signed_in_page("viewer")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto("/sessions/")
    details = page.locator("form.filters details.more-filters")
    assert details.get_attribute("open") is None  # nothing active: only the search box
    details.locator("summary").click()
    page.select_option('select[name="archived"]', "0")
    page.fill('input[name="source"]', "telegram")
    page.press('input[name="source"]', "Enter")
    page.wait_for_url(re.compile(r"source=telegram"))
    expect(page.locator(ROWS)).to_have_count(2)
    assert set(_row_ids(page)) == set(telegram)
    expect(details.locator("summary")).to_have_text("Filters · 2 active")

    page.goto(page.url)
    expect(details).to_have_attribute("open", "")
    expect(page.locator('input[name="source"]')).to_have_value("telegram")
    assert set(_row_ids(page)) == set(telegram)
    assert page.script_errors == []


def test_rows_are_labelled_by_their_first_user_message_and_viewers_get_no_checkboxes(
    signed_in_page,
):
    sid = _new("cli", 1_700_000_000.0)
    core.append_message(
        session_id=sid, role="user", content="\u202eredro ym\u202c <b>where</b>\nis my order?"
    )
    page = signed_in_page("viewer")
    page.goto("/sessions/")
    label = page.locator(f'tr[data-session-id="{sid}"] .label')
    expect(label).to_have_text("redro ym <b>where</b> is my order?")  # inert, one line
    assert page.locator(f'tr[data-session-id="{sid}"] code.sid').inner_text() == sid
    expect(page.locator(ROW_BOXES)).to_have_count(0)
    expect(page.locator("[data-select-all]")).to_have_count(0)
    assert page.script_errors == []


def test_the_filters_control_works_without_javascript(browser, live_server):
    telegram = _new("telegram", 1_700_000_000.0)
    _new("cli", 1_700_000_100.0)
    assign_role(User.objects.create_user("no-js", password=PASSWORD), "viewer")
    context = browser.new_context(base_url=live_server.url, java_script_enabled=False)
    try:
        page = context.new_page()
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto("/login/")
        page.fill("input[name=username]", "no-js")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/login/" not in url)
        page.goto("/sessions/")
        expect(page.locator('input[name="source"]')).to_be_hidden()
        page.locator("form.filters details.more-filters summary").click()
        page.fill('input[name="source"]', "telegram")
        page.click("form.filters button[type=submit]")  # a plain GET of the whole page
        page.wait_for_url(re.compile(r"source=telegram"))
        assert _row_ids(page) == [telegram]
        expect(page.locator("form.filters summary")).to_have_text("Filters · 1 active")
    finally:
        context.close()
