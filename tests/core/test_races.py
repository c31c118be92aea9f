"""Two runtime processes racing on one store: the core's promises hold at the narrow moments.

Each test holds one real OS process (``tests/core/race_child.py``) inside its transaction at the
dangerous point (a pause point of ``sessions_admin/core/faults.py``), starts a second process
that races it, lets the first go, and then checks the store both left behind. Before the fix
these interleavings broke on PostgreSQL (READ COMMITTED: the second process read what the first
had not committed yet and acted on it); SQLite's write lock serializes them. Both passes run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.rows import parse_model_config
from tests.helpers import child_env, session

ROOT = Path(settings.BASE_DIR)


class Runtime:
    """One child process running ``commands`` through the core; ``answers()`` waits for it."""

    def __init__(
        self, commands: list[dict], *, env: dict | None = None, pause_at=None, folder=None
    ):
        environment = {**child_env(), **(env or {})}
        if pause_at:
            environment["SESSIONS_ADMIN_PAUSE_AT"] = pause_at
            environment["SESSIONS_ADMIN_PAUSE_DIR"] = str(folder)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.core.race_child", json.dumps(commands)],
            cwd=ROOT,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finished_within(self, seconds: float) -> bool:
        try:
            self.process.wait(seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def answers(self, timeout: float = 60) -> list[dict]:
        out, err = self.process.communicate(timeout=timeout)
        assert self.process.returncode == 0, err
        return [json.loads(line) for line in out.splitlines() if line.strip()]


def held(commands: list[dict], point: str, folder: Path, *, env: dict | None = None) -> Runtime:
    """A runtime stopped at ``point`` with its transaction open (until ``release``)."""
    runtime = Runtime(commands, env=env, pause_at=point, folder=folder)
    deadline = time.monotonic() + 60
    while not (folder / f"{point}.reached").exists():
        if runtime.process.poll() is not None:
            pytest.fail(f"the held runtime ended before {point}: {runtime.process.stderr.read()}")
        assert time.monotonic() < deadline, f"{point} never reached"
        time.sleep(0.02)
    return runtime


def race(first: list[dict], point: str, second: list[dict], folder: Path, *, env=None):
    """Hold ``first`` at ``point``, run ``second`` meanwhile, release; both processes' answers."""
    holder = held(first, point, folder, env=env)
    racer = Runtime(second, env=env)
    racer.finished_within(1.5)  # unlocked, it would race through now; locked, it waits
    (folder / f"{point}.release").touch()
    return holder.answers(), racer.answers()


def live_of_key(key: str) -> list[str]:
    return [
        r[0]
        for r in db.fetchall(
            "SELECT id FROM sessions WHERE session_key = %s AND ended_at IS NULL ORDER BY id", [key]
        )
    ]


def create(**kwargs) -> dict:
    return {"op": "create_session", "kwargs": {"source": "telegram", **kwargs}}


def test_two_processes_creating_one_id_both_get_the_promised_no_op(tmp_path):
    (first,), (second,) = race(
        [create(session_id="sess-1", session_key="tg:1")],
        "create.before_insert",
        [create(session_id="sess-1", session_key="tg:1", model="m2")],
        tmp_path,
    )
    assert first == {"ok": {"session_id": "sess-1", "created": True}}
    assert second == {"ok": {"session_id": "sess-1", "created": False}}
    assert session("sess-1")["model"] == "m2"  # the second caller's metadata filled in
    assert live_of_key("tg:1") == ["sess-1"]


def test_two_first_sessions_of_one_key_leave_one_live_and_the_other_refuses_appends(tmp_path):
    (first,), (second,) = race(
        [create(session_id="a-first", session_key="tg:2")],
        "create.before_insert",
        [create(session_id="b-second", session_key="tg:2")],
        tmp_path,
    )
    assert first["ok"]["created"] and second["ok"]["created"]
    assert live_of_key("tg:2") == ["b-second"]
    assert session("a-first")["end_reason"] == "new_session"
    with pytest.raises(core.SessionEnded) as ended:
        core.append_message(session_id="a-first", role="user", content="late")
    assert ended.value.live_session_id == "b-second"


def test_get_or_create_from_two_processes_gives_both_the_first_session(tmp_path):
    (first,), (second,) = race(
        [create(session_id="a-first", session_key="tg:3", join_live=True)],
        "create.before_insert",
        [create(session_id="b-second", session_key="tg:3", join_live=True)],
        tmp_path,
    )
    assert first == {"ok": {"session_id": "a-first", "created": True}}
    assert second == {"ok": {"session_id": "a-first", "created": False}}
    assert live_of_key("tg:3") == ["a-first"]
    assert session("b-second") is None


def test_a_resume_racing_a_new_session_of_its_key_leaves_one_live(tmp_path):
    old = core.create_session(source="telegram", session_key="tg:4").session_id
    core.reset_session_key(session_key="tg:4")
    (resumed,), (new,) = race(
        [{"op": "resume_session", "kwargs": {"ref": old}}],
        "resume.before_commit",
        [create(session_id="zz-new", session_key="tg:4")],
        tmp_path,
    )
    assert resumed["ok"]["session_id"] == old and new["ok"]["created"]
    assert live_of_key("tg:4") == ["zz-new"]
    assert session(old)["end_reason"] == "new_session"


def test_a_new_session_racing_a_resume_of_its_key_leaves_one_live(tmp_path):
    old = core.create_session(source="telegram", session_key="tg:6").session_id
    core.reset_session_key(session_key="tg:6")
    (new,), (resumed,) = race(
        [create(session_id="zz-new", session_key="tg:6")],
        "create.before_commit",
        [{"op": "resume_session", "kwargs": {"ref": old}}],
        tmp_path,
    )
    assert new["ok"]["created"] and resumed["ok"]["switched_from_session_id"] == "zz-new"
    assert live_of_key("tg:6") == [old]
    assert session("zz-new")["end_reason"] == "session_switch"


def test_a_reset_during_an_uncommitted_compression_ends_the_continuation(tmp_path):
    parent = core.create_session(source="telegram", session_key="tg:5").session_id
    core.append_message(session_id=parent, role="user", content="hello")
    target = core.resolve_conversation(conversation="slug-5")
    core.record_turn(response_id="r-5", session_id=target.session_id, conversation="slug-5")
    # The slug is on the key's session (as an API chat bound to a key would be).
    db.execute(
        "UPDATE conversations SET session_id = %s WHERE name = 'slug-5'",
        [parent],
        alias=core.conversations.responses_alias(),
    )
    (compressed,), (reset,) = race(
        [{"op": "rotate_for_compression", "kwargs": {"session_id": parent, "summary": "s"}}],
        "compression.before_commit",
        [{"op": "reset_session_key", "kwargs": {"session_key": "tg:5"}}],
        tmp_path,
    )
    continuation = compressed["ok"]["new_session_id"]
    fresh = reset["ok"]["new_session_id"]
    assert reset["ok"]["ended_session_id"] == continuation
    assert session(continuation)["end_reason"] == "session_reset"
    assert parse_model_config(session(fresh)["model_config"])["_reset_from"] == continuation
    assert live_of_key("tg:5") == [fresh]
    (event,) = [e for e in core.read_switch_events() if e.new_session_id == fresh]
    assert (event.parent_session_id, event.previous_session_id) == (continuation, continuation)
    assert core.conversation_session("slug-5") == fresh


def test_racing_new_slug_with_a_separate_response_store_gets_one_session(tmp_path):
    responses = {"SESSIONS_ADMIN_RESPONSES_URL": f"sqlite:///{tmp_path / 'response_store.db'}"}
    Runtime([{"op": "ensure_store_schema"}], env=responses).answers()
    resolve = {"op": "resolve_conversation", "kwargs": {"conversation": "new-slug"}}
    (first,), (second,) = race(
        [resolve], "create.before_insert", [resolve], tmp_path, env=responses
    )
    assert first["ok"]["created"] and first["ok"]["resolved_by"] == "new"
    assert second["ok"] == {**first["ok"], "created": False, "resolved_by": "conversation"}
    assert session(first["ok"]["session_id"]) is not None


def test_two_processes_continuing_one_ended_conversation_make_one_continuation(tmp_path):
    target = core.resolve_conversation(conversation="idle-slug")
    core.record_turn(response_id="r-1", session_id=target.session_id, conversation="idle-slug")
    core.end_session(session_id=target.session_id, end_reason="idle")
    resolve = {"op": "resolve_conversation", "kwargs": {"conversation": "idle-slug"}}
    (first,), (second,) = race([resolve], "continuation.before_commit", [resolve], tmp_path)
    assert first["ok"]["resolved_by"] == "continuation" and first["ok"]["created"]
    assert second["ok"]["session_id"] == first["ok"]["session_id"]
    assert not second["ok"]["created"]
    children = db.fetchall(
        "SELECT id FROM sessions WHERE parent_session_id = %s", [target.session_id]
    )
    assert [c[0] for c in children] == [first["ok"]["session_id"]]
