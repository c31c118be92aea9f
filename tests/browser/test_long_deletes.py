"""A long cascade delete and its restore in a real browser: each runs as a job whose page
shows its progress (polled, read out) and then its outcome (issue 29, item 4)."""

from __future__ import annotations

import re
import threading

import pytest
from playwright.sync_api import expect

from sessions_admin import core
from sessions_admin.core import deletion, faults
from sessions_admin.ledger.models import AuditAction, AuditEntry, DeleteJob, TrashEntry
from tests.browser.test_axe import _violations
from tests.browser.test_deletion import gated_worker  # noqa: F401
from tests.builders import store_snapshot
from tests.helpers import present

SEGMENTS = 12


@pytest.fixture
def halfway(monkeypatch):
    """The worker's cascade stops after its third batch until the test lets it go on."""
    reached, release = threading.Event(), threading.Event()
    real = faults.checkpoint
    hits = []

    def checkpoint(name: str) -> None:
        real(name)
        if name == "cascade.between_batches":
            hits.append(name)
            if len(hits) == 3:
                reached.set()
                release.wait(30)

    monkeypatch.setattr(faults, "checkpoint", checkpoint)
    yield reached, release
    release.set()


def test_a_long_cascade_shows_its_progress_then_its_restore_brings_it_back(
    signed_in_page,
    gated_worker,  # noqa: F811
    halfway,
    settings,
    monkeypatch,
):
    settings.SESSIONS_ADMIN_CASCADE_JOB_MESSAGES = 20
    settings.SESSIONS_ADMIN_RESTORE_JOB_MESSAGES = 20
    monkeypatch.setattr(deletion.batches, "BATCH_SESSIONS", 2)  # six batches
    root = core.create_session(source="telegram", session_key="tg:9", title="long").session_id
    chain = [root]
    for n in range(SEGMENTS - 1):
        core.append_messages(
            session_id=chain[-1],
            messages=[{"role": "user", "content": f"turn {n} part {k}"} for k in range(3)],
        )
        chain.append(core.rotate_for_compression(session_id=chain[-1]).new_session_id)
    before = store_snapshot("sessions", "messages", "conversations", "responses")
    plan = core.plan_cascade_delete(session_ids=[chain[5]])
    assert sorted(plan.session_ids) == sorted(chain)

    page = signed_in_page("admin")
    page.goto(f"/sessions/{chain[5]}/delete/")
    page.locator('form.confirm textarea[name="reason"]').fill("customer asked")
    if page.locator('form.confirm input[name="typed_count"]').count():
        page.locator('form.confirm input[name="typed_count"]').fill(str(SEGMENTS))
    page.get_by_role("button", name=re.compile(rf"^Delete {SEGMENTS} sessions")).click()

    # The request returned at once: the job's page, the plan still whole in the store.
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = DeleteJob.objects.get()
    assert job.kind == DeleteJob.CASCADE
    expect(page.locator("h1")).to_have_text(f"Cascade delete job #{job.pk}")
    expect(page.locator("ul.messages")).to_contain_text(
        f"Deleting {SEGMENTS} sessions and {plan.message_count} messages in the background "
        f"(job #{job.pk})"
    )
    expect(page.locator("#job-percent")).to_have_text("0 %")
    assert present(chain) == set(chain)
    # No cancel for a cascade, and the page says why.
    expect(page.locator("#job-actions button")).to_have_count(0)
    expect(page.locator("[data-no-cancel]")).to_contain_text("cannot be cancelled")

    page.evaluate("window.sameDocument = true")
    gated_worker.set()  # the next poll starts the worker
    reached, release = halfway
    assert reached.wait(30), "the worker never reached its third batch"
    # Halfway: the page shows what is deleted so far, polled in, not a reload.
    expect(page.locator("[data-processed]")).to_have_text(f"6 / {SEGMENTS}", timeout=10_000)
    percent = int(page.locator("#job-percent").get_attribute("data-percent"))
    assert 0 < percent < 100
    assert len(present(chain)) == SEGMENTS - 6
    assert _violations(page) == []  # WCAG 2.1 A and AA, as every page
    release.set()

    expect(page.locator("#job-percent")).to_have_text("100 %", timeout=30_000)
    expect(page.locator("[data-state]")).to_have_text("done")
    expect(page.locator("#announcer")).to_have_text(
        f"Cascade delete job #{job.pk} done: 100 %, {plan.message_count} of "
        f"{plan.message_count} messages, {SEGMENTS} of {SEGMENTS} sessions deleted.",
        timeout=15_000,
    )
    assert page.evaluate("window.sameDocument") is True
    assert present(chain) == set()
    entry = AuditEntry.objects.get(action=AuditAction.CASCADE_DELETE)
    assert entry.outcome == AuditEntry.OK
    first = TrashEntry.objects.order_by("pk").first()
    assert {e.operation for e in TrashEntry.objects.all()} == {job.operation}

    # The outcome names its trash entry; the restore from there is a job of its own.
    outcome = page.locator("[data-outcome]")
    expect(outcome).to_contain_text(f"{SEGMENTS} sessions and {plan.message_count} messages")
    outcome.locator(f'[data-trash-entry="{first.pk}"]').click()
    page.wait_for_url(re.compile(r"/trash/"))
    page.locator("li.entry").first.get_by_role("button", name=re.compile("^Restore")).click()
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    restore_job = DeleteJob.objects.get(kind=DeleteJob.RESTORE)
    expect(page.locator("h1")).to_have_text(f"Restore job #{restore_job.pk}")
    expect(page.locator("[data-state]")).to_have_text("done", timeout=30_000)
    expect(page.locator("[data-outcome]")).to_contain_text(
        f"{SEGMENTS} sessions and {plan.message_count} messages restored"
    )
    assert store_snapshot("sessions", "messages", "conversations", "responses") == before
    assert _violations(page) == []
    page.locator("[data-restored-session]").first.click()
    page.wait_for_url(re.compile(r"/sessions/[^/]+/$"))
    assert AuditEntry.objects.get(action=AuditAction.RESTORE).outcome == AuditEntry.OK
    assert page.script_errors == []
