"""Load test: the console under gunicorn while simulated runtimes write; writes docs/benchmarks.md.

    python bench/load.py --size 100k --duration 30             # the seeded 100k SQLite store
    python bench/load.py --var-dir /tmp/small --duration 10    # any store directory
    python bench/load.py --size 10k --db postgres
    python bench/load.py --size 100k --db postgres --hosts 2 --workers 2   # two web hosts

It serves the dashboard with gunicorn (``--workers`` processes, the production
config ``sessions_admin.gunicorn_conf``) on a loopback port, signs an operator
in, starts ``--sim-processes`` runtime simulators (``manage.py simulate_runtime``)
writing through the core, and for ``--duration`` seconds drives ``--clients``
client threads (``http.client``, one connection each, reused where the server
keeps it open) over the session list (plain, filtered, sorted, deeper pages),
full-text search and session detail pages. Reported: requests per second,
median and p99 latency per page kind, and errors (any status but 200, or a
connection error); the bar is zero errors. The section "## Load: gunicorn ..."
of the report is replaced (other sections belong to other benchmarks).

With ``--hosts N`` (PostgreSQL) it starts N gunicorn instances, each with a var directory of
its own (nothing on disk shared) and ``SESSIONS_ADMIN_CACHE_URL=db://`` (one figure cache in
the shared dashboard database), as N web hosts behind a balancer: the clients take turns over
them with the one sign-in cookie, and afterwards each host's overview is read to check that
every host shows the same store-wide figures, computed at the same moment. (That a job
confirmed on one host runs exactly once among the workers of all is tested in
tests/ledger/test_two_hosts.py.)

The store is used in place (the simulators add a few hundred sessions and
never evict responses); it is not reseeded. ``main(argv)`` is what
``bench/run.py --only load`` calls.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import machine, stores  # noqa: E402
from sessions_admin.devtools import free_port, stop_process  # noqa: E402

OPERATOR = "loadbench"
PASSWORD = "load-bench-operator-9f2c"
HEADING = "## Load: gunicorn"
# Words the demo seed and the simulators write, so searches find something.
SEARCH_WORDS = ("budget", "backup", "deploy", "invoice", "curry", "flight", "database", "test")
SOURCES = ("telegram", "discord", "cli", "api_server")
# Relative weights of the page kinds the clients request.
MIX = (("list", 4), ("filtered list", 2), ("search", 2), ("detail", 3))


@dataclass
class Sample:
    kind: str
    seconds: float
    status: int  # 0: connection error
    at: float  # time.monotonic() when the request started
    path: str = ""


@dataclass
class Client:
    host: str
    port: int
    cookie: str
    samples: list[Sample] = field(default_factory=list)
    connection: http.client.HTTPConnection | None = None

    def get(self, kind: str, path: str) -> int:
        at = time.monotonic()
        start = time.perf_counter()
        status = 0
        for attempt in range(2):
            if self.connection is None:
                self.connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                self.connection.request("GET", path, headers={"Cookie": self.cookie})
                response = self.connection.getresponse()
                response.read()
                status = response.status
                if response.getheader("Connection", "").lower() == "close":
                    self.connection.close()
                    self.connection = None
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # A kept-alive connection the server closed meanwhile: one reconnect, as browsers do.
                self.connection.close()
                self.connection = None
                if attempt == 1:
                    status = 0
            except (OSError, http.client.HTTPException):
                if self.connection is not None:
                    self.connection.close()
                self.connection = None
                status = 0
                break
        self.samples.append(Sample(kind, time.perf_counter() - start, status, at, path))
        return status


# --- serving and signing in ------------------------------------------------------------


def _wait_for(host: str, port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection(host, port, timeout=5)
            connection.request("GET", "/login/")
            connection.getresponse().read()
            connection.close()
            return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"gunicorn did not answer on {host}:{port} within {timeout:.0f}s")


def _cookies(response: http.client.HTTPResponse) -> dict[str, str]:
    found = {}
    for header, value in response.getheaders():
        if header.lower() == "set-cookie":
            name, _, rest = value.partition("=")
            found[name.strip()] = rest.split(";", 1)[0]
    return found


def sign_in_cookies(
    host: str, port: int, *, username: str = OPERATOR, password: str = PASSWORD
) -> dict[str, str]:
    """Sign an operator in through the login form, as a browser does; return its cookies."""
    connection = http.client.HTTPConnection(host, port, timeout=60)
    connection.request("GET", "/login/")
    response = connection.getresponse()
    page = response.read().decode()
    cookies = _cookies(response)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    body = urllib.parse.urlencode(
        {"username": username, "password": password, "csrfmiddlewaretoken": token}
    )
    connection.close()
    connection = http.client.HTTPConnection(host, port, timeout=60)
    connection.request(
        "POST",
        "/login/",
        body=body,
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "Cookie": f"csrftoken={cookies['csrftoken']}",
            "Referer": f"http://{host}:{port}/login/",
        },
    )
    response = connection.getresponse()
    response.read()
    cookies.update(_cookies(response))
    connection.close()
    if response.status != 302 or "sessionid" not in cookies:
        raise RuntimeError(f"signing in to the console failed (status {response.status})")
    return cookies


def sign_in(host: str, port: int) -> str:
    """Log the bench operator in through the login form; return the Cookie header to send."""
    return "; ".join(f"{k}={v}" for k, v in sign_in_cookies(host, port).items())


def session_ids_from_list(client: Client, pages: int = 3) -> list[str]:
    """Session ids linked from the first list pages (detail targets, as an operator clicks)."""
    found: list[str] = []
    for path in ("/sessions/", "/sessions/?sort=messages", "/sessions/?scope=all")[:pages]:
        connection = http.client.HTTPConnection(client.host, client.port, timeout=30)
        connection.request("GET", path, headers={"Cookie": client.cookie})
        page = connection.getresponse().read().decode()
        connection.close()
        found += re.findall(r'href="/sessions/([^/"?#]+)/"', page)
    return list(dict.fromkeys(found))


# --- the load -----------------------------------------------------------------------------


def request_path(kind: str, rng: random.Random, session_ids: list[str]) -> str:
    if kind == "list":
        return rng.choice(("/sessions/", "/sessions/?scope=all", "/sessions/?sort=activity"))
    if kind == "filtered list":
        source = rng.choice(SOURCES)
        return rng.choice(
            (
                f"/sessions/?source={source}",
                f"/sessions/?source={source}&sort=messages",
                "/sessions/?status=live",
            )
        )
    if kind == "search":
        return f"/sessions/?q={rng.choice(SEARCH_WORDS)}"
    return f"/sessions/{rng.choice(session_ids)}/"


def drive(client: Client, session_ids: list[str], deadline: float, seed: int) -> None:
    rng = random.Random(seed)
    kinds = [kind for kind, weight in MIX for _ in range(weight)]
    while time.monotonic() < deadline:
        kind = rng.choice(kinds)
        client.get(kind, request_path(kind, rng, session_ids))
    if client.connection is not None:
        client.connection.close()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def summarize(samples: list[Sample], seconds: float) -> list[dict]:
    rows = []
    for kind in [k for k, _ in MIX] + ["all"]:
        chosen = [s for s in samples if kind in ("all", s.kind)]
        if not chosen:
            continue
        latencies = [s.seconds * 1000 for s in chosen]
        rows.append(
            {
                "kind": kind,
                "requests": len(chosen),
                "per_second": len(chosen) / seconds,
                "median_ms": statistics.median(latencies),
                "p99_ms": percentile(latencies, 0.99),
                "errors": sum(1 for s in chosen if s.status != 200),
                "statuses": sorted({s.status for s in chosen if s.status != 200}),
            }
        )
    return rows


# --- report -------------------------------------------------------------------------------


def replace_section(text: str, heading_prefix: str, section: str) -> str:
    """Replace the ``## `` section whose heading starts with ``heading_prefix``, else append."""
    pattern = re.compile(rf"^{re.escape(heading_prefix)}.*?(?=^## |\Z)", re.S | re.M)
    match = pattern.search(text)
    if match:
        return text[: match.start()] + section.rstrip("\n") + "\n\n" + text[match.end() :]
    return text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def render_section(result: dict) -> str:
    lines = [
        _heading(result),
        "",
        f"Measured {result['when']} on {os.cpu_count()} cores ({cpu_model()}; load average "
        f"{result['load_average']:.1f} before the run), "
        f"Python {platform.python_version()}, with `{result['command']}`: gunicorn "
        f"({result['workers']} gthread workers, `sessions_admin.gunicorn_conf`) on loopback, "
        f"{result['clients']} client threads signed in as one operator for {result['duration']:.0f} s "
        f"after {result['warmup']:.0f} s of warm-up "
        f"(`http.client`, a connection per client, reopened when the server closes it), while "
        f"{result['sim_processes']} simulated runtimes (`manage.py simulate_runtime`, "
        f"{result['sim_chats']} chats each) wrote through the core. The clients, the "
        "simulators and the server share the same cores, so the figures are a floor.",
        "",
        "| pages | requests | req/s | median ms | p99 ms | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in result["rows"]:
        name = "**all**" if row["kind"] == "all" else row["kind"]
        lines.append(
            f"| {name} | {row['requests']:,} | {row['per_second']:.1f} | "
            f"{row['median_ms']:.1f} | {row['p99_ms']:.1f} | {row['errors']} |"
        )
    lines += [
        "",
        "Pages: list = `/sessions/` (conversations, every segment, by last activity); "
        "filtered list = by source (also sorted by messages) and live sessions; search = "
        "`/sessions/?q=<word>`; detail = a session's page, for ids linked from the list.",
        "",
        "Slowest requests: "
        + ", ".join(f"{ms:.0f} ms `{path}`" for ms, _status, path in result["slowest"][:3])
        + ".",
        "",
        "Writes meanwhile: " + "; ".join(s.rstrip(".") for s in result["simulators"]) + ".",
        "",
    ]
    if result.get("profile"):
        lines += render_profile(result["profile"]) + [""]
    consistency = result.get("consistency")
    if consistency:
        lines += [
            f"Hosts: {consistency['hosts']} gunicorn instances, each with its own var directory, "
            "one figure cache in the dashboard database (`SESSIONS_ADMIN_CACHE_URL=db://`); the "
            "clients took turns over them with one sign-in. After the load each host's overview "
            + (
                "showed the same figures, computed at the same moment "
                f"({consistency['computed_at']}): " + ", ".join(consistency["figures"]) + "."
                if consistency["same"]
                else f"did **not** agree ({consistency['answered']} of {consistency['hosts']} "
                "answered with figures)."
            ),
            "",
        ]
    return "\n".join(lines)


def render_profile(profile: dict) -> list[str]:
    """The ``--profile`` figures as Markdown lines (bench/machine.py says how they are read)."""
    requests, appends, wall = profile["requests"], profile["appends"], profile["wall"]
    cores = os.cpu_count() or 1
    lines = [
        f"Where the machine's time went ({wall:.0f} s measured; the {cores} cores "
        f"{profile['machine_busy']:.0%} busy): CPU seconds per process group, and per console "
        f"request ({requests:,}) or simulated append ({appends:,.0f}).",
        "",
        "| processes | CPU s | share of the cores | CPU ms per request | CPU ms per append |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, seconds in profile["cpu_seconds"].items():
        per_append = (
            f"{seconds * 1000 / appends:.1f}" if appends and name.startswith("runtimes") else ""
        )
        lines.append(
            f"| {name} | {seconds:.1f} | {seconds / (wall * cores):.0%} | "
            f"{seconds * 1000 / max(1, requests):.1f} | {per_append} |"
        )
    pg = profile.get("postgres")
    if pg:
        lines += ["", "PostgreSQL over the same window, per database:", ""]
        lines += [
            "| database | transactions | per request | connections opened | per request |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for name, counters in pg["counters"].items():
            xacts = counters["xact_commit"] + counters["xact_rollback"]
            lines.append(
                f"| {name} | {xacts:,} | {xacts / max(1, requests):.1f} | "
                f"{counters['sessions']:,} | {counters['sessions'] / max(1, requests):.2f} |"
            )
        by_app = pg.get("cpu_by_application") or {}
        if by_app:
            lines += [
                "",
                "PostgreSQL's CPU by the connections it served (backends seen in the samples): "
                + ", ".join(
                    f"{app} {seconds:.1f} s"
                    + (
                        f" ({seconds * 1000 / requests:.1f} ms per console request)"
                        if app == "console" and requests
                        else f" ({seconds * 1000 / appends:.1f} ms per append)"
                        if app == "runtime" and appends
                        else ""
                    )
                    for app, seconds in sorted(by_app.items())
                )
                + ".",
            ]
        busy = ", ".join(f"{app} {n:.2f}" for app, n in sorted(pg["busy_backends"].items()))
        lines += [
            "",
            f"Active backends on average ({pg['samples']:,} samples of `pg_stat_activity`): "
            f"{busy or 'none'}. What they were doing (share of samples with a backend active):",
            "",
            "| connection | doing | share |",
            "| --- | --- | ---: |",
        ]
        total = sum(count for _key, count in pg["waits"]) or 1
        for (app, what), count in pg["waits"]:
            lines.append(f"| {app} | {what} | {count / total:.0%} |")
        totals = pg.get("statement_totals")
        if totals:
            lines += [
                "",
                f"Statements (`pg_stat_statements`): {totals['calls']:,} "
                f"({totals['calls'] / max(1, requests):.1f} per console request, runtimes' "
                f"included), {totals['exec_ms'] / 1000:.1f} s executing and "
                f"{totals['plan_ms'] / 1000:.1f} s planning. The costliest:",
                "",
                "| database | calls | exec ms | plan ms | statement |",
                "| --- | ---: | ---: | ---: | --- |",
            ]
            for row in pg["statements"]:
                query = row["query"].replace("|", "\\|")
                lines.append(
                    f"| {row['database']} | {row['calls']:,} | {row['exec_ms']:.0f} | "
                    f"{row['plan_ms']:.0f} | `{query}` |"
                )
    return lines


def _heading(result: dict) -> str:
    hosts = result.get("hosts", 1)
    kept = result.get("conn_max_age", 0)
    where = (
        f"{hosts} hosts × {result['workers']} workers"
        if hosts > 1
        else f"{result['workers']} workers"
    )
    if kept:
        where += f", connections kept {kept} s"
    elif result.get("pool_size") == 0 and result["backend"] == "PostgreSQL":
        where += ", a connection per request"
    return f"{HEADING}, {where}, {result['store']} ({result['backend']})"


def write_report(path: Path, result: dict) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    heading = _heading(result)
    text = replace_section(text, heading, render_section(result))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n")
    print(f"wrote {path}")


# --- the command --------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="100k", help="bench store size (bench/stores.py)")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--var-dir", type=Path, default=None, help="a SQLite store directory instead of --size"
    )
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of load measured")
    parser.add_argument(
        "--warmup", type=float, default=5.0, help="seconds of load before measuring (not counted)"
    )
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--clients", type=int, default=8, help="client threads")
    parser.add_argument("--sim-processes", type=int, default=2)
    parser.add_argument("--sim-chats", type=int, default=10)
    parser.add_argument(
        "--sim-think-time", type=float, default=0.5, help="mean seconds between a chat's actions"
    )
    parser.add_argument(
        "--hosts", type=int, default=1, help="gunicorn instances (separate var dirs; PostgreSQL)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also measure CPU per process group and, on PostgreSQL, the server's statements, "
        "connections and waits over the measured window (bench/machine.py)",
    )
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--no-report", action="store_true", help="print, don't write the report")
    args = parser.parse_args(argv)
    if args.hosts < 1:
        parser.error("--hosts must be 1 or more")
    if args.hosts > 1 and (args.db != "postgres" or args.var_dir is not None):
        parser.error("--hosts above 1 needs --db postgres (hosts share the database, not files)")
    return args


LOAD_CLONE = "load"


def _environment(args) -> tuple[dict, str, Callable[[], None]]:
    """The store to serve, and how to drop it afterwards.

    A bench store is cloned first: the simulated runtimes write to what they are given,
    and the seeded store must stay as seeded for the next run of any benchmark.
    """
    if args.var_dir is not None:
        var_dir = args.var_dir.resolve()
        return stores.sqlite_env(var_dir), f"store in {var_dir}", lambda: None
    size = stores.parse_size(args.size)
    label = f"{size:,} sessions"
    if args.db == "postgres":
        name = f"{stores.postgres_database(size)}_{LOAD_CLONE}"
        stores.clone_postgres_store(size, name)
        env = stores.postgres_env(size, store_database=name)
        return env, label, lambda: stores.drop_postgres_database(name)
    clone = stores.STORES_DIR / f"{size}-{LOAD_CLONE}"
    stores.clone_sqlite_store(size, clone)
    return stores.sqlite_env(clone), label, lambda: shutil.rmtree(clone, ignore_errors=True)


def _named_connections(env: dict, name: str) -> dict:
    """``env`` with its PostgreSQL URLs asking for ``application_name=name``."""
    named = dict(env)
    for key in ("DATABASE_URL", "SESSIONS_ADMIN_STORE_URL"):
        url = named.get(key, "")
        if url.startswith("postgres"):
            named[key] = url + ("&" if "?" in url else "?") + f"application_name={name}"
    return named


def _meters(args, servers, simulators, env: dict) -> list:
    groups = {
        "server (gunicorn)": lambda: [s.pid for s in servers],
        "runtimes (simulate_runtime)": lambda: [p.pid for p in simulators],
        "clients (this process)": lambda: [os.getpid()],
    }
    meters: list = []
    if args.db == "postgres" and args.var_dir is None:
        postmaster = machine.postmaster_pid(stores.PG_DIR / "data")
        groups["database (PostgreSQL)"] = lambda: [postmaster] if postmaster else []
        urls = [env["DATABASE_URL"], env["SESSIONS_ADMIN_STORE_URL"]]
        names = [urllib.parse.urlparse(url).path.lstrip("/") for url in urls]
        meters.append(machine.PostgresProfile(url=urls[0].split("?")[0], databases=names))
    meters.insert(0, machine.CpuMeter(groups, own_only=frozenset({"clients (this process)"})))
    return meters


_APPENDS = re.compile(r"(\d+) appends \(([\d.]+)/s\)")


def _profile(meters: list, requests: int, elapsed: float, summaries: list) -> dict:
    cpu = meters[0]
    # The simulators report appends over their whole run; their rate times the window.
    appends = sum(
        float(m.group(2)) * elapsed
        for _code, summary, _out in summaries
        if (m := _APPENDS.search(summary))
    )
    profile = {
        "cpu_seconds": cpu.seconds,
        "wall": cpu.wall,
        "machine_busy": cpu.machine_busy,
        "requests": requests,
        "appends": appends,
    }
    if len(meters) > 1:
        pg = meters[1]
        profile["postgres"] = {
            "counters": pg.counters,
            "busy_backends": pg.busy_backends(),
            "cpu_by_application": pg.cpu_by_application(),
            "waits": pg.waits.most_common(12),
            "samples": pg.samples,
            "statement_totals": pg.statement_totals,
            "statements": pg.statements,
        }
    return profile


def _wait_for_writes(workdir: Path, processes: int, timeout: float = 120) -> None:
    """Until every simulator has had an append acknowledged (its ledger has a line)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ledgers = [workdir / f"ledger-{n}.jsonl" for n in range(processes)]
        if all(path.exists() and path.stat().st_size > 0 for path in ledgers):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the simulators wrote nothing within {timeout:.0f}s")


def _manage(env: dict, *args: str, stdin: str | None = None) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        input=stdin,
        text=True,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def run(args) -> dict:
    load_average = os.getloadavg()[0]
    env, store_label, drop_store = _environment(args)
    env = {
        **env,
        "SESSIONS_ADMIN_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SESSIONS_ADMIN_LOG_LEVEL": "WARNING",
    }
    if args.hosts > 1:
        env["SESSIONS_ADMIN_CACHE_URL"] = "db://"  # one figure cache for every host
    # PostgreSQL's statistics tell the console's connections from the runtimes' by name.
    sim_env = _named_connections(env, "runtime")
    env = _named_connections(env, "console")
    host = "127.0.0.1"
    ports = [free_port() for _ in range(args.hosts)]
    _manage(env, "migrate", "--noinput", "-v", "0")
    _manage(env, "init_store")  # additive: the dashboard's own tables a newer version adds
    _manage(env, "create_operator", OPERATOR, "--role", "viewer", "--if-missing", stdin=PASSWORD)
    servers: list[subprocess.Popen] = []
    simulators = None
    meters: list = []
    consistency = None
    # A file, not a pipe: a pipe nobody reads while the load runs would fill and stall gunicorn.
    server_log_file = tempfile.TemporaryFile(mode="w+")
    workdir = tempfile.TemporaryDirectory(prefix="bench-load-")
    try:
        for n, port in enumerate(ports):
            host_env = dict(env)
            if args.hosts > 1:  # a var directory of its own, as on another machine
                host_env["SESSIONS_ADMIN_VAR_DIR"] = str(Path(workdir.name) / f"host-{n}")
            servers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "gunicorn", "sessions_admin.wsgi"]
                    + ["--bind", f"{host}:{port}", "--workers", str(args.workers)]
                    + ["--config", "python:sessions_admin.gunicorn_conf", "--timeout", "60"],
                    cwd=ROOT,
                    env=host_env,
                    stdout=subprocess.DEVNULL,
                    stderr=server_log_file,
                )
            )
        for port in ports:
            _wait_for(host, port)
        cookie = sign_in(host, ports[0])  # the session lives in the shared dashboard database
        session_ids = session_ids_from_list(Client(host, ports[-1], cookie))
        if not session_ids:
            raise RuntimeError("the session list links no session: is the store empty?")
        sim_logs = [
            open(Path(workdir.name) / f"sim-{n}.out", "w")  # noqa: SIM115 - closed below
            for n in range(args.sim_processes)
        ]
        simulators = [
            subprocess.Popen(
                [sys.executable, "manage.py", "simulate_runtime"]
                + ["--chats", str(args.sim_chats), "--duration", "0"]
                + ["--think-time", str(args.sim_think_time), "--evict-keep", "0"]
                + ["--label", f"load{n}-{os.getpid()}", "--seed", str(n)]
                + ["--ledger", str(Path(workdir.name) / f"ledger-{n}.jsonl")],
                cwd=ROOT,
                env=sim_env,
                # Files, not pipes: nothing reads them until the end.
                stdout=sim_logs[n],
                stderr=subprocess.STDOUT,
            )
            for n in range(args.sim_processes)
        ]
        _wait_for_writes(Path(workdir.name), args.sim_processes)
        clients = [Client(host, ports[n % len(ports)], cookie) for n in range(args.clients)]
        # Warm-up first (each worker's first pages fill its caches and SQLite's page cache).
        started = time.monotonic() + args.warmup
        deadline = started + args.duration
        threads = [
            threading.Thread(target=drive, args=(client, session_ids, deadline, n))
            for n, client in enumerate(clients)
        ]
        for thread in threads:
            thread.start()
        meters = _meters(args, servers, simulators, env) if args.profile else []
        if meters:
            time.sleep(max(0.0, started - time.monotonic()))
            for meter in meters:
                meter.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        for meter in meters:
            meter.stop()
        if args.hosts > 1:
            consistency = compare_hosts(host, ports, cookie)
    finally:
        summaries = []
        for n, process in enumerate(simulators or []):
            stop_process(process, timeout=60)
            sim_logs[n].close()
            out = (Path(workdir.name) / f"sim-{n}.out").read_text()
            summary = [line for line in out.splitlines() if line.startswith("Simulated")]
            summaries.append((process.returncode, "\n".join(summary), out))
        for server in servers:
            stop_process(server, timeout=30)
        server_log_file.seek(0)
        server_log = server_log_file.read()
        server_log_file.close()
        workdir.cleanup()
        drop_store()
    samples = [s for client in clients for s in client.samples if s.at >= started]
    rows = summarize(samples, elapsed)
    failed_simulators = [s for s in summaries if s[0] != 0]
    if failed_simulators:
        print("simulator failures:", *(s[2][-4000:] for s in failed_simulators), sep="\n")
    if any(row["errors"] for row in rows):
        tail = "\n".join(line for line in server_log.splitlines() if "[INFO]" not in line)[-4000:]
        print("server log (errors):\n" + tail)
    return {
        "when": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "store": store_label,
        "backend": "PostgreSQL" if args.db == "postgres" and args.var_dir is None else "SQLite",
        "workers": args.workers,
        "hosts": args.hosts,
        "conn_max_age": int(env.get("SESSIONS_ADMIN_DB_CONN_MAX_AGE") or 0),
        "pool_size": int(env["SESSIONS_ADMIN_DB_POOL_SIZE"])
        if env.get("SESSIONS_ADMIN_DB_POOL_SIZE", "").strip()
        else None,
        "consistency": consistency,
        "clients": args.clients,
        "duration": elapsed,
        "warmup": args.warmup,
        "load_average": load_average,
        "sim_processes": args.sim_processes,
        "sim_chats": args.sim_chats,
        "simulators": [s[1].splitlines()[0] if s[1] else f"exit {s[0]}" for s in summaries],
        "simulator_failures": len(failed_simulators),
        "rows": rows,
        "profile": _profile(meters, rows[-1]["requests"], elapsed, summaries) if meters else None,
        "slowest": [
            (s.seconds * 1000, s.status, s.path)
            for s in sorted(samples, key=lambda s: s.seconds, reverse=True)[:5]
        ],
        "command": "".join(
            f"{name}={env[name]} "
            for name in ("SESSIONS_ADMIN_DB_CONN_MAX_AGE", "SESSIONS_ADMIN_DB_POOL_SIZE")
            if env.get(name, "").strip()
            and not (name == "SESSIONS_ADMIN_DB_CONN_MAX_AGE" and env[name].strip() == "0")
        )
        + "python bench/load.py "
        + (
            f"--var-dir {args.var_dir}"
            if args.var_dir
            else f"--size {stores.size_label(stores.parse_size(args.size))} --db {args.db}"
        )
        + f" --duration {args.duration:g} --warmup {args.warmup:g} --workers {args.workers}"
        + f" --clients {args.clients} --sim-processes {args.sim_processes}"
        + (" --profile" if args.profile else "")
        + (f" --hosts {args.hosts}" if args.hosts > 1 else ""),
    }


# The overview's figures and the moment they were computed (templates/console/home.html).
_STAT_VALUE = re.compile(r'class="stat-value">([^<]*)<')
_COMPUTED_AT = re.compile(r'<time datetime="([^"]+)" data-ago>')


def compare_hosts(host: str, ports: list[int], cookie: str, timeout: float = 60) -> dict:
    """Each host's overview figures, read until none is a placeholder: are they the same?"""
    seen: dict[int, tuple[list[str], list[str]]] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(seen) < len(ports):
        for port in ports:
            if port in seen:
                continue
            connection = http.client.HTTPConnection(host, port, timeout=30)
            connection.request("GET", "/", headers={"Cookie": cookie})
            body = connection.getresponse().read().decode()
            connection.close()
            values, times = _STAT_VALUE.findall(body), _COMPUTED_AT.findall(body)
            if values and times:  # not the "Counting the store…" placeholder
                seen[port] = (values, times[:1])
        time.sleep(0.5)
    answers = list(seen.values())
    return {
        "hosts": len(ports),
        "answered": len(seen),
        "same": len(seen) == len(ports) and all(a == answers[0] for a in answers),
        "figures": answers[0][0] if answers else [],
        "computed_at": answers[0][1][0] if answers and answers[0][1] else None,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    total = result["rows"][-1]
    print(
        f"{total['requests']} requests in {result['duration']:.1f}s: {total['per_second']:.1f} req/s, "
        f"median {total['median_ms']:.1f} ms, p99 {total['p99_ms']:.1f} ms, "
        f"{total['errors']} errors {total['statuses'] or ''}"
    )
    for row in result["rows"][:-1]:
        print(
            f"  {row['kind']}: {row['requests']} req, median {row['median_ms']:.1f} ms, "
            f"p99 {row['p99_ms']:.1f} ms, {row['errors']} errors {row['statuses'] or ''}"
        )
    for line in result["simulators"]:
        print(f"  {line}")
    if result.get("consistency"):
        print(f"  hosts: {result['consistency']}")
    if result.get("profile"):
        print("\n".join(render_profile(result["profile"])))
    print("slowest requests:")
    for ms, status, path in result["slowest"]:
        print(f"  {ms:8.1f} ms  {status}  {path}")
    if not args.no_report:
        write_report(args.output, result)
    return 1 if total["errors"] or result["simulator_failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
