"""The demo's background runtime: on by default, off on request, and it stops cleanly with the demo."""

from __future__ import annotations

import subprocess
import sys
import time

from sessions_admin import devtools
from tests.helpers import child_env, count


def test_the_demo_simulator_is_on_unless_turned_off_or_read_only():
    assert devtools.demo_simulator_enabled({})
    assert devtools.demo_simulator_enabled({"SESSIONS_ADMIN_DEMO_SIMULATOR": "1"})
    assert not devtools.demo_simulator_enabled({"SESSIONS_ADMIN_DEMO_SIMULATOR": "0"})
    assert not devtools.demo_simulator_enabled({"SESSIONS_ADMIN_READ_ONLY": "1"})


def test_the_demo_simulator_writes_until_stopped_then_exits_cleanly(monkeypatch):
    # Faster than the demo's pace, so the test sees writes within seconds.
    monkeypatch.setattr(
        devtools, "DEMO_SIMULATOR_ARGS", ("--chats", "2", "--duration", "0", "--think-time", "0.05")
    )
    process = devtools.start_demo_simulator({**child_env(), "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 60
        while count("messages") == 0 and time.monotonic() < deadline:
            assert process.poll() is None, "the simulator exited on its own"
            time.sleep(0.2)
        assert count("messages") > 0
    finally:
        devtools.stop_process(process)
    assert process.returncode == 0
    assert process.poll() is not None


def test_stop_process_kills_what_does_not_stop():
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    stubborn.stdout.readline()
    devtools.stop_process(stubborn, timeout=0.5)
    assert stubborn.poll() is not None
