"""What the whole machine spent during a measured window (bench/load.py ``--profile``).

- CPU seconds per group of processes, read from ``/proc``: a process's own user+system time
  plus, for a group's root, what its children that already exited used (the kernel adds a
  reaped child's time to its parent's ``cutime``/``cstime``). gunicorn's master reaps its
  workers, PostgreSQL's postmaster every backend, so connections opened and closed per
  request are counted too. A child alive at the start and reaped before the end is counted
  whole at the end, so a group can be over by the little such a child used before the
  window: with connections kept, none.
- On PostgreSQL, from the server's own statistics over the same window: transactions,
  connections opened (``pg_stat_database.sessions``), statements and their execution and
  planning time (``pg_stat_statements``, when the cluster preloads it: bench/stores.py
  does), and what the active backends were doing, sampled every 20 ms from
  ``pg_stat_activity``: on a core (no wait event) or waiting, on what (a lock, an advisory
  lock, a lightweight lock, I/O, the client), split by ``application_name`` (load.py names
  the console's connections ``console`` and the simulated runtimes' ``runtime``).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, own CPU ticks, reaped children's CPU ticks) of ``pid``; None once gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = text[text.rindex(")") + 2 :].split()
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return ppid, utime + stime, cutime + cstime


def _process_table() -> dict[int, tuple[int, int, int]]:
    table = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                table[int(entry.name)] = stat
    return table


def _group_ticks(
    roots: list[int], table: dict[int, tuple[int, int, int]], *, descendants: bool = True
) -> int:
    """Own time of the roots and every live descendant, plus the roots' reaped children;
    with ``descendants=False`` the roots' own time only."""
    if not descendants:
        return sum(table[root][1] for root in roots if root in table)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _own, _reaped) in table.items():
        children.setdefault(ppid, []).append(pid)
    total = 0
    seen: set[int] = set()
    for root in roots:
        if root not in table:
            continue
        total += table[root][2]
        stack = [root]
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            total += table[pid][1]
            stack.extend(children.get(pid, ()))
    return total


class CpuMeter:
    """CPU seconds used by each named group of process trees between start() and stop()."""

    def __init__(
        self, groups: dict[str, Callable[[], list[int]]], *, own_only: frozenset[str] = frozenset()
    ):
        self.groups = groups
        self.own_only = own_only
        self._start: dict[str, int] = {}
        self.seconds: dict[str, float] = {}

    def _ticks(self) -> dict[str, int]:
        table = _process_table()
        return {
            name: _group_ticks(roots(), table, descendants=name not in self.own_only)
            for name, roots in self.groups.items()
        }

    def start(self) -> None:
        self._start = self._ticks()
        self._wall = time.monotonic()
        self._machine = _machine_ticks()

    def stop(self) -> None:
        end = self._ticks()
        self.wall = time.monotonic() - self._wall
        busy, total = (b - a for a, b in zip(self._machine, _machine_ticks(), strict=True))
        self.machine_busy = busy / total if total else 0.0
        self.seconds = {
            name: max(0, end[name] - self._start.get(name, 0)) / CLOCK_TICKS for name in end
        }


def _machine_ticks() -> tuple[int, int]:
    """(busy, all) jiffies of every core since boot, from /proc/stat."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in first]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


def postmaster_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


# --- PostgreSQL's side ---------------------------------------------------------------------

_DATABASE_COUNTERS = ("xact_commit", "xact_rollback", "sessions", "tup_returned", "blks_read")


@dataclass
class PostgresProfile:
    url: str  # any database of the cluster, for the sampler's own connection
    databases: list[str]
    interval: float = 0.02
    waits: Counter = field(default_factory=Counter)
    samples: int = 0
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    statements: list[dict] = field(default_factory=list)
    statement_totals: dict[str, float] = field(default_factory=dict)
    has_statements: bool = False
    _backends: dict[int, list] = field(default_factory=dict)  # pid -> [app, first, last ticks]

    def _database_counters(self, conn) -> dict[str, dict[str, int]]:
        rows = conn.execute(
            f"SELECT datname, {', '.join(_DATABASE_COUNTERS)} FROM pg_stat_database "
            "WHERE datname = ANY(%s)",
            [self.databases],
        ).fetchall()
        return {row[0]: dict(zip(_DATABASE_COUNTERS, row[1:], strict=True)) for row in rows}

    def start(self) -> None:
        import psycopg

        self._conn = psycopg.connect(self.url, autocommit=True, application_name="profiler")
        self.has_statements = bool(
            self._conn.execute(
                "SELECT 1 FROM pg_settings WHERE name = 'shared_preload_libraries' "
                "AND setting LIKE '%%pg_stat_statements%%'"
            ).fetchone()
        )
        if self.has_statements:
            self._conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            self._set_planning("on")
            self._conn.execute("SELECT pg_stat_statements_reset()")
        self._conn.execute("SELECT pg_stat_clear_snapshot()")
        self._before = self._database_counters(self._conn)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True, application_name="profiler") as conn:
            while not self._stop.wait(self.interval):
                rows = conn.execute(
                    "SELECT pid, application_name, state, wait_event_type, wait_event "
                    "FROM pg_stat_activity WHERE backend_type = 'client backend' "
                    "AND application_name <> 'profiler'"
                ).fetchall()
                self.samples += 1
                for pid, app, state, kind, event in rows:
                    app = app or "(unnamed)"
                    self._backend_ticks(pid, app)
                    if state == "active":
                        what = "on a core" if kind is None else f"{kind}: {event}"
                        self.waits[(app, what)] += 1

    def _backend_ticks(self, pid: int, app: str) -> None:
        """A backend's own CPU ticks when first and last seen, by the application it serves
        (pooled and kept connections live through the window, so this is their whole use)."""
        stat = _stat(pid)
        if stat is None:
            return
        first = self._backends.setdefault(pid, [app, stat[1], stat[1]])
        first[2] = stat[1]

    def cpu_by_application(self) -> dict[str, float]:
        """CPU seconds PostgreSQL's backends spent for each application over the window
        (what connections opened and closed between two samples used is not in it)."""
        seconds: Counter = Counter()
        for app, first, last in self._backends.values():
            seconds[app] += (last - first) / CLOCK_TICKS
        return dict(seconds)

    def _set_planning(self, value: str) -> None:
        """Planning time is tracked for the window only (new connections see it at once)."""
        self._conn.execute(f"ALTER SYSTEM SET pg_stat_statements.track_planning = {value}")
        self._conn.execute("SELECT pg_reload_conf()")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.execute("SELECT pg_stat_clear_snapshot()")
        after = self._database_counters(self._conn)
        self.counters = {
            name: {
                key: after[name][key] - self._before.get(name, {}).get(key, 0)
                for key in after[name]
            }
            for name in after
        }
        if self.has_statements:
            rows = self._conn.execute(
                "SELECT d.datname, s.calls, s.total_exec_time, s.total_plan_time, s.rows, "
                "left(regexp_replace(s.query, '\\s+', ' ', 'g'), 110) "
                "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
                "WHERE d.datname = ANY(%s) ORDER BY s.total_exec_time + s.total_plan_time DESC",
                [self.databases],
            ).fetchall()
            self.statement_totals = {
                "calls": sum(r[1] for r in rows),
                "exec_ms": sum(r[2] for r in rows),
                "plan_ms": sum(r[3] for r in rows),
            }
            self.statements = [
                {
                    "database": r[0],
                    "calls": r[1],
                    "exec_ms": r[2],
                    "plan_ms": r[3],
                    "rows": r[4],
                    "query": r[5],
                }
                for r in rows[:12]
            ]
            self._set_planning("off")
        self._conn.close()

    def busy_backends(self) -> dict[str, float]:
        """Mean number of active backends per application over the window."""
        per_app: Counter = Counter()
        for (app, _what), count in self.waits.items():
            per_app[app] += count
        return {app: count / max(1, self.samples) for app, count in per_app.items()}
