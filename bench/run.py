"""Server-time benchmarks of the console's read pages on a large seeded store.

    python bench/run.py --sessions 100000            # seeds bench/.stores/100000 once, then measures
    python bench/run.py --sessions 10000 --runs 25

Each page is requested through Django's test client (the whole view, template
and database work in-process; no network), after warm-up, several times; the
median and p95 are reported next to the bare SQL that returns the same rows
(the floor). Results go to docs/benchmarks.md (replacing the section for this
size). Figures are machine-dependent: compare ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def seed(store_dir: Path, sessions: int) -> None:
    marker = store_dir / "seeded"
    if marker.exists():
        return
    store_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SESSIONS_ADMIN_VAR_DIR": str(store_dir)}
    for args in (
        ["migrate", "-v", "0"],
        ["init_store"],
        ["seed_demo", "--sessions", str(sessions)],
    ):
        print("manage.py", " ".join(args), flush=True)
        subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True)
    marker.write_text(dt.datetime.now(dt.UTC).isoformat())


def timed(fn, *, warmup: int, runs: int) -> tuple[float, float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    return statistics.median(samples), p95


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--store-dir", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    store_dir = args.store_dir or ROOT / "bench" / ".stores" / str(args.sessions)
    seed(store_dir, args.sessions)

    os.environ["SESSIONS_ADMIN_VAR_DIR"] = str(store_dir)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sessions_admin.settings")
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.test import Client
    from django.test.utils import setup_test_environment

    from sessions_admin import core
    from sessions_admin.console.roles import assign_role
    from sessions_admin.core import db
    from sessions_admin.store import listing

    setup_test_environment()  # the test client needs it; it changes no database
    user, _ = User.objects.get_or_create(username="bench")
    assign_role(user, "admin")
    client = Client()
    client.force_login(user)

    sessions_total = db.fetchone("SELECT COUNT(*) FROM sessions")[0]
    messages_total = db.fetchone("SELECT COUNT(*) FROM messages")[0]
    longest = db.fetchone(
        "SELECT id, message_count FROM sessions ORDER BY message_count DESC LIMIT 1"
    )
    compression_children = [
        r[0]
        for r in db.fetchall(
            "SELECT c.id FROM sessions c JOIN sessions p ON p.id = c.parent_session_id "
            "WHERE p.end_reason = 'compression'"
        )
    ]
    roots = core.lineage.roots_of(compression_children)
    chain_root = max(set(roots.values()), key=list(roots.values()).count)
    chain = core.compression_chain(session_id=chain_root)
    chain_middle = chain[len(chain) // 2]
    deep = db.fetchone(
        "SELECT started_at, id FROM sessions ORDER BY started_at DESC, id DESC LIMIT 1 OFFSET %s",
        [sessions_total // 2],
    )
    deep_cursor = listing.encode_cursor("started", "desc", [deep[0], deep[1]])
    newest = db.fetchone("SELECT MAX(started_at) FROM sessions")[0]
    day = dt.datetime.fromtimestamp(newest, dt.UTC).date()
    week_ago = day - dt.timedelta(days=7)
    word = "weather"
    if not db.fetchall(
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH %s LIMIT 1", [word]
    ):
        word = "the"

    def get(url: str):
        def fetch():
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)

        return fetch

    def sql(statement: str, params: list):
        return lambda: db.fetchall(statement, params)

    cases = [
        (
            "Session list, first page (conversations)",
            get("/sessions/"),
            sql(
                # Unary + keeps SQLite on the started_at index; ordering by the indexed
                # column alone (ties on started_at are rare) is the floor.
                "SELECT * FROM sessions WHERE +parent_session_id IS NULL "
                "ORDER BY started_at DESC LIMIT 50",
                [],
            ),
        ),
        (
            "Session list, every segment, first page",
            get("/sessions/?scope=all"),
            sql("SELECT * FROM sessions ORDER BY started_at DESC LIMIT 50", []),
        ),
        (
            f"Filtered: source=telegram, started {week_ago}..{day}",
            get(f"/sessions/?scope=all&source=telegram&from={week_ago}&to={day}"),
            sql(
                "SELECT * FROM sessions WHERE source = %s AND started_at >= %s "
                "ORDER BY started_at DESC LIMIT 50",
                ["telegram", dt.datetime.combine(week_ago, dt.time(), dt.UTC).timestamp()],
            ),
        ),
        (
            f"Deep keyset page (row {sessions_total // 2:,})",
            get(f"/sessions/?scope=all&after={deep_cursor}"),
            sql(
                "SELECT * FROM sessions WHERE started_at < %s ORDER BY started_at DESC LIMIT 50",
                [deep[0]],
            ),
        ),
        ("Sort by last activity, first page", get("/sessions/?sort=activity"), None),
        (
            f"Full-text search '{word}'",
            get(f"/sessions/?q={word}"),
            sql(
                "SELECT m.id, snippet(messages_fts, 0, '[', ']', '…', 12) FROM messages_fts "
                "JOIN messages m ON m.id = messages_fts.rowid WHERE messages_fts MATCH %s "
                "ORDER BY messages_fts.rowid DESC LIMIT 50",
                [word],
            ),
        ),
        (
            f"Session detail + first chunk of a {longest[1]:,}-message transcript",
            get(f"/sessions/{longest[0]}/"),
            sql("SELECT * FROM messages WHERE session_id = %s ORDER BY id LIMIT 100", [longest[0]]),
        ),
        (
            f"Session detail, {len(chain)}-segment compression chain (lineage + stitched transcript)",
            get(f"/sessions/{chain_middle}/"),
            None,
        ),
        ("Home overview (counts cached after the first request)", get("/"), None),
        ("Conversations", get("/conversations/"), None),
    ]

    # Floors first: a page leaves the connection in the state a real request would.
    floors = {
        name: timed(floor, warmup=args.warmup, runs=args.runs)[0] if floor else None
        for name, _, floor in cases
    }
    rows = []
    for name, page, _ in cases:
        page_median, page_p95 = timed(page, warmup=args.warmup, runs=args.runs)
        floor_median = floors[name]
        rows.append((name, page_median, page_p95, floor_median))
        ratio = f"{page_median / floor_median:.1f}x" if floor_median else "-"
        print(
            f"{name}: median {page_median:.1f} ms, p95 {page_p95:.1f} ms, "
            f"SQL floor {floor_median or 0:.2f} ms ({ratio})",
            flush=True,
        )

    write_report(args.output, args.sessions, sessions_total, messages_total, rows, args.runs)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}"
    )


def write_report(path: Path, size: int, sessions: int, messages: int, rows, runs: int) -> None:
    heading = f"## Read pages on {sessions:,} sessions / {messages:,} messages (SQLite)"
    lines = [
        heading,
        "",
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {machine()} with "
        f"`python bench/run.py --sessions {size}`: server time through Django's test client "
        f"(view, queries and template), {runs} runs after warm-up. The SQL floor is the bare "
        "query returning the same rows; the ratio is page / floor.",
        "",
        "| page | median ms | p95 ms | SQL floor ms | ratio |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, median, p95, floor in rows:
        floor_text = f"{floor:.2f}" if floor else "-"
        ratio = f"{median / floor:.1f}x" if floor else "-"
        lines.append(f"| {name} | {median:.1f} | {p95:.1f} | {floor_text} | {ratio} |")
    lines.append("")
    section = "\n".join(lines)
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    pattern = re.compile(
        r"^## Read pages on [\d,]+ sessions / [\d,]+ messages \(SQLite\)\n.*?(?=^## |\Z)",
        re.S | re.M,
    )
    existing = [m for m in pattern.finditer(text) if f"--sessions {size}`" in m.group(0)]
    if existing:
        text = text[: existing[0].start()] + section + "\n" + text[existing[0].end() :]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
