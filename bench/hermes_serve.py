"""Side by side with Hermes Agent's own dashboard (`hermes serve`) over HTTP; docs/benchmarks.md.

    python bench/hermes_serve.py --size 10k                  # reads and the 1,000-session delete
    python bench/hermes_serve.py --size 100k --runs 20 --write
    python bench/hermes_serve.py --var-dir /tmp/small --runs 1 --delete 10

Both servers run on loopback, one worker each, on private copies of the same seeded
SQLite store (bench/stores.py; ``--var-dir`` for any store directory):

- Hermes: ``hermes serve --port P --skip-build --isolated`` from the pinned hermes-agent
  virtualenv (var/hermes-agent-0.19.0), ``HERMES_HOME`` a temporary directory whose
  ``state.db`` is the copy (hermes_state.DEFAULT_DB_PATH is ``get_hermes_home() /
  "state.db"``), ``HERMES_DASHBOARD_SESSION_TOKEN`` set and sent as the
  ``X-Hermes-Session-Token`` header, which its auth middleware asks of every ``/api/`` call
  (hermes_cli/web_server.py). One uvicorn process; its JSON API is what its web UI calls.
- The console: gunicorn with one worker (``sessions_admin.gunicorn_conf``), an admin
  signed in through the login form; pages are HTML, full page loads.

Each read is one request per side (the JSON call Hermes's web UI makes for it, the page the
console shows for it), interleaved (console, Hermes, then Hermes, console on the next run),
``--runs`` times, warm and cold:

- warm: after one request of each, nothing cleared;
- cold: the console's store-wide figure cache (sessions_admin/store/cached.py; a file cache
  under its var directory) emptied before each console request, as after a start or a
  quiet spell. Hermes caches nothing between requests (each opens a new ``SessionDB``, so a
  new SQLite connection with an empty page cache), so its cold run is the same requests
  again. Neither server is restarted; the OS page cache is warm for both.

Then the same 1,000 oldest sessions are deleted through each UI end to end: Hermes's
``POST /api/sessions/bulk-delete`` (at most 500 ids a call, so two calls; permanent, live
sessions included without asking), and the console's bulk delete (the session list's
selection posted to the dry run, its page, the confirm POST with the typed count, then the
job until it is done: its row in the dashboard database polled every 5 ms). The console
keeps the trash and leaves live sessions out.

Times are wall-clock milliseconds from sending the request to the last byte read, one
kept-alive connection per server, no compression asked. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import platform
import re
import secrets
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import stores  # noqa: E402
from bench.load import (  # noqa: E402
    _manage,
    _wait_for,
    cpu_model,
    replace_section,
    sign_in_cookies,
)
from sessions_admin.devtools import free_port, stop_process  # noqa: E402

HEADING = "## Side by side with hermes serve (issue 16)"
REPORT = ROOT / "docs" / "benchmarks.md"


def default_hermes() -> Path:
    """hermes-agent's ``hermes``: beside SESSIONS_ADMIN_HERMES_PYTHON (what the test command
    sets, tests/hermes/conftest.py) or in the pinned virtualenv under var/."""
    python = os.environ.get("SESSIONS_ADMIN_HERMES_PYTHON", "").strip()
    if python and (Path(python).parent / "hermes").exists():
        return Path(python).parent / "hermes"
    return ROOT / "var" / "hermes-agent-0.19.0" / "bin" / "hermes"


HERMES_TOKEN_HEADER = "X-Hermes-Session-Token"
HERMES_BULK_MAX = 500  # web_server.bulk_delete_sessions_endpoint refuses more ids a call
OPERATOR = "servebench"
PASSWORD = "serve-bench-operator-4b7e"
WORD_COMMON, WORD_RARE = "the", "english"  # as bench/run.py searches
JOB_POLL_SECONDS = 0.005
HOST = "127.0.0.1"


# --- what is compared -----------------------------------------------------------------


@dataclass
class Read:
    key: str
    what: str
    console: str  # the console's page
    # The JSON call Hermes's web UI makes for the same thing; several, joined by " + ", are
    # made one after the other and timed as one read (what its UI loads for one view).
    hermes: str


@dataclass
class Timing:
    samples: list[float] = field(default_factory=list)
    bytes: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None

    @property
    def p95(self) -> float | None:
        if not self.samples:
            return None
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _longest_compression_chain(conn: sqlite3.Connection) -> list[str]:
    """The longest compression chain (root first), by Hermes's edge rule: the parent ended
    for compression and the child started at or after that end (core/lineage.py)."""
    rows = conn.execute(
        "SELECT c.id, c.parent_session_id, c.started_at, p.ended_at FROM sessions c "
        "JOIN sessions p ON p.id = c.parent_session_id WHERE p.end_reason = 'compression'"
    ).fetchall()
    nxt: dict[str, str] = {}
    for child, parent, started, parent_ended in rows:
        if parent_ended is not None and started is not None and started >= parent_ended:
            # Several continuations: the first started one (the one a chain walk follows).
            nxt.setdefault(parent, child)
    children = set(nxt.values())
    best: list[str] = []
    for root in nxt.keys() - children:
        chain = [root]
        while chain[-1] in nxt and len(chain) < 10_000:
            chain.append(nxt[chain[-1]])
        if len(chain) > len(best):
            best = chain
    return best


def build_reads(state: Path, common: str, rare: str) -> tuple[list[Read], dict]:
    conn = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
    try:
        total = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        messages = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        longest, longest_count = conn.execute(
            "SELECT id, message_count FROM sessions ORDER BY message_count DESC LIMIT 1"
        ).fetchone()
        chain = _longest_compression_chain(conn)
    finally:
        conn.close()
    q = urllib.parse.quote
    reads = [
        Read(
            "list",
            "session list, first page",
            "/sessions/",
            "/api/sessions?limit=20&offset=0&order=created",
        ),
        Read(
            "search_common",
            f"search '{common}' (common word)",
            f"/sessions/?q={q(common)}",
            f"/api/sessions/search?q={q(common)}",
        ),
        Read(
            "search_rare",
            f"search '{rare}' (rare word)",
            f"/sessions/?q={q(rare)}",
            f"/api/sessions/search?q={q(rare)}",
        ),
        Read("overview", "overview / stats", "/", "/api/sessions/stats"),
        Read(
            "messages",
            f"a {longest_count:,}-message session",
            f"/sessions/{q(longest, safe='')}/",
            f"/api/sessions/{q(longest, safe='')}/messages",
        ),
    ]
    if len(chain) > 1:
        middle = chain[len(chain) // 2]
        root, tip = q(chain[0], safe=""), q(chain[-1], safe="")
        reads.append(
            Read(
                "lineage",
                f"{len(chain)}-segment compression chain",
                f"/sessions/{q(middle, safe='')}/",
                f"/api/sessions/{root}/latest-descendant",
            )
        )
        # Like for like (issue 30): what Hermes's web UI loads to show the conversation. Its
        # chat view, opened on the chain's first session, asks for the session and its latest
        # descendant, then reopens on the descendant; the messages it renders are
        # /api/sessions/{id}/messages (the sessions page's expanded row; Hermes resolves the
        # id to the live segment). The console's page shows the whole lineage and the
        # transcript from the segment opened, in one response.
        reads.append(
            Read(
                "lineage_full",
                f"{len(chain)}-segment compression chain, like for like",
                f"/sessions/{q(middle, safe='')}/",
                f"/api/sessions/{root} + /api/sessions/{root}/latest-descendant"
                f" + /api/sessions/{tip} + /api/sessions/{tip}/latest-descendant"
                f" + /api/sessions/{tip}/messages",
            )
        )
    return reads, {"sessions": total, "messages": messages, "chain": len(chain)}


# --- the two servers --------------------------------------------------------------------


class Server:
    """One kept-alive HTTP connection to a server, with the headers every request sends."""

    def __init__(self, port: int, headers: dict[str, str]):
        self.port = port
        self.headers = headers
        self.connection: http.client.HTTPConnection | None = None

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        for attempt in range(2):
            if self.connection is None:
                self.connection = http.client.HTTPConnection(HOST, self.port, timeout=600)
            try:
                self.connection.request(
                    method, path, body=body, headers={**self.headers, **(headers or {})}
                )
                response = self.connection.getresponse()
                data = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.connection.close()
                self.connection = None
                if attempt:
                    raise
                continue
            if response.getheader("Connection", "").lower() == "close":
                self.connection.close()
                self.connection = None
            return response.status, dict(response.getheaders()), data
        raise AssertionError("unreachable")

    def timed_get(self, paths: str, timing: Timing) -> None:
        """One read: ``paths`` (one path, or several joined by " + ") requested in turn."""
        start = time.perf_counter()
        size = 0
        for path in paths.split(" + "):
            try:
                status, _, data = self.request("GET", path)
            except OSError as error:
                timing.errors.append(f"{path}: {error}")
                return
            if status != 200:
                timing.errors.append(f"{path}: HTTP {status}")
                return
            size += len(data)
        timing.samples.append((time.perf_counter() - start) * 1000)
        timing.bytes = size

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


def _share_store(args, work: Path) -> tuple[Path, Path, str]:
    """``--in-place``: both servers on the seeded store itself, Hermes through a symlink.

    For a store too big to copy twice (1m: 21 GB); only reads are measured then, so the two
    servers never write to it (SQLite resolves the link, so both use one WAL).
    """
    size = stores.parse_size(args.size)
    console_var = stores.STORES_DIR / str(size)
    if not (console_var / "seeded").exists():
        raise SystemExit(f"no seeded {stores.size_label(size)} SQLite store: seed it first")
    hermes_home = work / "hermes"
    hermes_home.mkdir(parents=True)
    (hermes_home / "state.db").symlink_to(console_var / "state.db")
    return console_var, hermes_home, stores.size_label(size)


def _copy_store(args, work: Path) -> tuple[Path, Path, str]:
    """Two private copies of the store: the console's var dir and Hermes's home."""
    if args.in_place:
        return _share_store(args, work)
    console_var = work / "console"
    hermes_home = work / "hermes"
    hermes_home.mkdir(parents=True)
    if args.var_dir is not None:
        source = args.var_dir.resolve()
        console_var.mkdir(parents=True)
        for name in stores.SQLITE_FILES:
            for suffix in ("", "-wal"):
                if (source / f"{name}{suffix}").exists():
                    shutil.copyfile(source / f"{name}{suffix}", console_var / f"{name}{suffix}")
        label = f"store in {source}"
    else:
        size = stores.parse_size(args.size)
        if not (stores.STORES_DIR / str(size) / "seeded").exists():
            # Seeding a million sessions takes a long while: that is bench/stores.py's job.
            raise SystemExit(
                f"no seeded {stores.size_label(size)} SQLite store in {stores.STORES_DIR}: "
                f"seed it first (python bench/stores.py --size {stores.size_label(size)})"
            )
        stores.clone_sqlite_store(size, console_var)
        label = stores.size_label(size)
    for suffix in ("", "-wal"):
        if (console_var / f"state.db{suffix}").exists():
            shutil.copyfile(console_var / f"state.db{suffix}", hermes_home / f"state.db{suffix}")
    return console_var, hermes_home, label


def start_console(var_dir: Path, log) -> tuple[subprocess.Popen, Server]:
    env = {
        **stores.sqlite_env(var_dir),
        "SESSIONS_ADMIN_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SESSIONS_ADMIN_LOG_LEVEL": "WARNING",
    }
    _manage(env, "migrate", "--noinput", "-v", "0")
    _manage(env, "init_store")
    _manage(env, "create_operator", OPERATOR, "--role", "admin", "--if-missing", stdin=PASSWORD)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "sessions_admin.wsgi"]
        + ["--bind", f"{HOST}:{port}", "--workers", "1"]
        + ["--config", "python:sessions_admin.gunicorn_conf", "--timeout", "600"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    _wait_for(HOST, port)
    cookies = sign_in(port)
    cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
    server = Server(port, {"Cookie": cookie, "Host": f"{HOST}:{port}"})
    server.csrf = cookies["csrftoken"]  # type: ignore[attr-defined]
    return process, server


def sign_in(port: int) -> dict[str, str]:
    """The bench admin signed in through the login form: the cookies to send."""
    return sign_in_cookies(HOST, port, username=OPERATOR, password=PASSWORD)


def start_hermes(hermes: Path, home: Path, log) -> tuple[subprocess.Popen, Server]:
    if not hermes.exists():
        raise RuntimeError(
            f"{hermes} is missing: the pinned hermes-agent 0.19.0 virtualenv goes in var/ "
            "(ln -s /path/to/hermes-agent-0.19.0 var/hermes-agent-0.19.0)"
        )
    token = secrets.token_urlsafe(32)
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SESSIONS_ADMIN_")},
        "HERMES_HOME": str(home),
        "HOME": str(home),  # anything Hermes writes under ~ stays in the throwaway home
        "HERMES_DASHBOARD_SESSION_TOKEN": token,
    }
    process = subprocess.Popen(
        [str(hermes), "serve", "--port", str(port), "--host", HOST, "--skip-build", "--isolated"],
        cwd=home,
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,  # its own process group: stopped with whatever it starts
    )
    server = Server(port, {HERMES_TOKEN_HEADER: token})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"hermes serve exited with {process.returncode}")
        try:
            status, _, _ = server.request("GET", "/api/sessions/stats")
            if status == 200:
                return process, server
            raise RuntimeError(f"hermes serve answered {status} with the session token")
        except OSError:
            server.close()
            server.connection = None
            time.sleep(0.3)
    raise RuntimeError("hermes serve did not answer within 120 s")


def clear_console_cache(var_dir: Path) -> None:
    """What ``cache.clear()`` does to the console's file cache: every entry gone."""
    cache = var_dir / "cache"
    if cache.is_dir():
        for entry in cache.iterdir():
            if entry.is_file():
                entry.unlink(missing_ok=True)


# --- measuring ----------------------------------------------------------------------------


def measure_reads(reads, console: Server, hermes: Server, var_dir: Path, runs: int) -> dict:
    results: dict = {}
    for mode in ("warm", "cold"):
        for read in reads:
            ours, theirs = Timing(), Timing()
            if mode == "warm":
                console.timed_get(read.console, Timing())
                hermes.timed_get(read.hermes, Timing())
            for run in range(runs):
                sides = [("console", console, ours), ("hermes", hermes, theirs)]
                if run % 2:
                    sides.reverse()
                for side, server, timing in sides:
                    if side == "console" and mode == "cold":
                        clear_console_cache(var_dir)
                    path = read.console if side == "console" else read.hermes
                    server.timed_get(path, timing)
            results[(mode, read.key)] = (ours, theirs)
            print(
                f"{mode:4} {read.key:14} console {_ms(ours.median)} (p95 {_ms(ours.p95)}) "
                f"hermes {_ms(theirs.median)} (p95 {_ms(theirs.p95)})"
                + (
                    f" errors {ours.errors[:1] + theirs.errors[:1]}"
                    if ours.errors or theirs.errors
                    else ""
                ),
                flush=True,
            )
    return results


def oldest_sessions(state: Path, count: int) -> tuple[list[str], int]:
    conn = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT id, ended_at IS NULL FROM sessions ORDER BY started_at, id LIMIT ?", [count]
        ).fetchall()
    finally:
        conn.close()
    return [r[0] for r in rows], sum(r[1] for r in rows)


def delete_through_hermes(hermes: Server, ids: list[str]) -> dict:
    start = time.perf_counter()
    deleted = 0
    calls = 0
    for at in range(0, len(ids), HERMES_BULK_MAX):
        body = json.dumps({"ids": ids[at : at + HERMES_BULK_MAX]}).encode()
        status, _, data = hermes.request(
            "POST", "/api/sessions/bulk-delete", body, {"Content-Type": "application/json"}
        )
        calls += 1
        if status != 200:
            raise RuntimeError(f"Hermes bulk-delete answered {status}: {data[:200]!r}")
        deleted += json.loads(data)["deleted"]
    return {"seconds": time.perf_counter() - start, "deleted": deleted, "requests": calls}


def _hidden(page: str, name: str) -> str | None:
    match = re.search(rf'<input type="hidden" name="{name}" value="([^"]*)"', page)
    return match.group(1) if match else None


def delete_through_console(console: Server, var_dir: Path, ids: list[str]) -> dict:
    form = {"Content-Type": "application/x-www-form-urlencoded", "X-CSRFToken": console.csrf}
    start = time.perf_counter()
    # 1. The session list's selection posted to the dry run (it redirects to the dry run page).
    body = urllib.parse.urlencode([("ids", i) for i in ids]).encode()
    status, headers, _ = console.request("POST", "/bulk-delete/preview/", body, form)
    location = headers.get("Location", "")
    if status != 302 or "selection=" not in location:
        raise RuntimeError(f"the dry run POST answered {status} ({location!r})")
    preview_done = time.perf_counter()
    status, _, page_bytes = console.request("GET", location)
    page = page_bytes.decode()
    dry_run_done = time.perf_counter()
    selection, digest = _hidden(page, "selection"), _hidden(page, "digest")
    count = re.search(r"Type <strong>(\d+)</strong> to confirm", page)
    if status != 200 or not selection or not digest:
        raise RuntimeError(f"the dry run page ({status}) has no confirm form")
    # 2. The confirm POST (reason, the typed count of a large delete), redirected to the job.
    fields = {"selection": selection, "include_live": "", "digest": digest}
    fields["reason"] = "bench: the 1,000 oldest sessions, side by side with hermes serve"
    if count:
        fields["typed_count"] = count.group(1)
    status, headers, data = console.request(
        "POST", "/bulk-delete/start/", urllib.parse.urlencode(fields).encode(), form
    )
    job = re.search(r"/jobs/(\d+)/", headers.get("Location", ""))
    if status != 302 or not job:
        problems = re.findall(r'<ul class="problems">(.*?)</ul>', data.decode(), re.S)
        raise RuntimeError(f"the confirm POST answered {status}: {problems}")
    confirmed = time.perf_counter()
    # 3. The job until it is done: its row, read straight from the dashboard database.
    dashboard = sqlite3.connect(f"file:{var_dir / 'dashboard.db'}?mode=ro", uri=True, timeout=30)
    try:
        while True:
            row = dashboard.execute(
                "SELECT state, done, skipped, deleted_messages, started_at, finished_at "
                "FROM ledger_deletejob WHERE id = ?",
                [int(job.group(1))],
            ).fetchone()
            if row and row[0] not in ("pending", "running"):
                break
            time.sleep(JOB_POLL_SECONDS)
        finished = time.perf_counter()
        trashed, trash_entries = dashboard.execute(
            "SELECT COALESCE(SUM(session_count), 0), COUNT(*) FROM ledger_trashentry "
            "WHERE job_id = ? AND state = 'complete'",
            [int(job.group(1))],
        ).fetchone()
    finally:
        dashboard.close()
    state, done, skipped, messages, started_at, finished_at = row
    job_seconds = None
    if started_at and finished_at:
        job_seconds = (
            dt.datetime.fromisoformat(finished_at) - dt.datetime.fromisoformat(started_at)
        ).total_seconds()
    return {
        "seconds": finished - start,
        "dry_run": dry_run_done - start,
        "preview_post": preview_done - start,
        "confirm": confirmed - dry_run_done,
        "job_wait": finished - confirmed,
        "job_seconds": job_seconds,
        "state": state,
        "deleted": done,
        "skipped": skipped,
        "messages": messages,
        "job": int(job.group(1)),
        "trashed": trashed,
        "trash_entries": trash_entries,
    }


def store_counts(state: Path, ids: list[str]) -> dict:
    """What is left of ``ids`` in a store, and how many trash entries the console wrote."""
    conn = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
    try:
        left = 0
        for at in range(0, len(ids), 500):
            chunk = ids[at : at + 500]
            marks = ",".join("?" * len(chunk))
            left += conn.execute(
                f"SELECT COUNT(*) FROM sessions WHERE id IN ({marks})", chunk
            ).fetchone()[0]
    finally:
        conn.close()
    return {"left": left}


def measure(args) -> dict:
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="hermes-serve-bench-"))
    processes: list[subprocess.Popen] = []
    servers: list[Server] = []
    console_log = (work / "console.log").open("w+")
    hermes_log = (work / "hermes.log").open("w+")
    try:
        console_var, hermes_home, label = _copy_store(args, work)
        reads, shape = build_reads(console_var / "state.db", args.word_common, args.word_rare)
        if args.only:
            reads = [r for r in reads if r.key in args.only]
        console_process, console = start_console(console_var, console_log)
        processes.append(console_process)
        servers.append(console)
        hermes_process, hermes = start_hermes(args.hermes, hermes_home, hermes_log)
        processes.append(hermes_process)
        servers.append(hermes)
        results = measure_reads(reads, console, hermes, console_var, args.runs) if reads else {}
        deletion = None
        if args.delete:
            ids, live = oldest_sessions(console_var / "state.db", args.delete)
            theirs = delete_through_hermes(hermes, ids)
            ours = delete_through_console(console, console_var, ids)
            ours.update(store_counts(console_var / "state.db", ids))
            theirs.update(store_counts(hermes_home / "state.db", ids))
            deletion = {"count": len(ids), "live": live, "console": ours, "hermes": theirs}
            print(f"delete {len(ids)}: console {ours} hermes {theirs}", flush=True)
        hermes_version = subprocess.run(
            [
                str(args.hermes.parent / "python"),
                "-c",
                "import importlib.metadata as m; print(m.version('hermes-agent'))",
            ],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except BaseException:
        for log, name in ((console_log, "console"), (hermes_log, "hermes")):
            log.flush()
            log.seek(0)
            tail = log.read()[-3000:]
            if tail.strip():
                print(f"--- {name} log (tail) ---\n{tail}", file=sys.stderr)
        raise
    finally:
        for server in servers:
            server.close()
        for process in processes:
            stop_process(process, timeout=30)
        if len(processes) > 1:
            try:
                os.killpg(processes[1].pid, signal.SIGKILL)  # what hermes serve left running
            except ProcessLookupError:
                pass
        console_log.close()
        hermes_log.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return {
        "when": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "label": label,
        "shape": shape,
        "reads": reads,
        "results": results,
        "deletion": deletion,
        "runs": args.runs,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "hermes_version": hermes_version or "?",
        "command": "python bench/hermes_serve.py "
        + (f"--var-dir {args.var_dir}" if args.var_dir else f"--size {label}")
        + f" --runs {args.runs}"
        + (" --in-place" if args.in_place else "")
        + (f" --delete {args.delete}" if args.delete != 1000 and not args.in_place else ""),
    }


# --- the report ---------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _ratio(ours: float | None, theirs: float | None) -> str:
    if not ours or not theirs:
        return "—"
    ratio = ours / theirs
    return f"{ratio:.3f}x" if ratio < 0.1 else f"{ratio:.2f}x"


def _size(n: int) -> str:
    if n >= 1_048_576:
        return f"{n / 1_048_576:.1f} MB"
    return f"{n / 1024:.0f} kB" if n >= 10_240 else f"{n:,} B"


def render_section(result: dict) -> str:
    shape = result["shape"]
    load_before = ", ".join(f"{x:.2f}" for x in result["load_before"])
    load_after = ", ".join(f"{x:.2f}" for x in result["load_after"])
    lines = [
        f"{HEADING}: {shape['sessions']:,} sessions / {shape['messages']:,} messages (SQLite)",
        "",
        f"Measured {result['when']} with `{result['command']}` on {os.cpu_count()} cores "
        f"({cpu_model()}), shared with other agents' work: load average {load_before} before, "
        f"{load_after} after. Python {platform.python_version()}, hermes-agent "
        f"{result['hermes_version']}. Both servers on loopback, one worker each, on "
        + (
            "the same store file (too big to copy twice; reads only); "
            if "--in-place" in result["command"]
            else "copies of the same store; "
        )
        + "medians and p95 of "
        f"{result['runs']} interleaved requests per side, milliseconds to the last byte. "
        "**ratio** = console / Hermes (below 1: the console is faster). Cold: the console's "
        "figure cache emptied before each of its requests; Hermes has no cache to empty "
        "(a new SessionDB connection per request), so its cold column is the same requests "
        "again. Neither is restarted; the OS page cache is warm for both.",
        "",
        "| read | console page | Hermes call | console warm median / p95 | Hermes warm median / p95 "
        "| ratio warm | console cold median / p95 | Hermes cold median / p95 | ratio cold "
        "| bytes console / Hermes |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for read in result["reads"]:
        warm = result["results"].get(("warm", read.key))
        cold = result["results"].get(("cold", read.key))
        if warm is None:
            continue
        (wo, wt), (co, ct) = warm, cold
        errors = wo.errors + wt.errors + co.errors + ct.errors
        lines.append(
            f"| {read.what} | `{read.console}` | `{read.hermes}` "
            f"| {_ms(wo.median)} / {_ms(wo.p95)} | {_ms(wt.median)} / {_ms(wt.p95)} "
            f"| {_ratio(wo.median, wt.median)} "
            f"| {_ms(co.median)} / {_ms(co.p95)} | {_ms(ct.median)} / {_ms(ct.p95)} "
            f"| {_ratio(co.median, ct.median)} | {_size(wo.bytes)} / {_size(wt.bytes)}"
            + (f" ({len(errors)} errors: {errors[0]})" if errors else "")
            + " |"
        )
    deletion = result["deletion"]
    if deletion:
        ours, theirs = deletion["console"], deletion["hermes"]
        lines += [
            "",
            f"Deleting the {deletion['count']:,} oldest sessions ({deletion['live']:,} of them "
            "live) through each UI, end to end, once:",
            "",
            "| | time | deleted | left in the store | what it takes |",
            "| --- | ---: | ---: | ---: | --- |",
            f"| Hermes | {theirs['seconds'] * 1000:.0f} ms | {theirs['deleted']:,} "
            f"| {theirs['left']:,} | {theirs['requests']} × `POST /api/sessions/bulk-delete` "
            "(500 ids at most a call); permanent, live sessions included, children orphaned |",
            f"| console | {ours['seconds'] * 1000:.0f} ms | {ours['deleted']:,} "
            f"({ours['skipped']:,} skipped) | {ours['left']:,} "
            f"| dry run (POST + page) {ours['dry_run'] * 1000:.0f} ms, confirm POST "
            f"{ours['confirm'] * 1000:.0f} ms, job {ours['job_wait'] * 1000:.0f} ms until done "
            + (
                f"(its own run {ours['job_seconds'] * 1000:.0f} ms) "
                if ours["job_seconds"] is not None
                else ""
            )
            + f"for {ours['messages']:,} messages; {ours['trashed']:,} sessions in the trash "
            f"({ours['trash_entries']} entries), live sessions left out |",
            "",
            f"Ratio console / Hermes: {_ratio(ours['seconds'], theirs['seconds'])}.",
        ]
    return "\n".join(lines) + "\n"


def write_report(path: Path, result: dict) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    heading = render_section(result).split("\n", 1)[0]
    # One section per store size: the heading up to the session count names it.
    text = replace_section(text, heading.split(" sessions /")[0], render_section(result))
    path.write_text(text.rstrip("\n") + "\n")
    print(f"wrote {path}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--size", default="10k", help="seeded SQLite store (bench/stores.py)")
    parser.add_argument("--var-dir", type=Path, help="compare on a copy of this store directory")
    parser.add_argument("--runs", type=int, default=20, help="requests per side and read")
    parser.add_argument(
        "--delete", type=int, default=1000, help="oldest sessions to delete (0: no delete)"
    )
    parser.add_argument(
        "--only",
        type=lambda text: [k for k in text.split(",") if k],
        default=None,
        help="reads to measure (list,search_common,search_rare,overview,messages,lineage,lineage_full)",
    )
    parser.add_argument("--word-common", default=WORD_COMMON)
    parser.add_argument("--word-rare", default=WORD_RARE)
    parser.add_argument(
        "--hermes", type=Path, default=None, help="hermes-agent's hermes (default: var/...)"
    )
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--report", type=Path, default=REPORT)
    parser.add_argument("--keep", action="store_true", help="keep the store copies and logs")
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="both servers on the seeded store itself, reads only (a store too big to copy)",
    )
    args = parser.parse_args(argv)
    args.hermes = args.hermes or default_hermes()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.delete < 0:
        parser.error("--delete must be 0 or more")
    if args.in_place:
        if args.var_dir is not None:
            parser.error("--in-place works on a seeded --size store, not --var-dir")
        args.delete = 0  # nothing may write to the shared store
    if args.var_dir is None:
        try:
            stores.parse_size(args.size)
        except ValueError as error:
            parser.error(str(error))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = measure(args)
    section = render_section(result)
    print(section)
    if args.write:
        write_report(args.report, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
