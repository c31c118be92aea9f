"""A runtime process for the race tests: runs core operations and prints what each returned.

``python -m tests.core.race_child '[{"op": "create_session", "kwargs": {...}}, ...]'`` runs the
commands in order and prints one JSON line per command; ``--serve`` reads commands from standard
input instead, one JSON line each, answering each with one line (the property tests keep two of
these running). The environment carries the test store's URLs and, for the pause tests,
``SESSIONS_ADMIN_PAUSE_AT``/``SESSIONS_ADMIN_PAUSE_DIR`` (sessions_admin/core/faults.py).

An answer is ``{"ok": <the dataclass as a dict>}`` or ``{"error": <class name>, "message": ...,
"live_session_id": ...}`` for a ``StoreError``; anything else is a crash of this process, which
the test sees as a non-zero exit.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys


def run(command: dict) -> dict:
    from sessions_admin import core

    if command["op"] == "ensure_store_schema":  # a separate response_store.db, created empty
        from sessions_admin.core.schema import ensure_store_schema

        ensure_store_schema()
        return {"ok": None}
    if command["op"] == "cascade_delete":  # preview then delete, as an operator does

        def operation(**kwargs):
            plan = core.plan_cascade_delete(session_ids=kwargs["session_ids"])
            return core.execute_cascade_delete(
                session_ids=kwargs["session_ids"],
                expected_fingerprint=plan.fingerprint,
                actor="race test",
                reason="race test",
            )
    else:
        operation = getattr(core, command["op"])
    try:
        result = operation(**command.get("kwargs", {}))
    except core.StoreError as error:
        return {
            "error": type(error).__name__,
            "message": str(error),
            "live_session_id": getattr(error, "live_session_id", None),
        }
    if dataclasses.is_dataclass(result):
        result = dataclasses.asdict(result)
    return {"ok": result}


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sessions_admin.settings")
    import django

    django.setup()
    if argv[:1] == ["--serve"]:
        for line in sys.stdin:
            if line.strip():
                print(json.dumps(run(json.loads(line)), default=str), flush=True)
        return
    for command in json.loads(argv[0]):
        print(json.dumps(run(command), default=str), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
