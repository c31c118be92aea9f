"""Benchmarks of issue 17's deletes: an erasure request and a retention policy run.

    python bench/retention.py --size 100k --db sqlite
    python bench/retention.py --size 10k --db postgres

Each case runs on a fresh copy of a seeded store (bench/stores.py; the same copies as
bench/writes.py), in a child process, while another process appends messages to live
sessions at a steady rate (bench/writes.py's appender) and records each append's latency:

- erasure: one subject with 1,000 sessions of 10 messages each is added to the store;
  the preview (``ledger.erasure.plan``) and the whole request (``request_erasure`` +
  ``run_erasure``: the store's purge, the dashboard's side, the WAL truncation) are timed;
  then the file rewrite that follows it (``finish_erasure_rewrites``, what
  ``manage.py erasure_rewrite`` and the scheduler run): its time, the longest lock it
  reports holding, and the appends' latency while it runs. SQLite rewrites only in a quiet
  moment: a first try is made while the appender writes (it must step back without
  holding anyone), then the appender pauses, as a runtime going quiet, and comes back as
  soon as the rewrite started, so its waits are the lock time the runtime sees.
  PostgreSQL's VACUUM FULL is the operator's step: it runs while the appender writes;
- rewrite: the file rewrite alone on the seeded copy, forced (no quiet window, waiting up
  to 60 s for the lock) while the appender writes: the cost of a rewrite started at the
  worst moment;
- policy: a retention policy over every ended session quiet for a day (``older_than_days=1``:
  on a seeded store, most of it) is dry-run (``selected_ids``), then run as its job.

Results replace the rows of the cases run, for this size and backend, in the "Retention and
erasure" section of docs/benchmarks.md. Figures are machine-dependent; the section states the machine and load.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
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
# How long the benchmark lets the search index merges go on after an erasure before it
# gives up on the file rewrite (which waits for them).
INDEX_MERGE_SECONDS = 900


def _live_sessions() -> list[str]:
    from sessions_admin import core

    return [
        core.create_session(source="telegram", session_key=f"bench:live:{n}").session_id
        for n in range(writes.APPEND_SESSIONS)
    ]


def child_erasure(workdir: Path) -> dict:
    from sessions_admin import core
    from sessions_admin.core.erasure import Subject
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
    # The preview the request page shows: the store's plan and the dashboard's trash, under
    # the one fingerprint the request checks.
    fingerprint = ledger_erasure.plan(subject).fingerprint
    planned = time.perf_counter()
    request = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="bench",
        expected_fingerprint=fingerprint,
        start=False,
    )
    receipt = actions.run_erasure(request_id=request.pk)
    finished = time.perf_counter()
    end_wall = time.time()
    rewrite = _rewrite_after(appender, request.pk)
    time.sleep(1)
    records = appender.stop()
    for name, (start_at, end_at) in rewrite.pop("windows").items():
        rewrite[f"appends_{name}"] = writes.window(records, start_at, end_at) | {
            "stall_seconds": longest_stall(records, start_at, end_at)
        }
    return {
        "build_seconds": built,
        "sessions": receipt["erased"]["sessions"],
        "messages": receipt["erased"]["messages"],
        "plan_seconds": planned - start,
        "erase_seconds": finished - planned,
        "rate": receipt["erased"]["sessions"] / (finished - planned),
        "storage": receipt["storage"],
        "search_index": receipt.get("search_index"),
        "file_rewrite": receipt.get("file_rewrite"),
        "appends_during": writes.window(records, start_wall, end_wall)
        | {"stall_seconds": longest_stall(records, start_wall, end_wall)},
        "appends_baseline": writes.window(records, appender.started + 2, start_wall),
        "rewrite": rewrite,
    }


def longest_stall(records, start: float, end: float) -> float | None:
    """The longest time in [start, end] in which no append succeeded: how long the runtime
    could not write, whatever its appends did meanwhile (the appender is one writer in
    sequence: an append held back delays the next ones, which then run in a burst, so the
    latencies' p99 hides the wait; one that gives up is an error, not a latency).

    ``records`` are the appender's (wall clock at start, latency ms, error). None when the
    window is empty.
    """
    if end <= start:
        return None
    ends = sorted(wall + ms / 1000 for wall, ms, error in records if not error)
    marks = [start, *(t for t in ends if start < t < end), end]
    return max(b - a for a, b in itertools.pairwise(marks))


def _store_bytes() -> int:
    """The store's size on disk: its files (SQLite, the WAL included) or its database."""
    from django.db import connections

    from sessions_admin.core import db
    from sessions_admin.routers import store_alias

    connection = connections[store_alias()]
    if connection.vendor == "postgresql":
        return int(db.fetchone("SELECT pg_database_size(current_database())")[0])
    path = Path(str(connection.settings_dict["NAME"]))
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def _finish_index_merge(request_id: int) -> dict:
    """Merge the search indexes until the erasure's receipt says merged, as the scheduler's
    tries would (each stops after its budget, the next goes on from there)."""
    from sessions_admin.ledger import actions
    from sessions_admin.ledger import erasure as ledger_erasure

    started = time.perf_counter()
    tries = 0
    while request_id in ledger_erasure.requests_awaiting_index_merge():
        if time.perf_counter() - started > INDEX_MERGE_SECONDS:
            break
        actions.finish_erasure_index_merges()
        tries += 1
    return {
        "tries": tries,
        "seconds": time.perf_counter() - started,
        "merged": request_id not in ledger_erasure.requests_awaiting_index_merge(),
    }


def _rewrite_after(appender: writes.Appender, request_id: int) -> dict:
    """The file rewrite after the erasure: timed, with the windows of the appends it held."""
    import threading

    from django.db import connections

    from sessions_admin.core import erasure as erasure_core
    from sessions_admin.ledger import actions
    from sessions_admin.ledger.models import AuditEntry, ErasureRequest
    from sessions_admin.routers import store_alias

    sqlite = connections[store_alias()].vendor == "sqlite"
    result: dict = {"bytes_before": _store_bytes(), "windows": {}}
    if sqlite:
        # What the scheduler does while the runtime writes: it must give up, holding no one.
        busy_from = time.time()
        started = time.perf_counter()
        busy = erasure_core.rewrite_store_files()
        result["busy_try"] = {
            "seconds": time.perf_counter() - started,
            "done": busy.done,
            "notes": list(busy.notes),
        }
        result["windows"]["busy_try"] = (busy_from, time.time())
        # The runtime goes quiet: what the erasure left of the index merge finishes first
        # (the rewrite waits for it), then the rewrite; the runtime comes back right after
        # the rewrite's quiet check passed and waits for as long as the VACUUM holds it.
        quiet_from = appender.pause()
        result["index_merge"] = _finish_index_merge(request_id)
        resume = threading.Timer(erasure_core.REWRITE_QUIET_SECONDS + 0.3, appender.resume)
    else:
        result["index_merge"] = _finish_index_merge(request_id)
        resume = None
    # A rewrite the runtime kept from running only logs why; the log goes into the result.
    unfinished: list[str] = []
    handler = logging.Handler(level=logging.INFO)
    handler.emit = lambda record: unfinished.append(record.getMessage())
    logging.getLogger(actions.__name__).addHandler(handler)
    logging.getLogger(actions.__name__).setLevel(logging.INFO)
    rewrite_from = time.time()
    started = time.perf_counter()
    if resume:
        resume.start()
    try:
        done = actions.finish_erasure_rewrites()
    finally:
        logging.getLogger(actions.__name__).removeHandler(handler)
    result["log"] = unfinished
    result["rewrite_seconds"] = time.perf_counter() - started
    rewrite_to = time.time()
    if resume:
        resume.join()
        result["resumed_after_seconds"] = erasure_core.REWRITE_QUIET_SECONDS + 0.3
        appender.resume()
    # The runtime's side of the lock: appends started from when it wrote again to the end.
    runtime_from = rewrite_from + (result.get("resumed_after_seconds") or 0)
    result["windows"]["rewrite"] = (runtime_from, rewrite_to)
    if sqlite:
        result["runtime_quiet_seconds"] = runtime_from - quiet_from
    result["rewritten"] = request_id in done
    receipt = ErasureRequest.objects.get(pk=request_id).receipt
    result["file_rewrite"] = receipt.get("file_rewrite")
    result["notes"] = [n for n in receipt.get("storage", []) if "VACUUM" in n or "rewr" in n]
    entry = AuditEntry.objects.filter(action="erasure_files_rewritten").order_by("-pk").first()
    result["longest_lock_seconds"] = (
        entry.after.get("longest_lock_seconds") if entry is not None else None
    )
    result["bytes_after"] = _store_bytes()
    return result


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
        "appends_during": writes.window(records, start_wall, end_wall)
        | {"stall_seconds": longest_stall(records, start_wall, end_wall)},
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


def _appends(window: dict) -> str:
    stall = window.get("stall_seconds")
    return (
        f"{_ms(window.get('p50'))} / {_ms(window.get('p99'))} / {_ms(window.get('max'))} "
        f"({window.get('errors', 0)} errors"
        + (f"; no append for {stall:.1f} s" if stall is not None else "")
        + ")"
    )


def _size(count: int | None) -> str:
    return "?" if count is None else f"{count / 1e9:.2f} GB"


def _rewrite_row(erasure: dict, backend: str) -> tuple[str, str]:
    """The file rewrite's "what" and "time" cells."""
    rewrite = erasure["rewrite"]
    sizes = f"store {_size(rewrite.get('bytes_before'))} -> {_size(rewrite.get('bytes_after'))}"
    lock = rewrite.get("longest_lock_seconds")
    held = f"longest lock it reports {lock:.2f} s" if lock is not None else "no lock reported"
    merge = rewrite.get("index_merge") or {}
    if merge.get("tries"):
        sizes += (
            f"; the search index merge it waits for took {merge['tries']} more tries, "
            f"{merge['seconds']:.0f} s{', runtime quiet' if backend == 'sqlite' else ''}"
            f"{'' if merge.get('merged') else ', unfinished'}"
        )
    if backend == "sqlite":
        busy = rewrite.get("busy_try") or {}
        what = (
            f"VACUUM of the store and dashboard.db in a quiet moment ({sizes}; {held}); "
            f"tried first while the runtime wrote: "
            f"{'rewrote' if busy.get('done') else 'stepped back'} in "
            f"{busy.get('seconds', 0):.2f} s, appends {_appends(rewrite.get('appends_busy_try', {}))}"
        )
    else:
        what = f"VACUUM FULL of the touched tables while the runtime wrote ({sizes}; {held})"
    if not rewrite.get("rewritten"):
        what += f"; NOT done, receipt still {(rewrite.get('file_rewrite') or {}).get('state')}"
    return what, f"{rewrite['rewrite_seconds']:.2f} s"


def report_rows(label: str, backend: str, results: dict) -> dict[str, str]:
    """Table rows of one run, by case name (the second cell)."""
    rows = {}
    erasure = results.get("erasure")
    if erasure:
        during, base = erasure["appends_during"], erasure["appends_baseline"]
        rows["erasure"] = (
            f"| {label} {backend} | erasure | {erasure['sessions']:,} sessions, "
            f"{erasure['messages']:,} messages of one subject (preview {erasure['plan_seconds']:.2f} s) "
            f"| {erasure['erase_seconds']:.2f} s | {erasure['rate']:,.0f} sessions/s "
            f"| {_appends(during)} | {_ms(base.get('p99'))} |"
        )
        if erasure.get("rewrite"):
            what, took = _rewrite_row(erasure, backend)
            rows["file rewrite"] = (
                f"| {label} {backend} | file rewrite | {what} | {took} | - "
                f"| {_appends(erasure['rewrite'].get('appends_rewrite', {}))} "
                f"| {_ms(base.get('p99'))} |"
            )
    forced = results.get("rewrite")
    if forced:
        lock = forced.get("lock_seconds")
        rows["forced rewrite"] = (
            f"| {label} {backend} | forced rewrite | the file rewrite alone, no quiet window, "
            f"while the runtime wrote (longest lock {lock or 0:.2f} s"
            f"{'' if forced.get('done') else '; NOT done'}) | {forced['seconds']:.2f} s | - "
            f"| {_appends(forced['appends_during'])} "
            f"| {_ms(forced['appends_baseline'].get('p99'))} |"
        )
    policy = results.get("policy")
    if policy:
        during, base = policy["appends_during"], policy["appends_baseline"]
        rate = f"{policy['rate']:,.0f} sessions/s" if policy["rate"] else "-"
        rows["policy run"] = (
            f"| {label} {backend} | policy run | {policy['deleted']:,} of {policy['selected']:,} "
            f"selected sessions, {policy['deleted_messages']:,} messages (dry run "
            f"{policy['dry_run_seconds']:.2f} s) | {policy['run_seconds']:.2f} s | {rate} "
            f"| {_appends(during)} | {_ms(base.get('p99'))} |"
        )
    return rows


def replace_rows(text: str, label: str, backend: str, rows: dict[str, str], note: str) -> str:
    """The section with this run's rows and note in place of the same cases' older ones;
    the rows and notes of cases not run this time are kept."""
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
    head, _, tail = text.partition(SECTION)
    section, marker, rest = tail.partition("\n## ")
    lines = section.split("\n")
    replaced = {f"| {label} {backend} | {case} |" for case in rows}
    kept = [line for line in lines if not any(line.startswith(r) for r in replaced)]
    # This run's rows after the last row of the table (or its header, "| --- ").
    table = [i for i, line in enumerate(kept) if line.startswith("| ")]
    at = table[-1] + 1 if table else len(kept)
    kept[at:at] = list(rows.values())
    key = f"({label} {backend}: {', '.join(rows)})"
    kept = [line for line in kept if not (line.startswith("Measured") and line.endswith(key))]
    # The notes go after the table, before any commentary under it.
    after_table = at + len(rows)
    while after_table < len(kept) and kept[after_table].startswith("Measured"):
        after_table += 1
    kept[after_table:after_table] = ["", f"{note} {key}"]
    body = re.sub(r"\n{3,}", "\n\n", "\n".join(kept).rstrip() + "\n")
    return head + SECTION + body + (marker + rest if marker else "")


def _report(output: Path, label: str, backend: str, results: dict, command: str) -> None:
    text = output.read_text() if output.exists() else ""
    note = (
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()} "
        f"{os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f} at the end): `{command}`."
    )
    output.write_text(
        replace_rows(text, label, backend, report_rows(label, backend, results), note)
    )


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

    from bench import stores
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
            print(case, json.dumps(results[case], default=str))
    # The raw results, kept beside the seeded stores (the section shows only some of them).
    raw = stores.STORES_DIR / f"retention-{size_label(size)}-{args.db}.json"
    raw.write_text(json.dumps(results, indent=1, default=str))
    if not args.no_report:
        command = "python bench/retention.py " + " ".join(sys.argv[1:] if argv is None else argv)
        _report(args.output, size_label(size), args.db, results, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
