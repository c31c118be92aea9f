"""Run one store operation in a process of its own, for the kill -9 tests (test_crash.py).

``python -m tests.store.crash_child OPERATION JSON_ARGUMENTS`` with the store's
URLs and ``SESSIONS_ADMIN_CRASH_AT`` in the environment. Prints the result on
success; a crash point kills the process before it gets there.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys


def main(operation: str, arguments: dict) -> object:
    from sessions_admin import core
    from sessions_admin.core import deletion
    from sessions_admin.ledger import jobs

    if os.environ.get("CRASH_CHILD_BATCH_SESSIONS"):
        # Tiny batches, so a small lineage takes several (the default is 200 sessions).
        deletion.delete_in_batches.__kwdefaults__["batch_sessions"] = int(
            os.environ["CRASH_CHILD_BATCH_SESSIONS"]
        )
    if os.environ.get("CRASH_CHILD_BATCH_MESSAGES"):
        # Small parts, so a session of a few hundred messages is deleted in several.
        deletion.delete_in_batches.__kwdefaults__["batch_messages"] = int(
            os.environ["CRASH_CHILD_BATCH_MESSAGES"]
        )
    if operation == "merge":
        return core.merge_sessions(**arguments)
    if operation == "cascade_delete":
        return core.execute_cascade_delete(**arguments)
    if operation == "restore":
        return core.restore_trash_entry(**arguments)
    if operation == "run_job":
        return jobs.run_job(**arguments)
    if operation == "run_jobs":  # the command an operator runs to resume interrupted jobs
        from django.core.management import call_command

        call_command("run_jobs", **arguments)
        return None
    if operation == "run_erasure":
        from sessions_admin.ledger import actions

        return actions.run_erasure(**arguments)
    raise SystemExit(f"unknown operation {operation!r}")


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sessions_admin.settings")
    import django

    django.setup()
    result = main(sys.argv[1], json.loads(sys.argv[2]))
    if result is not None:
        print(
            json.dumps(
                result if isinstance(result, dict) else dataclasses.asdict(result), default=str
            )
        )
