"""bench/machine.py: CPU per process group from /proc (children that already exited included),
and PostgreSQL's side of a window, measured on real processes and a real server."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from django.db import connections

from bench import machine
from bench.load import render_profile
from tests.helpers import database_url

# A parent that starts a child burning a CPU for `seconds`, waits for it (so the kernel adds
# the child's time to the parent's), then sleeps until told to stop.
PARENT = """
import subprocess, sys, time
burn = "import time\\nend = time.process_time() + {seconds}\\nwhile time.process_time() < end: pass"
subprocess.run([sys.executable, "-c", burn], check=True)
print("burnt", flush=True)
sys.stdin.read()
"""


def test_a_group_counts_its_children_even_after_they_exited():
    meter = machine.CpuMeter(
        {"parent": lambda: [parent.pid], "me": lambda: [os.getpid()]},
        own_only=frozenset({"me"}),
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT.format(seconds=0.8)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        meter.start()
        assert parent.stdout.readline().strip() == "burnt"  # the child ran and was reaped
        meter.stop()
    finally:
        parent.communicate("")
    assert meter.seconds["parent"] >= 0.7, meter.seconds
    # This process only waited: its own time leaves out the parent it started.
    assert meter.seconds["me"] < 0.4, meter.seconds
    assert meter.wall > 0 and 0 <= meter.machine_busy <= 1


@pytest.mark.django_db(databases=["default", "store"], transaction=True)
def test_postgres_profile_counts_the_windows_transactions_and_samples_what_backends_do():
    if connections["store"].vendor != "postgresql":
        pytest.skip("PostgreSQL's statistics")
    import psycopg

    store = connections["store"].settings_dict["NAME"]
    profile = machine.PostgresProfile(url=database_url("store"), databases=[store])
    profile.start()
    stop = threading.Event()

    def busy() -> None:
        with psycopg.connect(database_url("store"), application_name="console") as conn:
            while not stop.is_set():
                conn.execute("SELECT pg_sleep(0.05)")
                conn.commit()

    worker = threading.Thread(target=busy)
    worker.start()
    threading.Event().wait(0.6)
    stop.set()
    worker.join()
    profile.stop()
    assert profile.counters[store]["xact_commit"] >= 5
    assert profile.counters[store]["sessions"] >= 1  # the worker's connection
    assert profile.samples >= 5
    busy_seen = profile.busy_backends()
    assert busy_seen.get("console", 0) > 0.3, busy_seen
    # The worker's backend was seen, and its CPU (little: it slept) is put down to it.
    assert "console" in profile.cpu_by_application()
    # Waiting in pg_sleep is a timeout wait event, not time on a core.
    assert any(app == "console" and "PgSleep" in what for (app, what) in profile.waits)


def test_the_profile_renders_every_group_and_its_share():
    lines = render_profile(
        {
            "cpu_seconds": {"server (gunicorn)": 30.0, "runtimes (simulate_runtime)": 6.0},
            "wall": 30.0,
            "machine_busy": 0.99,
            "requests": 1500,
            "appends": 3000,
        }
    )
    text = "\n".join(lines)
    share = f"{30.0 / (30.0 * (os.cpu_count() or 1)):.0%}"
    assert f"| server (gunicorn) | 30.0 | {share} | 20.0 |  |" in text
    assert "| runtimes (simulate_runtime) | 6.0 |" in text and "| 4.0 | 2.0 |" in text
