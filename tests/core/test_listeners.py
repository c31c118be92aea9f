"""Issue 11, items 11 to 14: listeners that hang or raise hurt nobody, hear which chat
switched, and hear the switches other processes make.

Items 11-13 run in this process (listeners are threads of it). Item 14 runs a
real runtime process (tests/core/listener_child.py) that follows the log
while this process, as an operator, resets and resumes; it is then restarted
under the same follower name.
"""

from __future__ import annotations

import json
import logging
import queue
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.db import connections

from sessions_admin import core
from sessions_admin.core import bulk_insert, events
from sessions_admin.core.schema import ensure_store_schema, existing_columns
from sessions_admin.store.attach import inspect_alias
from tests.core.test_schema import runtime_store, sqlite_only  # noqa: F401 - a fixture
from tests.helpers import child_env

REPO = Path(__file__).resolve().parents[2]


def eventually(predicate, *, within: float = 3.0):
    """Poll ``predicate`` until it is true or ``within`` seconds passed; return its last value."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


class Recorder:
    def __init__(self):
        self.calls: list[str] = []

    def on_session_switch(self, new_session_id, **kwargs):
        self.calls.append(new_session_id)


class Hung:
    """Blocks on every call until released (at most 5 s, so old code ends too)."""

    def __init__(self):
        self.release = threading.Event()
        self.calls: list[str] = []

    def on_session_switch(self, new_session_id, **kwargs):
        self.release.wait(5)
        self.calls.append(new_session_id)

    def __repr__(self):
        return "<Hung listener>"


# --------------------------------------------------------------------------- 11: time bound


def test_a_hung_listener_costs_the_caller_the_grace_period_and_delays_only_itself(settings, caplog):
    settings.SESSIONS_ADMIN_LISTENER_TIMEOUT = 0.3
    hung, recorder = Hung(), Recorder()
    core.register_listener(hung)  # first: it must not hold up the recorder
    core.register_listener(recorder)
    try:
        with caplog.at_level(logging.WARNING, logger="sessions_admin.core.events"):
            started = time.monotonic()
            first = core.create_session(source="cli", session_key="k").session_id
            second = core.reset_session_key(session_key="k").new_session_id
            elapsed = time.monotonic() - started
            # Two operations, each waiting at most the 0.2 s grace for its listeners.
            assert elapsed < 2.0
            assert recorder.calls == [first, second]
            late = eventually(
                lambda: [
                    r.getMessage()
                    for r in caplog.records
                    if "late" in r.getMessage() and "<Hung listener>" in r.getMessage()
                ]
            )
            assert late and first in late[0]
            assert hung.calls == []
    finally:
        hung.release.set()
    # Released, it hears both switches, in order.
    assert eventually(lambda: hung.calls == [first, second])


def test_the_caller_does_not_wait_beyond_the_grace(settings):
    settings.SESSIONS_ADMIN_LISTENER_GRACE = 0
    told = threading.Event()

    def slow(new_session_id, **kwargs):
        time.sleep(0.5)
        told.set()

    core.register_listener(slow)
    core.create_session(source="cli")
    assert not told.is_set()  # the operation returned before the listener finished
    assert told.wait(3)


def test_unregistering_a_listener_ends_its_thread():
    recorder = Recorder()
    core.register_listener(recorder)
    first = core.create_session(source="cli").session_id
    [dispatcher] = [d for d in events._dispatchers if d.listener is recorder]
    assert dispatcher.thread.is_alive()
    core.unregister_listener(recorder)
    dispatcher.thread.join(3)
    assert not dispatcher.thread.is_alive()
    core.create_session(source="cli")
    assert recorder.calls == [first]


# --------------------------------------------------------------------------- 12: isolation


class Custom(BaseException):
    pass


def raising(error: BaseException):
    def listener(new_session_id, **kwargs):
        raise error

    return listener


def test_whatever_a_listener_raises_stays_with_it(caplog):
    for error in (SystemExit(3), GeneratorExit(), Custom("odd"), RuntimeError("bug")):
        core.register_listener(raising(error))
    recorder = Recorder()
    core.register_listener(recorder)
    with caplog.at_level(logging.ERROR, logger="sessions_admin.core.events"):
        first = core.create_session(source="cli", session_key="k").session_id
        second = core.reset_session_key(session_key="k").new_session_id
        assert eventually(lambda: len([r for r in caplog.records if r.exc_info]) == 8)
    assert recorder.calls == [first, second]
    raised = {r.exc_info[0] for r in caplog.records if r.exc_info}
    assert raised == {SystemExit, GeneratorExit, Custom, RuntimeError}


# --------------------------------------------------------------------------- 13: which chat


class ChatAware:
    """Declares every field it uses and no **kwargs."""

    def __init__(self):
        self.calls: list[tuple] = []

    def on_session_switch(
        self,
        new_session_id,
        *,
        parent_session_id,
        reset,
        reason,
        session_key,
        previous_session_id,
        source,
    ):
        self.calls.append((new_session_id, reason, session_key, previous_session_id, source))


class OldStyle:
    """Written for the first signature: no session_key, no **kwargs."""

    def __init__(self):
        self.calls: list[tuple] = []

    def on_session_switch(self, new_session_id, *, parent_session_id, reset, reason):
        self.calls.append((new_session_id, parent_session_id, reset, reason))


def test_listeners_hear_which_chat_switched_and_old_signatures_still_work():
    aware, old = ChatAware(), OldStyle()
    old_function_calls = []

    def old_function(new_session_id, *, parent_session_id, reset, reason):
        old_function_calls.append((new_session_id, reason))

    for listener in (aware, old, old_function):
        core.register_listener(listener)
    tg = core.create_session(source="telegram", session_key="tg:1").session_id
    dc = core.create_session(source="discord", session_key="dc:7").session_id
    tg_reset = core.reset_session_key(session_key="tg:1").new_session_id
    assert aware.calls == [
        (tg, "new", "tg:1", None, "telegram"),
        (dc, "new", "dc:7", None, "discord"),
        (tg_reset, "reset", "tg:1", tg, "telegram"),
    ]
    assert old.calls == [
        (tg, "", True, "new"),
        (dc, "", True, "new"),
        (tg_reset, tg, True, "reset"),
    ]
    assert old_function_calls == [(tg, "new"), (dc, "new"), (tg_reset, "reset")]
    log = core.read_switch_events()
    assert [(e.new_session_id, e.source) for e in log] == [
        (tg, "telegram"),
        (dc, "discord"),
        (tg_reset, "telegram"),
    ]
    assert {e.origin for e in log} == {events.process_origin()}


@sqlite_only
@pytest.mark.own_db
def test_an_older_switch_log_gains_the_new_columns_and_keeps_its_rows(runtime_store):  # noqa: F811
    alias, path = runtime_store
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE sessions_admin_switch_events (seq BIGINT PRIMARY KEY, created_at REAL "
        "NOT NULL, new_session_id TEXT NOT NULL, previous_session_id TEXT, parent_session_id "
        "TEXT, reset INTEGER NOT NULL DEFAULT 0, reason TEXT NOT NULL, session_key TEXT)"
    )
    conn.execute(
        "INSERT INTO sessions_admin_switch_events VALUES (1, 1.0, 'old-1', NULL, NULL, 1, 'new', NULL)"
    )
    conn.commit()
    conn.close()
    # The start-up check says what to run before the first switch would fail.
    codes = [f.code for f in inspect_alias(alias, role="store").findings]
    assert "own_columns_missing" in codes
    report = ensure_store_schema(alias)
    assert "own_columns_missing" not in [
        f.code for f in inspect_alias(alias, role="store").findings
    ]
    assert {
        "sessions_admin_switch_events.source",
        "sessions_admin_switch_events.origin",
    } <= set(report.added_columns)
    assert {"source", "origin"} <= existing_columns(alias, "sessions_admin_switch_events")
    conn = sqlite3.connect(path)
    assert conn.execute(
        "SELECT seq, new_session_id, source, origin FROM sessions_admin_switch_events"
    ).fetchall() == [(1, "old-1", None, None)]
    conn.close()
    assert ensure_store_schema(alias).added_columns == ()


# --------------------------------------------------------------------------- 14: follower


class Runtime:
    """A runtime process following the log under ``name``; its listener writes ``output``."""

    def __init__(self, name: str, output: Path, stderr: Path, from_seq: int | None = None):
        self.output = output
        # Nothing of ours may hold a SQLite read snapshot the child waits on.
        connections.close_all()
        extra = [] if from_seq is None else [str(from_seq)]
        self._stderr = stderr.open("a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.core.listener_child", name, str(output), *extra],
            cwd=REPO,
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        word, start_seq = self.answer(timeout=60).split()
        assert word == "ready"
        self.start_seq = int(start_seq)

    def _read(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line.strip())
        self._lines.put(None)  # the process ended

    def answer(self, *, timeout: float = 20) -> str:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            line = None
        if line is None:
            self.process.kill()
            self._stderr.flush()
            tail = Path(self._stderr.name).read_text()[-2000:]
            raise AssertionError(f"the runtime did not answer:\n{tail}")
        return line

    def reset(self, session_key: str) -> str:
        self.process.stdin.write(f"reset {session_key}\n")
        self.process.stdin.flush()
        word, new_id = self.answer().split()
        assert word == "done"
        return new_id

    def stop(self) -> int:
        self.process.stdin.write("stop\n")
        self.process.stdin.flush()
        word, last_seq = self.answer().split()
        assert word == "stopped"
        assert self.process.wait(20) == 0
        self._stderr.close()
        return int(last_seq)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._stderr.close()

    def heard(self) -> list[dict]:
        if not self.output.exists():
            return []
        return [json.loads(line) for line in self.output.read_text().splitlines()]


def told(call: dict) -> tuple:
    return (
        call["new_session_id"],
        call["reason"],
        call["session_key"],
        call["previous_session_id"],
        call["source"],
        call["parent_session_id"],
        call["reset"],
    )


def logged(after_seq: int) -> list[tuple]:
    return [
        (
            e.new_session_id,
            e.reason,
            e.session_key,
            e.previous_session_id,
            e.source,
            e.parent_session_id or "",
            e.reset,
        )
        for e in core.read_switch_events(after_seq=after_seq, limit=1000)
    ]


def hears(runtime: Runtime, count: int, *, within: float = 3.0) -> list[dict]:
    """What the runtime heard once it heard ``count`` calls (asserting it did, in time)."""
    heard = eventually(lambda: len(runtime.heard()) >= count and runtime.heard(), within=within)
    assert heard, f"the runtime heard {len(runtime.heard())} of {count} switches in {within} s"
    return heard


def test_a_follower_tells_each_switch_of_other_processes_once_in_order_across_restarts(tmp_path):
    first = core.create_session(source="telegram", session_key="tg:1").session_id
    core.create_session(source="discord", session_key="dc:7")  # history: before the follower
    output, stderr = tmp_path / "heard.jsonl", tmp_path / "stderr.txt"
    runtime = Runtime("gateway", output, stderr)
    try:
        start = runtime.start_seq
        assert start == 2  # a new name starts at the end of the log: no replay
        # The operator, in this process: a reset and a resume of the same chat.
        core.reset_session_key(session_key="tg:1")
        core.resume_session(ref=first)
        hears(runtime, 2)
        # The runtime's own reset: told once, on its commit, not again by its follower.
        runtime.reset("dc:7")
        hears(runtime, 3)
        core.reset_session_key(session_key="tg:1")
        heard = hears(runtime, 4)
        time.sleep(0.5)  # a few more polls: nothing doubled
        heard = runtime.heard()
        assert [told(call) for call in heard] == logged(start)
        stopped_at = runtime.stop()
        assert stopped_at == start + 4

        # While the runtime is down, the operator and another runtime keep switching.
        core.reset_session_key(session_key="tg:1")
        core.reset_session_key(session_key="dc:7")
        runtime = Runtime("gateway", tmp_path / "heard-after-restart.jsonl", stderr)
        assert runtime.start_seq == stopped_at  # resumes after the last event it handed over
        core.resume_session(ref=first)
        hears(runtime, 3)
        time.sleep(0.5)
        assert [told(call) for call in runtime.heard()] == logged(stopped_at)
        assert runtime.stop() == stopped_at + 3
    finally:
        runtime.kill()


def test_a_follower_told_to_start_at_zero_tells_the_whole_log_but_not_loaded_history(tmp_path):
    first = core.create_session(source="telegram", session_key="tg:1").session_id
    bulk_insert.insert_sessions(sessions=[{"id": "loaded", "source": "cli", "started_at": 1.0}])
    core.reset_session_key(session_key="tg:1")
    core.resume_session(ref=first)
    runtime = Runtime("replayer", tmp_path / "heard.jsonl", tmp_path / "stderr.txt", from_seq=0)
    try:
        hears(runtime, 3)
        time.sleep(0.3)
        # Every switch of the log but the loaded session's history event (seq 2).
        expected = logged(0)
        assert expected[1][:2] == ("loaded", "new")
        assert [told(call) for call in runtime.heard()] == expected[:1] + expected[2:]
        assert runtime.stop() == 4
    finally:
        runtime.kill()
    # A saved cursor wins over from_seq: started again with 0, it replays nothing.
    core.reset_session_key(session_key="tg:1")
    runtime = Runtime("replayer", tmp_path / "again.jsonl", tmp_path / "stderr.txt", from_seq=0)
    try:
        assert runtime.start_seq == 4
        heard = hears(runtime, 1)
        assert [told(call) for call in heard] == logged(4)
        runtime.stop()
    finally:
        runtime.kill()


def test_a_follower_refuses_bad_arguments():
    for arguments in (
        {"name": ""},
        {"name": "x", "interval": 0},
        {"name": "x", "interval": True},
        {"name": "x", "from_seq": -1},
    ):
        with pytest.raises(core.InvalidInput):
            core.start_switch_follower(**arguments)


# The child handles Ctrl-C as an interactive runtime does, even when the suite itself runs as a
# background job (a shell starts those with SIGINT ignored, and children inherit that).
KEYBOARD_INTERRUPT_SCRIPT = """
import signal, time, django
signal.signal(signal.SIGINT, signal.default_int_handler)
django.setup()
from sessions_admin import core

def interrupting(new_session_id, **kwargs):
    raise KeyboardInterrupt

core.register_listener(interrupting)
core.create_session(source="cli")
time.sleep(10)
print("not interrupted")
"""


def _assert_interrupts(script: str) -> None:
    """The child is interrupted by its listener's KeyboardInterrupt before its sleep ends (it
    would print "not interrupted" after it)."""
    connections.close_all()
    finished = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "KeyboardInterrupt" in finished.stderr
    assert "not interrupted" not in finished.stdout
    assert finished.returncode != 0


def test_a_keyboard_interrupt_from_a_listener_still_interrupts_the_process():
    _assert_interrupts(KEYBOARD_INTERRUPT_SCRIPT)


def test_a_late_keyboard_interrupt_wakes_a_main_thread_blocked_in_a_sleep():
    """The listener raises after the caller stopped waiting for it: the main thread, asleep by
    then, is interrupted at once (a real SIGINT to it), not when its sleep ends."""
    script = KEYBOARD_INTERRUPT_SCRIPT.replace(
        "def interrupting(new_session_id, **kwargs):\n",
        "def interrupting(new_session_id, **kwargs):\n    time.sleep(1.0)\n",
    )
    assert script != KEYBOARD_INTERRUPT_SCRIPT
    _assert_interrupts(script)
