"""Deletion over HTTP: cascade plan and delete by fingerprint, bulk delete dry run and job,
job status and cancel, the trash and its restore.

Each test drives the API with an admin token and asserts on the store and the dashboard's
database (trash entries, jobs, audit entries) afterwards; a refused confirmation changes
nothing and is audited as the console's refused action.
"""

from __future__ import annotations

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.rows import recompute_counters
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import AuditEntry, DeleteJob, TrashEntry
from tests.api.conftest import ApiClient
from tests.builders import cascade_lineage, store_snapshot
from tests.helpers import session_ids

PARTS = ("sessions", "messages", "conversations", "responses", "merges")

pytestmark = pytest.mark.usefixtures("no_worker")


@pytest.fixture
def admin(make_token) -> ApiClient:
    return ApiClient(make_token("admin", name="ops-bot"))


def entries(action: str, outcome: str | None = None):
    found = AuditEntry.objects.filter(action=action)
    return found.filter(outcome=outcome) if outcome else found


def ended_sessions(n: int, *, source: str = "cli", messages: int = 2) -> list[str]:
    ids = []
    for i in range(n):
        sid = core.create_session(source=source, started_at=1000.0 + i).session_id
        if messages:
            core.append_messages(
                session_id=sid,
                messages=[{"role": "user", "content": f"m{i}-{k}"} for k in range(messages)],
            )
        core.end_session(session_id=sid, end_reason="user_exit")
        ids.append(sid)
    # Ended long ago.
    db.execute(f"UPDATE sessions SET ended_at = 5000 WHERE id IN ({db.placeholders(ids)})", ids)
    return ids


# --- cascade -----------------------------------------------------------------------------------


def test_the_cascade_plan_is_the_cores_with_its_fingerprint(admin, make_token):
    root, delegate, grand, tip, branch, child, other = cascade_lineage()
    answer = admin.get(f"cascades/{root}")
    assert answer.status == 200, answer.body
    plan = core.plan_cascade_delete(session_ids=[root])
    assert answer.body["fingerprint"] == plan.fingerprint
    assert set(answer.body["session_ids"]) == {root, delegate, grand, tip}
    assert {c["session_id"] for c in answer.body["kept_children"]} == {branch, child}
    assert answer.body["typed_count_required"] is None
    with_branches = admin.get(f"cascades/{root}?include_branches=true").body
    assert branch in with_branches["session_ids"]
    assert admin.get("cascades/no-such-session").status == 404
    # Deletion is the admin's: support may not even see the plan, as in the console.
    assert ApiClient(make_token("support")).get(f"cascades/{root}").status == 403


def test_a_cascade_delete_by_fingerprint_moves_the_plan_to_the_trash(admin):
    root, delegate, grand, tip, branch, child, other = cascade_lineage()
    fingerprint = admin.get(f"cascades/{root}").body["fingerprint"]
    answer = admin.post(f"cascades/{root}", {"fingerprint": fingerprint, "reason": "GDPR 42"})
    assert answer.status == 200, answer.body
    assert answer.body["deleted_sessions"] == 4
    assert session_ids() == {branch, child, other}
    entry = TrashEntry.objects.get()
    assert set(entry.session_ids) == {root, delegate, grand, tip}
    assert (entry.actor_name, entry.reason) == ("api:ops-bot", "GDPR 42")
    assert answer.body["trash_entry_ids"] == [entry.pk]
    audit = entries("cascade_delete").get()
    assert (audit.outcome, audit.actor_name, audit.reason) == ("ok", "api:ops-bot", "GDPR 42")
    assert audit.after["deleted_sessions"] == 4


def test_a_typed_count_that_contradicts_the_plan_is_refused_even_when_none_is_asked(admin):
    # A small plan asks no typed count; a number sent anyway must be the plan's (a stale
    # script's count is no confirmation): 422 naming typed_count, nothing deleted, no job.
    root, delegate, grand, tip, branch, child, other = cascade_lineage()
    plan = admin.get(f"cascades/{root}").body
    assert plan["typed_count_required"] is None
    before = store_snapshot(*PARTS)
    confirm = {"fingerprint": plan["fingerprint"], "reason": "GDPR 42"}
    answer = admin.post(f"cascades/{root}", {**confirm, "typed_count": 48})
    assert answer.status == 422, answer.body
    assert [e["field"] for e in answer.body["errors"]] == ["typed_count"]
    assert store_snapshot(*PARTS) == before
    old = ended_sessions(3)
    dry = admin.post("bulk-deletes/dry-run", {"session_ids": old}).body
    job = {"session_ids": old, "fingerprint": dry["fingerprint"], "reason": "tidy"}
    answer = admin.post("bulk-deletes", {**job, "typed_count": 1234})
    assert answer.status == 422, answer.body
    assert [e["field"] for e in answer.body["errors"]] == ["typed_count"]
    assert {root, *old} <= session_ids() and not DeleteJob.objects.exists()
    assert admin.post(f"cascades/{root}", {**confirm, "typed_count": 4}).status == 200


def test_a_long_cascade_and_its_restore_are_202_with_their_job(admin, settings):
    """Over the configured size (about a second of work), each runs as a job: 202 with the
    job's URL, the plan intact until the worker runs it, then the audit entry ok."""
    settings.SESSIONS_ADMIN_CASCADE_JOB_MESSAGES = 1
    settings.SESSIONS_ADMIN_RESTORE_JOB_MESSAGES = 1
    root, delegate, grand, tip, branch, child, other = cascade_lineage()
    before = store_snapshot(*PARTS)
    fingerprint = admin.get(f"cascades/{root}").body["fingerprint"]
    answer = admin.post(f"cascades/{root}", {"fingerprint": fingerprint, "reason": "GDPR 42"})
    assert answer.status == 202, answer.body
    job = DeleteJob.objects.get()
    assert answer.body["kind"] == "cascade" and answer.body["job_id"] == job.pk
    assert answer.body["url"] == f"/api/v1/jobs/{job.pk}"
    assert answer.headers["Location"] == answer.body["url"]
    assert store_snapshot(*PARTS) == before
    assert entries("cascade_delete").get().outcome == "pending"
    # The same confirmation again is refused while the job holds the plan: nothing changes.
    again = admin.post(f"cascades/{root}", {"fingerprint": fingerprint, "reason": "GDPR 42"})
    assert again.status >= 400 and DeleteJob.objects.count() == 1

    jobs.run_job(job_id=job.pk)
    status = admin.get(f"jobs/{job.pk}").body
    assert (status["state"], status["deleted"]) == ("done", 4)
    assert session_ids() == {branch, child, other}
    assert entries("cascade_delete", "ok").get().after["deleted_sessions"] == 4

    entry_id = TrashEntry.objects.get().pk
    restoring = admin.post(f"trash/{entry_id}/restore", {"reason": "by mistake"})
    assert restoring.status == 202, restoring.body
    assert restoring.body["kind"] == "restore"
    jobs.run_job(job_id=restoring.body["job_id"])
    assert store_snapshot(*PARTS) == before
    assert entries("restore", "ok").get().after["restored_sessions"] == 4


def test_a_stale_cascade_fingerprint_is_plan_changed_and_changes_nothing(admin):
    root, *_ = cascade_lineage()
    fingerprint = admin.get(f"cascades/{root}").body["fingerprint"]
    # The runtime starts another sub-agent of the conversation meanwhile.
    core.create_session(
        source="tool", parent_session_id=root, model_config={"_delegate_from": root}
    )
    before = store_snapshot(*PARTS)
    answer = admin.post(f"cascades/{root}", {"fingerprint": fingerprint, "reason": "r"})
    assert answer.status == 409, answer.body
    assert answer.body["type"].endswith("/plan-changed")
    assert store_snapshot(*PARTS) == before
    assert not TrashEntry.objects.exists()
    audit = entries("cascade_delete").get()
    assert (audit.outcome, audit.actor_name) == ("refused", "api:ops-bot")


@pytest.mark.parametrize(
    "reason",
    ["", "   ", "a\x00b", "\u200b\u200b", " \ufeff\u2060 "],
    ids=["empty", "blank", "nul", "zero-width", "invisible"],
)
def test_a_cascade_needs_a_reason(admin, reason):
    root, *_ = cascade_lineage()
    fingerprint = admin.get(f"cascades/{root}").body["fingerprint"]
    before = store_snapshot(*PARTS)
    answer = admin.post(f"cascades/{root}", {"fingerprint": fingerprint, "reason": reason})
    assert answer.status == 422, answer.body
    assert answer.body["errors"][0]["field"] == "reason"
    assert store_snapshot(*PARTS) == before
    assert not TrashEntry.objects.exists()


def test_a_large_cascade_needs_its_number_of_sessions_typed(admin):
    sid = core.create_session(source="cli").session_id
    core.append_messages(
        session_id=sid, messages=[{"role": "user", "content": f"m{n}"} for n in range(1000)]
    )
    plan = admin.get(f"cascades/{sid}").body
    assert plan["typed_count_required"] == 1
    before = store_snapshot(*PARTS)
    for typed in (None, 1000):
        answer = admin.post(
            f"cascades/{sid}",
            {"fingerprint": plan["fingerprint"], "reason": "r", "typed_count": typed},
        )
        assert answer.status == 422, answer.body
        assert answer.body["errors"][0]["field"] == "typed_count"
        assert store_snapshot(*PARTS) == before
    assert entries("cascade_delete", "refused").count() == 2
    answer = admin.post(
        f"cascades/{sid}", {"fingerprint": plan["fingerprint"], "reason": "r", "typed_count": 1}
    )
    assert answer.status == 200, answer.body
    assert answer.body["deleted_messages"] == 1000
    assert session_ids() == set()


def test_a_cascade_losing_a_merges_undo_needs_lose_undo(admin):
    first = core.create_session(source="cli", user_id="u", started_at=1.0).session_id
    second = core.create_session(source="cli", user_id="u", started_at=2.0).session_id
    for sid in (first, second):
        core.append_message(session_id=sid, role="user", content=f"in {sid}")
    merge = core.merge_sessions(
        session_ids=[first, second],
        expected_fingerprint=core.plan_merge(session_ids=[first, second]).fingerprint,
    )
    plan = admin.get(f"cascades/{first}").body
    assert plan["lost_undos"] == [merge.merge_id]
    before = store_snapshot(*PARTS)
    body = {"fingerprint": plan["fingerprint"], "reason": "r"}
    answer = admin.post(f"cascades/{first}", body)
    assert answer.status == 422, answer.body
    assert answer.body["errors"][0]["field"] == "lose_undo"
    assert store_snapshot(*PARTS) == before
    answer = admin.post(f"cascades/{first}", body | {"lose_undo": True})
    assert answer.status == 200, answer.body
    assert answer.body["lost_undos"] == [merge.merge_id]
    assert first not in session_ids()


# --- bulk delete -------------------------------------------------------------------------------


def test_a_bulk_delete_runs_the_dry_runs_set_as_a_job(admin):
    old = ended_sessions(5)
    live = core.create_session(source="cli").session_id
    other = ended_sessions(1, source="telegram")
    before = store_snapshot(*PARTS)
    dry = admin.post("bulk-deletes/dry-run", {"preset": "by_source", "source": "cli"})
    assert dry.status == 200, dry.body
    assert (dry.body["count"], dry.body["live_excluded"]) == (5, 1)
    assert dry.body["message_count"] == 10 and dry.body["typed_count_required"] is None
    assert store_snapshot(*PARTS) == before  # a dry run changes nothing
    answer = admin.post(
        "bulk-deletes",
        {
            "preset": "by_source",
            "source": "cli",
            "fingerprint": dry.body["fingerprint"],
            "reason": "retention",
        },
    )
    assert answer.status == 201, answer.body
    job = DeleteJob.objects.get()
    assert answer.body["job_id"] == job.pk and answer.body["state"] == "pending"
    assert (job.total, job.reason, job.created_by) == (5, "retention", "api:ops-bot")
    audit = entries("bulk_delete").get()
    assert (audit.outcome, audit.actor_name) == ("ok", "api:ops-bot")
    jobs.run_job(job_id=job.pk)
    assert session_ids() == {live, *other}
    assert set(old).isdisjoint(session_ids())
    status = admin.get(f"jobs/{job.pk}").body
    assert (status["state"], status["deleted"], status["deleted_messages"]) == ("done", 5, 10)
    assert [j["job_id"] for j in admin.get("jobs").body] == [job.pk]
    assert TrashEntry.objects.filter(job=job).exists()


def test_the_empty_preset_never_takes_a_live_session_even_when_asked(admin):
    # An empty live session is a chat's current one (docs/attach.md): include_live does not
    # reach it, neither in the dry run nor in a job's batches after the session went live again.
    emptied = ended_sessions(2, messages=0)
    live = core.create_session(source="cli").session_id
    body = {"preset": "empty", "include_live": True}
    dry = admin.post("bulk-deletes/dry-run", body)
    assert dry.status == 200, dry.body
    assert (dry.body["count"], dry.body["live_included"]) == (2, 0)
    answer = admin.post(
        "bulk-deletes", {**body, "fingerprint": dry.body["fingerprint"], "reason": "tidy"}
    )
    assert answer.status == 201, answer.body
    job = DeleteJob.objects.get()
    assert not job.include_live and "live sessions included" not in job.description
    resumed = emptied[0]
    db.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = %s", [resumed])
    jobs.run_job(job_id=job.pk)
    assert session_ids() == {live, resumed}


def test_a_stale_bulk_fingerprint_is_plan_changed_and_creates_no_job(admin):
    ended_sessions(3)
    dry = admin.post("bulk-deletes/dry-run", {"preset": "by_source", "source": "cli"}).body
    ended_sessions(1)  # the selection finds one more now
    before = store_snapshot(*PARTS)
    answer = admin.post(
        "bulk-deletes",
        {"preset": "by_source", "source": "cli", "fingerprint": dry["fingerprint"], "reason": "r"},
    )
    assert answer.status == 409, answer.body
    assert answer.body["type"].endswith("/plan-changed")
    assert not DeleteJob.objects.exists()
    assert store_snapshot(*PARTS) == before
    assert (entries("bulk_delete").get().outcome) == "refused"


def test_the_ended_older_than_preset_keeps_the_dry_runs_cutoff(admin):
    ended_sessions(2)
    dry = admin.post("bulk-deletes/dry-run", {"preset": "ended_older_than", "days": 1}).body
    assert dry["count"] == 2 and dry["cutoff"] is not None
    body = {"preset": "ended_older_than", "days": 1, "fingerprint": dry["fingerprint"]}
    missing = admin.post("bulk-deletes", body | {"reason": "r"})
    assert missing.status == 422 and missing.body["errors"][0]["field"] == "cutoff"
    assert not DeleteJob.objects.exists()
    answer = admin.post("bulk-deletes", body | {"reason": "r", "cutoff": dry["cutoff"]})
    assert answer.status == 201, answer.body
    assert DeleteJob.objects.get().total == 2


def test_picked_live_sessions_need_confirm_live_and_large_sets_the_typed_count(admin):
    ids = ended_sessions(19) + [core.create_session(source="cli").session_id]
    dry = admin.post("bulk-deletes/dry-run", {"session_ids": ids, "include_live": True}).body
    assert (dry["count"], dry["live_included"], dry["typed_count_required"]) == (20, 1, 20)
    body = {
        "session_ids": ids,
        "include_live": True,
        "fingerprint": dry["fingerprint"],
        "reason": "r",
    }
    answer = admin.post("bulk-deletes", body)
    assert answer.status == 422, answer.body
    assert {e["field"] for e in answer.body["errors"]} == {"confirm_live", "typed_count"}
    assert not DeleteJob.objects.exists()
    answer = admin.post("bulk-deletes", body | {"confirm_live": True, "typed_count": 20})
    assert answer.status == 201, answer.body
    assert DeleteJob.objects.get().include_live is True


def test_a_selection_is_a_preset_or_picked_ids(admin):
    too_many = {"session_ids": [f"s{n}" for n in range(10_001)]}
    for body in ({}, {"preset": "empty", "session_ids": ["a"]}, {"preset": "by_source"}, too_many):
        answer = admin.post("bulk-deletes/dry-run", body)
        assert answer.status == 422, (body, answer.body)


def test_cancelling_a_job_stops_it_and_is_audited(admin):
    ids = ended_sessions(6)
    dry = admin.post("bulk-deletes/dry-run", {"session_ids": ids}).body
    job_id = admin.post(
        "bulk-deletes", {"session_ids": ids, "fingerprint": dry["fingerprint"], "reason": "r"}
    ).body["job_id"]
    jobs.run_job(job_id=job_id, batch_sessions=2, max_batches=1)
    answer = admin.post(f"jobs/{job_id}/cancel", {"reason": "wrong set"})
    assert answer.status == 200, answer.body
    assert answer.body["state"] == "cancelled" and answer.body["processed"] == 2
    assert DeleteJob.objects.get(pk=job_id).state == DeleteJob.CANCELLED
    jobs.run_job(job_id=job_id)
    assert len(session_ids()) == 4
    audit = entries("cancel_bulk_delete").get()
    assert (audit.outcome, audit.actor_name, audit.reason) == ("ok", "api:ops-bot", "wrong set")
    again = admin.post(f"jobs/{job_id}/cancel", {})
    assert again.status == 409 and "already cancelled" in again.body["detail"]
    assert entries("cancel_bulk_delete", "ok").count() == 1
    assert admin.get("jobs/999999").status == 404


# --- trash -------------------------------------------------------------------------------------


def cascade_into_trash(admin: ApiClient, sid: str) -> int:
    fingerprint = admin.get(f"cascades/{sid}?include_branches=true").body["fingerprint"]
    answer = admin.post(
        f"cascades/{sid}",
        {"fingerprint": fingerprint, "reason": "oops", "include_branches": True},
    )
    assert answer.status == 200, answer.body
    return answer.body["trash_entry_ids"][0]


def test_the_trash_lists_operations_and_a_restore_gives_back_the_exact_rows(admin):
    root, delegate, grand, tip, branch, child, other = cascade_lineage()
    before = store_snapshot(*PARTS)
    entry_id = cascade_into_trash(admin, tip)
    assert store_snapshot(*PARTS) != before
    listing = admin.get("trash").body
    assert listing["total"] == 1
    (row,) = listing["operations"]
    assert row["entry_id"] == entry_id and row["state"] == "complete"
    assert tip in row["session_ids"] and row["actor"] == "api:ops-bot"
    assert admin.get(f"trash?q={other}").body["operations"] == []
    answer = admin.post(f"trash/{entry_id}/restore", {"reason": "deleted by mistake"})
    assert answer.status == 200, answer.body
    restored = set(answer.body["restored_sessions"])
    assert tip in restored and restored == set(TrashEntry.objects.get().session_ids)
    assert store_snapshot(*PARTS) == before
    assert TrashEntry.objects.get().state == TrashEntry.RESTORED
    audit = entries("restore").get()
    assert (audit.outcome, audit.actor_name) == ("ok", "api:ops-bot")
    assert admin.get("trash").body["operations"][0]["state"] == "restored"
    again = admin.post(f"trash/{entry_id}/restore", {})
    assert again.status == 422 and "already restored" in again.body["detail"]
    assert store_snapshot(*PARTS) == before


def test_the_trash_list_pages_by_cursor_each_operation_once_while_the_trash_changes(
    admin, monkeypatch
):
    from sessions_admin.api import deletion as api_deletion

    monkeypatch.setattr(api_deletion, "TRASH_PAGE_SIZE", 3)
    first_entries = []
    for sid in ended_sessions(8):
        first_entries.append(cascade_into_trash(admin, sid))
    newest_first = sorted(first_entries, reverse=True)
    page = admin.get("trash").body
    assert page["total"] == 8 and page["next_cursor"]
    seen = [row["entry_id"] for row in page["operations"]]
    # A delete after the first page is newer than every page still to come: never shown.
    cascade_into_trash(admin, ended_sessions(1)[0])
    while page["next_cursor"]:
        page = admin.get(f"trash?after={page['next_cursor']}").body
        seen += [row["entry_id"] for row in page["operations"]]
    assert seen == newest_first
    for bad in ("garbage", page["operations"][0]["operation"], "W10"):
        refused = admin.get(f"trash?after={bad}")
        assert refused.status == 422 and refused.body["type"].endswith("invalid-input")


def test_a_restore_conflict_is_409_and_changes_nothing(admin):
    (sid,) = ended_sessions(1)
    entry_id = cascade_into_trash(admin, sid)
    core.create_session(source="cli", session_id=sid)  # the id is taken again meanwhile
    before = store_snapshot(*PARTS)
    answer = admin.post(f"trash/{entry_id}/restore", {})
    assert answer.status == 409, answer.body
    assert answer.body["type"].endswith("/restore-conflict")
    assert store_snapshot(*PARTS) == before
    assert TrashEntry.objects.get(pk=entry_id).state == TrashEntry.COMPLETE
    assert entries("restore", "failed").count() == 1


def test_restoring_an_unknown_entry_is_not_found_and_recorded(admin):
    answer = admin.post("trash/999999/restore", {})
    assert answer.status == 404
    assert entries("restore", "refused").count() == 1


def _conversation(*, root_ended: float, continuation_ended: float, messages: int) -> tuple:
    """A root ended by compression and its continuation (3 messages by default)."""
    root = core.create_session(source="telegram", user_id="u-old", started_at=900.0).session_id
    core.append_message(session_id=root, role="user", content="old words")
    cont = core.rotate_for_compression(session_id=root).new_session_id
    for n in range(messages):
        core.append_message(session_id=cont, role="user", content=f"written later {n}")
    core.end_session(session_id=cont, end_reason="user_exit")
    db.execute("UPDATE sessions SET ended_at = %s WHERE id = %s", [root_ended, root])
    db.execute("UPDATE sessions SET ended_at = %s WHERE id = %s", [continuation_ended, cont])
    return root, cont


@pytest.mark.parametrize(
    ("selection", "messages"),
    [
        ({"preset": "ended_older_than", "days": 90}, 3),
        ({"preset": "empty"}, 3),
    ],
    ids=["ended-older-than", "empty"],
)
def test_a_preset_keeps_a_conversation_whose_continuation_it_does_not_match(
    admin, selection, messages
):
    """Attack round 45: "ended more than 90 days ago" took a continuation that ended yesterday
    with its root (and "empty" an empty root's continuation with messages). A conversation
    goes only when all of it matches, as in a retention run; the dry run says why it stays."""
    import time

    now = time.time()
    root, cont = _conversation(
        root_ended=now - 100 * 86400, continuation_ended=now - 86400, messages=messages
    )
    if selection["preset"] == "empty":
        db.execute("DELETE FROM messages WHERE session_id = %s", [root])
        recompute_counters(root)
    old = ended_sessions(2)  # ended long ago, messages: taken by "ended more than 90 days"
    empty = ended_sessions(1, messages=0)
    taken = set(empty) | (set(old) if selection["preset"] == "ended_older_than" else set())
    dry = admin.post("bulk-deletes/dry-run", selection)
    assert dry.status == 200, dry.body
    assert dry.body["count"] == len(taken)
    kept = {k["session_id"]: k["why"] for k in dry.body["conversation_kept"]}
    assert set(kept) == {root} and cont in kept[root]
    start = admin.post(
        "bulk-deletes",
        {
            **selection,
            "cutoff": dry.body.get("cutoff"),
            "fingerprint": dry.body["fingerprint"],
            "reason": "cleanup",
        },
    )
    assert start.status == 201, start.body
    jobs.run_job(job_id=start.body["job_id"])
    assert {root, cont} <= session_ids() and taken.isdisjoint(session_ids())
    assert db.fetchone("SELECT COUNT(*) FROM messages WHERE session_id = %s", [cont])[0] == 3


def test_no_bulk_delete_takes_a_continuation_without_the_session_it_continues(admin):
    """Attack round 45 (T): "by source" telegram took the telegram continuation of a discord
    conversation and left its root, ended by "compression", without it. A continuation goes
    only with the session it continues, for a preset and for picked sessions alike; the
    conversation that began on telegram goes whole, its discord continuation with it."""
    discord_root, telegram_tail = _conversation(
        root_ended=5000.0, continuation_ended=5000.0, messages=3
    )
    db.execute("UPDATE sessions SET source = 'discord' WHERE id = %s", [discord_root])
    telegram_root, discord_tail = _conversation(
        root_ended=5000.0, continuation_ended=5000.0, messages=2
    )
    db.execute("UPDATE sessions SET source = 'discord' WHERE id = %s", [discord_tail])
    for selection in (
        {"session_ids": [telegram_tail, telegram_root]},
        {"preset": "by_source", "source": "telegram"},
    ):
        dry = admin.post("bulk-deletes/dry-run", selection)
        assert dry.status == 200, dry.body
        assert dry.body["count"] == 2  # telegram_root and its discord continuation
        kept = {k["session_id"]: k["why"] for k in dry.body["conversation_kept"]}
        assert discord_root in kept[telegram_tail]
    start = admin.post(
        "bulk-deletes",
        {"preset": "by_source", "source": "telegram", "fingerprint": dry.body["fingerprint"],
         "reason": "cleanup"},
    )  # fmt: skip
    assert start.status == 201, start.body
    jobs.run_job(job_id=start.body["job_id"])
    assert {discord_root, telegram_tail} <= session_ids()
    assert not {telegram_root, discord_tail} & session_ids()


def test_no_pick_takes_part_of_an_api_conversation_linked_by_its_markers_only(admin):
    """Attack round 45 (U): three segments of one /v1/responses conversation, each continuing
    the one before by ``_continued_from`` with ``parent_session_id`` left empty (as a runtime
    may write them). Picking the middle one, or the first two, deleted them and left the rest:
    each pick now keeps the whole conversation, saying where it goes on."""
    first = core.create_session(source="api_server").session_id
    core.append_message(session_id=first, role="user", content="first words")
    core.end_session(session_id=first, end_reason="session_reset")
    middle = core.create_session(
        source="api_server", model_config={"_continued_from": first}
    ).session_id
    core.append_message(session_id=middle, role="user", content="middle words")
    core.end_session(session_id=middle, end_reason="session_reset")
    tip = core.create_session(source="api_server", model_config={"_continued_from": middle})
    db.execute(
        "UPDATE sessions SET parent_session_id = NULL WHERE id IN (%s, %s)",
        [middle, tip.session_id],
    )
    for picked, why in (
        ([middle], (first, tip.session_id)),
        ([first, middle], (tip.session_id,)),
        ([first], (middle,)),
    ):
        dry = admin.post("bulk-deletes/dry-run", {"session_ids": picked})
        assert dry.status == 200, dry.body
        assert dry.body["count"] == 0, (picked, dry.body)
        kept = {k["session_id"]: k["why"] for k in dry.body["conversation_kept"]}
        assert set(kept) == set(picked), kept
        assert any(name in w for name in why for w in kept.values()), kept
    assert {first, middle, tip.session_id} <= session_ids()
