"""A bulk delete job executes exactly its preview and never splits a conversation (issue 25,
items 10, 12 and 13): a conversation the runtime continues after the preview (an API
continuation, a delegate, a compression segment), before the job starts or while it runs,
stays whole and linked, and the job names it; a session that appeared in the gap is never
deleted unseen; a merge made while the job runs keeps its target and husk, still undoable.
A real worker (``jobs.run_job``) on both backends; every check reads the databases.
"""

from __future__ import annotations

import io
import time

import pytest
from django.core.management import call_command

from sessions_admin import core
from sessions_admin.core import db, faults
from sessions_admin.ledger import actions, jobs, retention
from sessions_admin.ledger.models import AuditEntry, DeleteJobItem, RetentionPolicy
from sessions_admin.routers import responses_alias
from tests.builders import api_turn
from tests.helpers import parent_of, session_ids
from tests.ledger.test_retention import DAY, old_session

pytestmark = pytest.mark.usefixtures("no_worker")


def _messages(session_id: str) -> int:
    return db.fetchone("SELECT COUNT(*) FROM messages WHERE session_id = %s", [session_id])[0]


def _unlinked_continuations() -> list[str]:
    """Sessions a runtime linked to a parent (continuation, delegate) that lost that link."""
    return [
        r[0]
        for r in db.fetchall(
            "SELECT id FROM sessions WHERE parent_session_id IS NULL AND ("
            f"{core.lineage.marker('_continued_from')} IS NOT NULL OR "
            f"{core.lineage.marker('_delegate_from')} IS NOT NULL)"
        )
    ]


def _policy(days: float = 30) -> RetentionPolicy:
    return RetentionPolicy.objects.create(name="quiet", older_than_days=days, created_by="t")


def _confirmed_run(policy: RetentionPolicy) -> int:
    """ "Run now" as the page does it: the preview's fingerprint, then the job."""
    preview = retention.dry_run(policy)
    job_id = actions.run_retention_policy(
        actor=None,
        policy_id=policy.pk,
        reason="cleanup",
        expected_fingerprint=preview.fingerprint,
    )
    assert job_id is not None
    return job_id


@pytest.mark.parametrize("when", ["before the job starts", "after its first batch"])
def test_a_retention_run_keeps_an_api_conversation_continued_after_its_preview(when):
    now = time.time()
    lonely = [old_session(days=120), old_session(days=110)]
    old = api_turn("support-7", "resp-1", now - 100 * DAY, end=True)
    old_messages = _messages(old)
    policy = _policy(days=30)
    assert set(retention.dry_run(policy).session_ids) == {*lonely, old}
    job_id = _confirmed_run(policy)
    if when == "after its first batch":
        jobs.run_job(job_id=job_id, batch_sessions=1, max_batches=1)
        assert lonely[0] not in session_ids()

    # The customer writes again: the core continues the ended conversation in a new session.
    tip = api_turn("support-7", "resp-2", now, end=False)
    assert parent_of(tip) == old
    progress = jobs.run_job(job_id=job_id, batch_sessions=1)

    assert progress.state == "done"
    assert {old, tip} <= session_ids() and not set(lonely) & session_ids()
    assert parent_of(tip) == old and _messages(old) == old_messages
    assert _unlinked_continuations() == []
    assert progress.deleted == 2 and progress.skipped == 1
    assert f"kept: {old}, its conversation continued in {tip}" in progress.skipped_text
    entry = AuditEntry.objects.get(action=jobs.KEPT_WHOLE_ACTION)
    assert entry.before == {"job": job_id, "retention_policy": policy.pk}
    assert entry.after["kept"] == [{"session": old, "why": f"its conversation continued in {tip}"}]
    assert DeleteJobItem.objects.get(job_id=job_id, session_id=old).state == DeleteJobItem.SKIPPED


def test_a_delegate_started_between_the_preview_and_the_job_is_never_deleted(monkeypatch):
    """The run's job is created from the previewed ids: a delegate the runtime wrote in the
    gap was never shown, so it is not deleted, and neither is the conversation it joined."""
    root = old_session(days=100, source="api_server")
    segment = old_session(days=99, source="api_server", parent=root)
    db.execute("UPDATE sessions SET end_reason = 'compression' WHERE id = %s", [root])
    lonely = old_session(days=100)
    policy = _policy(days=30)
    assert set(retention.dry_run(policy).session_ids) == {root, segment, lonely}
    made = {}
    create = jobs.create_bulk_delete_job

    def runtime_writes_first(**kw):
        # The runtime spawns a delegate from the old segment after the page's preview.
        made["delegate"] = core.create_session(
            source="tool", parent_session_id=segment, model_config={"_delegate_from": segment}
        ).session_id
        core.append_message(session_id=made["delegate"], role="user", content="late work")
        core.end_session(session_id=made["delegate"], end_reason="done")
        return create(**kw)

    monkeypatch.setattr(retention.jobs, "create_bulk_delete_job", runtime_writes_first)
    job_id = _confirmed_run(policy)
    progress = jobs.run_job(job_id=job_id)

    delegate = made["delegate"]
    assert progress.state == "done"
    assert {root, segment, delegate} <= session_ids() and lonely not in session_ids()
    assert parent_of(delegate) == segment and parent_of(segment) == root
    assert _messages(delegate) == 1
    assert progress.total == 3  # exactly the preview: the delegate was never an item
    assert f"kept: {segment}, its conversation continued in {delegate}" in progress.skipped_text
    assert f"kept: {root}, with {segment}, whose conversation continued in {delegate}" in (
        progress.skipped_text
    )


def test_a_bulk_job_takes_only_the_previewed_set():
    parent = old_session(days=10)
    lonely = old_session(days=10)
    preview = core.preview_bulk_delete(session_ids=[parent, lonely])
    assert set(preview.session_ids) == {parent, lonely}
    delegate = core.create_session(
        source="tool", parent_session_id=parent, model_config={"_delegate_from": parent}
    ).session_id
    core.end_session(session_id=delegate, end_reason="done")

    job_id = jobs.create_bulk_delete_job(
        session_ids=[parent, lonely],
        include_live=False,
        actor="ada",
        reason="cleanup",
        expected_ids=preview.session_ids,
    )
    progress = jobs.run_job(job_id=job_id)

    assert {parent, delegate} <= session_ids() and lonely not in session_ids()
    assert parent_of(delegate) == parent
    assert (
        progress.skipped_text
        == f"1 skipped: kept: {parent}, its conversation continued in {delegate}"
    )


def test_a_delegate_spawned_mid_job_keeps_every_segment_of_its_conversation():
    """The job's first batch ran; then the runtime spawned a delegate from the first segment
    of a compressed conversation the job holds: no segment of it goes (on main the deepest
    segment went in the first batch, the rest after the delegate was unlinked)."""
    lonely = [old_session(days=10), old_session(days=10)]
    root = core.create_session(source="cli", started_at=5.0).session_id
    core.append_message(session_id=root, role="user", content="first")
    tip = core.rotate_for_compression(session_id=root, summary="s").new_session_id
    core.append_message(session_id=tip, role="user", content="second")
    core.end_session(session_id=tip, end_reason="user_exit")
    counts = (_messages(root), _messages(tip))
    job_id = jobs.create_bulk_delete_job(
        session_ids=[*lonely, root], include_live=False, actor="ada", reason="cleanup"
    )
    jobs.run_job(job_id=job_id, batch_sessions=1, max_batches=1)
    assert {root, tip} <= session_ids()

    delegate = core.create_session(
        source="tool", parent_session_id=root, model_config={"_delegate_from": root}
    ).session_id
    progress = jobs.run_job(job_id=job_id, batch_sessions=1)

    assert progress.state == "done"
    assert {root, tip, delegate} <= session_ids() and not set(lonely) & session_ids()
    assert parent_of(tip) == root and parent_of(delegate) == root
    assert (_messages(root), _messages(tip)) == counts
    assert progress.skipped == 2
    assert f"kept: {root}, its conversation continued in {delegate}" in progress.skipped_text
    assert f"kept: {tip}, with {root}, whose conversation continued in {delegate}" in (
        progress.skipped_text
    )


def test_a_merge_made_while_the_job_runs_stays_undoable():
    lonely = old_session(days=10)
    target, husk = old_session(days=9), old_session(days=8)
    before = {
        sid: db.fetchall(
            "SELECT id, content FROM messages WHERE session_id = %s ORDER BY id", [sid]
        )
        for sid in (target, husk)
    }
    job_id = jobs.create_bulk_delete_job(
        session_ids=[lonely, target, husk], include_live=False, actor="ada", reason="cleanup"
    )
    jobs.run_job(job_id=job_id, batch_sessions=1, max_batches=1)
    assert lonely not in session_ids()
    merged = core.merge_sessions(session_ids=[target, husk], target_id=target)

    progress = jobs.run_job(job_id=job_id)

    assert progress.state == "done"
    assert {target, husk} <= session_ids()
    assert f"kept: {target}, target of merge #{merged.merge_id}, which can still be undone" in (
        progress.skipped_text
    )
    assert f"kept: {husk}, absorbed by merge #{merged.merge_id}, which can still be undone" in (
        progress.skipped_text
    )
    core.unmerge(merge_id=merged.merge_id)
    after = {
        sid: db.fetchall(
            "SELECT id, content FROM messages WHERE session_id = %s ORDER BY id", [sid]
        )
        for sid in (target, husk)
    }
    assert after == before


def test_the_batch_rechecks_under_the_lock():
    """The check before a batch and the one under the store's lock are the same rule: a
    continuation that lands between them stops the batch, and nothing of it is deleted."""
    parent = old_session(days=10)
    plan = core.deletion.WholeConversations(remaining={parent})
    child = core.create_session(
        source="tool", parent_session_id=parent, model_config={"_delegate_from": parent}
    ).session_id
    with pytest.raises(core.ConversationsKept, match=f"continued in {child}"):
        core.deletion.delete_batch(
            [parent], actor="t", reason="r", job_id=None, trash=jobs.LEDGER_TRASH, whole=plan
        )
    assert {parent, child} <= session_ids() and parent_of(child) == parent


def test_the_dry_run_leaves_out_a_conversation_that_goes_on_in_a_live_session():
    """What the job would keep is what the preview leaves out: an ended session whose API
    conversation continues in a live session is not listed as deleted."""
    now = time.time()
    old = api_turn("support-9", "resp-1", now - 10 * DAY, end=True)
    tip = api_turn("support-9", "resp-2", now, end=False)
    other = old_session(days=10)

    preview = core.preview_bulk_delete(session_ids=[old, other])

    assert preview.session_ids == (other,)
    assert dict(preview.conversation_kept) == {old: f"its conversation continued in {tip}"}
    job_id = jobs.create_bulk_delete_job(
        session_ids=[old, other], include_live=False, actor="ada", reason="cleanup"
    )
    jobs.run_job(job_id=job_id)
    assert {old, tip} <= session_ids() and other not in session_ids() and parent_of(tip) == old


def test_a_cascade_stops_before_a_batch_whose_conversation_gained_a_delegate(monkeypatch):
    """The cascade shares the rule: a delegate the runtime starts from a session still to go,
    between two of the cascade's batches, stops it before that batch (its earlier batches
    stay restorable in the trash) instead of deleting the delegate's parent."""
    root = core.create_session(source="cli").session_id
    core.append_message(session_id=root, role="user", content="first")
    tip = core.rotate_for_compression(session_id=root, summary="s").new_session_id
    core.end_session(session_id=tip, end_reason="user_exit")
    plan = core.plan_cascade_delete(session_ids=[root])
    assert plan.session_ids == (tip, root)
    monkeypatch.setattr(core.deletion.batches, "BATCH_SESSIONS", 1)
    made = {}
    checkpoint = faults.checkpoint

    def runtime_spawns_a_delegate(point):
        if point == "cascade.between_batches" and not made:
            made["delegate"] = core.create_session(
                source="tool", parent_session_id=root, model_config={"_delegate_from": root}
            ).session_id
        checkpoint(point)

    monkeypatch.setattr(faults, "checkpoint", runtime_spawns_a_delegate)
    # Its first batch committed: the error says what it deleted (issue 26), and why it stopped.
    with pytest.raises(core.DeletePartlyApplied) as raised:
        core.execute_cascade_delete(
            session_ids=[root],
            expected_fingerprint=plan.fingerprint,
            actor="ada",
            reason="cleanup",
            trash=jobs.LEDGER_TRASH,
        )
    assert isinstance(raised.value.error, core.ConversationsKept)
    assert raised.value.result.deleted_sessions == 1
    assert f"{root}, its conversation continued in {made['delegate']}" in str(raised.value)
    assert root in session_ids() and parent_of(made["delegate"]) == root and _messages(root) == 1


def test_a_retention_run_keeps_a_continuation_whose_first_session_went_live_again():
    """The runtime reopens the first session of an old API conversation after the preview
    (as a gateway reopens a session it closed by accident): the job keeps it, live, and its
    continuation with it, still linked (on main the continuation went first, children
    first, and the reopened session was left without it)."""
    first = old_session(days=100, source="api_server", end="agent_close")
    continuation = old_session(
        days=99, source="api_server", parent=first, model_config={"_continued_from": first}
    )
    lonely = old_session(days=100)
    policy = _policy(days=30)
    assert set(retention.dry_run(policy).session_ids) == {first, continuation, lonely}
    job_id = _confirmed_run(policy)
    db.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = %s", [first])

    progress = jobs.run_job(job_id=job_id)

    assert {first, continuation} <= session_ids() and lonely not in session_ids()
    assert parent_of(continuation) == first and _messages(continuation) == 2
    assert progress.deleted == 1 and progress.skipped == 2
    assert f"kept: {continuation}, its conversation goes on in {first}" in progress.skipped_text


def test_a_run_created_after_the_conversation_continued_names_what_it_left_out(monkeypatch):
    """The customer writes between the run's preview and its job: the job is created without
    the old session, and names it with where its conversation went on."""
    now = time.time()
    old = api_turn("support-8", "resp-1", now - 100 * DAY, end=True)
    lonely = old_session(days=100)
    policy = _policy(days=30)
    assert set(retention.dry_run(policy).session_ids) == {old, lonely}
    made = {}
    create = jobs.create_bulk_delete_job

    def customer_writes_first(**kw):
        made["tip"] = api_turn("support-8", "resp-2", now, end=False)
        return create(**kw)

    monkeypatch.setattr(retention.jobs, "create_bulk_delete_job", customer_writes_first)
    job_id = _confirmed_run(policy)
    progress = jobs.run_job(job_id=job_id)

    tip = made["tip"]
    assert {old, tip} <= session_ids() and lonely not in session_ids() and parent_of(tip) == old
    assert progress.total == 2 and progress.deleted == 1 and progress.skipped == 1
    assert progress.skipped_text == f"1 skipped: kept: {old}, its conversation continued in {tip}"


def test_apply_retention_names_a_conversation_its_run_kept_whole(monkeypatch):
    now = time.time()
    old = api_turn("support-5", "resp-1", now - 100 * DAY, end=True)
    lonely = old_session(days=100)
    policy = _policy(days=30)
    policy.enabled = True
    policy.save()
    made = {}
    create = jobs.create_bulk_delete_job

    def customer_writes_first(**kw):
        made["tip"] = api_turn("support-5", "resp-2", now, end=False)
        return create(**kw)

    monkeypatch.setattr(retention.jobs, "create_bulk_delete_job", customer_writes_first)
    out = io.StringIO()
    call_command("apply_retention", stdout=out)

    assert {old, made["tip"]} <= session_ids() and lonely not in session_ids()
    assert f"kept: {old}, its conversation continued in {made['tip']}" in out.getvalue()


def test_a_retention_batch_rechecks_a_continuation_marked_only_by_continued_from():
    """A retention run's conversations hold ``_continued_from`` even without a parent link:
    a continuation the runtime marked that way after the preview stops the batch under the
    lock, and nothing of it is deleted."""
    old = old_session(days=10)
    plan = core.deletion.WholeConversations(remaining={old}, every_link=True)
    tip = core.create_session(source="api_server", model_config={"_continued_from": old})
    with pytest.raises(core.ConversationsKept, match=f"continued in {tip.session_id}"):
        core.deletion.delete_batch(
            [old], actor="t", reason="r", job_id=None, trash=jobs.LEDGER_TRASH, whole=plan
        )
    assert {old, tip.session_id} <= session_ids()


def test_a_bulk_job_keeps_a_session_an_outside_session_was_merged_into_while_it_runs():
    """Another operator merges a session the job does not hold into one it still has to
    delete: the target stays, with its merge still undoable."""
    first, target = old_session(days=10), old_session(days=9)
    outside = old_session(days=8, source="cli")
    job_id = jobs.create_bulk_delete_job(
        session_ids=[first, target], include_live=False, actor="ada", reason="cleanup"
    )
    jobs.run_job(job_id=job_id, batch_sessions=1, max_batches=1)
    merged = core.merge_sessions(session_ids=[target, outside], target_id=target)

    progress = jobs.run_job(job_id=job_id)

    assert progress.state == "done" and first not in session_ids()
    assert {target, outside} <= session_ids()
    assert db.fetchone(
        "SELECT undone_at FROM sessions_admin_merges WHERE id = %s", [merged.merge_id]
    ) == (None,)
    core.unmerge(merge_id=merged.merge_id)
    assert _messages(outside) == 2


def test_a_retention_run_keeps_a_session_written_to_while_it_runs():
    """The runtime writes a message into an ended session the run still has to delete (the
    attack's late write): it is no longer quiet, so it stays with its conversation."""
    first = old_session(days=100)
    written = old_session(days=90)
    delegate = old_session(days=90, parent=written, model_config={"_delegate_from": written})
    policy = _policy(days=30)
    job_id = _confirmed_run(policy)
    jobs.run_job(job_id=job_id, batch_sessions=1, max_batches=1)
    assert first not in session_ids()
    db.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (%s, 'user', %s, %s)",
        [written, "late write", time.time()],
    )

    progress = jobs.run_job(job_id=job_id, batch_sessions=1)

    assert progress.state == "done"
    assert {written, delegate} <= session_ids() and parent_of(delegate) == written
    assert _messages(written) == 3
    assert f"kept: {written}, active again since the run's preview" in progress.skipped_text
    assert DeleteJobItem.objects.get(job_id=job_id, session_id=delegate).state == (
        DeleteJobItem.SKIPPED
    )


def test_the_dry_run_keeps_an_api_conversation_whose_unlinked_fork_goes_on_live():
    """A cold start minted a new session for a known slug, with no parent link: the ended
    session and the live one are one API conversation (the slug's history, the response
    chain). A bulk delete of the ended one left the live one's next turn chained to a
    deleted response (attack round 41); the dry run keeps it, and says why."""
    now = time.time()
    old = api_turn("fork-41", "resp-41a", now - 10 * DAY, end=True)
    fork = core.create_session(source="api_server").session_id
    core.append_messages(session_id=fork, messages=[{"role": "user", "content": "again"}])
    core.record_turn(
        response_id="resp-41b",
        session_id=fork,
        conversation="fork-41",
        data={"previous_response_id": "resp-41a"},
    )
    assert parent_of(fork) is None
    other = old_session(days=10)

    preview = core.preview_bulk_delete(session_ids=[old, other])

    assert preview.session_ids == (other,)
    assert dict(preview.conversation_kept) == {old: f"its API conversation goes on in {fork}"}
    job_id = jobs.create_bulk_delete_job(
        session_ids=[old, other], include_live=False, actor="ada", reason="cleanup"
    )
    jobs.run_job(job_id=job_id)
    assert {old, fork} <= session_ids() and other not in session_ids()
    kept = "SELECT COUNT(*) FROM responses WHERE response_id IN ('resp-41a', 'resp-41b')"
    assert db.fetchone(kept, alias=responses_alias())[0] == 2


def test_the_dry_run_keeps_a_delegate_whose_parent_is_live_and_not_taken():
    """A preset by source ("tool") took the ended delegates of a live chat (attack round 41);
    a retention run kept them. The dry run keeps them, with what continues below them."""
    parent = core.create_session(source="cli").session_id
    delegate = core.create_session(
        source="tool", parent_session_id=parent, model_config={"_delegate_from": parent}
    ).session_id
    below = core.create_session(
        source="tool", parent_session_id=delegate, model_config={"_delegate_from": delegate}
    ).session_id
    for sid in (below, delegate):
        core.append_message(session_id=sid, role="user", content="sub-task")
        core.end_session(session_id=sid, end_reason="delegate_done")
    ended_parent = core.create_session(source="cli").session_id
    done = core.create_session(
        source="tool",
        parent_session_id=ended_parent,
        model_config={"_delegate_from": ended_parent},
    ).session_id
    core.end_session(session_id=done, end_reason="delegate_done")
    core.end_session(session_id=ended_parent, end_reason="user_exit")

    selected = core.preset_session_ids(preset="by_source", source="tool")
    preview = core.preview_bulk_delete(session_ids=selected)

    assert preview.session_ids == (done,)  # its parent ended: nothing goes on
    assert dict(preview.conversation_kept) == {
        delegate: f"its conversation goes on in {parent}, which is live",
        below: f"with {delegate}, its conversation goes on in {parent}, which is live",
    }
    job_id = jobs.create_bulk_delete_job(
        session_ids=selected, include_live=False, actor="ada", reason="cleanup"
    )
    jobs.run_job(job_id=job_id)
    assert {parent, delegate, below, ended_parent} <= session_ids()
    assert done not in session_ids()


def test_a_job_keeps_an_api_conversation_a_runtime_continued_after_it_was_confirmed():
    """The dry run took the ended session of a slug; the runtime then continued the slug in a
    new session with no parent link (its response chained to the old one's). The job checks
    again before each batch and keeps the old one (attack round 41: it was deleted)."""
    now = time.time()
    old = api_turn("late-41", "resp-41c", now - 10 * DAY, end=True)
    other = old_session(days=10)
    preview = core.preview_bulk_delete(session_ids=[old, other])
    assert set(preview.session_ids) == {old, other}
    job_id = jobs.create_bulk_delete_job(
        session_ids=[old, other], include_live=False, actor="ada", reason="cleanup"
    )
    later = core.create_session(source="api_server").session_id
    core.append_messages(session_id=later, messages=[{"role": "user", "content": "back"}])
    core.record_turn(
        response_id="resp-41d",
        session_id=later,
        conversation="late-41",
        data={"previous_response_id": "resp-41c"},
    )

    progress = jobs.run_job(job_id=job_id)

    assert progress.state == "done"
    assert {old, later} <= session_ids() and other not in session_ids()
    assert DeleteJobItem.objects.get(job_id=job_id, session_id=old).state != DeleteJobItem.DONE
    assert progress.skipped_text == (
        f"1 skipped: kept: {old}, its API conversation goes on in {later}"
    )
