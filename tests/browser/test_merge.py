"""Merging forks in a real browser: forks page, preview, confirm, land on the target; undo."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

from sessions_admin import core
from sessions_admin.core import db
from tests.browser import open_support_actions
from tests.helpers import messages, session


def cold_start_forks(slug: str = "sidekick-browser", forks: int = 3) -> list[str]:
    """What a runtime without slug continuity writes: a new session per cold start."""
    ids = []
    for n in range(forks):
        sid = core.create_session(
            source="api_server", user_id="u1", started_at=1000.0 + n
        ).session_id
        core.append_messages(
            session_id=sid,
            messages=[
                {"role": "user", "content": f"turn {n} question"},
                {"role": "assistant", "content": f"turn {n} answer"},
            ],
        )
        core.record_turn(response_id=f"{slug}-r{n}", session_id=sid, conversation=slug)
        ids.append(sid)
    for sid in ids[:-1]:
        core.end_session(session_id=sid, end_reason="lru_evict")
    return ids


EXPECTED = [f"turn {n} {part}" for n in range(3) for part in ("question", "answer")]


def test_preview_and_merge_a_fork_group(signed_in_page):
    ids = cold_start_forks()
    page = signed_in_page("support")
    page.goto("/forks/")
    group = page.locator("article.fork-group")
    assert group.count() == 1
    assert "sidekick-browser" in group.inner_text()

    group.get_by_role("link", name="Preview merge").click()
    page.wait_for_url(re.compile(r"/merge/preview/"))
    assert parse_qs(urlparse(page.url).query)["ids"] == ids
    contents = page.locator(".merged-transcript .pm-content").all_inner_texts()
    assert contents == EXPECTED
    sources = page.locator(".merged-transcript .pm-msg").evaluate_all(
        "items => items.map(item => item.dataset.session)"
    )
    assert sources == [sid for sid in ids for _ in range(2)]

    page.fill("textarea[name=reason]", "three cold starts of one slug")
    page.get_by_role("button", name=re.compile(r"^Merge 2 sessions")).click()
    page.wait_for_url(f"**/sessions/{ids[0]}/")
    note = page.locator("ul.messages").inner_text()
    assert f"Merged 2 sessions into {ids[0]}" in note and "undo available" in note

    assert [m["content"] for m in messages(ids[0])] == EXPECTED
    assert [session(sid)["end_reason"] for sid in ids[1:]] == ["merged", "merged"]
    assert session(ids[0])["ended_at"] is None  # reopened: the last fork was live
    assert core.find_fork_groups() == []
    assert page.script_errors == []


def test_choose_another_target_then_undo_from_the_audit_log(signed_in_page):
    ids = cold_start_forks("sidekick-undo")
    before = db.fetchall("SELECT id, session_id FROM messages ORDER BY id")
    page = signed_in_page("admin")
    page.goto("/merge/preview/?" + "&".join(f"ids={sid}" for sid in ids))
    page.evaluate("window.sameDocument = true")

    page.locator(f'input[type=radio][name=target][value="{ids[2]}"]').check()
    page.wait_for_url(re.compile(rf"target={ids[2]}"))  # htmx pushed the re-preview
    page.locator(f'.merge-sources tr.role-target:has-text("{ids[2]}")').wait_for()
    assert page.evaluate("window.sameDocument") is True
    assert page.locator(".merged-transcript .pm-content").all_inner_texts() == EXPECTED

    page.get_by_role("button", name=re.compile(r"^Merge 2 sessions")).click()
    page.wait_for_url(f"**/sessions/{ids[2]}/")
    assert {m["session_id"] for m in db.fetchdicts("SELECT session_id FROM messages")} == {ids[2]}

    page.goto("/audit/?action=merge")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Undo merge").click()
    page.wait_for_url(re.compile(r"/audit/\?action=merge"))
    page.locator("ul.messages").get_by_text(re.compile(r"Undid merge #\d+")).wait_for()
    assert db.fetchall("SELECT id, session_id FROM messages ORDER BY id") == before
    assert page.locator("button", has_text="Undo merge").count() == 0
    assert page.script_errors == []


# --- issue 15: merging two customers, and the pages at phone width ------------------------------

PHONE = {"width": 390, "height": 844}


def assert_fits_the_phone(page, ids_selector: str) -> None:
    """Nothing wider than the viewport, and every session id on one or two lines."""
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"{page.url} is {overflow}px wider than the phone"
    heights = page.locator(ids_selector).evaluate_all(
        "codes => codes.map(code => [code.textContent, code.getBoundingClientRect().height,"
        " parseFloat(getComputedStyle(code).lineHeight) || 16])"
    )
    assert heights, f"no session ids matched {ids_selector}"
    for text, height, line in heights:
        assert height <= 2.5 * line, f"{text} wraps into {height}px at 390px"


def two_customers() -> tuple[str, str]:
    """(an ended CLI session of nobody, a live Telegram chat of customer 4242)."""
    cli = core.create_session(source="cli", started_at=1000.0).session_id
    core.append_message(session_id=cli, role="user", content="deploy the staging branch")
    core.end_session(session_id=cli, end_reason="cli_close")
    chat = core.create_session(
        source="telegram",
        user_id="4242",
        session_key="agent:main:telegram:dm:4242",
        started_at=2000.0,
    ).session_id
    core.append_message(session_id=chat, role="user", content="Where is my refund?")
    return cli, chat


def test_the_forks_page_keeps_nine_groups_to_a_screen_or_two(signed_in_page):
    for n in range(9):
        cold_start_forks(f"sidekick-many-{n}")
    page = signed_in_page("viewer")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto("/forks/")
    groups = page.locator("article.fork-group")
    groups.first.wait_for()
    assert groups.count() == 9
    assert page.evaluate("document.documentElement.scrollHeight") < 2400
    # Each group opens to its sessions and evidence.
    first = groups.first
    assert not first.locator(".fork-members").is_visible()
    first.locator("details.fork-detail > summary").click()
    assert first.locator(".fork-members").is_visible()
    assert page.script_errors == []


def test_forks_and_the_merge_preview_fit_a_phone(signed_in_page):
    ids = cold_start_forks("sidekick-phone")
    cli, chat = two_customers()
    page = signed_in_page("support")
    page.set_viewport_size(PHONE)

    page.goto("/forks/")
    page.locator("article.fork-group").first.wait_for()
    page.locator("article.fork-group details.fork-detail > summary").click()  # open the group
    assert "turn 0 question" in page.locator("article.fork-group").inner_text()
    assert_fits_the_phone(page, ".fork-members td.session-cell > a > code")

    page.goto("/merge/preview/?" + "&".join(f"ids={sid}" for sid in ids))
    assert_fits_the_phone(page, ".merge-sources td.session-cell a code")
    assert page.locator(".merge-differs").count() == 0

    page.goto(f"/merge/preview/?ids={cli}&ids={chat}")
    assert page.locator(".merge-differs").is_visible()
    assert_fits_the_phone(page, ".merge-sources td.session-cell a code")
    live_choice = page.locator(f'input[type=radio][name=target][value="{chat}"]')
    assert live_choice.is_checked()  # the default target is the live session, not the oldest
    assert page.locator("#merge-typed-count").is_visible()
    assert page.script_errors == []


def test_merging_two_customers_needs_the_typed_count_and_a_reason(signed_in_page):
    cli, chat = two_customers()
    page = signed_in_page("support")
    page.goto(f"/sessions/{chat}/")
    open_support_actions(page)
    page.fill("#sa-merge-ids", cli)  # the "Merge with..." box on the session page
    page.locator("form.sa-merge button[type=submit]").click()
    page.wait_for_url(re.compile(r"/merge/preview/"))
    warning = page.locator(".merge-differs").inner_text()
    assert "users, sources and session keys differ" in warning
    assert session(cli)["end_reason"] == "cli_close"  # the box merged nothing

    # A wrong count is refused by the server (the browser's own check is bypassed).
    page.locator("#merge-typed-count").evaluate("input => input.removeAttribute('required')")
    page.fill("#merge-typed-count", "2")
    page.fill("textarea[name=reason]", "same person on two devices")
    page.get_by_role("button", name=re.compile(r"^Merge 1 session")).click()
    page.locator(".act-alert.error", has_text="Nothing was merged").wait_for()
    assert session(cli)["end_reason"] == "cli_close" and messages(cli) != []

    page.fill("#merge-typed-count", "1")
    page.get_by_role("button", name=re.compile(r"^Merge 1 session")).click()
    page.wait_for_url(f"**/sessions/{chat}/")
    assert session(cli)["end_reason"] == "merged"
    assert [m["content"] for m in messages(chat)] == [
        "deploy the staging branch",
        "Where is my refund?",
    ]
    assert page.script_errors == []
