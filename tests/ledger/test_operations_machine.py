"""Random sequences of operator actions on a store three people share: what must always hold.

hypothesis's state machine builds lineages for three users whose ids share a prefix
(``u-ann``, ``u-ann-2``, ``u-bo``) and children of nobody, through the core as a runtime would
(compression, delegates, branches, untyped children, ends), and between those steps runs what
the operators do through ``ledger.actions``: cascade deletes, restores, purges, legal holds and
their release, merges and their undo, and erasure requests. After every step:

- the consistency checks (store and trash) report nothing;
- no audit entry is left ``pending``;
- a session under a hold standing before the step is still in the store or the trash;
- a cascade removed exactly the sessions its plan listed, and each is in the trash;
- a restore put its operation's sessions back in the store;
- an erasure removed only sessions its preview listed, each the subject's own or nobody's,
  and every other user's session kept its messages;
- a merge and its undo change no one's session but those picked.

A step the product refuses (a hold, a live session, a plan that changed) must change nothing
it would have deleted.
"""

from __future__ import annotations

import pytest
from django.db import connections
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core import holds as holds_core
from sessions_admin.core.erasure import Subject
from sessions_admin.demo.consistency import check_store, check_trash
from sessions_admin.ledger import actions, erasure, jobs
from sessions_admin.ledger.models import (
    AuditEntry,
    AuditSession,
    DeleteJob,
    DeleteJobItem,
    ErasureRequest,
    TrashEntry,
    TrashSession,
)
from tests.builders import erasures_run_inline  # noqa: F401 - an autouse fixture
from tests.conftest import _empty_tables, _wipe

USERS = ("u-ann", "u-ann-2", "u-bo")
LEDGER_MODELS = (
    AuditSession,
    AuditEntry,
    TrashSession,
    TrashEntry,
    DeleteJobItem,
    DeleteJob,
    ErasureRequest,
)


def store_sessions() -> dict[str, dict]:
    """Every session in creation order (ids are random: the order makes a drawn index name
    the same session when hypothesis replays a sequence)."""
    return {
        row[0]: {"user": row[1], "parent": row[2], "ended": row[3] is not None}
        for row in db.fetchall(
            "SELECT id, user_id, parent_session_id, ended_at FROM sessions ORDER BY started_at, id"
        )
    }


def pick(data, things: list):
    """One of ``things`` by a drawn index (drawing from the list itself would make what is
    drawn depend on the store, which hypothesis refuses)."""
    return things[data.draw(st.integers(0, 999)) % len(things)]


def message_counts() -> dict[str, int]:
    return dict(db.fetchall("SELECT session_id, COUNT(*) FROM messages GROUP BY session_id"))


def trashed_sessions() -> set[str]:
    """Sessions the trash holds (entries not restored)."""
    return set(
        TrashSession.objects.exclude(entry__state=TrashEntry.RESTORED).values_list(
            "session_id", flat=True
        )
    )


def lineage_of(sessions: dict[str, dict], start: set[str]) -> set[str]:
    """``start`` with every ancestor and descendant through parent links."""
    children: dict[str, list[str]] = {}
    for sid, row in sessions.items():
        if row["parent"]:
            children.setdefault(row["parent"], []).append(sid)
    found, todo = set(), list(start)
    while todo:
        sid = todo.pop()
        if sid in found:
            continue
        found.add(sid)
        todo.extend(children.get(sid, ()))
        parent = sessions.get(sid, {}).get("parent")
        if parent:
            todo.append(parent)
    return found


def held_now(sessions: dict[str, dict]) -> set[str]:
    """What the standing holds cover, as docs/retention.md says: a held session and its
    whole lineage; a held user's sessions and their lineages."""
    covered: set[str] = set()
    for hold in holds_core.active_holds():
        if hold.kind == holds_core.SESSION:
            start = {hold.subject}
        else:
            start = {sid for sid, row in sessions.items() if row["user"] == hold.subject}
        covered |= lineage_of(sessions, start) | start
    return covered


class Operations(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        _wipe()
        _empty_tables(connections["default"], [m._meta.db_table for m in LEDGER_MODELS])
        self.merges: list[int] = []
        self.conversations = 0

    # --- what a runtime writes ---------------------------------------------------------------

    def _pick(self, data, *, live: bool | None = None) -> str | None:
        rows = store_sessions()
        ids = [s for s, r in rows.items() if live is None or r["ended"] != live]
        return pick(data, ids) if ids else None

    @rule(user=st.sampled_from(USERS), messages=st.integers(0, 3))
    def new_conversation(self, user, messages):
        sid = core.create_session(
            source="telegram", user_id=user, session_key=f"tg:{user}:{self.conversations % 3}"
        ).session_id
        self.conversations += 1
        for n in range(messages):
            core.append_message(session_id=sid, role="user", content=f"{user} says {n}")

    @rule(
        data=st.data(),
        kind=st.sampled_from(["compress", "delegate", "branch", "child", "child-nobody"]),
    )
    def grow(self, data, kind):
        sid = self._pick(data)
        if sid is None:
            return
        row = store_sessions()[sid]
        try:
            if kind == "compress":
                child = core.rotate_for_compression(session_id=sid, summary="so far").new_session_id
            elif kind == "delegate":
                child = core.create_session(
                    source="tool", parent_session_id=sid, model_config={"_delegate_from": sid}
                ).session_id
            elif kind == "branch":
                child = core.branch_session(session_id=sid).new_session_id
            else:
                child = core.create_session(
                    source="cron",
                    parent_session_id=sid,
                    user_id=None if kind == "child-nobody" else row["user"],
                ).session_id
            core.append_message(session_id=child, role="assistant", content=f"{kind} reply")
        except core.StoreError:
            pass

    @rule(data=st.data())
    def end(self, data):
        sid = self._pick(data, live=True)
        if sid is not None:
            core.end_session(session_id=sid, end_reason="user_exit")

    # --- what operators do ------------------------------------------------------------------

    @rule(data=st.data(), include_branches=st.booleans())
    def cascade(self, data, include_branches):
        sid = self._pick(data)
        if sid is None:
            return
        plan = core.plan_cascade_delete(session_ids=[sid], include_branches=include_branches)
        before = set(store_sessions())
        try:
            result = actions.cascade_delete(
                actor=None,
                session_ids=[sid],
                include_branches=include_branches,
                expected_fingerprint=plan.fingerprint,
                reason="machine",
                lose_undo=data.draw(st.booleans()),
            )
        except core.StoreError as error:
            event(f"cascade refused: {type(error).__name__}")
            assert set(store_sessions()) == before, "a refused cascade deleted sessions"
            return
        event("cascade done")
        gone = before - set(store_sessions())
        assert gone == set(plan.session_ids), (gone, plan.session_ids)
        assert result.deleted_sessions == len(gone)
        assert gone <= trashed_sessions(), gone - trashed_sessions()

    @rule(data=st.data(), include_live=st.booleans(), cancel_midway=st.booleans())
    def bulk_delete(self, data, include_live, cancel_midway):
        rows = store_sessions()
        if not rows:
            return
        chosen = list(dict.fromkeys(pick(data, list(rows)) for _ in range(3)))
        preview = core.preview_bulk_delete(session_ids=chosen, include_live=include_live)
        before = set(rows)
        try:
            job_id = actions.start_bulk_delete(
                actor=None,
                session_ids=chosen,
                include_live=include_live,
                reason="machine",
                expected_ids=list(preview.session_ids),
            )
        except core.StoreError as error:
            event(f"bulk delete refused: {type(error).__name__}")
            assert set(store_sessions()) == before
            return
        if cancel_midway:
            jobs.run_job(job_id=job_id, worker="machine", batch_sessions=1, max_batches=1)
            actions.cancel_bulk_delete(actor=None, job_id=job_id, reason="stop")
        progress = jobs.run_job(job_id=job_id, worker="machine", batch_sessions=2)
        event(f"bulk delete {progress.state}")
        gone = before - set(store_sessions())
        # What goes with a previewed session (its continuations, delegates) may go too, but
        # nothing of a conversation none of the previewed sessions is in.
        reach = lineage_of(rows, set(preview.session_ids))
        assert gone <= reach, gone - reach
        assert progress.deleted <= len(gone), (progress, gone)
        assert gone <= trashed_sessions(), gone - trashed_sessions()

    @rule(data=st.data())
    def restore(self, data):
        entries = list(
            TrashEntry.objects.filter(state=TrashEntry.COMPLETE)
            .order_by("pk")
            .values_list("pk", "operation")
        )
        if not entries:
            return
        entry_id, operation = pick(data, entries)
        ids = set(
            TrashSession.objects.filter(
                entry__operation=operation, entry__state=TrashEntry.COMPLETE
            ).values_list("session_id", flat=True)
        )
        try:
            actions.restore(actor=None, entry_id=entry_id, reason="machine")
        except core.StoreError as error:
            event(f"restore refused: {type(error).__name__}")
            return
        event("restore done")
        assert ids <= set(store_sessions()), ids - set(store_sessions())

    @precondition(lambda self: TrashEntry.objects.exists())
    @rule(now=st.integers(0, 2))
    def purge(self, now):
        if now:  # one step in three: restores need something left in the trash
            return
        try:
            report = actions.purge(actor=None, older_than_days=None, reason="machine")
            event(f"purge done, kept some: {bool(report.kept)}")
        except core.StoreError as error:
            event(f"purge refused: {type(error).__name__}")

    @rule(data=st.data(), by_user=st.booleans())
    def hold(self, data, by_user):
        if by_user:
            kind, subject = holds_core.USER, data.draw(st.sampled_from(USERS))
        else:
            kind, subject = holds_core.SESSION, self._pick(data)
            if subject is None:
                return
        try:
            actions.place_hold(actor=None, kind=kind, subject=subject, reason="case 7")
        except core.StoreError:
            pass

    @precondition(lambda self: holds_core.active_holds())
    @rule(data=st.data())
    def release(self, data):
        hold = pick(data, sorted(holds_core.active_holds(), key=lambda h: h.id))
        actions.release_hold(actor=None, hold_id=hold.id, reason="closed")

    @rule(data=st.data())
    def merge(self, data):
        rows = store_sessions()
        user = data.draw(st.sampled_from(USERS))
        mine = [s for s, r in rows.items() if r["user"] == user]
        if len(mine) < 2:
            return
        first = pick(data, mine)
        picked = [first, pick(data, [s for s in mine if s != first])]
        try:
            plan = core.plan_merge(session_ids=picked)
        except core.StoreError:
            return
        others_before = {
            s: n for s, n in message_counts().items() if s not in plan_ids(plan, picked)
        }
        try:
            result = actions.merge(
                actor=None,
                session_ids=picked,
                target_id=None,
                expected_fingerprint=plan.fingerprint,
                reason="same person",
                typed_count=len(plan.absorbed_ids),
            )
        except core.StoreError as error:
            event(f"merge refused: {type(error).__name__} {str(error)[:90]}")
            return
        event("merge done")
        self.merges.append(result.merge_id)
        after = message_counts()
        for sid, n in others_before.items():
            assert after.get(sid, 0) == n, f"a merge of {picked} changed {sid}"

    @precondition(lambda self: self.merges)
    @rule(data=st.data())
    def unmerge(self, data):
        merge_id = pick(data, self.merges)
        try:
            actions.unmerge(actor=None, merge_id=merge_id, reason="undo")
        except core.StoreError as error:
            event(f"unmerge refused: {type(error).__name__}")
            return
        event("unmerge done")
        self.merges.remove(merge_id)

    @rule(user=st.sampled_from(USERS), now=st.integers(0, 3), by_key=st.booleans())
    def erase(self, user, now, by_key):
        if now:  # one step in four: an erasure leaves little for the other rules to work on
            return
        # By user id alone, or with one of their keys too (``new_conversation``'s keys).
        keys = (f"tg:{user}:0",) if by_key else ()
        subject = Subject(user_id=user, session_keys=keys)
        plan = erasure.plan(subject)
        rows_before, counts_before = store_sessions(), message_counts()
        everywhere_before = set(rows_before) | trashed_sessions()
        try:
            request = actions.request_erasure(
                actor=None,
                subject=subject,
                reference="DSR-1",
                expected_fingerprint=plan.fingerprint,
            )
            actions.run_erasure(request_id=request.pk)
            event("erasure done")
        except core.StoreError as error:
            event(f"erasure refused: {type(error).__name__}")
        rows_after, counts_after = store_sessions(), message_counts()
        gone = everywhere_before - (set(rows_after) | trashed_sessions())
        planned = set(plan.store.session_ids) | set(plan.trash.session_ids)
        assert gone <= planned, f"erased sessions the preview did not list: {gone - planned}"
        for sid in gone & set(rows_before):
            assert rows_before[sid]["user"] in (user, None), f"erased {sid} of another user"
        for sid, row in rows_before.items():
            if row["user"] not in (user, None):
                assert sid in rows_after, f"{user}'s erasure took {sid} of {row['user']}"
                assert counts_after.get(sid, 0) == counts_before.get(sid, 0), sid

    # --- after every step --------------------------------------------------------------------

    def check_held_survive(self, covered: set[str]) -> None:
        everywhere = set(store_sessions()) | trashed_sessions()
        assert covered <= everywhere, f"held sessions lost: {covered - everywhere}"

    @invariant()
    def consistent(self):
        assert check_store() == []
        assert check_trash() == []

    @invariant()
    def nothing_pending(self):
        pending = list(AuditEntry.objects.filter(outcome="pending").values_list("action", "pk"))
        assert pending == [], pending


def plan_ids(plan, picked) -> set[str]:
    return {*picked, plan.target_id, *plan.absorbed_ids}


class HeldStaySafe(Operations):
    """Holds are checked across each step: what a hold covered before a step is still in the
    store or the trash after it."""

    def __init__(self):
        super().__init__()
        self.covered: set[str] = set()

    @invariant()
    def holds_kept(self):
        self.check_held_survive(self.covered)
        self.covered = held_now(store_sessions()) & (set(store_sessions()) | trashed_sessions())


MACHINE_SETTINGS = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.usefixtures("erasures_run_inline", "no_worker")
def test_operator_actions_in_any_order_keep_every_promise(settings):
    # The files' rewrite after each erasure (SQLite) is tested on its own; here it would only
    # take most of the time.
    settings.SESSIONS_ADMIN_ERASURE_REWRITE_AUTO = False
    run_state_machine_as_test(HeldStaySafe, settings=MACHINE_SETTINGS)
