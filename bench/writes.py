"""Benchmarks of the store's write operations: merge, cascade delete, bulk delete under load.

    python bench/writes.py --size 100k --db sqlite
    python bench/writes.py --size 10k --db postgres --runs 5

Each destructive run works on a fresh copy of a seeded store (SQLite: the
files copied to a scratch directory; PostgreSQL: databases cloned from a
template), never on the seeded store itself. Cases:

- merge: a fork group built through the core (five sessions of one
  session_key, 10,000 messages in all), ``plan_merge`` + ``merge_sessions``,
  then ``unmerge``;
- cascade: a lineage (three compression segments, a delegate, a branch;
  10,000 messages) deleted with ``plan_cascade_delete`` +
  ``execute_cascade_delete``;
- bulk: a delete job (``create_bulk_delete_job`` + ``run_job``, as the
  worker runs it) over every seeded session, while another process appends
  messages to live sessions through ``core.append_message`` at a steady rate
  and records each append's latency;
- large: the store's largest session (20,000 messages in the seeded stores)
  deleted while appends run, in parts (``core.deletion.parts``,
  the default) and, for the comparison, in one transaction as before parts
  existed; each run on a fresh copy;
- hermes: hermes-agent's own ``SessionDB.delete_sessions`` of the same
  number of sessions the issue names (10,000) on a copy of the same store,
  with Hermes's own ``SessionDB.append_message`` appending meanwhile; and
  our delete job over the same 10,000 sessions for the side by side.

Each measured run happens in a child process of its own (Django binds its
databases at start-up). Results replace the "## Writes" section for this
size and backend in docs/benchmarks.md. Figures are machine-dependent.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime as dt
import json
import os
import platform
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
HERMES_PYTHON = ROOT / "var" / "hermes-agent-0.19.0" / "bin" / "python"
SCRATCH = Path(tempfile.gettempdir())
FORK_SEGMENTS = 5
GROUP_MESSAGES = 10_000
HERMES_DELETE_SESSIONS = 10_000
APPEND_RATE = 20.0  # appends per second: a busy gateway's message rate, steady
APPEND_SESSIONS = 4
APPEND_BASELINE_SECONDS = 3.0
TARGETS = {
    "merge": "< 1 s",
    "unmerge": "-",
    "cascade": "< 1 s",
    "bulk": ">= 2,675 sessions/s",
    "append_p99": "< 100 ms",
}


# ---------------------------------------------------------------------------
# Statistics


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def summary(samples: list[float], *, p95_from: int = 10) -> dict:
    return {
        "runs": len(samples),
        "median": statistics.median(samples) if samples else None,
        "p95": percentile(samples, 0.95) if len(samples) >= p95_from else None,
        "samples": samples,
    }


def latency_summary(latencies: list[float], errors: int) -> dict:
    if not latencies:
        return {"count": 0, "errors": errors}
    return {
        "count": len(latencies),
        "errors": errors,
        "p50": percentile(latencies, 0.50),
        "p99": percentile(latencies, 0.99),
        "max": max(latencies),
    }


# ---------------------------------------------------------------------------
# Appenders: separate processes writing at a steady rate, one latency per append


def _pause_files(stop_file: Path) -> tuple[Path, Path]:
    """The file that pauses an appender (a runtime gone quiet) and the one it answers with."""
    return stop_file.with_suffix(".pause"), stop_file.with_suffix(".paused")


def _append_loop(append, session_ids: list[str], stop_file: Path, out_file: Path, rate: float):
    records = []  # (wall clock at start, latency ms, error text or "")
    interval = 1.0 / rate
    next_at = time.monotonic()
    n = 0
    pause_file, paused_file = _pause_files(stop_file)
    while not stop_file.exists():
        if pause_file.exists():
            paused_file.touch()
            time.sleep(interval / 4)
            next_at = time.monotonic()  # no catching up on the appends a quiet runtime skipped
            continue
        paused_file.unlink(missing_ok=True)
        now = time.monotonic()
        if now < next_at:
            time.sleep(next_at - now)
        next_at += interval
        wall = time.time()
        start = time.perf_counter()
        error = ""
        try:
            append(session_ids[n % len(session_ids)], f"benchmark append {n}")
        except Exception as exc:  # noqa: BLE001 - counted and reported, never hidden
            error = f"{type(exc).__name__}: {exc}"[:200]
        records.append((wall, (time.perf_counter() - start) * 1000, error))
        n += 1
    out_file.write_text(json.dumps(records))


def core_appender(session_ids: list[str], stop_file: Path, out_file: Path, rate: float) -> None:
    _django_setup()
    from sessions_admin import core

    def append(session_id: str, text: str) -> None:
        core.append_message(session_id=session_id, role="user", content=text)

    _append_loop(append, session_ids, stop_file, out_file, rate)


def hermes_appender(
    state: Path, session_ids: list[str], stop_file: Path, out_file: Path, rate: float
) -> None:
    import hermes_state  # the hermes-agent virtualenv's

    store = hermes_state.SessionDB(db_path=state)

    def append(session_id: str, text: str) -> None:
        store.append_message(session_id, "user", text)

    try:
        _append_loop(append, session_ids, stop_file, out_file, rate)
    finally:
        store.close()


class Appender:
    """A child process appending to ``session_ids`` until stopped; latencies by time window."""

    def __init__(self, command: list[str], env: dict, workdir: Path, session_ids: list[str]):
        self.stop_file = workdir / "appender.stop"
        self.out_file = workdir / "appender.json"
        for stale in (self.stop_file, self.out_file, *_pause_files(self.stop_file)):
            stale.unlink(missing_ok=True)
        self.process = subprocess.Popen(
            [
                *command,
                "--stop-file",
                str(self.stop_file),
                "--out-file",
                str(self.out_file),
                "--rate",
                str(APPEND_RATE),
                "--session-ids",
                ",".join(session_ids),
            ],
            cwd=ROOT,
            env=env,
        )
        self.started = time.time()
        # A case that fails before stop() must not leave the appender running (it would keep the
        # scratch copy open after its directory is removed, and its disk space taken).
        atexit.register(self._kill_if_running)

    def _kill_if_running(self) -> None:
        if self.process.poll() is None:
            self.process.kill()

    def pause(self, timeout: float = 60.0) -> float:
        """Stop appending (the runtime goes quiet) once the append in flight is done; the wall
        clock from which no append runs."""
        pause_file, paused_file = _pause_files(self.stop_file)
        paused_file.unlink(missing_ok=True)
        pause_file.touch()
        deadline = time.monotonic() + timeout
        while not paused_file.exists():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("the appender did not pause")
            time.sleep(0.01)
        return time.time()

    def resume(self) -> float:
        """Append again at the steady rate; the wall clock it was told to."""
        _pause_files(self.stop_file)[0].unlink(missing_ok=True)
        return time.time()

    def stop(self) -> list[tuple[float, float, str]]:
        self.resume()
        self.stop_file.touch()
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        return [tuple(r) for r in json.loads(self.out_file.read_text())]


def window(records, start: float, end: float) -> dict:
    """Appends started in [start, end]; ``scheduled`` is how many the steady rate asked for
    (a writer blocked for seconds starts far fewer)."""
    inside = [r for r in records if start <= r[0] <= end]
    return latency_summary([r[1] for r in inside if not r[2]], sum(1 for r in inside if r[2])) | {
        "error_sample": sorted({r[2] for r in inside if r[2]})[:3],
        "scheduled": int((end - start) * APPEND_RATE),
    }


# ---------------------------------------------------------------------------
# Stores: seeded once, copied (SQLite) or cloned (PostgreSQL) for each destructive run


def _django_setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sessions_admin.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def _clean_env() -> dict:
    env = dict(os.environ)
    for name in ("DATABASE_URL", "SESSIONS_ADMIN_STORE_URL", "SESSIONS_ADMIN_RESPONSES_URL"):
        env.pop(name, None)
    return env


class SqliteCopies:
    """The seeded SQLite store of a size (bench/stores.py), copied afresh for each run."""

    def __init__(self, size: int):
        from bench import stores

        self.size = size
        self.seeded = stores.sqlite_store(size)

    @contextlib.contextmanager
    def copy(self):
        """A scratch var dir holding a copy of the seeded files; the env that points at it."""
        from bench import stores

        workdir = Path(tempfile.mkdtemp(prefix="benchw-", dir=SCRATCH))
        try:
            for attempt in range(5):
                try:  # the seeded store is shared: another benchmark may be checkpointing it
                    stores.clone_sqlite_store(self.size, workdir)
                    break
                except sqlite3.DatabaseError:
                    if attempt == 4:
                        raise
                    time.sleep(10)
            yield workdir, stores.sqlite_env(workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


class PostgresClones:
    """The seeded PostgreSQL store of a size (bench/stores.py), store and dashboard cloned per run."""

    def __init__(self, size: int):
        from bench import stores

        self.size = size
        self.store_template = stores.postgres_store(size).rsplit("/", 1)[1]
        self.dashboard_template = f"{self.store_template}_dashboard"
        self.counter = 0

    def _clone(self, name: str, template: str) -> None:
        from bench import stores

        base = stores.postgres_server()
        for attempt in range(30):  # a template in use (another benchmark reading it) is refused
            try:
                stores._recreate_database(base, name, template=template)
                return
            except Exception:  # noqa: BLE001 - retried, then raised
                if attempt == 29:
                    raise
                time.sleep(2)

    @contextlib.contextmanager
    def copy(self):
        from bench import stores

        self.counter += 1
        suffix = f"{os.getpid()}_{self.counter}"
        store, dashboard = f"benchw_store_{suffix}", f"benchw_dash_{suffix}"
        workdir = Path(tempfile.mkdtemp(prefix="benchw-", dir=SCRATCH))
        self._clone(store, self.store_template)
        self._clone(dashboard, self.dashboard_template)
        env = stores.postgres_env(self.size, store_database=store)
        env["DATABASE_URL"] = env["DATABASE_URL"].rsplit("/", 1)[0] + "/" + dashboard
        env["SESSIONS_ADMIN_VAR_DIR"] = str(workdir)
        try:
            yield workdir, env
        finally:
            for name in (store, dashboard):
                stores.drop_postgres_database(name)
            shutil.rmtree(workdir, ignore_errors=True)


# ---------------------------------------------------------------------------
# Child cases: run inside a copy, print one JSON object


def _filler(n: int) -> dict:
    role = "user" if n % 2 == 0 else "assistant"
    return {"role": role, "content": f"benchmark message {n}: " + "lorem ipsum dolor " * 8}


def _fill(session_id: str, count: int) -> None:
    from sessions_admin import core

    for start in range(0, count, 1000):
        core.append_messages(
            session_id=session_id,
            messages=[_filler(n) for n in range(start, min(count, start + 1000))],
        )


def build_fork_group(tag: str) -> list[str]:
    """Five sessions of one session_key (each new one ends the last), 10,000 messages in all."""
    from sessions_admin import core

    ids = []
    for _ in range(FORK_SEGMENTS):
        ref = core.create_session(source="telegram", session_key=f"bench:fork:{tag}")
        _fill(ref.session_id, GROUP_MESSAGES // FORK_SEGMENTS)
        ids.append(ref.session_id)
    return ids


def build_lineage(tag: str) -> str:
    """Three compression segments, a delegate and a branch: 10,000 messages; the root's id."""
    from sessions_admin import core

    share = GROUP_MESSAGES // 5
    root = core.create_session(source="cli", session_key=f"bench:lineage:{tag}").session_id
    _fill(root, share)
    delegate = core.create_session(
        source="cli", parent_session_id=root, model_config={"_delegate_from": root}
    ).session_id
    _fill(delegate, share)
    core.end_session(session_id=delegate, end_reason="agent_close")
    segment = root
    for _ in range(2):
        segment = core.rotate_for_compression(session_id=segment).new_session_id
        _fill(segment, share)
    branch = core.branch_session(session_id=root).new_session_id  # copies the root's 2,000
    core.end_session(session_id=branch, end_reason="user_exit")
    return root


def child_merge_cascade(runs: int, warmup: int) -> dict:
    from sessions_admin import core

    merge, plan_only, unmerge, cascade = [], [], [], []
    moved = deleted_messages = None
    for n in range(warmup + runs):
        ids = build_fork_group(f"{os.getpid()}-{n}")
        start = time.perf_counter()
        plan = core.plan_merge(session_ids=ids)
        planned = time.perf_counter()
        result = core.merge_sessions(session_ids=ids, expected_fingerprint=plan.fingerprint)
        merged = time.perf_counter()
        core.unmerge(merge_id=result.merge_id)
        undone = time.perf_counter()
        if n >= warmup:
            plan_only.append((planned - start) * 1000)
            merge.append((merged - start) * 1000)
            unmerge.append((undone - merged) * 1000)
            moved = plan.moved_messages + plan.sources[0].messages
    for n in range(warmup + runs):
        root = build_lineage(f"{os.getpid()}-{n}")
        start = time.perf_counter()
        plan = core.plan_cascade_delete(session_ids=[root], include_branches=True)
        result = core.execute_cascade_delete(
            session_ids=[root],
            include_branches=True,
            expected_fingerprint=plan.fingerprint,
            actor="bench",
            reason="benchmark",
        )
        if n >= warmup:
            cascade.append((time.perf_counter() - start) * 1000)
            deleted_messages = result.deleted_messages
    return {
        "merge": summary(merge),
        "merge_plan": summary(plan_only),
        "unmerge": summary(unmerge),
        "cascade": summary(cascade),
        "group_messages": moved,
        "lineage_messages": deleted_messages,
    }


def _appender_command(python: str, kind: str) -> list[str]:
    return [python, str(Path(__file__).resolve()), f"--{kind}-appender"]


def child_bulk(limit: int | None, workdir: Path) -> dict:
    """Delete every seeded session (or the oldest ``limit``) by a job, appends running alongside."""
    from sessions_admin import core
    from sessions_admin.core import db
    from sessions_admin.ledger import jobs

    ids = [r[0] for r in db.fetchall("SELECT id FROM sessions ORDER BY started_at, id")]
    if limit:
        ids = ids[:limit]
    live = [
        core.create_session(source="telegram", session_key=f"bench:live:{n}").session_id
        for n in range(APPEND_SESSIONS)
    ]
    appender = Appender(_appender_command(sys.executable, "core"), dict(os.environ), workdir, live)
    time.sleep(APPEND_BASELINE_SECONDS + 2)  # start-up, then a quiet baseline
    start_wall = time.time()
    start = time.perf_counter()
    job_id = jobs.create_bulk_delete_job(
        session_ids=ids, include_live=True, actor="bench", reason="benchmark"
    )
    created = time.perf_counter()
    progress = jobs.run_job(job_id=job_id)
    finished = time.perf_counter()
    end_wall = time.time()
    time.sleep(1)
    records = appender.stop()
    left = db.fetchone("SELECT COUNT(*) FROM sessions")[0]
    return {
        "selected": len(ids),
        "deleted": progress.deleted,
        "deleted_messages": progress.deleted_messages,
        "state": progress.state,
        "sessions_left": left,
        "create_seconds": created - start,
        "run_seconds": finished - created,
        "total_seconds": finished - start,
        "rate_run": progress.deleted / (finished - created),
        "rate_total": progress.deleted / (finished - start),
        "appends_during": window(records, start_wall, end_wall),
        "appends_baseline": window(records, appender.started + 2, start_wall),
    }


def child_large(mode: str, workdir: Path) -> dict:
    """Delete the largest session (trash first), appends running alongside: ``mode`` "parts"
    (the default: parts of ``BATCH_MESSAGES``) or "whole" (one transaction, as before)."""
    from sessions_admin import core
    from sessions_admin.core import db, deletion
    from sessions_admin.ledger.models import TrashEntry

    sid, size = db.fetchone(
        "SELECT id, message_count FROM sessions ORDER BY message_count DESC, id LIMIT 1"
    )
    live = [
        core.create_session(source="telegram", session_key=f"bench:live:{n}").session_id
        for n in range(APPEND_SESSIONS)
    ]
    appender = Appender(_appender_command(sys.executable, "core"), dict(os.environ), workdir, live)
    time.sleep(APPEND_BASELINE_SECONDS + 2)
    start_wall = time.time()
    start = time.perf_counter()
    deleted, messages, _ = deletion.delete_batch(
        [sid],
        actor="bench",
        reason="benchmark",
        job_id=None,
        operation="bench-large",
        part_messages=deletion.BATCH_MESSAGES if mode == "parts" else 10**9,
    )
    seconds = time.perf_counter() - start
    end_wall = time.time()
    time.sleep(1)
    records = appender.stop()
    return {
        "mode": mode,
        "session_messages": int(size or 0),
        "deleted": deleted,
        "deleted_messages": messages,
        "transactions": TrashEntry.objects.filter(operation="bench-large").count(),
        "seconds": seconds,
        "appends_during": window(records, start_wall, end_wall),
        "appends_baseline": window(records, appender.started + 2, start_wall),
    }


def hermes_delete_child(state: Path, ids_file: Path, out_file: Path) -> None:
    """In the hermes venv: open the store as the runtime does, delete the ids in one call."""
    import hermes_state

    ids = json.loads(ids_file.read_text())
    store = hermes_state.SessionDB(db_path=state)
    start = time.perf_counter()
    count = store.delete_sessions(ids)
    seconds = time.perf_counter() - start
    store.close()
    out_file.write_text(json.dumps({"deleted": count, "seconds": seconds}))


def hermes_create_sessions(state: Path, out_file: Path) -> None:
    import uuid

    import hermes_state

    store = hermes_state.SessionDB(db_path=state)
    ids = []
    for n in range(APPEND_SESSIONS):
        sid = f"bench-hermes-live-{n}-{uuid.uuid4().hex[:8]}"
        store.create_session(sid, "telegram")
        ids.append(sid)
    store.close()
    out_file.write_text(json.dumps(ids))


def run_hermes(workdir: Path, count: int) -> dict:
    """Hermes's delete_sessions of the oldest ``count`` sessions, Hermes appending meanwhile."""
    state = workdir / "state.db"
    with sqlite3.connect(state) as conn:
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM sessions ORDER BY started_at, id LIMIT ?", [count]
            )
        ]
    ids_file, out_file, live_file = (workdir / n for n in ("ids.json", "out.json", "live.json"))
    ids_file.write_text(json.dumps(ids))
    env = {**_clean_env(), "HERMES_HOME": str(workdir / "hermes-home")}
    script = str(Path(__file__).resolve())
    subprocess.run(
        [str(HERMES_PYTHON), script, "--hermes-create", str(state), str(live_file)],
        env=env,
        check=True,
    )
    live = json.loads(live_file.read_text())
    appender = Appender(
        [*_appender_command(str(HERMES_PYTHON), "hermes"), "--state", str(state)],
        env,
        workdir,
        live,
    )
    try:
        time.sleep(APPEND_BASELINE_SECONDS + 2)
        start_wall = time.time()
        subprocess.run(
            [
                str(HERMES_PYTHON),
                script,
                "--hermes-delete",
                str(state),
                str(ids_file),
                str(out_file),
            ],
            env=env,
            check=True,
        )
        end_wall = time.time()
        time.sleep(1)
    finally:
        # Stopped whatever happened: a failed delete left the appender running, holding the
        # scratch copy (deleted with its directory) open and its disk space taken.
        records = appender.stop()
    result = json.loads(out_file.read_text())
    return {
        **result,
        "rate": result["deleted"] / result["seconds"],
        "wall_seconds": end_wall - start_wall,
        "appends_during": window(records, start_wall, end_wall),
        "appends_baseline": window(records, appender.started + 2, start_wall),
    }


def spawn_child(case: str, env: dict, workdir: Path, extra: list[str]) -> dict:
    out = workdir / f"{case}.result.json"
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
            *extra,
        ],
        cwd=ROOT,
        env=env,
        check=True,
    )
    return json.loads(out.read_text())


def store_counts(env: dict, workdir: Path) -> dict:
    return spawn_child("counts", env, workdir, [])


# ---------------------------------------------------------------------------
# Report


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def _met(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "**no**")


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.machine()


def write_report(output: Path, label: str, backend: str, results: dict, command: str) -> None:
    heading = f"## Writes on {label} ({backend})"
    counts = results["counts"]
    lines = [
        heading,
        "",
        f"Measured {results.get('measured') or f'{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M}'} UTC "
        f"on {os.cpu_count()} cores "
        f"({_cpu_model()}), Python {platform.python_version()}, "
        f"{counts.get('server') or f'SQLite {sqlite3.sqlite_version}'}, with `{command}`; "
        "the store held "
        f"{counts['sessions']:,} sessions / {counts['messages']:,} messages. Every destructive run "
        "worked on a fresh copy of the seeded store (or a fresh fixture in it); other work was "
        "running on the machine, so treat single figures as noisy.",
        "",
        "| operation | size | runs | median | p95 | target | met? |",
        "| --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    mc = results.get("merge_cascade")
    if mc:
        for key, name, size in (
            ("merge", "Merge a fork group (plan_merge + merge_sessions)", mc["group_messages"]),
            ("merge_plan", "  of which plan_merge", mc["group_messages"]),
            ("unmerge", "Unmerge it (unmerge)", mc["group_messages"]),
            (
                "cascade",
                "Cascade delete a lineage (plan + execute, trash first)",
                mc["lineage_messages"],
            ),
        ):
            s = mc[key]
            target = TARGETS.get(key, "-")
            met = s["median"] < 1000 if target == "< 1 s" else None
            lines.append(
                f"| {name} | {size:,} messages | {s['runs']} | {_ms(s['median'])} | "
                f"{_ms(s['p95'])} | {target} | {_met(met)} |"
            )
    bulk = results.get("bulk")
    if bulk:
        rates = [r["rate_total"] for r in bulk]
        runs = [r["rate_run"] for r in bulk]
        p99s = [r["appends_during"].get("p99") for r in bulk if r["appends_during"].get("p99")]
        errors = sum(r["appends_during"]["errors"] for r in bulk)
        first = bulk[0]
        lines += [
            f"| Bulk delete job, create + run (trash first) | {first['selected']:,} sessions / "
            f"{first['deleted_messages']:,} messages | {len(bulk)} | "
            f"{statistics.median(rates):,.0f} sessions/s | - | >= 2,675 sessions/s | "
            f"{_met(statistics.median(rates) >= 2675)} |",
            f"|   of which run_job alone | | {len(bulk)} | {statistics.median(runs):,.0f} "
            "sessions/s | - | | |",
            f"| Concurrent appends (core.append_message, {APPEND_RATE:.0f}/s) during it, p99 | "
            f"{sum(r['appends_during']['count'] for r in bulk):,} appends, {errors} errors | "
            f"{len(bulk)} | {_ms(statistics.median(p99s)) if p99s else '-'} | - | < 100 ms | "
            f"{_met(bool(p99s) and statistics.median(p99s) < 100 and errors == 0)} |",
        ]
    partial = results.get("ours_10k")
    if partial:
        rates = [r["rate_total"] for r in partial]
        p99s = [r["appends_during"].get("p99") for r in partial if r["appends_during"].get("p99")]
        errors = sum(r["appends_during"]["errors"] for r in partial)
        lines += [
            f"| Bulk delete job of the oldest sessions | {partial[0]['selected']:,} sessions / "
            f"{partial[0]['deleted_messages']:,} messages | {len(partial)} | "
            f"{statistics.median(rates):,.0f} sessions/s | - | >= 2,675 sessions/s | "
            f"{_met(statistics.median(rates) >= 2675)} |",
            f"| Concurrent appends during it, p99 | "
            f"{sum(r['appends_during']['count'] for r in partial):,} appends, {errors} errors | "
            f"{len(partial)} | {_ms(statistics.median(p99s)) if p99s else '-'} | - | < 100 ms | "
            f"{_met(bool(p99s) and statistics.median(p99s) < 100 and errors == 0)} |",
        ]
    lines.append("")
    if bulk:
        lines += ["Bulk delete runs, one line each:", ""]
        lines += [
            "| run | sessions/s (create + run) | job creation | run_job | appends during: "
            "p50 / p99 / max, errors | appends before (baseline) p50 / p99 |",
            "| ---: | ---: | ---: | ---: | --- | --- |",
        ]
        for n, r in enumerate(bulk, 1):
            d, b = r["appends_during"], r["appends_baseline"]
            lines.append(
                f"| {n} | {r['rate_total']:,.0f} | {r['create_seconds']:.1f} s | "
                f"{r['run_seconds']:.1f} s | {_ms(d.get('p50'))} / {_ms(d.get('p99'))} / "
                f"{_ms(d.get('max'))}, {d['errors']} of {d['count'] + d['errors']} | "
                f"{_ms(b.get('p50'))} / {_ms(b.get('p99'))} |"
            )
        lines.append("")
    large = results.get("large")
    if large:
        lines += [
            f"Deleting the largest session ({large[0]['session_messages']:,} messages, trash "
            f"first) while `core.append_message` appends {APPEND_RATE:.0f}/s, on a fresh copy "
            "each run: in parts (the default) and in one transaction (before parts existed).",
            "",
            "| how | run | store transactions | seconds | appends during: p50 / p99 / max, "
            "errors |",
            "| --- | ---: | ---: | ---: | --- |",
        ]
        for mode, how in (("parts", "in parts"), ("whole", "one transaction")):
            for n, r in enumerate((r for r in large if r["mode"] == mode), 1):
                d = r["appends_during"]
                lines.append(
                    f"| {how} | {n} | {r['transactions']} | {r['seconds']:.2f} | "
                    f"{_ms(d.get('p50'))} / {_ms(d.get('p99'))} / {_ms(d.get('max'))}, "
                    f"{d['errors']} of {d['count'] + d['errors']} |"
                )
        lines.append("")
    hermes = results.get("hermes")
    if hermes:

        def appends(run: dict) -> str:
            d = run["appends_during"]
            scheduled = int(run.get("wall_seconds", run.get("total_seconds", 0)) * APPEND_RATE)
            return (
                f"{_ms(d.get('p50'))} / {_ms(d.get('p99'))} / {_ms(d.get('max'))} | "
                f"{d['count'] + d['errors']:,} of {scheduled:,} | {d['errors']}"
            )

        ours = results.get("ours_10k") or results.get("bulk") or []
        lines += [
            f"Side by side with hermes-agent 0.19: deleting the oldest "
            f"{HERMES_DELETE_SESSIONS:,} sessions of a copy of the same store.",
            "",
            "| who | run | how | sessions/s | appends during: p50 / p99 / max | appends started "
            "of scheduled | append errors |",
            "| --- | ---: | --- | ---: | --- | ---: | ---: |",
        ]
        for n, h in enumerate(hermes, 1):
            lines.append(
                f"| Hermes | {n} | `SessionDB.delete_sessions`, one transaction (appends by "
                f"Hermes's own `SessionDB.append_message`, {APPEND_RATE:.0f}/s) | "
                f"{h['rate']:,.0f} | {appends(h)} |"
            )
        for n, r in enumerate(ours, 1):
            lines.append(
                f"| sessions_admin | {n} | delete job: trash first, short batches (appends by "
                f"`core.append_message`, {APPEND_RATE:.0f}/s) | {r['rate_total']:,.0f} | "
                f"{appends(r)} |"
            )
        lines.append("")
    lines += results.get("notes", [])
    section = "\n".join(lines).rstrip() + "\n"
    text = output.read_text() if output.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    output.write_text(text.rstrip("\n") + "\n")


# ---------------------------------------------------------------------------
# Entry points


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="100k")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--runs", type=int, default=10, help="merge / cascade runs")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--bulk-runs", type=int, default=3)
    parser.add_argument("--hermes-runs", type=int, default=3)
    parser.add_argument(
        "--cases",
        default="merge,bulk,hermes",
        help="comma-separated: merge, bulk, hermes, large",
    )
    parser.add_argument("--large-runs", type=int, default=3)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the section from the last raw results"
    )
    # Internal: child processes.
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--core-appender", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--hermes-appender", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--stop-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=APPEND_RATE, help=argparse.SUPPRESS)
    parser.add_argument("--session-ids", default="", help=argparse.SUPPRESS)
    parser.add_argument("--hermes-delete", nargs=3, type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--hermes-create", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.core_appender or args.hermes_appender:
        ids = args.session_ids.split(",")
        if args.core_appender:
            core_appender(ids, args.stop_file, args.out_file, args.rate)
        else:
            hermes_appender(args.state, ids, args.stop_file, args.out_file, args.rate)
        return 0
    if args.hermes_delete:
        hermes_delete_child(*args.hermes_delete)
        return 0
    if args.hermes_create:
        hermes_create_sessions(*args.hermes_create)
        return 0
    if args.child:
        _django_setup()
        if args.child == "merge":
            result = child_merge_cascade(args.runs, args.warmup)
        elif args.child == "bulk":
            result = child_bulk(args.limit or None, args.workdir)
        elif args.child in ("large-parts", "large-whole"):
            result = child_large(args.child.removeprefix("large-"), args.workdir)
        else:
            from sessions_admin.core import db

            result = {
                "sessions": db.fetchone("SELECT COUNT(*) FROM sessions")[0],
                "messages": db.fetchone("SELECT COUNT(*) FROM messages")[0],
                "server": (
                    "PostgreSQL " + db.fetchone("SHOW server_version")[0].split()[0]
                    if db.vendor() == "postgresql"
                    else f"SQLite {sqlite3.sqlite_version}"
                ),
            }
        args.result.write_text(json.dumps(result))
        return 0

    from bench.stores import parse_size

    size = parse_size(args.size)
    cases = {c.strip() for c in args.cases.split(",") if c.strip()}
    raw = SCRATCH / f"benchw-results-{args.db}-{size}.json"
    command = "python bench/writes.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.report_only:
        results = json.loads(raw.read_text())
        command = results.get("command", command)
        cases = set()
    stores = (
        None if not cases else SqliteCopies(size) if args.db == "sqlite" else PostgresClones(size)
    )
    # Cases can run separately (the bulk delete at 100k takes minutes): earlier results of
    # the other cases, for this backend and size, are kept and reported with the new ones.
    if not args.report_only:
        results = json.loads(raw.read_text()) if raw.exists() else {}
        results["notes"] = []
        results["command"] = command
        results["measured"] = f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M}"
    with contextlib.ExitStack() as stack:
        if cases:
            workdir, env = stack.enter_context(stores.copy())
            results["counts"] = store_counts(env, workdir)
        if "merge" in cases:
            print("merge + cascade ...", flush=True)
            results["merge_cascade"] = spawn_child(
                "merge", env, workdir, ["--runs", str(args.runs), "--warmup", str(args.warmup)]
            )
            print(json.dumps(results["merge_cascade"], indent=1), flush=True)
            raw.write_text(json.dumps(results, indent=1))
    if "bulk" in cases:
        results["bulk"] = []
        for n in range(args.bulk_runs):
            print(f"bulk delete run {n + 1} ...", flush=True)
            with stores.copy() as (workdir, env):
                run = spawn_child("bulk", env, workdir, [])
            print(json.dumps(run, indent=1), flush=True)
            results["bulk"].append(run)
            raw.write_text(json.dumps(results, indent=1))
    if "large" in cases:
        results["large"] = []
        for n in range(args.large_runs):
            for mode in ("parts", "whole"):  # interleaved, each on a fresh copy
                print(f"largest session, {mode}, run {n + 1} ...", flush=True)
                with stores.copy() as (workdir, env):
                    run = spawn_child(f"large-{mode}", env, workdir, [])
                print(json.dumps(run, indent=1), flush=True)
                results["large"].append(run)
                raw.write_text(json.dumps(results, indent=1))
    if "hermes" in cases:
        results["ours_10k"] = []
        for n in range(args.hermes_runs if size > HERMES_DELETE_SESSIONS else 0):
            print(f"our delete job of {HERMES_DELETE_SESSIONS:,}, run {n + 1} ...", flush=True)
            with stores.copy() as (workdir, env):
                run = spawn_child("bulk", env, workdir, ["--limit", str(HERMES_DELETE_SESSIONS)])
            print(json.dumps(run, indent=1), flush=True)
            results["ours_10k"].append(run)
            raw.write_text(json.dumps(results, indent=1))
        if args.db == "sqlite" and HERMES_PYTHON.exists():
            results["hermes"] = []
            for n in range(args.hermes_runs):
                print(f"hermes delete_sessions run {n + 1} ...", flush=True)
                with stores.copy() as (workdir, _env):
                    run = run_hermes(workdir, HERMES_DELETE_SESSIONS)
                print(json.dumps(run, indent=1), flush=True)
                results["hermes"].append(run)
    raw.write_text(json.dumps(results, indent=1))
    print(f"raw results: {raw}")
    if not args.no_report:
        label = f"the {size:,}-session store"
        write_report(
            args.output, label, "SQLite" if args.db == "sqlite" else "PostgreSQL", results, command
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
