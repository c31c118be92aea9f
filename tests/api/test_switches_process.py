"""Subscribers in other processes, knowing only HTTP, get every switch once and in order.

gunicorn serves this test's databases with short streams (a few seconds, so a stream ends and
is resumed several times). Two subscribers run ``clients/switch_reader.py`` with ``python -I``
(nothing of ours imported): one reads Server-Sent Events with a runtime token, reconnecting with
``Last-Event-ID`` when a stream ends and on purpose mid-stream; one long-polls with a viewer
token. Meanwhile ``clients/runtime_client.py``, another process, drives chats over HTTP
(compressions, resets, resumes); then the server is stopped, switches are made while it is down
(a Python runtime on the store directly), it is started again and the chats go on. Each
subscriber ends up with exactly what ``core.read_switch_events`` holds, field for field, loaded
history left out, no switch twice, none missing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from sessions_admin import core, devtools
from sessions_admin.core import db, events, lineage
from sessions_admin.ledger import actions
from tests.helpers import Gunicorn, server_env, serving

CLIENTS = Path(__file__).parent / "clients"


@pytest.fixture
def server(tmp_path) -> Iterator[Gunicorn]:
    """gunicorn on a fixed port, which the test stops and starts again as a deployment would."""
    env = server_env(
        tmp_path,
        SESSIONS_ADMIN_API_RATE="",
        SESSIONS_ADMIN_THREADS="8",
        SESSIONS_ADMIN_SWITCH_STREAM_SECONDS="3",
        SESSIONS_ADMIN_SWITCH_HEARTBEAT_SECONDS="0.5",
        SESSIONS_ADMIN_SWITCH_POLL_SECONDS="0.1",
        # A stream the reader drops on purpose holds its place until the server's next write
        # notices: room for that (the reader also honours a 429's Retry-After).
        SESSIONS_ADMIN_LONG_REQUESTS_PER_TOKEN="4",
        SESSIONS_ADMIN_LONG_REQUESTS_PER_WORKER="6",
    )
    running = Gunicorn(env, tmp_path / "server.log")
    with serving(running):
        yield running


def _drive(server: Gunicorn, secret: str, seed: int, tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-I", str(CLIENTS / "runtime_client.py"), server.base, secret]
        + ["3", "10", str(seed)],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, (run.stderr[-3000:], run.stdout[-3000:])


def _reader(server: Gunicorn, secret: str, mode: str, stop_file: Path, tmp_path: Path):
    return subprocess.Popen(
        [sys.executable, "-I", str(CLIENTS / "switch_reader.py"), server.base, secret, mode]
        + [str(stop_file)],
        cwd=tmp_path,  # nowhere near the project
        env={"PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _end_of_log() -> int:
    return db.fetchone("SELECT COALESCE(MAX(seq), 0) FROM sessions_admin_switch_events")[0]


def test_subscribers_get_every_switch_once_in_order_across_reconnects_and_a_restart(
    server, tmp_path
):
    runtime = actions.create_api_token(actor=None, name="switch-runtime", scope="runtime").secret
    viewer = actions.create_api_token(actor=None, name="switch-viewer", scope="viewer").secret
    # Loaded history is in the log but no subscriber hears of it.
    db.store_operation(events.record_new_sessions)(sessions=[("loaded-1", "k:loaded")], at=1.0)
    stop_file = tmp_path / "stop"
    readers = {
        "stream": _reader(server, runtime, "stream", stop_file, tmp_path),
        "poll": _reader(server, viewer, "poll", stop_file, tmp_path),
    }
    try:
        _drive(server, runtime, 5, tmp_path)
        server.stop()
        # Switches made while no server runs: the subscribers hear of them once it is back.
        down = core.create_session(source="proc", session_key="proc:down").session_id
        core.rotate_for_compression(session_id=down, summary="while down")
        before_reset = lineage.live_session_for_key("proc:0")
        core.reset_session_key(session_key="proc:0")
        core.resume_session(ref=before_reset)
        for chat in range(3):  # the chats start anew once the server is back
            live = lineage.live_session_for_key(f"proc:{chat}")
            core.end_session(session_id=live, end_reason="user_exit")
        time.sleep(1)  # the subscribers find the server gone
        server.start()
        # Another runtime token: the client's idempotency keys repeat from run to run.
        again = actions.create_api_token(actor=None, name="switch-again", scope="runtime").secret
        _drive(server, again, 6, tmp_path)
        stop_file.write_text(str(_end_of_log()))
        results = {}
        for mode, reader in readers.items():
            out, err = reader.communicate(timeout=300)
            assert reader.returncode == 0, (mode, err[-3000:], out[-3000:])
            results[mode] = json.loads(out)
    finally:
        for reader in readers.values():
            devtools.stop_process(reader)

    expected = [
        asdict(e)
        for e in events.read_switch_events(after_seq=0, limit=10_000)
        if e.origin != events.HISTORY_ORIGIN
    ]
    reasons = {e["reason"] for e in expected}
    assert {"new", "compression", "reset", "resume"} <= reasons, reasons
    assert len(expected) >= 20
    for mode, result in results.items():
        assert result["errors"] == [], mode
        # Every switch exactly once, in order, with the core's fields and values.
        assert result["received"] == expected, mode
        # It did lose the server (the restart) and came back.
        assert result["unreachable"] >= 1, (mode, result["unreachable"])
    stream = results["stream"]
    # Resumed many times: on purpose mid-stream, at each stream's end, after the restart.
    assert stream["connections"] >= len(expected) // 5 + 1, stream["connections"]
    assert stream["heartbeats"] >= 1
