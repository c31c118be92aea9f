"""bench/api.py: its arguments, its report section, and one tiny run against a real gunicorn.

No speed is asserted: the tiny run checks that every append each runtime was told it stored is
in the store once (core and HTTP alike), that each HTTP append has its audit entry and its
idempotency key, and that the store is still consistent.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connections

from bench import api
from sessions_admin.core import db
from sessions_admin.ledger.models import AuditAction, AuditEntry
from tests.helpers import child_env


def test_arguments_default_to_one_eight_and_thirty_two_runtimes_on_both_backends():
    args = api.parse_args([])
    assert (args.db, args.runtimes, args.write) == ("both", [1, 8, 32], False)
    args = api.parse_args(["--db", "sqlite", "--runtimes", "2,4", "--duration", "3", "--write"])
    assert (args.db, args.runtimes, args.duration, args.write) == ("sqlite", [2, 4], 3.0, True)
    for bad in (["--runtimes", "0"], ["--runtimes", "a,b"], ["--duration", "0"], ["--db", "x"]):
        with pytest.raises(SystemExit):
            api.parse_args(bad)


def _result(backend: str, core: float, http: float, p99: float) -> dict:
    def row(kind, per_second, p99_ms):
        return {
            "kind": kind, "runtimes": 8, "per_second": per_second, "p50_ms": 1.0,
            "p99_ms": p99_ms, "errors": 0, "appends": 10, "acked": 10, "cpu_ms": 0.5,
        }  # fmt: skip

    return {
        "when": "now",
        "backend": backend,
        "rows": [row("core", core, 2.0), row("http", http, p99)],
        "load_before": (1.0, 1.0, 1.0),
        "load_after": (1.0, 1.0, 1.0),
        "workers": 2,
        "threads": 16,
        "duration": 10,
        "warmup": 2,
        "command": "python bench/api.py",
    }


def test_each_backend_replaces_its_own_section_and_says_whether_the_target_is_met(tmp_path):
    report = tmp_path / "benchmarks.md"
    report.write_text("# Benchmarks\n\n## Idle open pages\n\ntheirs\n")
    api.write_report(report, _result("SQLite", 1000.0, 300.0, 80.0))
    api.write_report(report, _result("PostgreSQL", 500.0, 400.0, 20.0))
    api.write_report(report, _result("SQLite", 1000.0, 600.0, 30.0))
    text = report.read_text()
    assert text.count(api.HEADING) == 2 and "theirs" in text
    sqlite = text[text.index(f"{api.HEADING} (SQLite") :]
    assert "| 8 | 1,000 | 1.0 / 2.0 | 0.5 | 600 | 1.0 / 30.0 | 0.5 | 60% | 0 |" in sqlite
    assert "**missed**" not in sqlite and "300" not in sqlite
    postgres = text[text.index(f"{api.HEADING} (PostgreSQL") :]
    assert "80% of the core's" in postgres and "on SQLite" not in postgres.split("##")[1]
    missed = api.render_section(_result("SQLite", 1000.0, 300.0, 80.0))
    assert missed.count("**missed**") == 2


def test_one_tiny_run_stores_every_acknowledged_append_once(tmp_path):
    args = api.parse_args(
        ["--runtimes", "1,2", "--duration", "1", "--warmup", "0.2", "--workers", "1"]
        + ["--threads", "4"]
    )
    backend = "PostgreSQL" if connections["store"].vendor == "postgresql" else "SQLite"
    env = {k: v for k, v in child_env().items() if not k.startswith("PYTEST_")}
    env["SESSIONS_ADMIN_VAR_DIR"] = str(tmp_path)

    result = api.measure(env, backend, args, prepare=False)

    rows = {(row["kind"], row["runtimes"]): row for row in result["rows"]}
    assert set(rows) == {(kind, n) for kind in ("core", "http") for n in (1, 2)}
    for row in rows.values():
        assert row["errors"] == 0, row["first_errors"]
        assert row["appends"] > 0 and row["per_second"] > 0 and row["p99_ms"] >= row["p50_ms"]
        assert row["cpu_ms"] > 0
    acked = {
        kind: sum(r["acked"] for r in rows.values() if r["kind"] == kind)
        for kind in ("core", "http")
    }
    stored = dict(
        db.fetchall(
            "SELECT CASE WHEN m.content LIKE %s THEN 'http' ELSE 'core' END, COUNT(*) "
            "FROM messages m JOIN sessions s ON s.id = m.session_id WHERE s.source = %s "
            "GROUP BY 1",
            ["http%", api.SOURCE],
        )
    )
    assert stored == {"core": acked["core"], "http": acked["http"]}
    distinct = db.fetchone("SELECT COUNT(DISTINCT content) FROM messages")[0]
    assert distinct == acked["core"] + acked["http"]  # none stored twice
    assert db.fetchone("SELECT COUNT(*) FROM sessions WHERE source = %s", [api.SOURCE])[0] == 6
    keys = db.fetchone("SELECT COUNT(*) FROM sessions_admin_idempotency")[0]
    assert keys == acked["http"]
    audited = AuditEntry.objects.filter(
        action=AuditAction.APPEND, actor_name__startswith=f"api:{api.TOKEN_NAME}"
    )
    assert audited.count() == acked["http"]
    call_command("check_consistency")
    assert f"{api.HEADING} ({backend}" in api.render_section(result)
