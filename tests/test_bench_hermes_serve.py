"""bench/hermes_serve.py: its arguments, and one tiny run against a real `hermes serve`.

No time is asserted: the run checks that both servers answer every read and what each
delete leaves in its own copy of the store (Hermes: nothing of the selection; the console:
the live sessions it protects, the rest in the trash).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connections

from bench import hermes_serve

ROOT = Path(__file__).resolve().parent.parent


def test_arguments_default_to_twenty_runs_and_a_thousand_sessions():
    args = hermes_serve.parse_args([])
    assert (args.size, args.runs, args.delete, args.write) == ("10k", 20, 1000, False)
    args = hermes_serve.parse_args(["--size", "1m", "--runs", "10", "--delete", "0", "--write"])
    assert (args.size, args.runs, args.delete, args.write) == ("1m", 10, 0, True)
    assert hermes_serve.parse_args(["--only", "list,lineage"]).only == ["list", "lineage"]
    for bad in (["--runs", "0"], ["--delete", "-1"], ["--size", "ten"]):
        with pytest.raises(SystemExit):
            hermes_serve.parse_args(bad)


def test_a_size_without_a_seeded_store_is_refused_not_seeded(tmp_path, monkeypatch):
    monkeypatch.setattr(hermes_serve.stores, "STORES_DIR", tmp_path)
    with pytest.raises(SystemExit, match="seed it first"):
        hermes_serve.measure(hermes_serve.parse_args(["--size", "1m"]))
    assert list(tmp_path.iterdir()) == []


def test_a_section_per_store_size_replaces_its_own(tmp_path):
    report = tmp_path / "benchmarks.md"
    report.write_text("# Benchmarks\n\n## Idle open pages\n\ntheirs\n")
    for sessions, figure in ((10_000, 11.0), (100_000, 22.0), (10_000, 33.0)):
        timing = hermes_serve.Timing(samples=[figure], bytes=2048)
        read = hermes_serve.Read("list", "session list", "/sessions/", "/api/sessions")
        hermes_serve.write_report(
            report,
            {
                "when": "now",
                "label": "x",
                "shape": {"sessions": sessions, "messages": 5, "chain": 0},
                "reads": [read],
                "results": {("warm", "list"): (timing, timing), ("cold", "list"): (timing, timing)},
                "deletion": None,
                "runs": 1,
                "load_before": (1.0, 1.0, 1.0),
                "load_after": (1.0, 1.0, 1.0),
                "hermes_version": "0.19.0",
                "command": "python bench/hermes_serve.py",
            },
        )
    text = report.read_text()
    assert text.count(hermes_serve.HEADING) == 2 and "theirs" in text
    assert "33.0 / 33.0" in text and "11.0 / 11.0" not in text and "22.0 / 22.0" in text


def test_one_tiny_run_reads_both_and_deletes_through_both_uis(tmp_path):
    if connections["store"].vendor != "sqlite":
        pytest.skip("hermes serve reads SQLite stores: this runs in the SQLite pass")
    hermes = hermes_serve.default_hermes()
    if not hermes.exists():
        pytest.skip(f"{hermes} is missing (hermes-agent 0.19.0's virtualenv under var/)")
    store = tmp_path / "store"
    env = {**hermes_serve.stores.sqlite_env(store)}
    # manage.py migrate, init_store and seed_demo --sessions 30, in one process (each of
    # three would start Django again).
    seed = (
        "import django; django.setup(); from django.core.management import call_command; "
        "call_command('migrate', interactive=False, verbosity=0); call_command('init_store'); "
        "call_command('seed_demo', sessions=30)"
    )
    subprocess.run(
        [sys.executable, "-c", seed], cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
        env={**env, "DJANGO_SETTINGS_MODULE": "sessions_admin.settings"},
    )  # fmt: skip
    with sqlite3.connect(store / "state.db") as conn:
        oldest = conn.execute(
            "SELECT id, ended_at IS NULL FROM sessions ORDER BY started_at, id LIMIT 8"
        ).fetchall()
    live = sum(row[1] for row in oldest)

    result = hermes_serve.measure(
        hermes_serve.parse_args(["--var-dir", str(store), "--runs", "1", "--delete", "8"])
    )

    assert [read.key for read in result["reads"]][:5] == [
        "list", "search_common", "search_rare", "overview", "messages",
    ]  # fmt: skip
    for console, theirs in result["results"].values():
        assert console.errors == [] and theirs.errors == []
        assert len(console.samples) == 1 and len(theirs.samples) == 1
    deletion = result["deletion"]
    assert deletion["count"] == 8 and deletion["live"] == live
    assert deletion["hermes"]["deleted"] == 8 and deletion["hermes"]["left"] == 0
    console = deletion["console"]
    assert console["state"] == "done"
    assert console["left"] == live and console["deleted"] == 8 - live
    assert console["trashed"] == 8 - live  # restorable, unlike Hermes's
    assert "| console |" in hermes_serve.render_section(result)
    # The seeded store itself is untouched: both servers worked on copies.
    with sqlite3.connect(store / "state.db") as conn:
        marks = ",".join("?" * len(oldest))
        kept = conn.execute(
            f"SELECT COUNT(*) FROM sessions WHERE id IN ({marks})", [row[0] for row in oldest]
        ).fetchone()[0]
    assert kept == 8
