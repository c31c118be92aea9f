"""Appends over the HTTP API beside the in-process core, 1, 8 and 32 runtimes; docs/benchmarks.md.

    python bench/api.py                                 # both backends, 1/8/32 runtimes
    python bench/api.py --db sqlite --runtimes 1,8 --duration 5
    python bench/api.py --db postgres --write           # replace the PostgreSQL section

A runtime is a separate OS process appending one message at a time to a session of its own,
as fast as it is answered, for ``--duration`` seconds after ``--warmup`` seconds not counted:

- core: the process imports the project and calls ``sessions_admin.core.append_messages``
  (what a Python runtime does; one store transaction per append);
- http: the process knows only ``http.client`` (one kept-alive connection) and sends
  ``POST /api/v1/runtime/sessions/{id}/messages`` with a runtime token and a new
  ``Idempotency-Key`` for each append, as a runtime in another language should, to gunicorn
  serving the dashboard with the production config (``sessions_admin.gunicorn_conf``:
  ``WEB_CONCURRENCY`` workers x ``SESSIONS_ADMIN_THREADS`` threads) and no throttle
  (``SESSIONS_ADMIN_API_RATE=""``). Each HTTP append is authenticated, checked against the
  session's source, stored with its idempotency key and audited (one audit row), as always.

Both kinds run against the same fresh store in the same run (SQLite: a scratch var directory;
PostgreSQL: fresh databases on the bench cluster, bench/stores.py, durability at its defaults),
each level of core then http before the next level. Reported per level: appends per second
(appends started in the measured window, over its length), p50 and p99 latency of one append
as the runtime sees it, errors (any answer but 201, or an exception), and the HTTP/core ratio.
The target (issue 28): at 8 runtimes HTTP keeps at least half the core's appends per second,
and the HTTP p99 is under 50 ms on SQLite. ``--write`` replaces this backend's
"## HTTP API appends" section of docs/benchmarks.md. The runtimes, the server and the
database share the machine's cores, so the load average before the run is printed with it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import http.client
import json
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HEADING = "## HTTP API appends"
REPORT = ROOT / "docs" / "benchmarks.md"
TOKEN_NAME = "apibench"
SOURCE = "apibench"
TARGET_RATIO = 0.5  # HTTP's share of the core's appends per second, at TARGET_RUNTIMES
TARGET_RUNTIMES = 8
TARGET_P99_MS = 50.0  # on SQLite


# --- statistics ---------------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def summarize(records: list[list], measure_from: float, measure_to: float) -> dict:
    """``records``: [started (s since the common start), latency ms, error] of every append."""
    counted = [r for r in records if measure_from <= r[0] < measure_to]
    latencies = [r[1] for r in counted if not r[2]]
    errors = [r[2] for r in counted if r[2]]
    seconds = measure_to - measure_from
    return {
        "appends": len(latencies),
        "per_second": len(latencies) / seconds if seconds > 0 else 0.0,
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": max(latencies) if latencies else None,
        "errors": len(errors),
        "first_errors": sorted(set(errors))[:3],
    }


# --- the runtimes (child processes) -------------------------------------------------------------


def _wait_for_go(go_file: Path) -> float:
    """The common start (a time.time()) the parent writes once every runtime is ready."""
    while not go_file.exists():
        time.sleep(0.01)
    for _ in range(100):
        text = go_file.read_text().strip()
        if text:
            return float(text)
        time.sleep(0.01)
    raise RuntimeError(f"{go_file} stayed empty")


def _run_appends(append, args) -> None:
    """Append until the window ends; the records and the acknowledged count go to ``--out``."""
    Path(args.out).with_suffix(".ready").touch()
    start = _wait_for_go(Path(args.go))
    while time.time() < start:
        time.sleep(0.001)
    end = start + args.warmup + args.duration
    records = []
    acked = 0
    n = 0
    measured_from = start + args.warmup
    cpu_from = None
    while True:
        began = time.time()
        if began >= end:
            break
        if cpu_from is None and began >= measured_from:
            cpu_from = time.process_time()
        clock = time.perf_counter()
        error = ""
        try:
            append(n)
            acked += 1
        except Exception as exc:  # noqa: BLE001 - counted and reported, never hidden
            error = f"{type(exc).__name__}: {exc}"[:200]
        records.append([began - start, (time.perf_counter() - clock) * 1000, error])
        n += 1
    cpu = time.process_time() - cpu_from if cpu_from is not None else 0.0
    Path(args.out).write_text(json.dumps({"records": records, "acked": acked, "cpu": cpu}))


def core_runtime(args) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sessions_admin.settings")
    import django

    django.setup()
    from sessions_admin import core

    session_id = core.create_session(
        source=SOURCE, session_key=f"{SOURCE}:{args.label}", join_live=True
    ).session_id

    def append(n: int) -> None:
        core.append_messages(
            session_id=session_id,
            messages=[{"role": "user", "content": f"{args.label} append {n}"}],
        )

    _run_appends(append, args)


class HttpRuntime:
    """A runtime that knows only HTTP: one kept-alive connection, reopened if the server closes it."""

    def __init__(self, base: str, secret: str):
        match = re.fullmatch(r"http://([^:/]+):(\d+)", base.rstrip("/"))
        if not match:
            raise ValueError(f"not a loopback base URL: {base!r}")
        self.host, self.port = match.group(1), int(match.group(2))
        self.headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
        self.connection: http.client.HTTPConnection | None = None

    def call(self, method: str, path: str, body: dict, headers: dict | None = None):
        data = json.dumps(body).encode()
        for attempt in range(2):
            if self.connection is None:
                self.connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
            try:
                self.connection.request(
                    method, path, body=data, headers={**self.headers, **(headers or {})}
                )
                response = self.connection.getresponse()
                payload = response.read()
                if response.getheader("Connection", "").lower() == "close":
                    self.connection.close()
                    self.connection = None
                return response.status, payload
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # A kept-alive connection the server closed meanwhile. The retry carries the
                # same idempotency key, so it never stores the message twice.
                self.connection.close()
                self.connection = None
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")


def http_runtime(args) -> None:
    client = HttpRuntime(args.base, args.secret)
    status, payload = client.call(
        "POST",
        "/api/v1/runtime/sessions",
        {"source": SOURCE, "session_key": f"{SOURCE}:{args.label}"},
    )
    if status not in (200, 201):
        raise SystemExit(f"starting a session answered {status}: {payload[:300]!r}")
    path = f"/api/v1/runtime/sessions/{json.loads(payload)['session_id']}/messages"

    def append(n: int) -> None:
        status, payload = client.call(
            "POST",
            path,
            {"messages": [{"role": "user", "content": f"{args.label} append {n}"}]},
            {"Idempotency-Key": f"{args.label}-{n}"},
        )
        if status != 201:
            raise RuntimeError(f"{status} {payload[:150]!r}")

    _run_appends(append, args)


# --- the parent: store, server, levels ----------------------------------------------------------


def _manage(env: dict, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def _up(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request("GET", "/api/v1/openapi.json")
        ok = connection.getresponse().status == 200
        connection.close()
        return ok
    except OSError:
        return False


def _ticks(pid: int) -> int:
    """CPU clock ticks (user + system) of process ``pid`` so far; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    return int(fields[11]) + int(fields[12])


def server_cpu_seconds(master: int) -> float:
    """CPU seconds used so far by gunicorn's master and its workers (Linux /proc; 0 elsewhere)."""
    pids = [master]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == master:
                pids.append(int(stat.parent.name))
    return sum(_ticks(pid) for pid in pids) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Server:
    base: str  # http://127.0.0.1:<port>
    pid: int  # gunicorn's master


@contextlib.contextmanager
def serving(env: dict, log: Path, *, workers: int, threads: int) -> Iterator[Server]:
    """gunicorn with the production config on a loopback port."""
    from sessions_admin.devtools import free_port, stop_process

    port = free_port()
    server_env = {
        **env,
        "SESSIONS_ADMIN_API_RATE": "",
        "SESSIONS_ADMIN_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SESSIONS_ADMIN_LOG_LEVEL": "WARNING",
        "WEB_CONCURRENCY": str(workers),
        "SESSIONS_ADMIN_THREADS": str(threads),
    }
    with log.open("w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "sessions_admin.wsgi"]
            + ["--bind", f"127.0.0.1:{port}", "--config", "python:sessions_admin.gunicorn_conf"],
            cwd=ROOT,
            env=server_env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while not _up(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("gunicorn did not start:\n" + log.read_text()[-3000:])
            time.sleep(0.2)
        yield Server(f"http://127.0.0.1:{port}", process.pid)
    finally:
        stop_process(process, timeout=30)


def run_level(kind: str, runtimes: int, *, env, server, secret, args, workdir: Path) -> dict:
    """``runtimes`` processes of ``kind`` appending at once; their figures."""
    level = workdir / f"{kind}-{runtimes}"
    shutil.rmtree(level, ignore_errors=True)
    level.mkdir(parents=True)
    go = level / "go"
    tag = f"{kind}{runtimes}-{os.getpid()}-{time.time_ns() % 10**9}"
    processes = []
    for n in range(runtimes):
        command = [sys.executable, str(Path(__file__).resolve()), "--runtime", kind]
        command += ["--label", f"{tag}-{n}", "--out", str(level / f"{n}.json"), "--go", str(go)]
        command += ["--warmup", str(args.warmup), "--duration", str(args.duration)]
        child_env = dict(env)
        if kind == "http":
            command += ["--base", server.base, "--secret", secret]
            # Knows nothing of the project: only the standard library and this file.
            child_env = {"PATH": env.get("PATH", "/usr/bin:/bin")}
        processes.append(
            subprocess.Popen(command, cwd=ROOT, env=child_env, stderr=subprocess.PIPE, text=True)
        )
    try:
        deadline = time.monotonic() + 300
        while not all((level / f"{n}.ready").exists() for n in range(runtimes)):
            failed = [p for p in processes if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                raise RuntimeError(f"a {kind} runtime did not start: {failed[0].stderr.read()}")
            time.sleep(0.05)
        start = time.time() + 0.5
        go.write_text(str(start))
        # The server's CPU over the measured window (the runtimes measure their own).
        time.sleep(max(0.0, start + args.warmup - time.time()))
        server_cpu = server_cpu_seconds(server.pid)
        time.sleep(max(0.0, start + args.warmup + args.duration - time.time()))
        server_cpu = server_cpu_seconds(server.pid) - server_cpu
        for process in processes:
            _, stderr = process.communicate(timeout=args.warmup + args.duration + 120)
            if process.returncode != 0:
                raise RuntimeError(f"a {kind} runtime failed: {stderr[-2000:]}")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    records, acked, runtime_cpu = [], 0, 0.0
    for n in range(runtimes):
        result = json.loads((level / f"{n}.json").read_text())
        records += result["records"]
        acked += result["acked"]
        runtime_cpu += result["cpu"]
    figures = summarize(records, args.warmup, args.warmup + args.duration)
    # CPU per append, what the load of the machine does not change much: the runtimes' own
    # and, for HTTP, the server's (a PostgreSQL's backends are not counted, for either kind).
    cpu = runtime_cpu + (server_cpu if kind == "http" else 0.0)
    cpu_ms = cpu * 1000 / figures["appends"] if figures["appends"] else None
    return {"kind": kind, "runtimes": runtimes, "acked": acked, "cpu_ms": cpu_ms, **figures}


def _fresh_store(backend: str, scratch: Path) -> tuple[dict, str, callable]:
    """The environment of a fresh store on ``backend``, and how to drop it afterwards."""
    from bench import stores

    if backend == "sqlite":
        var_dir = scratch / "var"
        var_dir.mkdir(parents=True, exist_ok=True)
        return stores.sqlite_env(var_dir), "SQLite", lambda: None
    base = stores.postgres_server()
    names = ("bench_api", "bench_api_dashboard")
    for name in names:
        stores._recreate_database(base, name)
    env = stores.sqlite_env(scratch / "var")
    (scratch / "var").mkdir(parents=True, exist_ok=True)
    env["DATABASE_URL"] = f"{base}/bench_api_dashboard"
    env["SESSIONS_ADMIN_STORE_URL"] = f"{base}/bench_api"

    def drop() -> None:
        for name in names:
            stores.drop_postgres_database(name)

    return env, "PostgreSQL", drop


def measure(env: dict, backend: str, args, *, prepare: bool = True) -> dict:
    """Every level, core then HTTP, on the store ``env`` names; the result for the report."""
    load_before = os.getloadavg()
    # The product refuses to serve without a secret key; these are throwaway stores.
    env = {"SESSIONS_ADMIN_SECRET_KEY": "bench-only-" + secrets.token_urlsafe(48), **env}
    if prepare:
        _manage(env, "migrate", "--noinput", "-v", "0")
        _manage(env, "init_store")
    secret = (
        _manage(
            env,
            "api_token",
            "create",
            "--name",
            f"{TOKEN_NAME}-{os.getpid()}",
            "--scope",
            "runtime",
        )
        .strip()
        .splitlines()[-1]
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-api-") as scratch:
        workdir = Path(scratch)
        with serving(
            env, workdir / "server.log", workers=args.workers, threads=args.threads
        ) as server:
            for runtimes in args.runtimes:
                for kind in ("core", "http"):
                    row = run_level(
                        kind, runtimes, env=env, server=server, secret=secret, args=args,
                        workdir=workdir,
                    )  # fmt: skip
                    rows.append(row)
                    print(
                        f"{backend} {kind:4} x{runtimes:<3} {row['per_second']:8.1f} appends/s  "
                        f"p50 {_ms(row['p50_ms'])} ms  p99 {_ms(row['p99_ms'])} ms  "
                        f"CPU {_ms(row['cpu_ms'])} ms/append  "
                        f"errors {row['errors']} {row['first_errors'] or ''}",
                        flush=True,
                    )
            server_log = (workdir / "server.log").read_text()
    return {
        "when": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "backend": backend,
        "rows": rows,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "workers": args.workers,
        "threads": args.threads,
        "duration": args.duration,
        "warmup": args.warmup,
        "server_errors": [line for line in server_log.splitlines() if "Traceback" in line][:3],
        "command": (
            f"SESSIONS_ADMIN_DB_CONN_MAX_AGE={env['SESSIONS_ADMIN_DB_CONN_MAX_AGE']} "
            if backend == "PostgreSQL"
            and env.get("SESSIONS_ADMIN_DB_CONN_MAX_AGE", "0").strip() not in ("", "0")
            else ""
        )
        + "python bench/api.py --db "
        + ("sqlite" if backend == "SQLite" else "postgres")
        + f" --runtimes {','.join(map(str, args.runtimes))} --duration {args.duration:g}"
        + f" --warmup {args.warmup:g} --workers {args.workers} --threads {args.threads}",
    }


# --- the report ---------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def verdict(result: dict) -> list[str]:
    """What the target asks, said per figure."""
    by = {(r["kind"], r["runtimes"]): r for r in result["rows"]}
    core, http = by.get(("core", TARGET_RUNTIMES)), by.get(("http", TARGET_RUNTIMES))
    said = []
    if core and http and core["per_second"]:
        ratio = http["per_second"] / core["per_second"]
        said.append(
            f"at {TARGET_RUNTIMES} runtimes HTTP keeps {ratio:.0%} of the core's appends per "
            f"second (target at least {TARGET_RATIO:.0%}): "
            + ("met" if ratio >= TARGET_RATIO else "**missed**")
        )
    if http and result["backend"] == "SQLite" and http["p99_ms"] is not None:
        said.append(
            f"HTTP p99 at {TARGET_RUNTIMES} runtimes {http['p99_ms']:.1f} ms (target under "
            f"{TARGET_P99_MS:.0f} ms on SQLite): "
            + ("met" if http["p99_ms"] < TARGET_P99_MS else "**missed**")
        )
    return said


def render_section(result: dict) -> str:
    load = result["load_before"]
    lines = [
        f"{HEADING} ({result['backend']}, issue 28)",
        "",
        f"Measured {result['when']} on {os.cpu_count()} cores ({_cpu_model()}), Python "
        f"{platform.python_version()}, load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
        f"(1 / 5 / 15 min) before the run and {result['load_after'][0]:.2f} after, with "
        f"`{result['command']}`: a fresh store; gunicorn with `sessions_admin.gunicorn_conf` "
        f"({result['workers']} gthread workers x {result['threads']} threads), no throttle. Each "
        "runtime is an OS process appending one message at a time to its own session, as fast as "
        f"it is answered, for {result['duration']:g} s after {result['warmup']:g} s of warm-up "
        "(not counted). core: `sessions_admin.core.append_messages` in the process; http: "
        "`http.client` (one kept-alive connection) posting to `/api/v1/runtime/sessions/{id}/"
        "messages` with a runtime token and a new `Idempotency-Key` each time (authenticated, "
        "source-checked, stored with its key, audited). CPU ms: CPU time per append of the "
        "runtimes and, for HTTP, gunicorn's (PostgreSQL's own not counted), which the "
        "machine's load changes less than the rates. Runtimes, server and database share "
        "the cores.",
        "",
        "| runtimes | core appends/s | core p50 / p99 ms | core CPU ms | HTTP appends/s "
        "| HTTP p50 / p99 ms | HTTP CPU ms | HTTP / core | errors |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    by = {(r["kind"], r["runtimes"]): r for r in result["rows"]}
    for runtimes in sorted({r["runtimes"] for r in result["rows"]}):
        core, http = by.get(("core", runtimes)), by.get(("http", runtimes))
        if not core or not http:
            continue
        ratio = f"{http['per_second'] / core['per_second']:.0%}" if core["per_second"] else "-"
        lines.append(
            f"| {runtimes} | {core['per_second']:,.0f} | {_ms(core['p50_ms'])} / "
            f"{_ms(core['p99_ms'])} | {_ms(core.get('cpu_ms'))} | {http['per_second']:,.0f} | "
            f"{_ms(http['p50_ms'])} / {_ms(http['p99_ms'])} | {_ms(http.get('cpu_ms'))} | "
            f"{ratio} | {core['errors'] + http['errors']} |"
        )
    said = verdict(result)
    if said:
        lines += ["", "Target: " + "; ".join(said) + "."]
    return "\n".join(lines) + "\n"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def replace_section(text: str, heading_prefix: str, section: str) -> str:
    """Replace the ``## `` section whose heading starts with ``heading_prefix``, else append."""
    pattern = re.compile(rf"^{re.escape(heading_prefix)}.*?(?=^## |\Z)", re.S | re.M)
    match = pattern.search(text)
    if match:
        return text[: match.start()] + section.rstrip("\n") + "\n\n" + text[match.end() :]
    return text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"


def write_report(path: Path, result: dict) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    text = replace_section(text, f"{HEADING} ({result['backend']},", render_section(result))
    path.write_text(text.rstrip("\n") + "\n")
    print(f"wrote {path}")


# --- the command --------------------------------------------------------------------------------


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of runtime counts: {text!r}") from None
    if not levels or any(n < 1 for n in levels):
        raise argparse.ArgumentTypeError(f"runtime counts must be 1 or more: {text!r}")
    return levels


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--runtimes", type=_levels, default=[1, 8, 32])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds measured")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds not counted first")
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY") or 2))
    parser.add_argument(
        "--threads", type=int, default=int(os.environ.get("SESSIONS_ADMIN_THREADS") or 16)
    )
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--output", type=Path, default=REPORT)
    # A runtime process (started by the bench itself).
    parser.add_argument("--runtime", choices=("core", "http"), help=argparse.SUPPRESS)
    for name in ("--label", "--out", "--go", "--base", "--secret"):
        parser.add_argument(name, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.warmup < 0 or args.workers < 1 or args.threads < 1:
        parser.error("--duration, --workers and --threads must be positive, --warmup not negative")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.runtime == "core":
        core_runtime(args)
        return 0
    if args.runtime == "http":
        http_runtime(args)
        return 0
    from bench import stores  # noqa: F401 - sets the bench secret key for every child

    failed = False
    for backend in ("sqlite", "postgres") if args.db == "both" else (args.db,):
        with tempfile.TemporaryDirectory(prefix="bench-api-store-") as scratch:
            env, label, drop = _fresh_store(backend, Path(scratch))
            try:
                result = measure(env, label, args)
            finally:
                drop()
        for line in verdict(result):
            print(f"{label}: {line}")
        failed = failed or any(r["errors"] for r in result["rows"])
        if args.write:
            write_report(args.output, result)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
