"""What an idle open page costs the server: requests per minute and CPU; writes docs/benchmarks.md.

    python bench/idle.py                          # the seeded 10k SQLite store, 60 s
    python bench/idle.py --size 100k --duration 120
    python bench/idle.py --var-dir /tmp/small     # any store directory

It serves the dashboard with gunicorn (the production config, ``--workers`` processes)
on a loopback port, and measures twice for ``--duration`` seconds while nothing writes
to the store: first with no page open (the server's own background work: the slug
history, the cached figures), then with a real headless chromium (Debian's, through
Playwright) keeping three tabs open and visible, signed in as a viewer: a live
session's page shown to its end (its poller asks for new messages), the session list
(its banner asks for sessions started since) and the overview (its counts refresh).
Reported: the requests each page made per minute (counted in the browser, after the
page loaded) and the CPU seconds per minute of the gunicorn processes (user + system
time from ``/proc/<pid>/stat``, master and workers), without and with the pages open.

The store is only read (no simulator runs), so the seeded store is used in place.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import stores  # noqa: E402
from bench.load import (  # noqa: E402
    OPERATOR,
    PASSWORD,
    _manage,
    _wait_for,
    cpu_model,
    replace_section,
    sign_in,
)
from sessions_admin.devtools import free_port, stop_process  # noqa: E402

HEADING = "## Idle open pages"
REPORT = ROOT / "docs" / "benchmarks.md"
# Time for each page's first requests (the overview's health panel, the list's
# lazy parts) before counting starts: what is counted is the page left open.
SETTLE_SECONDS = 8
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _process_tree(root: int) -> list[int]:
    """``root`` and its descendants (gunicorn's master and workers)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: fields follow the last ")".
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
    tree, frontier = [root], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        tree += children
        frontier += children
    return tree


def cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root`` and its live descendants."""
    total = 0
    for pid in _process_tree(root):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / CLOCK_TICKS


def live_session_path(host: str, port: int, cookie: str) -> str:
    """A live session from the list (status=live), shown at its end, where it polls."""
    import http.client

    connection = http.client.HTTPConnection(host, port, timeout=30)
    connection.request("GET", "/sessions/?status=live", headers={"Cookie": cookie})
    page = connection.getresponse().read().decode()
    connection.close()
    match = re.search(r'href="(/sessions/[^"/?]+/)"', page)
    if not match:
        raise RuntimeError("the store lists no live session")
    return f"{match.group(1)}?at=end"


def measure(args) -> dict:
    from playwright.sync_api import sync_playwright

    load_average = os.getloadavg()[0]
    if args.var_dir is not None:
        var_dir = args.var_dir.resolve()
        label = f"store in {var_dir}"
    else:
        var_dir = stores.sqlite_store(stores.parse_size(args.size))
        label = f"{stores.parse_size(args.size):,} sessions"
    env = {
        **stores.sqlite_env(var_dir),
        "SESSIONS_ADMIN_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SESSIONS_ADMIN_LOG_LEVEL": "WARNING",
    }
    env.setdefault("SESSIONS_ADMIN_SECRET_KEY", "idle-bench-" + "x" * 50)
    _manage(env, "migrate", "--noinput", "-v", "0")
    _manage(env, "init_store")
    _manage(env, "create_operator", OPERATOR, "--role", "viewer", "--if-missing", stdin=PASSWORD)
    host, port = "127.0.0.1", free_port()
    base = f"http://{host}:{port}"
    server_log = tempfile.TemporaryFile(mode="w+")
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "sessions_admin.wsgi"]
        + ["--bind", f"{host}:{port}", "--workers", str(args.workers)]
        + ["--config", "python:sessions_admin.gunicorn_conf", "--timeout", "60"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=server_log,
    )
    try:
        _wait_for(host, port)
        cookie = sign_in(host, port)
        pages = {
            "live session": live_session_path(host, port, cookie),
            "session list": "/sessions/",
            "overview": "/",
        }
        # The server alone, nothing open: its background work is the floor.
        time.sleep(SETTLE_SECONDS)
        before = cpu_seconds(server.pid)
        time.sleep(args.duration)
        alone = cpu_seconds(server.pid) - before

        chromium = shutil.which("chromium")
        if not chromium:
            raise RuntimeError("Debian's chromium is not installed (apt-get install chromium)")
        counts = {name: 0 for name in pages}
        asked: list[tuple[str, str]] = []
        counting = {"on": False}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium, headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            context = browser.new_context(base_url=base)
            context.add_cookies(
                [
                    {"name": k, "value": v, "url": base}
                    for k, v in (part.split("=", 1) for part in cookie.split("; "))
                ]
            )
            opened = []
            for name, path in pages.items():
                page = context.new_page()

                def count(request, name=name) -> None:
                    if counting["on"]:
                        counts[name] += 1
                        asked.append((name, request.url.split("?")[0].removeprefix(base)))

                page.on("request", count)
                page.goto(path)
                opened.append(page)
            if not opened[0].locator("#live-tail").count():
                raise RuntimeError(f"{pages['live session']} does not poll: is it live?")
            visible = [p.evaluate("document.visibilityState") for p in opened]
            time.sleep(SETTLE_SECONDS)
            counting["on"] = True
            before = cpu_seconds(server.pid)
            started = time.monotonic()
            # Playwright's calls keep its event loop (and the request events) running.
            while time.monotonic() - started < args.duration:
                opened[0].wait_for_timeout(1000)
            elapsed = time.monotonic() - started
            with_pages = cpu_seconds(server.pid) - before
            counting["on"] = False
            browser.close()
    finally:
        stop_process(server, timeout=30)
        server_log.close()
    minutes = args.duration / 60
    return {
        "when": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "store": label,
        "workers": args.workers,
        "duration": elapsed,
        "load_average": load_average,
        "visible": visible,
        "pages": pages,
        "per_minute": {name: n / (elapsed / 60) for name, n in counts.items()},
        "asked": sorted(Counter(asked).items()),
        "cpu_alone": alone / minutes,
        "cpu_with_pages": with_pages / (elapsed / 60),
        "command": "python bench/idle.py "
        + (
            f"--var-dir {args.var_dir}"
            if args.var_dir
            else f"--size {stores.size_label(stores.parse_size(args.size))}"
        )
        + f" --duration {args.duration:g} --workers {args.workers}",
    }


def render_section(result: dict) -> str:
    lines = [
        HEADING,
        "",
        f"Measured {result['when']} on {os.cpu_count()} cores ({cpu_model()}; load average "
        f"{result['load_average']:.1f} before the run, the cores shared with other work), "
        f"Python {platform.python_version()}, with `{result['command']}`: gunicorn "
        f"({result['workers']} workers, `sessions_admin.gunicorn_conf`) on loopback over the "
        f"SQLite store of {result['store']}, nothing writing to it; {result['duration']:.0f} s "
        "with no page open, then as long with a headless chromium keeping three visible tabs "
        f"open ({', '.join(result['visible'])}), signed in as a viewer.",
        "",
        "| page left open | what it asks | requests per minute |",
        "| --- | --- | ---: |",
    ]
    asks = {
        "live session": "new messages after the last shown (204 when none), every 5 s",
        "session list": "sessions started since it was opened (204 when none), every 15 s",
        "overview": "its cached counts, every 30 s",
    }
    for name, rate in result["per_minute"].items():
        paths = ", ".join(f"{n} × `{path}`" for (page, path), n in result["asked"] if page == name)
        lines.append(
            f"| {name} (`{result['pages'][name]}`) | {asks[name]}; asked: {paths or 'nothing'} "
            f"| {rate:.1f} |"
        )
    extra = result["cpu_with_pages"] - result["cpu_alone"]
    lines += [
        "",
        f"Server CPU (gunicorn master and workers, user + system): "
        f"{result['cpu_alone']:.2f} s per minute with no page open, "
        f"{result['cpu_with_pages']:.2f} s per minute with the three pages open: "
        f"{extra:.2f} s per minute for the three ({extra / 60 * 100:.2f} % of one core). "
        "A hidden tab asks nothing (static/js/live.js ticks only while the page is visible); "
        "a tab coming into view asks at once, which is where a count above the period's "
        "(12 a minute for the live session) comes from.",
        "",
    ]
    return "\n".join(lines)


def write_report(path: Path, result: dict) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    text = replace_section(text, HEADING, render_section(result))
    path.write_text(text.rstrip("\n") + "\n")
    print(f"wrote {path}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--size", default="10k", help="seeded SQLite store (bench/stores.py)")
    parser.add_argument("--var-dir", type=Path, help="serve this store directory instead")
    parser.add_argument("--duration", type=float, default=60, help="seconds per measurement")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--report", type=Path, default=REPORT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = measure(args)
    for (name, path), n in result["asked"]:
        print(f"{name}: {n} x {path}")
    print(render_section(result))
    write_report(args.report, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
