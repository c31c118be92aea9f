"""core.threads: a process's background thread runs once by name, and again once it ended."""

from __future__ import annotations

import os
import threading

from sessions_admin.core import threads


def test_a_thread_runs_once_while_alive_and_again_once_it_ended():
    release = threading.Event()
    calls = []

    def work(*, tag: str) -> None:
        calls.append(tag)
        release.wait(10)

    first = threads.ensure_running("test-once", work, tag="first")
    again = threads.ensure_running("test-once", work, tag="second")
    assert again is first and first.daemon and first.name == "test-once"
    assert threads.started("test-once") is first
    release.set()
    first.join(10)
    assert not first.is_alive()

    release.clear()
    renewed = threads.ensure_running("test-once", work, tag="third")
    assert renewed is not first and renewed.is_alive()
    release.set()
    renewed.join(10)
    assert calls == ["first", "third"]
    assert threads.started("test-never") is None


def test_a_forked_child_starts_its_own_thread():
    release = threading.Event()
    parent = threads.ensure_running("test-fork", release.wait, timeout=10)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread does not run here
        try:
            ran = threading.Event()
            child = threads.ensure_running("test-fork", ran.set)
            ok = child is not parent and ran.wait(5)
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"1"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
        release.set()
        parent.join(10)
