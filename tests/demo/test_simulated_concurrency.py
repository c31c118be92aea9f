"""Several runtime processes write while operators merge, unmerge, resume, reset, rewrite and delete.

Three ``manage.py simulate_runtime`` processes drive the test store (their own
connections, as a gateway's would be) while this test, as operators, runs the
audited actions against the same sessions. Afterwards nothing acknowledged is
lost or doubled and every store invariant holds. Runs on both test passes
(SQLite and PostgreSQL); bounded by the simulators' duration.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from django.conf import settings

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.demo.consistency import check_acks, check_store, read_acks
from sessions_admin.ledger import actions, jobs
from sessions_admin.ledger.models import TrashEntry
from tests.helpers import child_env, start_simulator

ROOT = Path(settings.BASE_DIR)
SIMULATORS = 3
SIMULATE_SECONDS = 10


class Operator:
    """Picks an operator action at random and runs it; refusals are normal, errors are not."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.done: dict[str, int] = {}
        self.refused: dict[str, int] = {}
        self.merge_ids: list[int] = []

    def act(self) -> None:
        name, action = self.rng.choice(
            [
                ("merge", self.merge),
                ("merge", self.merge),
                ("unmerge", self.unmerge),
                ("resume", self.resume),
                ("reset", self.reset),
                ("cascade_delete", self.cascade_delete),
                ("restore", self.restore),
                ("rewrite", self.rewrite),
            ]
        )
        try:
            happened = action()
        except core.StoreError:
            self.refused[name] = self.refused.get(name, 0) + 1
            return
        if happened:
            self.done[name] = self.done.get(name, 0) + 1

    def _some_session(self, where: str = "1 = 1") -> str | None:
        row = db.fetchone(
            f"SELECT id FROM sessions WHERE {where} ORDER BY started_at DESC LIMIT 1 OFFSET %s",
            [self.rng.randint(0, 20)],
        )
        return row[0] if row else None

    def merge(self) -> bool:
        groups = core.find_fork_groups()
        if not groups:
            return False
        group = self.rng.choice(groups)
        plan = core.plan_merge(session_ids=list(group.session_ids))
        result = actions.merge(
            actor=None,
            session_ids=list(group.session_ids),
            target_id=plan.target_id,
            expected_fingerprint=plan.fingerprint,
            reason="forks",
        )
        self.merge_ids.append(result.merge_id)
        return True

    def unmerge(self) -> bool:
        if not self.merge_ids:
            return False
        # The latest first: an older one is refused while a later merge moved its sessions.
        actions.unmerge(actor=None, merge_id=self.merge_ids.pop())
        return True

    def resume(self) -> bool:
        ended = self._some_session("ended_at IS NOT NULL AND session_key IS NOT NULL")
        if ended is None:
            return False
        actions.resume(actor=None, ref=ended)
        return True

    def reset(self) -> bool:
        live = self._some_session("ended_at IS NULL AND session_key IS NOT NULL")
        if live is None:
            return False
        (key,) = db.fetchone("SELECT session_key FROM sessions WHERE id = %s", [live])
        actions.reset(actor=None, session_key=key)
        return True

    def rewrite(self) -> bool:
        live = self._some_session("ended_at IS NULL")
        if live is None:
            return False
        actions.rewrite(
            actor=None, session_id=live, action=self.rng.choice(("undo", "retry", "redo"))
        )
        return True

    def cascade_delete(self) -> bool:
        victim = self._some_session()
        if victim is None:
            return False
        include_branches = self.rng.random() < 0.5
        # As an operator does when the runtime wrote meanwhile: review the new preview, confirm.
        for attempt in range(3):
            plan = core.plan_cascade_delete(session_ids=[victim], include_branches=include_branches)
            try:
                actions.cascade_delete(
                    actor=None,
                    session_ids=[victim],
                    include_branches=include_branches,
                    expected_fingerprint=plan.fingerprint,
                    reason="operator clean-up",
                )
            except core.PlanChanged:
                if attempt == 2:
                    raise
                continue
            return True
        return False

    def restore(self) -> bool:
        entry = TrashEntry.objects.filter(state=TrashEntry.COMPLETE).order_by("?").first()
        if entry is None:
            return False
        actions.restore(actor=None, entry_id=entry.pk)
        return True

    def bulk_delete(self) -> bool:
        ended = [
            r[0]
            for r in db.fetchall(
                "SELECT id FROM sessions WHERE ended_at IS NOT NULL ORDER BY started_at LIMIT 40"
            )
        ]
        if not ended:
            return False
        job = jobs.create_bulk_delete_job(
            session_ids=ended, include_live=False, actor="operator", reason="bulk clean-up"
        )
        # Small batches, so the job interleaves with the runtimes' writes.
        progress = jobs.run_job(job_id=job, batch_sessions=5, batch_messages=200)
        assert progress.state == "done", progress
        self.done["bulk_delete"] = self.done.get("bulk_delete", 0) + 1
        return True


def test_runtimes_and_operators_together_lose_and_double_nothing(tmp_path):
    ledgers = [tmp_path / f"runtime-{n}.jsonl" for n in range(SIMULATORS)]
    env = child_env()
    processes = [
        start_simulator(
            ledger,
            seed=n,
            label=f"r{n}",
            duration=SIMULATE_SECONDS,
            chats=6,
            env=env,
            extra=["--cold-start-rate", "0.15", "--evict-keep", "30"],
        )
        for n, ledger in enumerate(ledgers)
    ]
    operator = Operator(seed=11)
    try:
        # Let the runtimes create some sessions first.
        time.sleep(2.5)
        rounds = 0
        while any(p.poll() is None for p in processes):
            operator.act()
            rounds += 1
            if rounds % 25 == 0:
                operator.bulk_delete()  # a background job's batches among the writes
            time.sleep(0.05)
        operator.bulk_delete()
    finally:
        outputs = [p.communicate(timeout=60) for p in processes]
    for process, (out, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, f"simulator failed:\n{out}\n{err}"
        assert "0 unexpected errors" in out, out

    # The operators really acted, concurrently with the writes.
    assert operator.done.get("cascade_delete", 0) > 0, operator.done
    assert operator.done.get("bulk_delete", 0) > 0, operator.done
    assert sum(operator.done.values()) >= 10, (operator.done, operator.refused)
    acked, _refused, _errors = read_acks(ledgers)
    assert len(acked) > 200

    assert check_acks(ledgers) == []
    assert check_store() == []
