"""The full-text work of a bulk delete alone, in SQLite, on a copy of a seeded store (issue 30).

    python bench/fts_steps.py --size 10k --mode batched --batch 500
    python bench/fts_steps.py --size 10k --mode deferred --batch 500 --pages 100 --steps 4
    python bench/fts_steps.py --size 10k --mode one

Deletes every message of the store with plain ``sqlite3`` (the store's FTS5 triggers do the
index work), in batches of whole sessions up to ``--batch`` messages (as a job's batches),
each its own ``BEGIN IMMEDIATE`` transaction; ``one`` is a single transaction, as Hermes's
``delete_sessions``. ``deferred`` sets ``automerge`` to 0 and after each batch runs up to
``--steps`` positive ``'merge'`` commands of ``--pages`` pages per index, each a transaction
of its own, then sets ``automerge`` back and merges what is left (core.deletion.fts_merges).
No trash copy, no appender: how long each transaction holds the write lock and the total.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FTS = ("messages_fts", "messages_fts_trigram")


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))] if ordered else 0.0


def main() -> int:
    from bench import stores

    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="10k")
    parser.add_argument("--mode", choices=["one", "batched", "deferred"], default="batched")
    parser.add_argument("--batch", type=int, default=500, help="messages per batch at most")
    parser.add_argument("--pages", type=int, default=100, help="pages per merge step")
    parser.add_argument("--steps", type=int, default=4, help="merge steps per index per batch")
    args = parser.parse_args()
    seeded = stores.sqlite_store(stores.parse_size(args.size)) / "state.db"
    with tempfile.TemporaryDirectory(prefix="fts-steps-") as scratch:
        path = Path(scratch) / "state.db"
        with sqlite3.connect(seeded) as source:
            source.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        shutil.copyfile(seeded, path)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        ids = [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY started_at, id")]
        sizes = dict(conn.execute("SELECT id, COALESCE(message_count, 0) FROM sessions"))
        batches: list[list[str]] = [[]]
        weight = 0
        for sid in ids:
            if batches[-1] and weight + sizes[sid] > args.batch:
                batches.append([])
                weight = 0
            batches[-1].append(sid)
            weight += sizes[sid]
        tables = [
            t
            for t in FTS
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", [t]).fetchone()
        ]

        def merge_step(fts: str) -> tuple[bool, float]:
            before = conn.total_changes
            started = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('merge', ?)", [args.pages])
            conn.execute("COMMIT")
            return conn.total_changes - before >= 2, time.perf_counter() - started

        if args.mode == "deferred":
            for fts in tables:
                conn.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('automerge', 0)")
        deletes: list[float] = []
        merges: list[float] = []
        started = time.perf_counter()
        if args.mode == "one":
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("DELETE FROM messages")
            conn.execute("COMMIT")
            deletes.append(time.perf_counter() - started)
        else:
            for batch in batches:
                began = time.perf_counter()
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(
                    f"DELETE FROM messages WHERE session_id IN ({','.join('?' * len(batch))})",
                    batch,
                )
                conn.execute("COMMIT")
                deletes.append(time.perf_counter() - began)
                if args.mode == "deferred":
                    for fts in tables:
                        for _ in range(args.steps):
                            worked, seconds = merge_step(fts)
                            merges.append(seconds)
                            if not worked:
                                break
        run = time.perf_counter() - started
        final = 0.0
        if args.mode == "deferred":
            began = time.perf_counter()
            for fts in tables:
                conn.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('automerge', 4)")
                while True:
                    worked, seconds = merge_step(fts)
                    merges.append(seconds)
                    if not worked:
                        break
            final = time.perf_counter() - began
        conn.close()

    def ms(samples: list[float], fraction: float) -> str:
        return f"{percentile(samples, fraction) * 1000:.0f}"

    print(
        f"{args.mode}, batches of {args.batch} messages"
        + (f", {args.steps} steps of {args.pages} pages" if args.mode == "deferred" else "")
        + f": {len(deletes)} delete transactions, {run:.2f} s + {final:.2f} s final merges; "
        f"delete+commit p50 {ms(deletes, 0.5)} / p99 {ms(deletes, 0.99)} / max {ms(deletes, 1)} ms"
        + (
            f"; {len(merges)} merge steps p50 {ms(merges, 0.5)} / p99 {ms(merges, 0.99)} / "
            f"max {ms(merges, 1)} ms"
            if merges
            else ""
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
