"""Sharing the write lock with a running Hermes.

- When the runtime holds the write lock, an action retries for a bounded time
  and then says "store busy, try again" with nothing changed.
- The runtime's writers wait on ours only briefly: a big delete runs in short
  batches while Hermes keeps appending (its busy timeout is 1 s per attempt).
"""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from django.db import connections
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db as core_db
from sessions_admin.core import deletion
from tests.hermes import scenario
from tests.hermes.checks import assert_healthy, search, transcripts
from tests.hermes.conftest import call


def test_an_action_gives_up_cleanly_while_hermes_holds_the_write_lock(
    hermes, attach, admin, client, monkeypatch
):
    scenario.build(hermes)
    attach()
    before = transcripts(hermes, ["tg-new"])
    monkeypatch.setattr(core_db, "RETRY_SECONDS", 1.0)
    # Each attempt waits at most 0.2 s for the lock (5 s in production): the attempts still
    # run for RETRY_SECONDS, then give up. (attach's teardown closes this connection.)
    with connections["store"].cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout = 200")
    runtime = sqlite3.connect(hermes.state, isolation_level=None, timeout=1.0)
    runtime.execute("BEGIN IMMEDIATE")  # what SessionDB._execute_write holds while it writes
    try:
        started = time.monotonic()
        with pytest.raises(core.StoreBusy, match="busy"):
            core.undo_last_turn(session_id="tg-new")
        assert time.monotonic() - started < 15
        response = client.post(
            reverse("session_undo", args=["tg-new"]), {"reason": "x"}, follow=True
        )
        assert b"The store is busy" in response.content
    finally:
        runtime.execute("ROLLBACK")
        runtime.close()
    assert transcripts(hermes, ["tg-new"]) == before
    core.undo_last_turn(session_id="tg-new")  # free again: it goes through
    assert_healthy(hermes, counted={"tg-new"})


def test_hermes_keeps_writing_while_a_big_delete_runs(hermes, attach, monkeypatch):
    big = ["big-0", "big-1", "big-2"]
    hermes.run(
        [call("state.create_session", sid, "cli") for sid in big]
        + [call("state.create_session", "chat", "telegram")]
        + [
            call(
                "state.replace_messages",
                sid,
                [{"role": "user", "content": f"bulk {n} about a yak"} for n in range(1200)],
            )
            for sid in big
        ]
    )
    attach()
    held: list[float] = []
    original = deletion.delete_batch

    def timed(*args, **kwargs):
        started = time.monotonic()
        try:
            return original(*args, **kwargs)
        finally:
            held.append(time.monotonic() - started)

    monkeypatch.setattr(deletion.batches, "delete_batch", timed)
    appended: list = []
    runtime = threading.Thread(
        target=lambda: appended.extend(
            hermes.run(
                [call("state.append_message", "chat", "user", f"live {n}") for n in range(40)],
                strict=False,
            )
        )
    )
    plan = core.plan_cascade_delete(session_ids=big)
    runtime.start()
    core.execute_cascade_delete(
        session_ids=big, expected_fingerprint=plan.fingerprint, actor="t", reason="r"
    )
    runtime.join(120)
    assert len(held) >= 2  # short batches, each its own transaction
    assert max(held) < 1.0, held
    assert all(isinstance(result, int) for result in appended), appended
    assert_healthy(hermes)


def test_hermes_writing_into_a_session_deleted_in_parts_loses_nothing(hermes, attach):
    """Hermes knows nothing of the being-deleted state: what it writes between two parts goes
    to the trash with the rest, and a restore gives Hermes back every message."""
    hermes.run(
        [call("state.create_session", "long", "telegram")]
        + [
            call(
                "state.replace_messages",
                "long",
                [{"role": "user", "content": f"old {n} about a yak"} for n in range(1200)],
            )
        ]
    )
    attach()
    before = transcripts(hermes, ["long"])["long"]
    written: list = []

    def hermes_writes() -> None:
        if not written:  # between the first two parts: Hermes's own append, its own SQL
            written.extend(hermes.run([call("state.append_message", "long", "user", "late")]))

    plan = core.plan_cascade_delete(session_ids=["long"])
    deleted = deletion.delete_batch(
        list(plan.session_ids), actor="t", reason="r", job_id=None, between_parts=hermes_writes
    )

    assert deleted[:2] == (1, 1201)
    assert transcripts(hermes, ["long"])["long"] == []
    (late_id,) = written
    entry = deleted[2]
    core.restore_trash_entry(entry_id=entry, actor="t")
    assert transcripts(hermes, ["long"])["long"] == [*before, (late_id, "user", "late")]
    assert search(hermes, "late") == {"late": {"long"}}
    assert_healthy(hermes)
