"""What makes the console look finished (issue 15), in a real browser: one button style, the
favicon, exports and "copy link" at hand, every main page usable at phone width."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from playwright.sync_api import expect

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.ledger import worker
from sessions_admin.signin.roles import assign_role
from tests.browser.conftest import HTMX_SETTLED, PASSWORD
from tests.browser.hostile import hostile_store
from tests.builders import refund_lineage

# Everything that acts as a button: what the one style in console.css covers.
BUTTONS = 'button, input[type="submit"], input[type="button"], .button, .sa-btn'
PHONE = {"width": 390, "height": 844}


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    cache.clear()
    monkeypatch.setattr(worker, "ensure_worker_running", lambda: None)  # jobs stay queued
    yield
    cache.clear()


def _unstyled_buttons(page) -> list[str]:
    """Visible buttons not in the console's style: a native button keeps the UA's font and
    corners; the style sets the page's font family and 6px corners."""
    return page.eval_on_selector_all(
        BUTTONS,
        """found => {
          const family = getComputedStyle(document.body).fontFamily;
          return found.filter(e => e.offsetParent !== null).filter(e => {
            const s = getComputedStyle(e);
            return s.fontFamily !== family || s.borderTopLeftRadius !== "6px" ||
              s.cursor !== "pointer";
          }).map(e => e.outerHTML.slice(0, 120));
        }""",
    )


def test_every_button_has_the_one_style(signed_in_page):
    page = signed_in_page("admin")
    ids = refund_lineage()
    hostile = hostile_store(User.objects.get(username="operator"))
    pages = [
        "/",
        "/sessions/",
        "/sessions/?source=telegram",
        f"/sessions/{ids['tip']}/",
        f"/sessions/{ids['tip']}/delete/",
        "/bulk-delete/?preset=empty",
        f"/jobs/{hostile['job']}/",
        "/trash/",
        "/audit/",
        "/conversations/",
    ]
    for path in pages:
        page.goto(path)
        page.wait_for_function(HTMX_SETTLED)  # its htmx fragments have arrived
        assert page.locator(BUTTONS).count() > 0, path
        assert _unstyled_buttons(page) == [], path
    page.goto("/sessions/")
    page.locator("header.top").get_by_role("button", name="Sign out").click()
    page.goto("/login/")
    assert _unstyled_buttons(page) == []


def test_the_sign_in_page_is_a_card_with_the_brand_and_a_clear_error(page):
    assign_role(User.objects.create_user("support", password=PASSWORD), "support")
    failed_loads: list[str] = []
    page.on("response", lambda r: failed_loads.append(r.url) if r.status >= 400 else None)
    page.goto("/login/")
    card = page.locator(".signin-card")
    expect(card).to_contain_text("Sessions Admin")
    expect(page).to_have_title("Sign in · Sessions Admin")
    box = card.bounding_box()
    width = page.viewport_size["width"]
    assert abs(box["x"] + box["width"] / 2 - width / 2) < 2  # centred
    assert box["width"] < width / 2
    page.get_by_label("Username").fill("support")
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Sign in").click()
    alert = card.get_by_role("alert")
    expect(alert).to_have_text("Your username and password didn't match. Please try again.")
    assert alert.evaluate("e => getComputedStyle(e).backgroundColor") != "rgba(0, 0, 0, 0)"
    expect(page.get_by_label("Username")).to_have_value("support")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/login/" not in url)
    expect(page.locator("header.top .brand")).to_have_text("Sessions Admin")
    assert failed_loads == []  # the favicon included: no 404 on any load


def test_the_favicon_loads_with_every_page(page):
    icons: list[tuple[str, int]] = []
    page.on(
        "response",
        lambda r: icons.append((r.url, r.status)) if "favicon" in r.url else None,
    )
    page.goto("/login/")
    href = page.locator('link[rel="icon"]').get_attribute("href")
    assert href.endswith(".svg")
    assert page.request.get(href).status == 200
    root = page.request.get("/favicon.ico")
    assert root.status == 200
    assert root.headers["content-type"] in {"image/x-icon", "image/vnd.microsoft.icon"}
    assert all(status == 200 for _url, status in icons), icons


def test_exports_download_from_the_session_page_and_the_list(signed_in_page):
    ids = refund_lineage()
    page = signed_in_page("viewer")
    page.goto(f"/sessions/{ids['tip']}/")
    exports = page.locator(".exports")
    with page.expect_download() as one:
        exports.get_by_role("link", name="JSONL").first.click()
    assert one.value.suggested_filename == f"session-{ids['tip']}.jsonl"
    records = [json.loads(line) for line in open(one.value.path(), encoding="utf-8")]
    assert [r["session"]["id"] for r in records if r["type"] == "session"] == [ids["tip"]]
    with page.expect_download() as lineage:
        exports.get_by_role("link", name="Markdown").last.click()
    assert lineage.value.suggested_filename == f"lineage-{ids['tip']}.md"
    text = open(lineage.value.path(), encoding="utf-8").read()
    assert all(session_id in text for session_id in ids.values())

    page.goto("/sessions/?source=telegram&scope=all")
    with page.expect_download() as listed:
        page.locator(".exports").get_by_role("link", name="JSONL").click()
    records = [json.loads(line) for line in open(listed.value.path(), encoding="utf-8")]
    # Whole conversations (issue 25, item 14): the root's delegate (source tool) goes with them.
    delegate = db.fetchone(
        "SELECT id FROM sessions WHERE parent_session_id = %s AND source = 'tool'", [ids["root"]]
    )[0]
    assert {r["session"]["id"] for r in records if r["type"] == "session"} == {
        *ids.values(),
        delegate,
    }
    assert page.script_errors == []


def test_copy_link_to_a_message_puts_its_permalink_on_the_clipboard(signed_in_page, live_server):
    session_id = core.create_session(source="telegram").session_id
    core.append_messages(
        session_id=session_id,
        messages=[{"role": "user", "content": f"question {n}"} for n in range(30)],
    )
    page = signed_in_page("viewer")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page.goto(f"/sessions/{session_id}/")
    message = page.locator("article.msg").filter(has_text="question 20")
    message_id = message.get_attribute("id")[1:]
    button = message.locator("button.copy-link")
    expect(button).to_have_text("Copy link")
    button.click()
    expect(button).to_have_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == f"{live_server.url}/sessions/{session_id}/?around={message_id}#m{message_id}"

    page.goto(copied)
    expect(page.locator(f"#m{message_id}")).to_be_in_viewport()
    assert page.script_errors == []


def test_every_main_page_fits_a_phone(signed_in_page):
    page = signed_in_page("admin")
    ids = refund_lineage()
    hostile_store(User.objects.get(username="operator"))
    page.set_viewport_size(PHONE)
    pages = [
        "/",
        "/sessions/",
        "/sessions/?scope=all&source=telegram",
        f"/sessions/{ids['tip']}/",
        f"/sessions/{ids['root']}/",
        "/trash/",
        "/audit/",
        "/jobs/",
    ]
    overflowing = {}
    for path in pages:
        page.goto(path)
        page.wait_for_function(HTMX_SETTLED)  # its htmx fragments have arrived
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > PHONE["width"]:
            overflowing[path] = width
    page.locator("header.top").get_by_role("button", name="Sign out").click()
    page.goto("/login/")
    width = page.evaluate("document.documentElement.scrollWidth")
    if width > PHONE["width"]:
        overflowing["/login/"] = width
    assert overflowing == {}
