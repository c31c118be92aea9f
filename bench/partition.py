"""The seeded PostgreSQL store with ``messages`` partitioned by month, for docs/scaling.md.

    python bench/partition.py --size 100k [--every day]   # builds bench_100000_part (replaced)
    python bench/run.py --size 100k --db postgres --only reads --no-admin --no-hermes \\
        --store-database bench_100000_part --output /tmp/partitioned.md

A copy of the seeded store (``CREATE DATABASE ... TEMPLATE``) whose ``messages`` becomes a
table partitioned by range of ``timestamp``: one partition a calendar month (UTC; ``--every
week`` or ``day`` for more, smaller ones) from the oldest message's to three past the newest,
and a default partition for anything outside. Everything else is as the product creates it:
the same columns and defaults; ``id`` from a sequence the table owns, going on from the
seeded one's last value (``pg_get_serial_sequence('messages', 'id')`` names it, as a restore
from the trash needs); the foreign key to ``sessions``; each of today's indexes created on
the parent, so PostgreSQL builds one per partition. The primary key of a partitioned table
must hold the partition key: it is ``(id, timestamp)``, so the database no longer refuses a
second row with the same id alone; the sequence still hands out each id once.

Prints the time each step took, the partitions and their rows. ``--appends N`` then measures
N runtime processes appending through the core (``core.append_messages``, one message a call,
each to a live session of its own) for ``--seconds`` on a fresh copy of the seeded store and on
the partitioned one, one after the other: appends per second and p50 / p99 of one append.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import stores  # noqa: E402

# Today's messages indexes (sessions_admin/core/schema.py), created on the parent.
INDEXES = (
    'CREATE INDEX idx_messages_session ON messages (session_id, "timestamp")',
    'CREATE INDEX idx_messages_session_active ON messages (session_id, active, "timestamp")',
    "CREATE INDEX idx_sa_messages_session_id ON messages (session_id, id)",
)


def _ranges(first: float, last: float, every: str) -> list[tuple[dt.datetime, dt.datetime]]:
    """Consecutive ranges of one ``every`` (day, week or month, UTC) from the one holding
    ``first`` to three past the one holding ``last`` (for the runtime's next writes)."""

    def following(start: dt.datetime) -> dt.datetime:
        if every == "month":
            return (start + dt.timedelta(days=32)).replace(day=1)
        return start + dt.timedelta(days=7 if every == "week" else 1)

    start = dt.datetime.fromtimestamp(first, dt.UTC).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    if every == "month":
        start = start.replace(day=1)
    elif every == "week":
        start -= dt.timedelta(days=start.weekday())
    end = dt.datetime.fromtimestamp(last, dt.UTC)
    ranges = []
    while start <= end:
        ranges.append((start, following(start)))
        start = following(start)
    for _ in range(3):
        ranges.append((start, following(start)))
        start = following(start)
    return ranges


def build(size: int, every: str = "month") -> str:
    import psycopg

    name = f"{stores.postgres_database(size)}_part"
    began = time.perf_counter()
    url = stores.clone_postgres_store(size, name)
    print(f"copied the seeded store as {name} in {time.perf_counter() - began:.1f} s", flush=True)
    with psycopg.connect(url, autocommit=True) as conn:
        full_text = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'messages' "
            "AND indexname = 'idx_sa_messages_fts'"
        ).fetchone()[0]
        first, last = conn.execute(
            'SELECT min("timestamp"), max("timestamp") FROM messages'
        ).fetchone()
        step = time.perf_counter()
        with conn.transaction():
            conn.execute("ALTER TABLE messages RENAME TO messages_flat")
            for index in ("idx_messages_session", "idx_messages_session_active",
                          "idx_sa_messages_session_id", "idx_sa_messages_fts"):  # fmt: skip
                conn.execute(f"DROP INDEX IF EXISTS {index}")
            conn.execute("ALTER TABLE messages_flat DROP CONSTRAINT messages_pkey")
            sequence = conn.execute(
                "SELECT pg_get_serial_sequence('messages_flat', 'id')"
            ).fetchone()[0]
            # The identity's sequence becomes a plain one the new table owns.
            conn.execute("CREATE SEQUENCE messages_part_id_seq")
            conn.execute(
                f"SELECT setval('messages_part_id_seq', (SELECT last_value FROM {sequence}))"
            )
            conn.execute(
                "CREATE TABLE messages (LIKE messages_flat INCLUDING DEFAULTS) "
                'PARTITION BY RANGE ("timestamp")'
            )
            conn.execute(
                "ALTER TABLE messages ALTER COLUMN id SET DEFAULT nextval('messages_part_id_seq')"
            )
            conn.execute("ALTER SEQUENCE messages_part_id_seq OWNED BY messages.id")
            for start, end in _ranges(first, last, every):
                conn.execute(
                    f"CREATE TABLE messages_{start:%Y_%m_%d} PARTITION OF messages "
                    f"FOR VALUES FROM ({start.timestamp()}) TO ({end.timestamp()})"
                )
            conn.execute("CREATE TABLE messages_default PARTITION OF messages DEFAULT")
            conn.execute("INSERT INTO messages SELECT * FROM messages_flat")
            conn.execute("DROP TABLE messages_flat")
        print(f"moved the rows into partitions in {time.perf_counter() - step:.1f} s", flush=True)
        step = time.perf_counter()
        conn.execute('ALTER TABLE messages ADD PRIMARY KEY (id, "timestamp")')
        conn.execute(
            "ALTER TABLE messages ADD CONSTRAINT messages_session_id_fkey "
            "FOREIGN KEY (session_id) REFERENCES sessions(id)"
        )
        for index in INDEXES:
            conn.execute(index)
        print(f"keys and btree indexes in {time.perf_counter() - step:.1f} s", flush=True)
        step = time.perf_counter()
        conn.execute(full_text.replace(" ON public.messages ", " ON messages "))
        print(f"full-text index in {time.perf_counter() - step:.1f} s", flush=True)
        conn.execute("VACUUM ANALYZE messages")
        for table, rows in conn.execute(
            "SELECT c.relname, c.reltuples::bigint FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent "
            "WHERE p.relname = 'messages' ORDER BY c.relname"
        ):
            print(f"  {table}: {rows:,} rows", flush=True)
    print(f"{name} ready in {time.perf_counter() - began:.1f} s: {url}", flush=True)
    return name


def _appender(env: dict, label: str, start: float, seconds: float, out) -> None:
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sessions_admin.settings")
    import django

    django.setup()
    from sessions_admin import core

    session_id = core.create_session(
        source="partbench", session_key=f"partbench:{label}", join_live=True
    ).session_id
    while time.time() < start:
        time.sleep(0.001)
    latencies = []
    n = 0
    while time.time() < start + seconds:
        began = time.perf_counter()
        core.append_messages(
            session_id=session_id, messages=[{"role": "user", "content": f"{label} {n}"}]
        )
        latencies.append((time.perf_counter() - began) * 1000)
        n += 1
    out.put(latencies)


def measure_appends(size: int, database: str, processes: int, seconds: float) -> dict:
    env = {
        k: v
        for k, v in stores.postgres_env(size, store_database=database).items()
        if isinstance(v, str)
    }
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    start = time.time() + 5 + processes  # every process set up before the window opens
    workers = [
        context.Process(target=_appender, args=(env, f"{database}-{i}", start, seconds, out))
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    latencies = [ms for _ in workers for ms in out.get()]
    for worker in workers:
        worker.join()
    latencies.sort()
    return {
        "per_second": len(latencies) / seconds,
        "p50": statistics.median(latencies),
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="100k")
    parser.add_argument(
        "--every",
        choices=("day", "week", "month"),
        default="month",
        help="one partition a day, week or month (the seeded stores span about two months)",
    )
    parser.add_argument("--appends", type=int, default=0, help="runtime processes (0: none)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--no-build", action="store_true", help="the partitioned copy exists")
    args = parser.parse_args(argv)
    size = stores.parse_size(args.size)
    name = f"{stores.postgres_database(size)}_part"
    if not args.no_build:
        build(size, args.every)
    if args.appends:
        flat = f"{stores.postgres_database(size)}_flat"
        stores.clone_postgres_store(size, flat)
        for database in (flat, name):
            found = measure_appends(size, database, args.appends, args.seconds)
            print(
                f"{database}: {args.appends} runtimes, {found['per_second']:.0f} appends/s, "
                f"p50 {found['p50']:.1f} ms, p99 {found['p99']:.1f} ms (load average "
                f"{os.getloadavg()[0]:.2f})",
                flush=True,
            )
        stores.drop_postgres_database(flat)


if __name__ == "__main__":
    main()
