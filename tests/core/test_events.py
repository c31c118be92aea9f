"""Item 9: every rotation tells the listeners and lands in a gap-free, ordered event log."""

from __future__ import annotations

import pytest
from django.db import transaction

from sessions_admin import core
from sessions_admin.routers import store_alias
from tests.helpers import run_threads


class Recorder:
    def __init__(self):
        self.calls: list[tuple] = []

    def on_session_switch(self, new_session_id, *, parent_session_id, reset, reason, **kwargs):
        self.calls.append((new_session_id, parent_session_id, reset, reason))


class Broken:
    def on_session_switch(self, *args, **kwargs):
        raise RuntimeError("provider bug")


@pytest.fixture
def recorder():
    listener = Recorder()
    core.register_listener(Broken())  # registered first: must not block the recorder
    core.register_listener(listener)
    return listener


def test_every_rotation_is_announced_with_its_parent_and_kind(recorder):
    first = core.create_session(source="telegram", session_key="tg:1").session_id
    reset = core.reset_session_key(session_key="tg:1").new_session_id
    compressed = core.rotate_for_compression(session_id=reset).new_session_id
    branched = core.branch_session(session_id=compressed).new_session_id
    core.resume_session(ref=first)
    assert recorder.calls == [
        (first, "", True, "new"),
        (reset, first, True, "reset"),
        (compressed, reset, False, "compression"),
        (branched, compressed, False, "branch"),
        (first, branched, False, "resume"),
    ]
    log = core.read_switch_events(after_seq=0)
    assert [e.seq for e in log] == [1, 2, 3, 4, 5]
    assert [(e.new_session_id, e.reason, e.reset) for e in log] == [
        (c[0], c[3], c[2]) for c in recorder.calls
    ]


def test_a_reader_follows_the_log_with_a_cursor():
    for _ in range(5):
        core.create_session(source="cli")
    first_page = core.read_switch_events(after_seq=0, limit=2)
    rest = core.read_switch_events(after_seq=first_page[-1].seq)
    assert [e.seq for e in first_page + rest] == [1, 2, 3, 4, 5]
    assert core.read_switch_events(after_seq=5) == []


def test_an_empty_session_id_is_not_announced(recorder):
    core.events.notify_listeners("", parent_session_id="x", reset=True, reason="new")
    core.events.notify_listeners(None, parent_session_id="x", reset=True, reason="new")
    assert recorder.calls == []


def test_a_rolled_back_rotation_is_neither_announced_nor_logged(recorder):
    core.create_session(source="cli", session_key="k")
    recorder.calls.clear()
    with pytest.raises(RuntimeError), transaction.atomic(using=store_alias()):
        core.reset_session_key(session_key="k")
        raise RuntimeError("caller failed after the reset")
    assert recorder.calls == []
    assert [e.reason for e in core.read_switch_events()] == ["new"]


def test_plain_callables_can_listen_and_unregister():
    heard = []

    def listener(new_session_id, **kwargs):
        heard.append((new_session_id, kwargs["reason"]))

    core.register_listener(listener)
    ref = core.create_session(source="cli").session_id
    core.unregister_listener(listener)
    core.create_session(source="cli")
    assert heard == [(ref, "new")]


def test_concurrent_rotations_number_the_log_without_gaps():
    def rotate(i: int) -> None:
        ref = core.create_session(source="cli", session_key=f"k{i}").session_id
        for _ in range(5):
            ref = core.rotate_for_compression(session_id=ref).new_session_id

    run_threads(rotate, 4)
    log = core.read_switch_events(after_seq=0, limit=1000)
    assert [e.seq for e in log] == list(range(1, 25))
    # Per key, the events are in the order the rotations happened.
    for i in range(4):
        reasons = [e.reason for e in log if e.session_key == f"k{i}"]
        assert reasons == ["new"] + ["compression"] * 5
