"""Message text as Markdown in a real browser: elements, monospace code, inert hostile input,
the raw toggle; tool-call turns in the merge and undo previews shown as calls."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from sessions_admin import core
from sessions_admin.signin.roles import assign_role
from tests.browser import open_support_actions
from tests.browser.conftest import PASSWORD

RICH = (
    "Run `make test` first.\n\n"
    "```\nprint('hi')\n```\n\n"
    "| name | count |\n|:-----|------:|\n| a | 1 |\n\n"
    "## Steps\n\n- one\n- **two**"
)
# Everything it could make carries class "xss", sets window.__xss or fetches a URL.
HOSTILE = (
    "<script>window.__xss=1</script>\n\n"
    "[click](javascript:window.__xss=1) [data](data:text/html,<script>window.__xss=1</script>)\n\n"
    '<img class=xss src=x onerror="window.__xss=1">\n\n'
    "![pic](https://example.invalid/x.png)\n\n"
    "<div class=xss><b>unbalanced <i>tags\n\n"
    '<a class=xss href="javascript:window.__xss=1">raw</a>\n\n'
    '[t](https://example.invalid "x\\" onmouseover=\\"window.__xss=1")'
)
INJECTED = ".xss, script:not([src]), img, [onerror], [onmouseover], a[href^='javascript:'], a[href^='data:']"


def call(call_id: str, name: str, arguments: dict) -> dict:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {"id": call_id, "type": "function", "function": function}


def test_markdown_renders_as_elements_and_the_raw_toggle_shows_the_source(signed_in_page):
    ref = core.create_session(source="cli").session_id
    core.append_messages(
        session_id=ref,
        messages=[
            {"role": "user", "content": "how do I test?"},
            {"role": "assistant", "content": RICH},
        ],
    )
    page = signed_in_page("viewer")
    page.goto(f"/sessions/{ref}/")
    text = page.locator("#transcript .msg.role-assistant .text.md")
    expect(text.locator("table th").first).to_have_text("name")
    expect(text.locator("pre code")).to_contain_text("print('hi')")
    expect(text.locator("h5")).to_have_text("Steps")
    expect(text.locator("li strong")).to_have_text("two")
    inline = text.locator("p code")
    expect(inline).to_have_text("make test")
    font = inline.evaluate("e => getComputedStyle(e).fontFamily")
    assert "monospace" in font
    assert "monospace" not in text.locator("p").first.evaluate(
        "e => getComputedStyle(e).fontFamily"
    )

    toggle = page.locator("#transcript a.text-toggle")
    expect(toggle).to_have_text("Show raw text")
    toggle.click()
    page.wait_for_url(f"**/sessions/{ref}/?text=raw")
    raw = page.locator("#transcript .msg.role-assistant .text")
    expect(raw).to_contain_text("| name | count |")
    expect(raw).to_contain_text("**two**")
    expect(page.locator("#transcript table")).to_have_count(0)
    page.locator("#transcript a.text-toggle").click()
    page.wait_for_url(f"**/sessions/{ref}/")
    expect(page.locator("#transcript .text.md table")).to_have_count(1)
    assert page.script_errors == []


@pytest.fixture
def csp_bypassed_page(browser, live_server):
    """A viewer's page with the Content-Security-Policy off: the rendering alone must hold."""
    User.objects.create_user("reader", password=PASSWORD)
    assign_role(User.objects.get(username="reader"), "viewer")
    context = browser.new_context(base_url=live_server.url, bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.dialogs = []
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.requested = requested
    page.goto("/login/")
    page.fill("input[name=username]", "reader")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url)
    yield page
    context.close()


def test_hostile_markdown_stays_inert(csp_bypassed_page):
    page = csp_bypassed_page
    ref = core.create_session(source="cli").session_id
    core.append_messages(
        session_id=ref,
        messages=[
            {"role": "user", "content": HOSTILE},
            {"role": "assistant", "content": "noted", "reasoning": HOSTILE},
        ],
    )
    page.goto(f"/sessions/{ref}/")
    page.wait_for_load_state("networkidle")
    page.locator("details.reasoning summary").click()
    for link in page.locator("#transcript .text.md a").all():
        link.hover()  # an injected onmouseover would run now
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.dialogs == []
    injected = page.eval_on_selector_all(INJECTED, "found => found.map(e => e.outerHTML)")
    assert injected == []
    assert not [url for url in page.requested if "example.invalid" in url]  # no image fetched
    user_text = page.locator("#transcript .msg.role-user .text.md")
    expect(user_text).to_contain_text("<script>window.__xss=1</script>")
    expect(user_text).to_contain_text('<img class=xss src=x onerror="window.__xss=1">')
    expect(user_text.get_by_role("link", name="pic")).to_have_attribute(
        "href", "https://example.invalid/x.png"
    )
    expect(user_text.get_by_role("link", name="pic")).to_have_attribute(
        "rel", "nofollow noopener noreferrer"
    )


def test_tool_call_turns_are_calls_in_the_merge_and_undo_previews(signed_in_page):
    a = core.create_session(source="cli", started_at=1.0).session_id
    b = core.create_session(source="cli", started_at=2.0).session_id
    core.append_messages(
        session_id=a,
        messages=[
            {"role": "user", "content": "where is order 8812?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call("c1", "lookup_order", {"order_id": "8812"})],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "shipped on Monday"},
            # The turn is answered: an operator's undo waits for the reply (TurnInProgress).
            {"role": "assistant", "content": "It shipped on Monday."},
        ],
    )
    core.append_message(session_id=b, role="user", content="hello")
    page = signed_in_page("support")

    page.goto(f"/merge/preview/?ids={a}&ids={b}")
    transcript = page.locator(".merged-transcript")
    expect(transcript).not_to_contain_text("(no text)")
    line = transcript.locator("details.call-line")
    expect(line.locator(".tool-name")).to_have_text("lookup_order")
    arguments = line.locator("pre.code")
    expect(arguments).to_be_hidden()
    line.locator("summary .tool-name").click()
    expect(arguments).to_contain_text('"order_id": "8812"')
    line.locator("a.call-result").click()
    assert page.url.endswith("#pm" + line.locator("a.call-result").get_attribute("href")[3:])
    expect(transcript.locator(".pm-answers")).to_contain_text("result of lookup_order")

    page.goto(f"/sessions/{a}/")
    undo = page.locator("#sa-undo")
    open_support_actions(page)
    undo.locator("summary.sa-btn").click()
    preview = undo.locator(".sa-preview")
    expect(preview).not_to_contain_text("(no text)")
    expect(preview.locator("details.call-line .tool-name")).to_have_text("lookup_order")
    expect(preview.locator(".sa-preview-answers")).to_contain_text("result of lookup_order")
    assert page.script_errors == []
