"""Properties of the lifecycle core under two racing runtime processes (hypothesis).

Two ``race_child --serve`` processes (real OS processes with their own connections) each play a
random sequence of create (a ``/new``), get-or-create, reset, resume, compress, append, merge and
cascade delete on two chat keys, at the same time, as two gateway workers would. Each keeps the
session id it last got per key and appends with it, following ``SessionEnded`` to the live session
as a runtime must. Whatever the interleaving:

- a key never has more than one live session;
- no append lands in a session after it ended (no message is later than its session's end),
  and every acknowledged append is in the session that acknowledged it, unless deleted since.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from django.conf import settings as django_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions_admin.core import db
from tests.conftest import _wipe
from tests.helpers import child_env

KEYS = ("tg:a", "tg:b")


class Worker:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.core.race_child", "--serve"],
            cwd=django_settings.BASE_DIR,
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def call(self, op: str, **kwargs) -> dict:
        self.process.stdin.write(json.dumps({"op": op, "kwargs": kwargs}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the runtime process died during {op}"
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(30)


@pytest.fixture(scope="module")
def workers(django_db_setup, django_db_blocker):
    pair = [Worker(), Worker()]
    yield pair
    for worker in pair:
        worker.close()


operation = st.tuples(
    st.sampled_from(
        ["new", "get", "reset", "resume", "compress", "append", "append", "merge", "delete"]
    ),
    st.sampled_from(KEYS),
    st.integers(0, 5),
)
plays = st.lists(operation, min_size=3, max_size=12)


class Runtime:
    """One side's view: the session it writes to per key, and every id it has seen."""

    def __init__(self, worker: Worker, name: str) -> None:
        self.worker = worker
        self.name = name
        self.current: dict[str, str] = {}
        self.seen: dict[str, list[str]] = {key: [] for key in KEYS}
        self.acked: list[tuple[int, str]] = []  # (message id, session it landed in)

    def saw(self, key: str, session_id: str | None) -> None:
        if session_id:
            self.current[key] = session_id
            if session_id not in self.seen[key]:
                self.seen[key].append(session_id)

    def play(self, op: str, key: str, n: int) -> None:
        seen = self.seen[key]
        if op in ("new", "get"):
            answer = self.worker.call(
                "create_session", source="telegram", session_key=key, join_live=op == "get"
            )
            self.saw(key, answer["ok"]["session_id"])
        elif op == "reset":
            answer = self.worker.call("reset_session_key", session_key=key)
            self.saw(key, answer.get("ok", {}).get("new_session_id"))
        elif op == "resume" and seen:
            answer = self.worker.call("resume_session", ref=seen[n % len(seen)])
            self.saw(key, answer.get("ok", {}).get("session_id"))
        elif op == "compress" and key in self.current:
            answer = self.worker.call("rotate_for_compression", session_id=self.current[key])
            self.saw(key, answer.get("ok", {}).get("new_session_id"))
            if "error" in answer:
                self.saw(key, answer.get("live_session_id"))
        elif op == "append" and key in self.current:
            for _attempt in range(3):
                answer = self.worker.call(
                    "append_message",
                    session_id=self.current[key],
                    role="user",
                    content=f"{self.name} {len(self.acked)}",
                )
                if "ok" in answer:
                    (message_id,) = answer["ok"]["message_ids"]
                    self.acked.append((message_id, answer["ok"]["session_id"]))
                    break
                if not answer.get("live_session_id"):
                    break  # ended with nothing live, or deleted: a runtime starts over
                self.saw(key, answer["live_session_id"])
        elif op == "merge" and len(seen) >= 2:
            pair = [seen[n % len(seen)], seen[(n + 1) % len(seen)]]
            if pair[0] != pair[1]:
                self.worker.call("merge_sessions", session_ids=pair, target_id=pair[0])
        elif op == "delete" and seen:
            victim = seen[n % len(seen)]
            self.worker.call("cascade_delete", session_ids=[victim])


SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(first=plays, second=plays)
def test_one_live_session_per_key_and_no_append_after_the_end(workers, first, second):
    _wipe()
    sides = [Runtime(workers[0], "one"), Runtime(workers[1], "two")]
    failures: list[BaseException] = []

    def run(side: Runtime, ops) -> None:
        try:
            for op in ops:
                side.play(*op)
        except BaseException as error:  # reported below, on the test's thread
            failures.append(error)

    threads = [
        threading.Thread(target=run, args=(side, ops))
        for side, ops in zip(sides, (first, second), strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, failures

    several = db.fetchall(
        "SELECT session_key, COUNT(*) FROM sessions WHERE ended_at IS NULL "
        "AND session_key IS NOT NULL GROUP BY session_key HAVING COUNT(*) > 1"
    )
    assert several == []
    # A merge into an ended target moves later messages in: those were appended while live.
    late = db.fetchall(
        "SELECT m.id, s.id FROM messages m JOIN sessions s ON s.id = m.session_id "
        "WHERE s.ended_at IS NOT NULL AND m.timestamp > s.ended_at AND NOT EXISTS "
        "(SELECT 1 FROM sessions_admin_merges g WHERE g.target_session_id = s.id)"
    )
    assert late == []
    where = dict(db.fetchall("SELECT id, session_id FROM messages"))
    for side in sides:
        for message_id, session_id in side.acked:
            # Deleted with its session, or moved by a merge into the target: never elsewhere.
            if message_id in where and where[message_id] != session_id:
                merged_into = db.fetchone(
                    "SELECT target_session_id FROM sessions_admin_merges "
                    "WHERE target_session_id = %s",
                    [where[message_id]],
                )
                assert merged_into, (message_id, session_id, where[message_id])
