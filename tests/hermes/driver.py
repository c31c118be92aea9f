"""Run hermes-agent's own code against a store: the runtime side of the Hermes tests.

Executed by the Python that has hermes-agent installed (its own virtualenv,
see sessions_admin.devtools.ensure_hermes), never imported by the test
process. Reads one JSON request from standard input:

    {"home": dir, "state": path or null, "responses": path or null,
     "ops": [{"call": "state.append_message", "args": [...], "kwargs": {...}},
             {"sql": "PRAGMA integrity_check", "on": "state"}, ...]}

and writes {"hermes_version", "schema_version", "results": [...]} to standard
output; a failing op gives {"error": "ExceptionName: text"} in its place.
``state`` is opened with ``hermes_state.SessionDB`` (which runs Hermes's own
schema initialisation, exactly as the runtime does on start-up) and
``responses`` with the API server's ``ResponseStore``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys


def _plain(value):
    if isinstance(value, sqlite3.Row):
        return {key: _plain(value[key]) for key in value.keys()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def main() -> int:
    request = json.load(sys.stdin)
    os.environ["HERMES_HOME"] = request["home"]
    import importlib.metadata
    from pathlib import Path

    import hermes_state
    from gateway.platforms.api_server import ResponseStore

    targets = {}
    if request.get("state"):
        targets["state"] = hermes_state.SessionDB(db_path=Path(request["state"]))
    if request.get("responses"):
        targets["responses"] = ResponseStore(
            max_size=int(request.get("max_responses", 100)), db_path=request["responses"]
        )
    results = []
    try:
        for op in request["ops"]:
            try:
                if "call" in op:
                    target, method = op["call"].split(".", 1)
                    value = getattr(targets[target], method)(
                        *op.get("args", []), **op.get("kwargs", {})
                    )
                else:
                    target = targets[op.get("on", "state")]
                    conn = target._conn
                    value = [list(row) for row in conn.execute(op["sql"], op.get("params", []))]
                    if op.get("commit"):
                        conn.commit()
                results.append(_plain(value))
            except Exception as error:  # noqa: BLE001 - reported to the test
                results.append({"error": f"{type(error).__name__}: {error}"})
    finally:
        for target in targets.values():
            target.close()
    json.dump(
        {
            "hermes_version": importlib.metadata.version("hermes-agent"),
            "schema_version": hermes_state.SCHEMA_VERSION,
            "results": results,
        },
        sys.stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
