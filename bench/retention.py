"""Benchmarks of issue 17's deletes: an erasure request and a retention policy run.

    python bench/retention.py --size 100k --db sqlite
    python bench/retention.py --size 10k --db postgres

Each case runs on a fresh copy of a seeded store (bench/stores.py; the same copies as
bench/writes.py), in a child process, while another process appends messages to live
sessions at a steady rate (bench/writes.py's appender) and records each append's latency:

- erasure: one subject with 1,000 sessions of 10 messages each is added to the store;
  the preview (``plan_erasure``) and the whole request (``request_erasure`` +
  ``run_erasure``: the store's purge, the dashboard's side, the WAL truncation) are timed;
- policy: a retention policy over every ended session quiet for a day (``older_than_days=1``:
  on a seeded store, most of it) is dry-run (``selected_ids``), then run as its job.

Results replace this size and backend's rows in the "Retention and erasure" section of
docs/benchmarks.md. Figures are machine-dependent; the section states the machine and load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import writes  # noqa: E402 - after the path set-up above

SUBJECT_SESSIONS = 1_000
SUBJECT_MESSAGES = 10
SECTION = "## Retention and erasure (issue 17)"


def _live_sessions() -> list[str]:
    from sessions_admin import core

    return [
        core.create_session(source="telegram", session_key=f"bench:live:{n}").session_id
        for n in range(writes.APPEND_SESSIONS)
    ]


def child_erasure(workdir: Path) -> dict:
    from sessions_admin import core
    from sessions_admin.core import erasure as erasure_core
    from sessions_admin.core.erasure import Subject, plan_erasure
    from sessions_admin.ledger import actions
    from sessions_admin.ledger import erasure as ledger_erasure

    build = time.perf_counter()
    for n in range(SUBJECT_SESSIONS):
        sid = core.create_session(
            source="telegram", user_id="bench-subject-4242", chat_id=f"bench-chat-{n % 7}"
        ).session_id
        core.append_messages(
            session_id=sid,
            messages=[
                {"role": "user" if m % 2 == 0 else "assistant", "content": f"subject text {n}.{m}"}
                for m in range(SUBJECT_MESSAGES)
            ],
        )
    built = time.perf_counter() - build
    live = _live_sessions()
    appender = writes.Appender(
        writes._appender_command(sys.executable, "core"), dict(os.environ), workdir, live
    )
    time.sleep(writes.APPEND_BASELINE_SECONDS + 2)
    subject = Subject(user_id="bench-subject-4242")
    start_wall = time.time()
    start = time.perf_counter()
    plan = plan_erasure(subject=subject)
    planned = time.perf_counter()
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="bench",
        expected_fingerprint=plan.fingerprint,
        start=False,
    )
    receipt = actions.run_erasure(request_id=request.pk)
    finished = time.perf_counter()
    end_wall = time.time()
    time.sleep(1)
    # The file rewrite with the runtime still writing: the erasure's own try (after a quiet
    # second) is expected to give way; then it is forced, to measure what it costs the
    # runtime's appends: SQLite's VACUUM holds the write lock for its length, PostgreSQL's
    # VACUUM FULL an ACCESS EXCLUSIVE lock on each table in turn.
    rewrite_wall = time.time()
    rewrite_start = time.perf_counter()
    forced = erasure_core.rewrite_store_files(quiet_seconds=0.0, busy_ms=2_000)
    dashboard = ledger_erasure.rewrite_dashboard_file(quiet_seconds=0.0, busy_ms=2_000)
    rewrite_seconds = time.perf_counter() - rewrite_start
    rewrite_end_wall = time.time()
    time.sleep(1)
    records = appender.stop()
    return {
        "rewrite_at_erasure": receipt["file_rewrite"]["state"],
        "rewrite_done": forced.done and dashboard[0],
        "rewrite_seconds": rewrite_seconds,
        "rewrite_lock_seconds": max(forced.longest_lock_seconds, dashboard[2]),
        "rewrite_notes": [*forced.notes, dashboard[1]],
        "appends_during_rewrite": writes.window(records, rewrite_wall, rewrite_end_wall),
        "build_seconds": built,
        "sessions": receipt["erased"]["sessions"],
        "messages": receipt["erased"]["messages"],
        "plan_seconds": planned - start,
        "erase_seconds": finished - planned,
        "rate": receipt["erased"]["sessions"] / (finished - planned),
        "storage": receipt["storage"],
        "appends_during": writes.window(records, start_wall, end_wall),
        "appends_baseline": writes.window(records, appender.started + 2, start_wall),
    }


def child_rewrite(workdir: Path) -> dict:
    """The file rewrite alone, forced (no quiet window, a long lock wait) while the runtime
    appends: how long it takes, how long it holds the lock, what the appends see."""
    from sessions_admin.core import erasure as erasure_core

    live = _live_sessions()
    appender = writes.Appender(
        writes._appender_command(sys.executable, "core"), dict(os.environ), workdir, live
    )
    time.sleep(writes.APPEND_BASELINE_SECONDS + 2)
    start_wall = time.time()
    start = time.perf_counter()
    rewrite = erasure_core.rewrite_store_files(quiet_seconds=0.0, busy_ms=60_000)
    finished = time.perf_counter()
    end_wall = time.time()
    time.sleep(1)
    records = appender.stop()
    return {
        "done": rewrite.done,
        "notes": list(rewrite.notes),
        "seconds": finished - start,
        "lock_seconds": rewrite.longest_lock_seconds,
        "appends_during": writes.window(records, start_wall, end_wall),
        "appends_baseline": writes.window(records, appender.started + 2, start_wall),
    }


def child_policy(workdir: Path) -> dict:
    from sessions_admin.ledger import actions, jobs, retention, worker
    from sessions_admin.ledger.models import RetentionPolicy

    # The run's job is run here, timed, not by a background worker thread.
    worker.ensure_worker_running = lambda: None

    live = _live_sessions()
    policy = RetentionPolicy.objects.create(name="bench", older_than_days=1, created_by="bench")
    appender = writes.Appender(
        writes._appender_command(sys.executable, "core"), dict(os.environ), workdir, live
    )
    time.sleep(writes.APPEND_BASELINE_SECONDS + 2)
    start_wall = time.time()
    start = time.perf_counter()
    selected = retention.selected_ids(policy)
    dry_run = time.perf_counter()
    job_id = actions.run_retention_policy(actor=None, policy_id=policy.pk, reason="cleanup")
    created = time.perf_counter()
    progress = jobs.run_job(job_id=job_id)
    finished = time.perf_counter()
    end_wall = time.time()
    time.sleep(1)
    records = appender.stop()
    return {
        "selected": len(selected),
        "deleted": progress.deleted,
        "deleted_messages": progress.deleted_messages,
        "dry_run_seconds": dry_run - start,
        "start_seconds": created - dry_run,
        "run_seconds": finished - created,
        "rate": progress.deleted / (finished - created) if finished > created else None,
        "appends_during": writes.window(records, start_wall, end_wall),
        "appends_baseline": writes.window(records, appender.started + 2, start_wall),
    }


def _ms(value) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def _report(output: Path, label: str, backend: str, results: dict, command: str) -> None:
    text = output.read_text() if output.exists() else ""
    if SECTION not in text:
        text = text.rstrip() + (
            f"\n\n{SECTION}\n\n"
            "`python bench/retention.py --size SIZE --db sqlite|postgres`: on a copy of the seeded "
            "store, while a separate process appends to live sessions at "
            f"{writes.APPEND_RATE:g}/s (its latency p50 / p99 during the operation, and before it "
            "as a baseline).\n\n"
            "| store | case | what | time | rate | appends during: p50 / p99 / max | baseline p99 |\n"
            "| --- | --- | --- | --- | --- | --- | --- |\n"
        )
    rows = []
    erasure = results.get("erasure")
    if erasure:
        during, base = erasure["appends_during"], erasure["appends_baseline"]
        rows.append(
            f"| {label} {backend} | erasure | {erasure['sessions']:,} sessions, "
            f"{erasure['messages']:,} messages of one subject (preview {erasure['plan_seconds']:.2f} s) "
            f"| {erasure['erase_seconds']:.2f} s | {erasure['rate']:,.0f} sessions/s "
            f"| {_ms(during.get('p50'))} / {_ms(during.get('p99'))} / {_ms(during.get('max'))} "
            f"({during.get('errors', 0)} errors) | {_ms(base.get('p99'))} |"
        )
    policy = results.get("policy")
    if policy:
        during, base = policy["appends_during"], policy["appends_baseline"]
        rate = f"{policy['rate']:,.0f} sessions/s" if policy["rate"] else "-"
        rows.append(
            f"| {label} {backend} | policy run | {policy['deleted']:,} of {policy['selected']:,} "
            f"selected sessions, {policy['deleted_messages']:,} messages (dry run "
            f"{policy['dry_run_seconds']:.2f} s) | {policy['run_seconds']:.2f} s | {rate} "
            f"| {_ms(during.get('p50'))} / {_ms(during.get('p99'))} / {_ms(during.get('max'))} "
            f"({during.get('errors', 0)} errors) | {_ms(base.get('p99'))} |"
        )
    head, _, tail = text.partition(SECTION)
    lines = tail.split("\n")
    kept = [line for line in lines if not line.startswith(f"| {label} {backend} |")]
    # New rows after the table header (the line starting "| --- ").
    at = next((i for i, line in enumerate(kept) if line.startswith("| --- ")), len(kept) - 1)
    kept[at + 1 : at + 1] = rows
    note = (
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()} "
        f"{os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f}): `{command}`."
    )
    kept = [line for line in kept if not line.startswith("Measured") or label not in line]
    text = head + SECTION + "\n".join(kept).rstrip() + f"\n\n{note} ({label} {backend})\n"
    output.write_text(re.sub(r"\n{3,}", "\n\n", text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="100k")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--cases", default="erasure,policy")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        writes._django_setup()
        child = {"erasure": child_erasure, "rewrite": child_rewrite}.get(args.child, child_policy)
        result = child(args.workdir)
        args.result.write_text(json.dumps(result))
        return 0

    from bench.stores import parse_size, size_label

    size = parse_size(args.size)
    copies = writes.SqliteCopies(size) if args.db == "sqlite" else writes.PostgresClones(size)
    results = {}
    for case in [c.strip() for c in args.cases.split(",") if c.strip()]:
        with copies.copy() as (workdir, env):
            out = workdir / f"{case}.json"
            import subprocess

            subprocess.run(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--child",
                    case,
                    "--workdir",
                    str(workdir),
                    "--result",
                    str(out),
                ],
                cwd=ROOT,
                env=env,
                check=True,
            )
            results[case] = json.loads(out.read_text())
            print(case, json.dumps(results[case], default=str)[:4000])
    if not args.no_report:
        command = "python bench/retention.py " + " ".join(sys.argv[1:] if argv is None else argv)
        _report(args.output, size_label(size), args.db, results, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
