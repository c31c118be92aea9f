"""The trash page names the operation to restore first when a delete ended up as two, and a
restore in the other order says which links wait for which entry (issue 26, item 1)."""

from __future__ import annotations

import re
import signal

import pytest
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db, deletion
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditEntry, TrashEntry
from tests.builders import cascade_split_by_a_fault, linked_conversation, store_snapshot
from tests.console.pages import messages_shown
from tests.core.test_delete_in_parts import (
    big_session,
    cascade_killed_after_first_part,
    run_crash_child,
)
from tests.helpers import parent_links
from tests.ledger.test_trash_settles import cascade_killed_between_batches


@pytest.fixture
def small_batches(monkeypatch):
    monkeypatch.setattr(deletion.batches, "BATCH_SESSIONS", 2)


def _row(body: str, entry_id: int) -> str:
    start = body.index(f'id="trash-{entry_id}"')
    end = body.find('<li class="entry ', start + 1)
    return body[start : end if end != -1 else len(body)]


def test_the_trash_page_names_the_operation_to_restore_first(admin, monkeypatch, small_batches):
    ids = linked_conversation()
    before = store_snapshot("sessions", "messages", "conversations", "responses")
    older, newer = cascade_split_by_a_fault(monkeypatch, ids["tip"])

    body = admin.get(reverse("trash")).content.decode()
    assert re.search(rf"Restore <a href=\"#trash-{newer}\">#{newer}</a> first", _row(body, older))
    assert "first:" not in _row(body, newer)  # its sessions' parents are all in it or the store

    # Following the page: the named entry first, then the other; every link is back.
    admin.post(reverse("trash_restore", args=[newer]))
    body = admin.get(reverse("trash")).content.decode()
    assert "first:" not in _row(body, older)
    admin.post(reverse("trash_restore", args=[older]))
    assert store_snapshot("sessions", "messages", "conversations", "responses") == before


def test_a_restore_before_the_parents_says_which_entry_gives_the_links_back(
    admin, monkeypatch, small_batches
):
    ids = linked_conversation()
    links_before = parent_links()
    older, newer = cascade_split_by_a_fault(monkeypatch, ids["tip"])
    restored = set(TrashEntry.objects.get(pk=older).session_ids)

    response = admin.post(reverse("trash_restore", args=[older]), follow=True)
    waiting = [m for m in messages_shown(response) if "without" in m]
    assert len(waiting) == 1 and f"restore #{newer} to link them again" in waiting[0]
    unlinked = {
        sid
        for sid, parent in parent_links().items()
        if sid in restored and parent is None and links_before[sid]
    }
    assert unlinked and all(sid in waiting[0] for sid in unlinked)
    assert AuditEntry.objects.get(action="restore").after["waiting_links"]

    admin.post(reverse("trash_restore", args=[newer]))
    assert parent_links() == links_before
    assert set(TrashEntry.objects.values_list("state", flat=True)) == {TrashEntry.RESTORED}


def test_the_trash_page_settles_a_restore_killed_after_its_store_commit(admin):
    ids = linked_conversation()
    before = store_snapshot("sessions", "messages", "conversations", "responses")
    plan = core.plan_cascade_delete(session_ids=[ids["tip"]], include_branches=True)
    deleted = actions.cascade_delete(
        actor="ada",
        session_ids=[ids["tip"]],
        include_branches=True,
        expected_fingerprint=plan.fingerprint,
        reason="cleanup",
    )
    first = deleted.trash_entry_ids[0]
    child = run_crash_child(
        "audited_restore", {"actor": "ada", "entry_id": first}, crash_at="restore.after_commit"
    )
    assert child.returncode == -signal.SIGKILL, child.stderr

    body = admin.get(reverse("trash")).content.decode()

    # The rows are back in the store: the page offers no restore of them, and says restored.
    assert reverse("trash_restore", args=[first]) not in _row(body, first)
    assert set(TrashEntry.objects.values_list("state", flat=True)) == {TrashEntry.RESTORED}
    assert AuditEntry.objects.get(action="restore").outcome == AuditEntry.OK
    assert store_snapshot("sessions", "messages", "conversations", "responses") == before


def test_the_trash_page_sends_a_sessions_parts_to_the_entry_holding_its_row(admin):
    sid = big_session(300)
    assert cascade_killed_after_first_part(sid).returncode == -signal.SIGKILL
    stopped = TrashEntry.objects.get().pk
    again = core.plan_cascade_delete(session_ids=[sid])
    finished = core.execute_cascade_delete(
        session_ids=[sid], expected_fingerprint=again.fingerprint, actor="a", reason="again"
    ).trash_entry_ids[0]

    body = admin.get(reverse("trash")).content.decode()

    assert re.search(
        rf"<a href=\"#trash-{finished}\">#{finished}</a> holds the row of session",
        _row(body, stopped),
    )
    assert f"Restore it with #{finished}: the whole session" in _row(body, stopped)
    assert "still in the store" not in _row(body, stopped)
    admin.post(reverse("trash_restore", args=[finished]))
    assert db.fetchone("SELECT COUNT(*) FROM messages WHERE session_id = %s", [sid])[0] == 300


def test_the_trash_page_offers_no_restore_of_a_cascade_still_pending(admin):
    cascade_killed_between_batches(linked_conversation()["tip"])
    first = TrashEntry.objects.order_by("pk").first().pk
    # Still running, on another machine (one of this machine known dead is completed at once,
    # and its trash offered for restore: below).
    entry = AuditEntry.objects.get(action="cascade_delete")
    killed = entry.before["process"]
    entry.before["process"] = {"host": "another-host", "boot": "b", "pid": 1}
    entry.save(update_fields=["before"])

    row = _row(admin.get(reverse("trash")).content.decode(), first)

    assert reverse("trash_restore", args=[first]) not in row
    assert "has not finished" in row

    entry.before["process"] = killed
    entry.save(update_fields=["before"])
    row = _row(admin.get(reverse("trash")).content.decode(), first)
    assert reverse("trash_restore", args=[first]) in row
