"""What a browser keeps of signed-in pages: no CSRF token in any URL, no htmx page snapshots."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

from playwright.sync_api import expect

from sessions_admin import core
from tests.builders import fresh_cache  # noqa: F401 - an autouse fixture


def _new(source: str, started_at: float, content: str) -> str:
    sid = core.create_session(source=source, started_at=started_at).session_id
    core.append_message(session_id=sid, role="user", content=content)
    return sid


def test_merge_selected_opens_the_preview_with_no_token_in_any_url(signed_in_page):
    picked = [_new("api_server", 1_700_000_000.0 + n, f"turn {n}") for n in range(2)]
    _new("cli", 1_700_000_100.0, "not picked")
    page = signed_in_page("support")
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto("/sessions/?scope=all")
    for sid in picked:
        page.check(f'input[name="ids"][value="{sid}"]')
    page.get_by_role("button", name="Merge selected…").click()
    page.wait_for_url(re.compile(r"/merge/preview/"))
    expect(page.locator("#merge-preview")).to_contain_text(picked[0])
    expect(page.locator("#merge-preview")).to_contain_text(picked[1])

    query = parse_qs(urlparse(page.url).query)
    assert set(query) == {"ids"} and sorted(query["ids"]) == sorted(picked)
    for url in [*requested, page.url]:
        assert "csrf" not in url.lower(), url
    # Nor in what the next navigation would send as Referer, nor in the history.
    page.go_back()
    page.wait_for_url(re.compile(r"/sessions/"))
    assert "csrf" not in page.url.lower()
    assert page.script_errors == []


def test_no_htmx_snapshot_of_signed_in_pages_survives_sign_out(signed_in_page):
    secret = "okapi-saffron-2291"
    sid = _new("cli", 1_700_000_000.0, f"the transcript says {secret}")
    core.append_message(session_id=sid, role="assistant", content="an answer")
    page = signed_in_page("viewer")
    # htmx navigations that push URLs: the list's filter form and the transcript toggle.
    page.goto("/sessions/?scope=all")
    details = page.locator("form.filters details.more-filters")
    if details.get_attribute("open") is None:  # open on a wide screen with a filter active
        details.locator("summary").click()
    page.fill('input[name="source"]', "cli")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r"source=cli"))
    page.goto(f"/sessions/{sid}/")
    page.get_by_role("link", name="Hide undone and compacted messages").click()
    # The toggle's request shares the machine with the rest of the suite (a full run timed
    # out at 10 s once): what is checked is what the browser keeps, not how fast.
    page.wait_for_url(re.compile(r"inactive=hide"), timeout=30_000)
    expect(page.locator("#transcript")).to_contain_text(secret)

    def stored() -> str:
        return page.evaluate(
            "() => JSON.stringify([Object.entries(sessionStorage), Object.entries(localStorage)])"
        )

    assert secret not in stored()
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile(r"/login/"))
    assert secret not in stored()
    assert "htmx-history-cache" not in stored()
    # Back after sign-out asks the server (no-store), which asks for a sign-in.
    page.go_back()
    page.wait_for_load_state()
    assert secret not in page.content()
    assert page.script_errors == []
