"""Restoring a delete that ended up as several trash operations, in any order, puts back every
lineage link (issue 26, item 1).

A cascade deletes children before their parents, so when a fault stops it between batches and
the operator runs it again, the first operation holds the children and the second their
parents; two bulk jobs over a conversation's segments split it the same way. Restoring the
children first used to clear their ``parent_session_id`` for good. Now the link waits in the
parents' operation and comes back with it; a parent nowhere any more (purged) is named in the
restore's answer instead of being dropped silently.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connections

from sessions_admin import core
from sessions_admin.core import db, deletion, holds
from sessions_admin.ledger import actions, jobs, trash
from sessions_admin.ledger.models import AuditEntry, TrashEntry
from tests.builders import cascade_split_by_a_fault, linked_conversation, store_snapshot
from tests.helpers import child_env, parent_links, run_test_child

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_batches(monkeypatch):
    monkeypatch.setattr(deletion.batches, "BATCH_SESSIONS", 2)


def _sessions_of(entry_id: int) -> set[str]:
    operation = TrashEntry.objects.get(pk=entry_id).operation
    ids: set[str] = set()
    for session_ids in TrashEntry.objects.filter(operation=operation).values_list(
        "session_ids", flat=True
    ):
        ids.update(session_ids)
    return ids


@pytest.mark.parametrize("order", ["older_first", "newer_first"])
def test_a_cascade_split_by_a_fault_restores_every_link_in_either_order(
    monkeypatch, small_batches, order
):
    ids = linked_conversation()
    other = core.create_session(source="cli").session_id
    before = store_snapshot()
    links_before = parent_links()
    older, newer = cascade_split_by_a_fault(monkeypatch, ids["tip"])
    in_store = {r[0] for r in db.fetchall("SELECT id FROM sessions")}
    assert other in in_store and not in_store & (_sessions_of(older) | _sessions_of(newer))
    # The older operation holds children whose parents are in the newer one.
    assert any(links_before[sid] in _sessions_of(newer) for sid in _sessions_of(older))

    first, second = (older, newer) if order == "older_first" else (newer, older)
    restored = actions.restore(actor=None, entry_id=first)
    assert restored.lost_links == ()
    if order == "older_first":
        # Each child restored before its parent is named, with the operation it waits for.
        assert restored.waiting_links
        assert {wait.entry_id for wait in restored.waiting_links} == {newer}
    for wait in restored.waiting_links:
        assert parent_links()[wait.session_id] is None
        assert links_before[wait.session_id] == wait.parent_id
    second_result = actions.restore(actor=None, entry_id=second)
    assert second_result.lost_links == () and second_result.waiting_links == ()

    assert parent_links() == links_before
    assert store_snapshot() == before  # row for row, every column
    assert set(TrashEntry.objects.values_list("state", flat=True)) == {TrashEntry.RESTORED}
    audits = AuditEntry.objects.filter(action="restore").order_by("pk")
    assert [a.outcome for a in audits] == ["ok", "ok"]
    if order == "older_first":
        assert audits[0].after["waiting_links"]


@pytest.mark.parametrize("order", ["children_first", "parents_first"])
def test_two_jobs_over_a_conversations_segments_restore_every_link_in_either_order(order):
    ids = linked_conversation()
    links_before = parent_links()
    before = store_snapshot()
    children = [ids["grand"], ids["late_delegate"], ids["child"]]
    parents = [ids["root"], ids["delegate"], ids["tip"], ids["last"], ids["branch"]]
    entries = {}
    for name, selection in (("children", children), ("parents", parents)):
        job = jobs.create_bulk_delete_job(
            session_ids=selection, include_live=True, actor="ada", reason=f"{name} job"
        )
        jobs.run_job(job_id=job, batch_sessions=2)
        entries[name] = (
            TrashEntry.objects.filter(operation=trash.job_operation(job)).order_by("pk").first().pk
        )
    assert not {r[0] for r in db.fetchall("SELECT id FROM sessions")} & set(ids.values())
    assert any(
        links_before[sid] in _sessions_of(entries["parents"])
        for sid in _sessions_of(entries["children"])
    )

    first, second = (
        ("children", "parents") if order == "children_first" else ("parents", "children")
    )
    actions.restore(actor=None, entry_id=entries[first])
    actions.restore(actor=None, entry_id=entries[second])

    assert parent_links() == links_before
    assert store_snapshot() == before


def test_a_link_to_a_parent_purged_for_good_is_reported_not_dropped_silently(
    monkeypatch, small_batches
):
    ids = linked_conversation()
    links_before = parent_links()
    older, newer = cascade_split_by_a_fault(monkeypatch, ids["tip"])
    newer_operation = TrashEntry.objects.get(pk=newer).operation
    TrashEntry.objects.filter(operation=newer_operation).delete()  # purged: gone for good

    restored = actions.restore(actor=None, entry_id=older)

    orphaned = {
        sid: parent
        for sid, parent in links_before.items()
        if sid in restored.restored_sessions
        and parent is not None
        and parent not in restored.restored_sessions
    }
    assert orphaned  # the case this test is about
    assert {(lost.session_id, lost.parent_id) for lost in restored.lost_links} == set(
        orphaned.items()
    )
    assert restored.waiting_links == ()
    audit = AuditEntry.objects.get(action="restore")
    assert audit.outcome == "ok"
    assert sorted(audit.after["lost_links"]) == sorted([c, p] for c, p in orphaned.items())


def test_a_hold_on_a_session_waiting_for_its_parent_keeps_the_parents_operation(
    monkeypatch, small_batches
):
    ids = linked_conversation()
    links_before = parent_links()
    older, newer = cascade_split_by_a_fault(monkeypatch, ids["tip"])
    trash.trashed_lineage()  # the links read before the restore, as a running process has them
    restored = actions.restore(actor=None, entry_id=older)
    waiting = restored.waiting_links[0]
    assert waiting.entry_id == newer

    hold = holds.place_hold(
        kind="session", subject=waiting.session_id, reason="case 26", actor="ada"
    )
    trash.purge_trash()  # takes the restored operation, whose rows are back
    # The parents' operation is the waiting session's lineage: the hold keeps it.
    assert not TrashEntry.objects.filter(pk=older).exists()
    assert TrashEntry.objects.filter(pk=newer).exists()
    holds.release_hold(hold_id=hold.id, reason="closed", actor="ada")
    actions.restore(actor=None, entry_id=newer)
    assert parent_links() == links_before


def _killed_cascade(start: str, crash_at: str) -> None:
    """The cascade of ``start``'s conversation in a process killed (SIGKILL) at ``crash_at``."""
    plan = core.plan_cascade_delete(session_ids=[start], include_branches=True)
    arguments = {
        "session_ids": [start],
        "include_branches": True,
        "expected_fingerprint": plan.fingerprint,
        "actor": "ada",
        "reason": "killed",
    }
    child = run_test_child(
        "crash_child",
        "cascade_delete",
        json.dumps(arguments),
        settings={"SESSIONS_ADMIN_CRASH_AT": crash_at, "CRASH_CHILD_BATCH_SESSIONS": "2"},
    )
    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stderr)


@pytest.mark.parametrize("crash_at", ["cascade.between_batches", "delete.after_commit@2"])
@pytest.mark.parametrize("order", ["older_first", "newer_first"])
def test_a_cascade_killed_and_run_again_restores_every_link_in_either_order(crash_at, order):
    ids = linked_conversation()
    before = store_snapshot("sessions", "messages", "conversations", "responses")
    planned = core.plan_cascade_delete(session_ids=[ids["tip"]], include_branches=True)
    _killed_cascade(ids["tip"], crash_at)
    left = [
        s for s in planned.session_ids if db.fetchone("SELECT 1 FROM sessions WHERE id = %s", [s])
    ]
    again = core.plan_cascade_delete(session_ids=left, include_branches=True)
    core.execute_cascade_delete(
        session_ids=left,
        include_branches=True,
        expected_fingerprint=again.fingerprint,
        actor="ada",
        reason="killed, run again",
    )
    operations = list(
        dict.fromkeys(TrashEntry.objects.order_by("pk").values_list("operation", flat=True))
    )
    assert len(operations) == 2
    firsts = [TrashEntry.objects.filter(operation=o).order_by("pk").first().pk for o in operations]
    results = [
        actions.restore(actor=None, entry_id=entry_id)
        for entry_id in (firsts if order == "older_first" else firsts[::-1])
    ]

    assert store_snapshot("sessions", "messages", "conversations", "responses") == before
    assert all(result.lost_links == () for result in results)
    if order == "older_first":
        assert {w.entry_id for w in results[0].waiting_links} == {firsts[1]}


def _restore_in_a_process(
    entry_id: int, *, pause_at: str | None = None, folder: Path | None = None
):
    env = child_env()
    if pause_at:
        env["SESSIONS_ADMIN_PAUSE_AT"] = pause_at
        env["SESSIONS_ADMIN_PAUSE_DIR"] = str(folder)
    command = [{"op": "restore_trash_entry", "kwargs": {"entry_id": entry_id, "actor": "bob"}}]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.core.race_child", json.dumps(command)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _answer(process) -> dict:
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    (line,) = [line for line in out.splitlines() if line.strip()]
    return json.loads(line)


def _waits_for_restore() -> bool:
    return db.vendor() == "postgresql" and bool(
        db.fetchall(
            "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
            ["%pg_advisory_xact_lock%"],
        )
    )


def test_the_parents_restored_while_the_childrens_restore_commits_still_link_them(
    monkeypatch, small_batches, tmp_path
):
    # Sessions without a key, so no key lock serializes the two restores.
    chain = [core.create_session(source="api_server").session_id]
    for _ in range(3):
        chain.append(
            core.create_session(
                source="tool",
                parent_session_id=chain[-1],
                model_config={"_delegate_from": chain[-1]},
            ).session_id
        )
    links_before = parent_links()
    older, newer = cascade_split_by_a_fault(monkeypatch, chain[0])
    connections.close_all()
    # The children's restore, held just before its commit: it has left their links waiting in
    # the parents' operation, and its rows are not visible to anyone yet.
    children = _restore_in_a_process(older, pause_at="restore.before_commit", folder=tmp_path)
    deadline = time.monotonic() + 60
    while not (tmp_path / "restore.before_commit.reached").exists():
        assert children.poll() is None, children.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    parents = _restore_in_a_process(newer)
    # Unserialized, it restores now and links nothing; serialized, it waits for the children's
    # restore (PostgreSQL: on the restore lock; SQLite: on the store's write lock).
    deadline = time.monotonic() + (30 if db.vendor() == "postgresql" else 5)
    while parents.poll() is None and time.monotonic() < deadline and not _waits_for_restore():
        time.sleep(0.1)
    (tmp_path / "restore.before_commit.release").touch()
    assert "ok" in _answer(children) and "ok" in _answer(parents)

    assert parent_links() == links_before


def _cascade(start: str, reason: str) -> core.DeleteResult:
    plan = core.plan_cascade_delete(session_ids=[start], include_branches=True)
    return actions.cascade_delete(
        actor="ada",
        session_ids=[start],
        include_branches=True,
        expected_fingerprint=plan.fingerprint,
        reason=reason,
    )


@pytest.mark.parametrize("order", ["parents_first", "child_first"])
def test_a_kept_child_deleted_by_a_second_cascade_gets_its_link_back_in_either_order(order):
    """Cascade A keeps a child (its link to A's tip cut), cascade B then deletes that child:
    restoring A before B used to leave the child unlinked for good (the attack's break 2)."""
    ids = linked_conversation()
    before = store_snapshot()
    links_before = parent_links()
    first = _cascade(ids["tip"], "the chain")
    assert db.fetchone("SELECT parent_session_id FROM sessions WHERE id = %s", [ids["child"]]) == (
        None,
    )
    second = _cascade(ids["child"], "the child")
    entries = [first.trash_entry_ids[0], second.trash_entry_ids[0]]
    if order == "child_first":
        entries.reverse()

    for entry in entries:
        actions.restore(actor="ada", entry_id=entry)

    assert parent_links() == links_before
    assert store_snapshot() == before
