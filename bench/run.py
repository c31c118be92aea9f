"""Server-time benchmarks of the console on large seeded stores; writes docs/benchmarks.md.

    python bench/run.py --size 100k                      # SQLite reads, then writes and load
    python bench/run.py --size 10k --db both --only reads
    python bench/run.py --sessions 100000 --runs 25      # --sessions: the older spelling
    python bench/run.py --size 10k --only reads --no-admin --runs 20 --cold   # issue 16

Stores come from bench/stores.py (seeded once per size and backend, then reused). Read
pages are requested through Django's test client (the whole request in process:
middleware, view, every query and the template; no network), after warm-up, several
times; median and p95 are reported beside:

- the SQL floor: the bare statement(s) returning the same rows;
- the Django floor: an empty page in the console's layout, through the same middleware
  and login (what any page of ours costs before it does anything);
- a typical Django admin over the same models (bench/admin_site.py, bench only);
- hermes-agent's own SessionDB on the same SQLite file, where it has an equivalent
  (bench/hermes_reads.py, run by the Hermes virtualenv).

``--cold`` measures each read page twice, warm and with the figure cache emptied before
every request (as at a dashboard's start, or after a quiet spell with no warming), and
writes the "Cold pages (issue 16)" section instead of the read-pages table.

Each backend is measured in a child process of its own (Django binds its databases at
start-up). ``--only writes`` and ``--only load`` call bench/writes.py and bench/load.py
(each owns its section of the report). Figures are machine-dependent: compare ratios.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import importlib
import json
import os
import platform
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import stores  # noqa: E402

HERMES_PYTHON = ROOT / "var" / "hermes-agent-0.19.0" / "bin" / "python"
PARTS = ("reads", "writes", "load")
PAGE_TARGET_MS = 50
SEARCH_TARGET_MS = 150
FLOOR_RATIO_TARGET = 3
ADMIN_SCAN_SPEEDUP_TARGET = 10


def timed(fn, *, warmup: int, runs: int, before=None) -> tuple[float, float, float]:
    """Median and p95 wall milliseconds, and the median CPU milliseconds of this thread.

    The CPU time counts our Python and, on SQLite, the database work (it runs in this
    process); it hardly moves when other processes share the cores, so it is the figure
    to compare between runs on a busy machine. On PostgreSQL it leaves out the server.
    ``before``, if given, runs untimed before each request (``--cold``: empty the cache).
    """
    for _ in range(warmup):
        fn()
    settle_background_figures()
    samples = []
    cpu = []
    for _ in range(runs):
        if before is not None:
            before()
        start, start_cpu = time.perf_counter(), time.thread_time()
        fn()
        cpu.append((time.thread_time() - start_cpu) * 1000)
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    return statistics.median(samples), p95, statistics.median(cpu)


def settle_background_figures() -> None:
    """Wait for the store-wide figures a warm-up request started computing in the background.

    A warm page is measured on its own: at a million sessions fork detection takes seconds
    of this process's CPU (and GIL) each time it is computed, and timing the first pages
    beside it measured the computation (the conversations list: 113 ms median beside it,
    35 ms after). Its cost is reported apart: "Cold pages" and the refresh period.
    """
    for thread in threading.enumerate():
        if thread.name.startswith("refresh "):
            thread.join(timeout=300)


# --- the measuring child process ----------------------------------------------------


@dataclass
class Case:
    key: str
    name: str
    url: str
    floor: list = field(default_factory=list)  # [(sql, params), ...] run in sequence
    admin: str | None = None
    hermes: dict | None = None  # {"method", "kwargs"} for bench/hermes_reads.py
    kind: str = "page"  # page | search | other (which target applies)


def build_cases(word_common: str, word_rare: str) -> list[Case]:
    from sessions_admin import core
    from sessions_admin.core import db
    from sessions_admin.store import listing

    postgres = db.vendor() == "postgresql"
    total = db.fetchone("SELECT COUNT(*) FROM sessions")[0]
    longest = db.fetchone(
        "SELECT id, message_count FROM sessions ORDER BY message_count DESC LIMIT 1"
    )
    # The longest compression chain: follow each compression link up to the chain's first
    # segment and take the first segment most links lead to.
    parent_of = dict(
        db.fetchall(
            "SELECT c.id, p.id FROM sessions c JOIN sessions p ON p.id = c.parent_session_id "
            "WHERE p.end_reason = 'compression'"
        )
    )
    tops = []
    for child in parent_of:
        top = child
        while top in parent_of:
            top = parent_of[top]
        tops.append(top)
    chain_root = collections.Counter(tops).most_common(1)[0][0]
    chain = core.compression_chain(session_id=chain_root)
    chain_middle = chain[len(chain) // 2]
    offset = total // 2
    deep = db.fetchone(
        "SELECT started_at, id FROM sessions ORDER BY started_at DESC, id DESC LIMIT 1 OFFSET %s",
        [offset],
    )
    deep_cursor = listing.encode_cursor("started", "desc", [deep[0], deep[1]])
    newest = db.fetchone("SELECT MAX(started_at) FROM sessions")[0]
    day = dt.datetime.fromtimestamp(newest, dt.UTC).date()
    week_ago = day - dt.timedelta(days=7)
    week_ago_ts = dt.datetime.combine(week_ago, dt.time(), dt.UTC).timestamp()
    title_word = "deploy"
    # SQLite keeps to the started_at index only when told not to use the parent index.
    not_child = "+parent_session_id IS NULL" if not postgres else "parent_session_id IS NULL"
    admin_sessions = "/bench-admin/store/session/"
    admin_messages = "/bench-admin/store/message/"

    def fts_floor(word: str) -> list:
        if postgres:
            from sessions_admin.core.schema import FTS_DOCUMENT_SQL

            doc = FTS_DOCUMENT_SQL.format(t="m.")
            return [
                (
                    f"SELECT m.id, m.session_id, ts_headline('simple', {doc}, "
                    "phraseto_tsquery('simple', %s)) FROM messages m "
                    f"WHERE to_tsvector('simple', {doc}) @@ phraseto_tsquery('simple', %s) "
                    "ORDER BY m.id DESC LIMIT 50",
                    [word, word],
                )
            ]
        return [
            (
                "SELECT m.id, m.session_id, snippet(messages_fts, 0, '[', ']', '…', 12) "
                "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
                "WHERE messages_fts MATCH %s ORDER BY messages_fts.rowid DESC LIMIT 50",
                [word],
            )
        ]

    chain_sql = (
        "WITH RECURSIVE chain(id, depth) AS (SELECT id, 0 FROM sessions WHERE id = %s "
        "UNION ALL SELECT s.id, chain.depth + 1 FROM sessions s JOIN chain "
        "ON s.parent_session_id = chain.id JOIN sessions p ON p.id = chain.id "
        "WHERE p.end_reason = 'compression') "
        "SELECT s.* FROM chain JOIN sessions s ON s.id = chain.id ORDER BY chain.depth"
    )
    return [
        Case(
            "list",
            "Session list, first page (conversations)",
            "/sessions/",
            [
                (
                    f"SELECT * FROM sessions WHERE {not_child} ORDER BY started_at DESC LIMIT 50",
                    [],
                )
            ],
            admin=admin_sessions,
            hermes={"method": "list_sessions_rich", "kwargs": {"limit": 50}},
        ),
        Case(
            "list_all",
            "Session list, every segment, first page",
            "/sessions/?scope=all",
            [("SELECT * FROM sessions ORDER BY started_at DESC LIMIT 50", [])],
            admin=admin_sessions,
            hermes={
                "method": "list_sessions_rich",
                "kwargs": {"limit": 50, "include_children": True},
            },
        ),
        Case(
            "filtered",
            f"Filtered: source=telegram, started {week_ago}..{day}",
            f"/sessions/?scope=all&source=telegram&from={week_ago}&to={day}",
            [
                (
                    "SELECT * FROM sessions WHERE source = %s AND started_at >= %s "
                    "ORDER BY started_at DESC LIMIT 50",
                    ["telegram", week_ago_ts],
                )
            ],
            admin=f"{admin_sessions}?source=telegram&started_since={week_ago}",
            hermes={
                "method": "list_sessions_rich",
                "kwargs": {"limit": 50, "source": "telegram", "include_children": True},
            },
        ),
        Case(
            "deep",
            f"Deep page (row {offset:,}; ours keyset, admin and Hermes offset)",
            f"/sessions/?scope=all&after={deep_cursor}",
            [
                (
                    "SELECT * FROM sessions WHERE started_at < %s "
                    "ORDER BY started_at DESC LIMIT 50",
                    [deep[0]],
                )
            ],
            admin=f"{admin_sessions}?p={offset // 100 + 1}",
            hermes={
                "method": "list_sessions_rich",
                "kwargs": {"limit": 50, "offset": offset, "include_children": True},
            },
        ),
        Case("activity", "Sort by last activity, first page", "/sessions/?sort=activity"),
        Case(
            "title",
            f"Sessions whose title contains '{title_word}'",
            f"/sessions/?scope=all&title={title_word}",
            [
                (
                    "SELECT * FROM sessions WHERE title "
                    + ("ILIKE" if postgres else "LIKE")
                    + " %s ORDER BY started_at DESC LIMIT 50",
                    [f"%{title_word}%"],
                )
            ],
            admin=f"{admin_sessions}?q={title_word}",
            kind="search",
        ),
        Case(
            "search_rare",
            f"Message search '{word_rare}' (selective word)",
            f"/sessions/?q={word_rare}",
            fts_floor(word_rare),
            admin=f"{admin_messages}?q={word_rare}",
            hermes={
                "method": "search_messages",
                "kwargs": {"query": word_rare, "limit": 50, "sort": "newest"},
            },
            kind="search",
        ),
        Case(
            "search_common",
            f"Message search '{word_common}' (in ~40% of messages)",
            f"/sessions/?q={word_common}",
            fts_floor(word_common),
            admin=f"{admin_messages}?q={word_common}",
            hermes={
                "method": "search_messages",
                "kwargs": {"query": word_common, "limit": 50, "sort": "newest"},
            },
            kind="search",
        ),
        Case(
            "detail",
            f"Session detail + first chunk of a {longest[1]:,}-message transcript",
            f"/sessions/{longest[0]}/",
            [
                ("SELECT * FROM sessions WHERE id = %s", [longest[0]]),
                (
                    "SELECT * FROM messages WHERE session_id = %s ORDER BY id LIMIT 100",
                    [longest[0]],
                ),
            ],
            hermes={"method": "get_messages", "kwargs": {"session_id": longest[0]}},
        ),
        Case(
            "lineage",
            f"Session detail, {len(chain)}-segment compression chain (lineage + transcript)",
            f"/sessions/{chain_middle}/",
            [
                (chain_sql, [chain_root]),
                (
                    "SELECT * FROM messages WHERE session_id = %s ORDER BY id LIMIT 100",
                    [chain_root],
                ),
            ],
        ),
        Case("home", "Home overview (counts cached after the first request)", "/", kind="other"),
        Case("conversations", "Conversations", "/conversations/", kind="other"),
        Case("forks", "Fork groups (/forks/)", "/forks/", kind="other"),
    ]


def measure(args) -> dict:
    """Run in the child: every case on the store this process's settings point at."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.cache import cache
    from django.db import connections
    from django.test import Client

    from sessions_admin.core import db
    from sessions_admin.signin.roles import assign_role

    assert not settings.DEBUG, "benchmarks run with DEBUG off"
    if args.cold:
        # Emptied before every request: a cache of this process's own, not the shared
        # store directory's (other benchmarks may be reading it).
        from django.test import override_settings

        override_settings(
            CACHES={
                "default": {
                    "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
                    "LOCATION": tempfile.mkdtemp(prefix="bench-cold-cache-"),
                }
            }
        ).enable()
    user, _ = User.objects.get_or_create(username="bench")
    if not user.is_superuser:  # Django admin lets staff in; superuser sees every model
        user.is_staff = user.is_superuser = True
        user.save()
    assign_role(user, "admin")
    client = Client()
    client.force_login(user)

    vendor = db.vendor()
    sessions_total = db.fetchone("SELECT COUNT(*) FROM sessions")[0]
    messages_total = db.fetchone("SELECT COUNT(*) FROM messages")[0]
    cases = build_cases("the", "english")

    def get(url: str):
        def fetch():
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)

        return fetch

    def sql(statements: list):
        def run():
            for statement, params in statements:
                db.fetchall(statement, params)

        return run

    def cold_start():
        """The figure cache as a dashboard finds it at start: empty, nothing computing.

        A background computation a previous request started is waited for first (untimed),
        so each request meets an empty cache and no leftover thread."""
        for thread in threading.enumerate():
            if thread.name.startswith("refresh "):
                thread.join(timeout=120)
        cache.clear()

    warm, runs = args.warmup, args.runs
    if args.cold:
        return measure_cold(args, cases, get, cold_start, sessions_total, messages_total)
    django_floor = timed(get("/bench-floor/"), warmup=warm, runs=runs)
    django_empty = timed(get("/bench-floor/empty/"), warmup=warm, runs=runs)
    results = {}
    for case in cases:
        row = {"name": case.name, "kind": case.kind, "url": case.url}
        if case.floor:
            row["floor"] = timed(sql(case.floor), warmup=warm, runs=runs)
        row["page"] = timed(get(case.url), warmup=warm, runs=runs)
        if case.admin and not args.no_admin:
            # Admin's scans take seconds on a large store: fewer runs, same warm-up rule.
            row["admin"] = timed(get(case.admin), warmup=1, runs=max(3, runs // 3))
        results[case.key] = row
        print(f"  {case.name}: {summary(row)}", flush=True)

    hermes = {}
    if vendor == "sqlite" and not args.no_hermes:
        hermes = run_hermes(settings.DATABASES["store"]["NAME"], cases, args)
        for key, value in hermes.get("results", {}).items():
            results[key]["hermes"] = value
    for alias in connections:
        connections[alias].close()
    return {
        "vendor": vendor,
        "server": server_version(vendor),
        "sessions": sessions_total,
        "messages": messages_total,
        "django_floor": django_floor,
        "django_empty": django_empty,
        "hermes_version": hermes.get("hermes_version"),
        "cases": results,
        "runs": args.runs,
        "warmup": args.warmup,
    }


COLD_CASES = ("list", "filtered", "search_rare", "search_common", "detail", "home", "forks")


def measure_cold(args, cases, get, cold_start, sessions_total, messages_total) -> dict:
    """``--cold``: each page warm, then with the figure cache emptied before every request."""
    from django.conf import settings

    from sessions_admin.console import figures
    from sessions_admin.core import db
    from sessions_admin.store import cached, listing

    del figures, listing  # imported for the figures they register
    results = {}
    for case in cases:
        if case.key not in COLD_CASES:
            continue
        row = {"name": case.name, "kind": case.kind, "url": case.url}
        # Warm: every figure computed first, as the dashboard's warming thread keeps them.
        cached.warm_once()
        row["page"] = timed(get(case.url), warmup=args.warmup, runs=args.runs)
        row["cold"] = timed(get(case.url), warmup=1, runs=args.runs, before=cold_start)
        cold_start()  # no computation left running into the next case
        row["filled"] = _filled_in_after(get(case.url), cold_start)
        results[case.key] = row
        print(
            f"  {case.name}: warm median {row['page'][0]:.1f} ms p95 {row['page'][1]:.1f}, "
            f"cold median {row['cold'][0]:.1f} ms p95 {row['cold'][1]:.1f}",
            flush=True,
        )
    hermes = {}
    if db.vendor() == "sqlite" and not args.no_hermes:
        hermes = run_hermes(settings.DATABASES["store"]["NAME"], cases, args)
        for key, value in hermes.get("results", {}).items():
            if key in results:
                results[key]["hermes"] = value
    return {
        "cold": True,
        "vendor": db.vendor(),
        "server": server_version(db.vendor()),
        "sessions": sessions_total,
        "messages": messages_total,
        "hermes_version": hermes.get("hermes_version"),
        "cases": results,
        "runs": args.runs,
        "warmup": args.warmup,
    }


def _filled_in_after(fetch, cold_start, runs: int = 3) -> float:
    """Median milliseconds from a cold request until the figures it started are cached:
    when its placeholder can show them (it asks again every second)."""
    samples = []
    for _ in range(runs):
        cold_start()
        start = time.perf_counter()
        fetch()
        for thread in threading.enumerate():
            if thread.name.startswith("refresh "):
                thread.join(timeout=120)
        samples.append((time.perf_counter() - start) * 1000)
    cold_start()
    return statistics.median(samples)


def render_cold_section(result: dict, command: str, load: str) -> str:
    vendor = "PostgreSQL" if result["vendor"] == "postgresql" else "SQLite"
    lines = [
        f"### {result['sessions']:,} sessions / {result['messages']:,} messages ({vendor})",
        "",
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {machine()}, "
        f"{result['server']}, shared with other agents ({load}), with `{command}`: "
        f"{result['runs']} runs each. Warm: after {result['warmup']} warm-up requests. "
        "Cold: the figure cache emptied before every request, with no background "
        "computation running. Figures cached after: from a cold request to the end of "
        "the background computations it started (the 0.2 s start delay included). "
        "Milliseconds.",
        "",
        "| page | warm | warm p95 | cold | cold p95 | figures cached after "
        "| Hermes SessionDB | cold / Hermes | cold p95 under 50 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in result["cases"].values():
        median, p95, _cpu = row["page"]
        cold, cold_p95, _cold_cpu = row["cold"]
        hermes = (row.get("hermes") or {}).get("median")
        lines.append(
            f"| {row['name']} | {_ms(median)} | {_ms(p95)} | {_ms(cold)} | {_ms(cold_p95)} | "
            f"{_ms(row.get('filled'))} | {_ms(hermes)} | {f'{cold / hermes:.2f}x' if hermes else '-'} | "
            f"{'yes' if cold_p95 < PAGE_TARGET_MS else 'no'} |"
        )
    lines.append("")
    return "\n".join(lines)


def write_cold_report(path: Path, result: dict, command: str) -> None:
    """The ``### <size>`` table inside "## Cold pages (issue 16)", replaced by size."""
    load = "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())
    table = render_cold_section(result, command, load)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    heading = "## Cold pages (issue 16)"
    if heading not in text:
        text = text.rstrip("\n") + f"\n\n{heading}\n\n"
    start = text.index(heading)
    end_match = re.compile(r"^## ", re.M).search(text, start + len(heading))
    end = end_match.start() if end_match else len(text)
    body = text[start:end]
    first_line = table.split("\n", 1)[0]
    size_prefix = first_line.split(" sessions")[0] + " sessions"
    vendor = first_line.rsplit("(", 1)[1]
    pattern = re.compile(
        rf"^{re.escape(size_prefix)}[^\n]*\({re.escape(vendor)}$.*?(?=^### |\Z)", re.M | re.S
    )
    match = pattern.search(body)
    if match:
        body = body[: match.start()] + table.rstrip("\n") + "\n\n" + body[match.end() :]
    else:
        body = body.rstrip("\n") + "\n\n" + table.rstrip("\n") + "\n\n"
    text = text[:start] + body + text[end:]
    path.write_text(text.rstrip("\n") + "\n")
    print(f"wrote {path}")


def server_version(vendor: str) -> str:
    from sessions_admin.core import db

    if vendor == "postgresql":
        return "PostgreSQL " + db.fetchone("SHOW server_version")[0].split()[0]
    return f"SQLite {sqlite3.sqlite_version}"


def run_hermes(state_path: str, cases: list[Case], args) -> dict:
    if not HERMES_PYTHON.exists():
        print("  hermes-agent's virtualenv is missing (python -m sessions_admin test installs it)")
        return {}
    request = {
        "state": state_path,
        "warmup": args.warmup,
        "runs": args.runs,
        "cases": [{"name": c.key, **c.hermes} for c in cases if c.hermes],
    }
    done = subprocess.run(
        [str(HERMES_PYTHON), str(ROOT / "bench" / "hermes_reads.py")],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    if done.returncode != 0:
        print(f"  Hermes timing failed: {done.stderr.strip()[-500:]}")
        return {}
    answer = json.loads(done.stdout)
    for key, value in answer["results"].items():
        if "error" in value:
            print(f"  Hermes {key}: {value['error']}")
        else:
            print(f"  Hermes {key}: median {value['median']:.1f} ms", flush=True)
    return answer


def summary(row: dict) -> str:
    text = f"median {row['page'][0]:.1f} ms, p95 {row['page'][1]:.1f} ms"
    if "floor" in row:
        text += f", SQL floor {row['floor'][0]:.2f} ms ({row['page'][0] / row['floor'][0]:.0f}x)"
    if "admin" in row:
        text += f", admin {row['admin'][0]:.1f} ms"
    return text


# --- the report ---------------------------------------------------------------------


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if value < 1 else f"{value:.1f}" if value < 1000 else f"{value:,.0f}"


def verdict(key: str, row: dict, result: dict) -> str:
    """Target met / missed for one row, each miss with the reason the figures give."""
    median, _p95, cpu = row["page"]
    django_floor = result["django_floor"][0]
    postgres = result["vendor"] == "postgresql"
    misses = []
    kind = row["kind"]
    limit = PAGE_TARGET_MS if kind == "page" else SEARCH_TARGET_MS if kind == "search" else None
    if limit and median >= limit:
        if cpu < limit:
            where = "the database server and waiting" if postgres else "waiting for a core"
            misses.append(f"over {limit} ms (our CPU {_ms(cpu)} ms: the rest is {where})")
        else:
            misses.append(f"over {limit} ms (CPU {_ms(cpu)} ms)")
    if kind == "page" and "floor" in row and median > FLOOR_RATIO_TARGET * row["floor"][0]:
        misses.append(
            f"over {FLOOR_RATIO_TARGET}x the SQL floor (the empty Django page alone is "
            f"{django_floor / row['floor'][0]:.0f}x it)"
        )
    if "admin" in row:
        speedup = row["admin"][0] / median
        needed = ADMIN_SCAN_SPEEDUP_TARGET if key in ADMIN_SCAN_CASES else 1
        if speedup < needed:
            misses.append(
                f"only {speedup:.1f}x faster than admin, not {needed}x"
                if needed > 1
                else "slower than admin"
            )
    if kind == "other" and not misses:
        return "no target"
    if not misses:
        return "met"
    return "missed: " + "; ".join(misses)


# Pages where admin scans (offset pages, LIKE over every message): the target is 10x faster.
ADMIN_SCAN_CASES = ("deep", "search_rare", "search_common")


def render_section(result: dict, size: int, command: str) -> str:
    vendor = "PostgreSQL" if result["vendor"] == "postgresql" else "SQLite"
    floor_median = result["django_floor"][0]
    empty_median = result["django_empty"][0]
    lines = [
        f"## Read pages on {result['sessions']:,} sessions / {result['messages']:,} messages "
        f"({vendor})",
        "",
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {machine()}, "
        f"{result['server']}, with `{command}`: {result['runs']} runs after "
        f"{result['warmup']} warm-up requests (Django admin: {max(3, result['runs'] // 3)} "
        "runs after one). Times are medians in milliseconds unless marked p95.",
        "",
        f"Django floor: an empty page in the console's layout through the same middleware "
        f"and login costs **{_ms(floor_median)} ms** (CPU {_ms(result['django_floor'][2])} ms; "
        "a bare `HttpResponse` through the "
        f'middleware: {_ms(empty_median)} ms). "over floor" is a page minus that: the '
        "work that is really the page's own.",
        "",
        "| page | ours | p95 | ours CPU | SQL floor | ours / SQL | over Django floor "
        "| Django admin | admin / ours | Hermes SessionDB | target |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for key, row in result["cases"].items():
        median, p95, cpu = row["page"]
        floor = row.get("floor", (None,))[0]
        admin = row.get("admin", (None,))[0]
        hermes = row.get("hermes") or {}
        hermes_text = (
            _ms(hermes.get("median"))
            if "median" in hermes
            else ("error" if "error" in hermes else "-")
        )
        lines.append(
            f"| {row['name']} | {_ms(median)} | {_ms(p95)} | {_ms(cpu)} | {_ms(floor)} | "
            f"{f'{median / floor:.0f}x' if floor else '-'} | {_ms(max(0.0, median - floor_median))} | "
            f"{_ms(admin)} | {f'{admin / median:.1f}x' if admin else '-'} | {hermes_text} | "
            f"{verdict(key, row, result)} |"
        )
    if result.get("hermes_version"):
        lines += [
            "",
            f"Hermes column: hermes-agent {result['hermes_version']}'s `SessionDB` opened "
            "read-only on the same state.db, timed in its own virtualenv "
            "(bench/hermes_reads.py): `list_sessions_rich(limit=50, ...)` for the lists "
            "(`offset=` for the deep page; no date filter, so the filtered row is source "
            "only), `search_messages(query, limit=50, sort='newest')`, and "
            "`get_messages(session_id)` of the whole long transcript (Hermes has no first "
            "chunk). It returns rows to Python code; ours renders a whole HTML page.",
        ]
    lines.append("")
    return "\n".join(lines)


def replace_section(text: str, heading_prefix: str, section: str, after: str | None = None) -> str:
    """Replace the `## ` section whose heading starts with heading_prefix, else append it."""
    pattern = re.compile(rf"^{re.escape(heading_prefix)}.*?(?=^## |\Z)", re.S | re.M)
    match = pattern.search(text)
    if match:
        return text[: match.start()] + section.rstrip("\n") + "\n\n" + text[match.end() :]
    # A new read section goes before the other benchmarks' sections (writes, load).
    later = re.search(r"^## (?!Read pages)(Writes|Load)\b", text, re.M)
    if later:
        return text[: later.start()] + section.rstrip("\n") + "\n\n" + text[later.start() :]
    return text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"


def write_report(path: Path, result: dict, size: int, command: str) -> None:
    vendor = "PostgreSQL" if result["vendor"] == "postgresql" else "SQLite"
    section = render_section(result, size, command)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    # One section per size and backend, found by the command that wrote it (the heading
    # holds the store's actual counts, which the load benchmark's runtimes make grow).
    heading = re.compile(
        rf"^## Read pages on [\d,]+ sessions / [\d,]+ messages \({vendor}\)$.*?(?=^## |\Z)",
        re.M | re.S,
    )
    prefix = None
    for match in heading.finditer(text):
        if f"`{command}`" in match.group(0):
            prefix = match.group(0).split("\n", 1)[0]
    if prefix is None:  # a new section, unless one of this store and backend exists
        prefix = (
            f"## Read pages on {result['sessions']:,} sessions / {result['messages']:,} "
            f"messages ({vendor})"
        )
    text = replace_section(text, prefix, section)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n")
    print(f"wrote {path}")


# --- the command ----------------------------------------------------------------------


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default=None, help="store size: 10k, 100k or a number")
    parser.add_argument("--sessions", type=int, default=None, help="same as --size, a number")
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="sqlite")
    parser.add_argument(
        "--only", default=",".join(PARTS), help="comma-separated: reads,writes,load"
    )
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-admin", action="store_true", help="skip the Django admin column")
    parser.add_argument("--no-hermes", action="store_true", help="skip the Hermes column")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="reads: also time each page with the figure cache emptied before every request",
    )
    parser.add_argument(
        "--store-database",
        default=None,
        help="postgres reads: this database of the bench cluster as the store, not the seeded "
        "one (another layout of the same store, e.g. bench/partition.py's copy)",
    )
    parser.add_argument("--child-result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.size is not None and args.sessions is not None:
        parser.error("give --size or --sessions, not both")
    try:
        args.size = stores.parse_size(
            args.sessions if args.sessions is not None else (args.size or "100k")
        )
    except ValueError as error:
        parser.error(str(error))
    args.only = [part.strip() for part in args.only.split(",") if part.strip()]
    unknown = set(args.only) - set(PARTS)
    if unknown:
        parser.error(f"--only takes {', '.join(PARTS)}; not {', '.join(sorted(unknown))}")
    return args


def run_reads(args, db: str) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-reads-") as tmp:
        if db == "sqlite" and args.cold and args.size <= stores.LARGEST_SEEDED:
            # A copy of the store, migrated: the cold run signs in and caches in its own
            # var directory, never in the seeded one other benchmarks read.
            env = stores.sqlite_env(stores.clone_sqlite_store(args.size, Path(tmp) / "var"))
            stores.prepare_console(env)
        elif db == "sqlite" and args.cold:
            # A million sessions is 21 GB: no copy. The cold run empties the seeded store's
            # own figure cache, which the next benchmark simply fills again.
            env = stores.sqlite_env(stores.sqlite_store(args.size))
            stores.prepare_console(env)
        elif db == "sqlite":
            env = stores.sqlite_env(stores.sqlite_store(args.size))
        else:
            stores.postgres_store(args.size)
            env = stores.postgres_env(args.size, store_database=args.store_database)
        print(f"== Read pages, {stores.size_label(args.size)} on {db} ==", flush=True)
        _run_reads_child(args, db, env, Path(tmp))


def _run_reads_child(args, db: str, env: dict, tmp: Path) -> None:
    result_path = tmp / "result.json"
    child = [sys.executable, str(Path(__file__).resolve())]
    child += ["--size", str(args.size), "--runs", str(args.runs)]
    child += ["--warmup", str(args.warmup), "--child-result", str(result_path)]
    child += ["--no-admin"] * args.no_admin + ["--no-hermes"] * args.no_hermes
    child += ["--cold"] * args.cold
    subprocess.run(child, cwd=ROOT, env=env, check=True)
    result = json.loads(result_path.read_text())
    command = f"python bench/run.py --size {stores.size_label(args.size)} --db {db} --only reads"
    if args.cold:
        command += f" --no-admin --runs {args.runs} --cold"
        write_cold_report(args.output, result, command)
        return
    write_report(args.output, result, args.size, command)


def run_module(part: str, args, db: str) -> None:
    name = {"writes": "bench.writes", "load": "bench.load"}[part]
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name != name:
            raise
        print(f"{name} is not there yet: {part} skipped", flush=True)
        return
    entry = getattr(module, "main", None) or getattr(module, "run", None)
    print(f"== {part}, {stores.size_label(args.size)} on {db} ==", flush=True)
    entry(["--size", stores.size_label(args.size), "--db", db, "--output", str(args.output)])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child_result:
        args.child_result.write_text(json.dumps(measure(args)))
        return 0
    backends = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    for db in backends:
        for part in PARTS:
            if part not in args.only:
                continue
            if part == "reads":
                run_reads(args, db)
            else:
                run_module(part, args, db)
    return 0


if __name__ == "__main__":
    sys.exit(main())
