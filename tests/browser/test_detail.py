"""The session detail page in a real browser: lineage navigation, tool calls, scrolling, escaping."""

from __future__ import annotations

import json
import re

from playwright.sync_api import expect

from sessions_admin import core

PAYLOAD = "<script>window.pwned = 1</script>"
IMG_PAYLOAD = '<img src="x" onerror="window.pwned = 2">'


def test_click_through_the_lineage_to_another_session(signed_in_page):
    root = core.create_session(source="telegram", session_key="tg:b1", title="The root").session_id
    core.append_message(session_id=root, role="user", content="in the root")
    compressed = core.rotate_for_compression(session_id=root).new_session_id
    core.append_message(session_id=compressed, role="user", content="after compression")
    branch = core.branch_session(session_id=compressed, title="A branch").new_session_id
    page = signed_in_page("viewer")

    page.goto(f"/sessions/{branch}/")
    tree = page.locator(".lineage-tree")
    expect(tree.locator("li.current > .node-box .node-link")).to_have_text(branch)
    expect(tree.locator("li.edge-branch > .node-box .edge")).to_have_text("branch")
    expect(tree.locator("li.edge-compression > .node-box .edge")).to_have_text("compression")

    tree.get_by_role("link", name=root).click()
    page.wait_for_url(f"**/sessions/{root}/")
    expect(page.locator("h1")).to_have_text("The root")
    expect(page.locator(".lineage-tree li.current > .node-box .node-link")).to_have_text(root)
    expect(page.locator("#transcript")).to_contain_text("in the root")

    page.locator(".lineage-tree").get_by_role("link", name=compressed).click()
    page.wait_for_url(f"**/sessions/{compressed}/")
    expect(page.locator(".lineage-tree li.current > .node-box .node-link")).to_have_text(compressed)
    assert page.script_errors == []


def test_expand_a_tool_call_and_see_its_result(signed_in_page):
    ref = core.create_session(source="cli").session_id
    core.append_messages(
        session_id=ref,
        messages=[
            {"role": "user", "content": "where is order 8812?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_7",
                        "type": "function",
                        "function": {
                            "name": "lookup_order",
                            "arguments": json.dumps({"order_id": "8812"}),
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_7",
                "tool_name": "lookup_order",
                "content": "status: shipped on Monday",
            },
        ],
    )
    page = signed_in_page("viewer")
    page.goto(f"/sessions/{ref}/")
    call = page.locator("details.tool-call")
    result = call.get_by_text("status: shipped on Monday")
    expect(result).to_be_hidden()
    call.locator("summary").click()
    expect(result).to_be_visible()
    expect(call.locator("pre.code").first).to_contain_text('"order_id": "8812"')
    assert page.script_errors == []


def test_scrolling_a_long_transcript_loads_the_rest(signed_in_page):
    ref = core.create_session(source="cli").session_id
    for batch in range(6):
        core.append_messages(
            session_id=ref,
            messages=[
                {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": f"message {batch * 100 + i:03d}",
                }
                for i in range(100)
            ],
        )
    page = signed_in_page("viewer")
    page.goto(f"/sessions/{ref}/")
    messages = page.locator("#transcript article.msg")
    expect(messages).to_have_count(100)
    last = page.get_by_text("message 599", exact=True)
    for _ in range(40):
        if last.count():
            break
        page.mouse.wheel(0, 20_000)
        page.wait_for_timeout(150)
    expect(last).to_be_visible()
    assert messages.count() == 600
    assert page.url.endswith(f"/sessions/{ref}/")  # loaded in place by htmx, not by navigation
    # A live session: its end follows the runtime (tests/browser/test_live.py).
    expect(page.locator("#live-tail")).to_be_visible()
    assert page.locator(".load-more").count() == 0
    assert page.script_errors == []


def test_script_payloads_render_as_text_and_never_run(signed_in_page):
    ref = core.create_session(source="telegram", title=PAYLOAD).session_id
    core.append_messages(
        session_id=ref,
        messages=[
            {"role": "user", "content": PAYLOAD},
            {
                "role": "assistant",
                "content": IMG_PAYLOAD,
                "reasoning": PAYLOAD,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": PAYLOAD, "arguments": json.dumps({"q": IMG_PAYLOAD})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": IMG_PAYLOAD},
        ],
    )
    page = signed_in_page("viewer")
    page.goto(f"/sessions/{ref}/")
    expect(page.locator("h1")).to_have_text(PAYLOAD)
    expect(page.locator("#transcript .role-user .text")).to_have_text(PAYLOAD)
    expect(page.locator("#transcript .role-assistant > .text")).to_have_text(IMG_PAYLOAD)
    page.locator("details.tool-call summary").click()
    page.locator("details.reasoning summary").click()
    expect(page.locator("details.tool-call .tool-name")).to_have_text(PAYLOAD)
    expect(page.locator(".tool-result pre")).to_have_text(IMG_PAYLOAD)
    assert page.locator("#transcript img").count() == 0
    assert page.evaluate("window.pwned") is None
    assert page.script_errors == []


def test_hide_undone_messages_in_place_and_load_earlier_ones(signed_in_page):
    root = core.create_session(source="cli").session_id
    core.append_messages(
        session_id=root,
        messages=[{"role": "user", "content": f"early {i}"} for i in range(3)],
    )
    tip = core.rotate_for_compression(session_id=root).new_session_id
    core.append_messages(
        session_id=tip,
        messages=[
            {"role": "user", "content": "kept question"},
            {"role": "assistant", "content": "kept answer"},
            {"role": "user", "content": "taken back"},
        ],
    )
    core.undo_last_turn(session_id=tip)
    page = signed_in_page("viewer")
    page.goto(f"/sessions/{tip}/")
    transcript = page.locator("#transcript")
    expect(transcript.locator("article.inactive")).to_have_count(1)
    expect(transcript.get_by_text("taken back")).to_be_visible()

    transcript.get_by_role("link", name="Hide undone and compacted messages").click()
    expect(page).to_have_url(re.compile(rf"/sessions/{tip}/\?inactive=hide$"))
    expect(transcript.get_by_text("taken back")).to_have_count(0)
    expect(transcript.get_by_text("kept answer")).to_be_visible()

    transcript.get_by_role("link", name="Load earlier messages").click()
    expect(transcript.get_by_text("early 0")).to_be_visible()
    expect(transcript.locator(".handoff")).to_contain_text("Continued in compressed session")
    assert transcript.locator("article.msg").count() == 5
    assert page.script_errors == []
