"""Time hermes-agent's own SessionDB reads on a store: run by the Hermes virtualenv's Python.

    var/hermes-agent-0.19.0/bin/python bench/hermes_reads.py < request.json

Request: {"state": path, "warmup": n, "runs": n, "cases": [{"name", "method", "kwargs"}]}.
Answer (standard output): {"hermes_version", "results": {name: {"median", "p95", "rows"}}},
times in milliseconds, or {"error": ...} in place of a case that failed. The database is
opened read-only (SessionDB(read_only=True)): nothing in the cached bench store changes.
Standard library and hermes-agent only: this runs outside the project's environment.
"""

from __future__ import annotations

import importlib.metadata
import json
import statistics
import sys
import time
from pathlib import Path

SLOW_SECONDS = 1.0
SLOW_RUNS = 3


def main() -> int:
    request = json.load(sys.stdin)
    import hermes_state

    db = hermes_state.SessionDB(db_path=Path(request["state"]), read_only=True)
    # A read-only SessionDB skips the start-up probe that turns full-text search on; the
    # runtime itself runs it, so set what it would find (the FTS tables exist).
    tables = {row[0] for row in db._conn.execute("SELECT name FROM sqlite_master")}
    db._fts_enabled = "messages_fts" in tables
    db._trigram_available = "messages_fts_trigram" in tables
    results = {}
    try:
        for case in request["cases"]:
            method = getattr(db, case["method"])
            kwargs = case.get("kwargs", {})
            try:
                runs = request["runs"]
                for _ in range(request["warmup"]):
                    start = time.perf_counter()
                    method(**kwargs)
                    if time.perf_counter() - start > SLOW_SECONDS:
                        runs = min(runs, SLOW_RUNS)  # seconds a call: a few runs tell enough
                        break
                samples = []
                rows = 0
                for _ in range(runs):
                    start = time.perf_counter()
                    value = method(**kwargs)
                    samples.append((time.perf_counter() - start) * 1000)
                    rows = len(value) if hasattr(value, "__len__") else 0
                samples.sort()
                p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
                results[case["name"]] = {
                    "median": statistics.median(samples),
                    "p95": p95,
                    "rows": rows,
                    "runs": runs,
                }
            except Exception as error:  # noqa: BLE001 - reported beside the other figures
                results[case["name"]] = {"error": f"{type(error).__name__}: {error}"}
    finally:
        db.close()
    json.dump(
        {"hermes_version": importlib.metadata.version("hermes-agent"), "results": results},
        sys.stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
