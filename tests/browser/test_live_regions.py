"""htmx updates that matter are read out by screen readers (issue 29).

A region swapped in whole is not reliably announced; #announcer (templates/base.html) is
a polite live region always in the page, which static/js/a11y.js fills from what a swap
brought: new messages on a live page, a job's progress, a refused action. What a
page arrives with after an action (#messages, itself role="status") is said once loaded.
"""

from __future__ import annotations

import re

from playwright.sync_api import expect

from sessions_admin import core
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import DeleteJob
from tests.browser import open_support_actions
from tests.browser.test_deletion import gated_worker  # noqa: F401 - a fixture
from tests.browser.test_keyboard import tab_to
from tests.browser.test_live import poll_now
from tests.builders import (
    fresh_cache,  # noqa: F401 - an autouse fixture
    old_sessions,
)
from tests.helpers import messages, present


def _chat() -> str:
    sid = core.create_session(source="telegram", session_key="tg:dm:9").session_id
    core.append_messages(
        session_id=sid,
        messages=[
            {"role": "user", "content": "where is my refund?"},
            {"role": "assistant", "content": "On its way."},
        ],
    )
    return sid


def test_the_regions_are_in_every_page_before_anything_is_said(signed_in_page):
    page = signed_in_page("viewer")
    for path in ("/", "/sessions/", "/audit/"):
        page.goto(path)
        announcer = page.locator("#announcer")
        expect(announcer).to_have_attribute("aria-live", "polite")
        expect(announcer).to_have_attribute("role", "status")
        expect(page.locator("#messages")).to_have_attribute("role", "status")


def test_new_messages_on_a_live_page_and_its_end_are_announced(signed_in_page):
    sid = _chat()
    page = signed_in_page("viewer")
    page.goto(f"/sessions/{sid}/")
    announcer = page.locator("#announcer")
    assert poll_now(page) == 204
    expect(announcer).to_have_text("")

    core.append_messages(
        session_id=sid,
        messages=[
            {"role": "user", "content": "and the second parcel?"},
            {"role": "assistant", "content": "Tomorrow."},
        ],
    )
    assert poll_now(page) == 200
    expect(announcer).to_have_text("2 new messages (user, assistant).")

    core.end_session(session_id=sid, end_reason="user_exit")
    assert poll_now(page) == 200
    expect(announcer).to_have_text("The conversation ended: no more messages will appear.")
    assert page.script_errors == []


def test_a_jobs_progress_is_announced_through_to_done(signed_in_page, gated_worker):  # noqa: F811
    doomed = old_sessions(4, messages=1, ended_at=5000.0)
    job_id = jobs.create_bulk_delete_job(
        session_ids=doomed, include_live=False, actor="ada", reason="old"
    )
    page = signed_in_page("admin")
    page.goto(f"/jobs/{job_id}/")
    gated_worker.set()  # the next poll starts the worker
    expect(page.locator("#announcer")).to_have_text(
        f"Delete job #{job_id} done: 100 %, 4 of 4 sessions.", timeout=30_000
    )
    assert DeleteJob.objects.get(pk=job_id).state == DeleteJob.DONE
    assert present(doomed) == set()
    assert page.script_errors == []


def test_a_refused_action_is_announced_and_takes_focus(signed_in_page):
    sid = _chat()
    page = signed_in_page("support")
    page.goto(f"/sessions/{sid}/")
    tab_to(page, "#session-actions summary.sa-summary")
    page.keyboard.press("Enter")  # opens the support actions panel (one line until opened)
    tab_to(page, "#sa-undo summary")
    page.keyboard.press("Enter")
    tab_to(page, '#sa-undo form button[type="submit"]')
    # The runtime writes meanwhile: a new question, still being answered (TurnInProgress).
    core.append_message(session_id=sid, role="user", content="hello?")
    page.keyboard.press("Enter")
    notice = page.locator("#session-actions .sa-notice.error")
    expect(notice).to_contain_text("refused, nothing changed")
    expect(notice).to_be_focused()
    expect(page.locator("#announcer")).to_contain_text("refused, nothing changed")
    assert len(messages(sid, active_only=True)) == 3  # nothing was undone
    assert page.script_errors == []


def test_an_undo_refused_because_the_runtime_answered_meanwhile_takes_focus(signed_in_page):
    # The runtime writes a whole exchange between the preview and the confirmation: the plan
    # changed. The panel comes back with a new preview, its confirm button in a closed
    # <details> where it cannot take focus; the refusal does.
    sid = _chat()
    page = signed_in_page("support")
    page.goto(f"/sessions/{sid}/")
    tab_to(page, "#session-actions summary.sa-summary")
    page.keyboard.press("Enter")
    tab_to(page, "#sa-undo summary")
    page.keyboard.press("Enter")
    tab_to(page, '#sa-undo form button[type="submit"]')
    core.append_messages(
        session_id=sid,
        messages=[
            {"role": "user", "content": "and now?"},
            {"role": "assistant", "content": "Soon."},
        ],
    )
    page.keyboard.press("Enter")
    notice = page.locator("#session-actions .sa-notice.error")
    expect(notice).to_contain_text("refused, nothing changed")
    expect(notice).to_be_focused()
    assert len(messages(sid, active_only=True)) == 4  # nothing was undone
    assert page.script_errors == []


def test_an_answer_htmx_does_not_swap_is_said_in_the_messages_region(signed_in_page):
    sid = _chat()
    page = signed_in_page("support")
    page.goto(f"/sessions/{sid}/")
    open_support_actions(page)
    page.locator("#sa-undo summary").click()
    # Deleted by someone else while the page was open: the action answers 404.
    plan = core.plan_cascade_delete(session_ids=[sid])
    core.execute_cascade_delete(
        session_ids=[sid], expected_fingerprint=plan.fingerprint, actor="other", reason="gone"
    )
    page.locator('#sa-undo form button[type="submit"]').click()
    expect(page.locator("#messages")).to_contain_text(
        re.compile(r"That did not work: the server answered 404")
    )
    expect(page.locator("#announcer")).to_have_text("")  # #messages is itself a live region
    assert present([sid]) == set()


def test_a_page_arriving_with_a_refusal_says_it(signed_in_page):
    root = core.create_session(source="cli", title="long").session_id
    chain = [root]
    for n in range(20):
        core.append_message(session_id=chain[-1], role="user", content=f"turn {n}")
        chain.append(core.rotate_for_compression(session_id=chain[-1]).new_session_id)
    page = signed_in_page("admin")
    page.goto(f"/sessions/{chain[-1]}/delete/")
    page.locator('form.confirm textarea[name="reason"]').fill("customer asked")
    page.locator('form.confirm input[name="typed_count"]').fill("20")  # 21 sessions
    page.locator("form.confirm button[type=submit]").click()
    page.wait_for_load_state()
    expect(page.locator("form.confirm .problems")).to_have_attribute("role", "alert")
    expect(page.locator("#announcer")).to_contain_text("21")
    assert present(chain) == set(chain)


def test_a_search_says_how_many_messages_match_not_every_row(signed_in_page):
    sid = core.create_session(source="cli").session_id
    for n in range(3):
        core.append_message(session_id=sid, role="user", content=f"red parcel number {n}")
    page = signed_in_page("viewer")
    page.goto("/sessions/")
    page.fill('input[name="q"]', "parcel")
    page.press('input[name="q"]', "Enter")  # htmx swaps #results
    expect(page.locator("li.hit-session")).to_have_count(1)
    announcer = page.locator("#announcer")
    expect(announcer).to_have_text(re.compile(r"^3 messages match"))
    assert "red parcel number" not in announcer.inner_text()
    assert page.locator("#results[aria-live]").count() == 0  # not the whole table again
