"""How soon a confirmed bulk delete starts: confirm -> the job's ``started_at``.

    python bench/jobs_wake.py                          # SQLite and PostgreSQL, 20 jobs each
    python bench/jobs_wake.py --db sqlite --runs 50
    python bench/jobs_wake.py --postgres postgres://postgres@127.0.0.1:5432

One ``manage.py run_jobs`` process waits, as an operator's worker does, on a small fresh
store (a temporary var directory; on PostgreSQL two scratch databases on the given
server, by default bench/stores.py's bench cluster). This process then confirms one
one-session job at a time (``create_bulk_delete_job``, what the confirm POST does once its
checks passed) and reads the job's ``started_at`` when it is done. Both clocks are this
host's. Two workers are measured:

- woken: the worker as it is (ledger/wake.py: NOTIFY on PostgreSQL, a local socket on SQLite);
- polling: the same worker with its wake channel replaced by a plain sleep of 0.5 s, as the
  worker polled before it could be woken.

Prints a Markdown section for docs/benchmarks.md; nothing is written.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OLD_POLL_SECONDS = 0.5
WORKERS = ("woken", "polling")


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


# --- the worker process ------------------------------------------------------------------------


def worker_main(kind: str) -> None:
    """``manage.py run_jobs``; for ``polling``, with the wake channel of the old worker (none)."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sessions_admin.settings")
    django.setup()
    from django.core.management import call_command

    from sessions_admin.ledger import worker

    poll = None
    if kind == "polling":

        class SleepOnly:
            channel = "poll only (bench: the old worker)"

            def wait(self, timeout: float) -> bool:
                time.sleep(timeout)
                return False

            def close(self) -> None:
                pass

        worker.JobWaiter = SleepOnly
        poll = OLD_POLL_SECONDS
    call_command("run_jobs", idle_exit=3600, poll=poll)


# --- the confirming process --------------------------------------------------------------------


def confirm_main(runs: int) -> None:
    """Confirm ``runs`` jobs one after the other; print each one's confirm -> start in ms."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sessions_admin.settings")
    django.setup()
    from django.utils import timezone

    from sessions_admin import core
    from sessions_admin.ledger import jobs
    from sessions_admin.ledger.models import DeleteJob

    for n in range(runs + 2):  # the first two warm both processes up
        sid = core.create_session(source="bench", started_at=1000.0 + n).session_id
        core.end_session(session_id=sid, end_reason="user_exit")
        time.sleep(0.05 + (n % 7) * 0.037)  # confirms fall anywhere in the old poll's cycle
        confirmed = timezone.now()
        job_id = jobs.create_bulk_delete_job(
            session_ids=[sid], include_live=False, actor="bench", reason="bench"
        )
        committed = timezone.now()
        deadline = time.monotonic() + 30
        while (job := DeleteJob.objects.get(pk=job_id)).state != DeleteJob.DONE:
            if time.monotonic() > deadline:
                raise SystemExit(f"job {job_id} did not finish: {job.state}")
            time.sleep(0.01)
        if n >= 2:
            since_confirm = (job.started_at - confirmed).total_seconds() * 1000
            since_commit = (job.started_at - committed).total_seconds() * 1000
            print(f"{since_confirm} {since_commit}", flush=True)


# --- the parent: stores, processes, report ----------------------------------------------------


def _environments(db: str, postgres: str | None, scratch: Path) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "SESSIONS_ADMIN_STORE_URL", "SESSIONS_ADMIN_RESPONSES_URL")
    }
    env.update(
        SESSIONS_ADMIN_VAR_DIR=str(scratch / "var"),
        DJANGO_SETTINGS_MODULE="sessions_admin.settings",
        PYTHONPATH=str(ROOT),
        SESSIONS_ADMIN_LOG_LEVEL="WARNING",
    )
    env.setdefault("SESSIONS_ADMIN_SECRET_KEY", "bench-only-jobs-wake")
    if db == "postgres":
        import psycopg

        server = postgres or _bench_cluster()
        with psycopg.connect(f"{server}/postgres", autocommit=True) as c:
            for name in ("bench_jobs_wake", "bench_jobs_wake_store"):
                c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                c.execute(f"CREATE DATABASE {name}")
        env["DATABASE_URL"] = f"{server}/bench_jobs_wake"
        env["SESSIONS_ADMIN_STORE_URL"] = f"{server}/bench_jobs_wake_store"
    from bench import stores

    stores.prepare_console(env)
    return env


def _bench_cluster() -> str:
    from bench import stores

    return stores.postgres_server()


def measure(db: str, kind: str, runs: int, postgres: str | None) -> list[tuple[float, float]]:
    with tempfile.TemporaryDirectory(prefix="jobs-wake-") as scratch:
        env = _environments(db, postgres, Path(scratch))
        worker = subprocess.Popen([sys.executable, __file__, "--worker", kind], cwd=ROOT, env=env)
        try:
            time.sleep(3)  # the worker has started and is waiting
            out = subprocess.run(
                [sys.executable, __file__, "--confirm", str(runs)],
                cwd=ROOT,
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        finally:
            worker.terminate()
            worker.wait(30)
    return [(float(a), float(b)) for a, b in (line.split() for line in out.splitlines())]


def report(
    results: dict[tuple[str, str], list[tuple[float, float]]], runs: int, command: str
) -> str:
    lines = [
        "## Jobs: confirm to start (issue 16)",
        "",
        f"`{command}`: {runs} one-session bulk deletes confirmed one after the other while "
        "one `manage.py run_jobs` waits; milliseconds from the confirm (before "
        "`create_bulk_delete_job`, which checks and snapshots the set) to the job's "
        "`started_at`, and from its commit (the wake itself, then the worker's look and "
        f'claim). "polling" is the same worker sleeping {OLD_POLL_SECONDS} s between '
        "looks, as it did before workers could be woken (bench/jobs_wake.py).",
        "",
        "| store | worker | confirm→start median ms | p95 ms | commit→start median ms | p95 ms |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for (db, kind), samples in results.items():
        confirm = [a for a, _ in samples]
        commit = [b for _, b in samples]
        lines.append(
            f"| {'SQLite' if db == 'sqlite' else 'PostgreSQL'} | {kind} | "
            f"{statistics.median(confirm):.1f} | {_p95(confirm):.1f} | "
            f"{statistics.median(commit):.1f} | {_p95(commit):.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--postgres", help="a PostgreSQL server URL (default: the bench cluster)")
    parser.add_argument("--worker", choices=WORKERS, help=argparse.SUPPRESS)
    parser.add_argument("--confirm", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args.worker)
        return 0
    if args.confirm:
        confirm_main(args.confirm)
        return 0
    backends = ("sqlite", "postgres") if args.db == "both" else (args.db,)
    results = {
        (db, kind): measure(db, kind, args.runs, args.postgres)
        for db in backends
        for kind in WORKERS
    }
    command = f"python bench/jobs_wake.py --db {args.db} --runs {args.runs}"
    print(report(results, args.runs, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
