"""Deleting in a real browser: a bulk delete job's progress bar, a cascade delete and its restore."""

from __future__ import annotations

import functools
import re
import threading

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from sessions_admin import core
from sessions_admin.core import deletion, threads
from sessions_admin.ledger import worker
from sessions_admin.ledger.models import DeleteJob, TrashEntry
from sessions_admin.signin.roles import assign_role
from tests.browser.conftest import PASSWORD
from tests.builders import old_sessions, refund_lineage, store_snapshot
from tests.helpers import present


@pytest.fixture
def gated_worker(monkeypatch, live_server):
    """The real background worker, started only once the test opens the gate.

    The job page asks for the worker on every poll, so opening the gate while
    the page polls shows that looking at a job is what (re)starts its worker.
    The worker exits soon after its last job, and the test waits for it.
    """
    gate = threading.Event()
    real_ensure = worker.ensure_worker_running
    monkeypatch.setattr(
        worker, "work_until_idle", functools.partial(worker.work_until_idle, idle_exit_seconds=0.5)
    )
    monkeypatch.setattr(
        worker, "ensure_worker_running", lambda: real_ensure() if gate.is_set() else None
    )
    yield gate
    thread = threads.started(worker.JOBS_THREAD)
    if thread is not None:
        thread.join(timeout=30)
        assert not thread.is_alive(), "the delete worker did not finish"


def test_a_bulk_delete_from_a_preset_runs_to_100_percent(signed_in_page, gated_worker):
    doomed = old_sessions(45, messages=2, ended_at=5000.0)
    live = core.create_session(source="cli", title="still talking").session_id
    page = signed_in_page("admin")
    page.goto("/bulk-delete/")
    page.evaluate("window.sameDocument = true")

    preset = page.locator("form.preset", has=page.locator('input[value="ended_older_than"]'))
    preset.locator('input[name="days"]').fill("30")
    preset.get_by_role("button", name="Dry run").click()
    expect(page.locator("[data-count]")).to_have_text("45")
    assert page.evaluate("window.sameDocument") is True  # htmx swapped the dry run in
    assert "preset=ended_older_than" in page.url
    expect(page.locator("table.sample tbody tr")).to_have_count(10)
    expect(page.locator(".dry-run")).to_contain_text("90 messages")

    page.locator('form.confirm textarea[name="reason"]').fill("retention: older than 30 days")
    # 45 sessions: the number typed, by the same rule and words as a cascade delete.
    expect(page.locator("form.confirm label.typed")).to_contain_text(
        "This deletes 45 sessions and 90 messages. Type 45 to confirm."
    )
    page.get_by_role("button", name=re.compile(r"^Delete 45 sessions")).click()
    assert DeleteJob.objects.count() == 0  # the browser asks for the number first
    page.locator('form.confirm input[name="typed_count"]').fill("45")
    page.get_by_role("button", name=re.compile(r"^Delete 45 sessions")).click()
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = DeleteJob.objects.get()
    expect(page.locator("ul.messages")).to_contain_text(f"Bulk delete job #{job.pk} started")

    # Nothing runs until the worker is allowed to: the page sits at 0 % and polls.
    expect(page.locator("#job-percent")).to_have_text("0 %")
    page.evaluate("window.sameDocument = true")
    gated_worker.set()  # the next poll starts the worker, as after a restart

    expect(page.locator("#job-percent")).to_have_text("100 %", timeout=30_000)
    expect(page.locator("[data-state]")).to_have_text("done")
    bar = page.locator("#job-bar")
    assert bar.get_attribute("max") == "45" and bar.get_attribute("value") == "45"
    expect(page.locator("#job-actions")).to_contain_text("Open the trash")  # refreshed by event
    expect(page.locator("#job-actions button")).to_have_count(0)
    assert page.evaluate("window.sameDocument") is True  # progress came by polling, no reload
    assert page.locator("#job-progress[hx-trigger]").count() == 0  # polling stopped

    assert present(doomed) == set()
    assert present([live]) == {live}
    assert TrashEntry.objects.filter(job_id=job.pk).count() >= 1
    assert page.script_errors == []


def test_a_cascade_delete_and_its_restore_from_the_trash(signed_in_page):
    ids = refund_lineage()
    before = store_snapshot("sessions", "messages", "conversations", "responses")
    messages = core.plan_cascade_delete(
        session_ids=[ids["tip"]], include_branches=True
    ).message_count
    page = signed_in_page("admin")
    page.goto(f"/sessions/{ids['tip']}/delete/")
    expect(page.locator(".group.kept")).to_contain_text(ids["branch"])
    expect(page.locator(".group.relation-branch")).to_have_count(0)

    page.evaluate("window.sameDocument = true")
    page.get_by_label(re.compile("Also delete branches")).check()
    expect(page.locator(".group.relation-branch")).to_contain_text(ids["branch"])
    assert page.evaluate("window.sameDocument") is True
    assert "include_branches=1" in page.url

    page.locator('form.confirm textarea[name="reason"]').fill("customer asked")
    page.get_by_role("button", name=re.compile(r"^Delete 4 sessions")).click()
    page.wait_for_url("**/trash/")
    expect(page.locator("ul.messages")).to_contain_text(
        f"Deleted 4 sessions and {messages} messages; restorable from the trash."
    )
    assert store_snapshot("sessions", "messages", "conversations", "responses") != before
    assert present(ids.values()) == set()

    entry = page.locator("li.entry").first
    expect(entry).to_contain_text("customer asked")
    expect(entry).to_contain_text(ids["root"])
    entry.get_by_role("button", name=re.compile("^Restore")).click()
    page.wait_for_url("**/trash/")
    expect(page.locator("ul.messages")).to_contain_text(
        f"Restored 4 sessions and {messages} messages"
    )
    expect(page.locator("li.entry").first.locator(".badge.restored")).to_be_visible()
    assert store_snapshot("sessions", "messages", "conversations", "responses") == before
    assert page.script_errors == []


def test_a_long_cascade_is_one_trash_entry_restored_whole(signed_in_page, monkeypatch):
    """A 25-segment chain deleted in 5 batches: one row in the trash, one click restores it all."""
    monkeypatch.setattr(deletion.batches, "BATCH_SESSIONS", 5)
    root = core.create_session(source="telegram", session_key="tg:7", title="refund").session_id
    chain = [root]
    for n in range(24):
        core.append_message(session_id=chain[-1], role="user", content=f"turn {n}")
        chain.append(core.rotate_for_compression(session_id=chain[-1]).new_session_id)
    before = store_snapshot("sessions", "messages", "conversations", "responses")
    page = signed_in_page("admin")
    page.goto(f"/sessions/{chain[12]}/delete/")
    expect(page.locator("form.confirm label.typed")).to_contain_text(
        "This deletes 25 sessions and 24 messages. Type 25 to confirm."
    )
    page.locator('form.confirm textarea[name="reason"]').fill("customer asked")
    page.locator('form.confirm input[name="typed_count"]').fill("25")
    page.get_by_role("button", name=re.compile(r"^Delete 25 sessions")).click()
    page.wait_for_url("**/trash/")
    assert present(chain) == set()
    entries = list(TrashEntry.objects.order_by("pk"))
    assert len(entries) == 5 and len({e.operation for e in entries}) == 1

    expect(page.locator("li.entry")).to_have_count(1)
    entry = page.locator("li.entry")
    expect(entry).to_contain_text("25 sessions, 24 messages")
    expect(entry).to_contain_text("one operation, 5 batches")
    entry.get_by_role("button", name="Restore the whole operation: 25 sessions").click()
    page.wait_for_url("**/trash/")
    expect(page.locator("ul.messages")).to_contain_text(
        "Restored 25 sessions and 24 messages from trash entry "
        f"#{entries[0].pk} (the whole operation: 5 batches)."
    )
    expect(page.locator("li.entry .badge.restored")).to_have_text(re.compile("^restored"))
    assert store_snapshot("sessions", "messages", "conversations", "responses") == before
    assert {e.state for e in TrashEntry.objects.all()} == {TrashEntry.RESTORED}
    assert page.script_errors == []


def test_without_javascript_the_job_page_refreshes_itself(browser, live_server, gated_worker):
    doomed = old_sessions(5, messages=2, ended_at=5000.0)
    user = User.objects.create_user("nojs", password=PASSWORD)
    assign_role(user, "admin")
    context = browser.new_context(base_url=live_server.url, java_script_enabled=False)
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        page.goto("/login/")
        page.fill("input[name=username]", "nojs")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/login/" not in url)

        page.goto("/bulk-delete/")
        page.locator("form.preset", has=page.locator('input[value="empty"]')).get_by_role(
            "button", name="Dry run"
        ).click()
        expect(page.locator(".dry-run")).to_contain_text("Nothing to delete")
        page.goto("/bulk-delete/?preset=ended_older_than&days=30")
        page.locator('form.confirm textarea[name="reason"]').fill("no js")
        page.get_by_role("button", name=re.compile(r"^Delete 5 sessions")).click()
        page.wait_for_url(re.compile(r"/jobs/\d+/$"))
        expect(page.locator("#job-percent")).to_have_text("0 %")
        gated_worker.set()
        expect(page.locator("#job-percent")).to_have_text("100 %", timeout=30_000)
        expect(page.locator("#job-actions")).to_contain_text("Open the trash")
        assert present(doomed) == set()
    finally:
        context.close()
