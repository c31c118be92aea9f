"""Run one store operation in a process of its own, for the kill -9 tests (test_crash.py).

``python -m tests.core.crash_child OPERATION JSON_ARGUMENTS`` with the store's
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
    from sessions_admin.core import deletion, faults
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
    if os.environ.get("CRASH_CHILD_RETRY_SECONDS"):
        # A store operation gives up on a busy store sooner (core.db.RETRY_SECONDS; an attempt
        # still waits out the busy or lock timeout): for a wait the test does not look at.
        from sessions_admin.core import db

        db.RETRY_SECONDS = float(os.environ["CRASH_CHILD_RETRY_SECONDS"])
    if os.environ.get("CRASH_CHILD_FULL_AT"):
        point, _, nth = os.environ["CRASH_CHILD_FULL_AT"].partition("@")
        database = os.environ["CRASH_CHILD_FULL_DATABASE"]
        if point == "start":  # full before the operation begins
            fill(database)
        else:
            faults.run_at(point, lambda: fill(database), nth=int(nth or 1))
    if operation == "merge":
        return core.merge_sessions(**arguments)
    if operation == "audited_merge":  # as the merge page runs it: with its audit entry
        from sessions_admin.ledger import actions

        return actions.merge(**arguments)
    if operation == "audited_unmerge":
        from sessions_admin.ledger import actions

        return actions.unmerge(**arguments)
    if operation == "cascade_delete":
        return core.execute_cascade_delete(**arguments)
    if operation == "audited_cascade_delete":  # as the cascade page runs it: with its audit entry
        from sessions_admin.ledger import actions

        return actions.cascade_delete(**arguments)
    if operation == "restore":
        return core.restore_trash_entry(**arguments)
    if operation == "audited_restore":  # as the trash page runs it: with its audit entry
        from sessions_admin.ledger import actions

        return actions.restore(**arguments)
    if operation == "run_job":
        return jobs.run_job(**arguments)
    if operation == "run_jobs":  # the command an operator runs to resume interrupted jobs
        from django.core.management import call_command

        call_command("run_jobs", **arguments)
        return None
    if operation == "command":  # as an operator runs it: its words and exit status, no catch
        from django.core.management import execute_from_command_line

        execute_from_command_line(["manage.py", *arguments["argv"]])
        return None
    if operation == "page_post":  # a console form as a signed-in operator's browser posts it
        from django.contrib.auth.models import User
        from django.test import Client

        client = Client(HTTP_HOST="localhost")
        client.force_login(User.objects.get(username=arguments["username"]))
        return {"status": client.post(arguments["path"], arguments["data"]).status_code}
    if operation == "run_erasure":
        from sessions_admin.ledger import actions

        return actions.run_erasure(**arguments)
    raise SystemExit(f"unknown operation {operation!r}")


def fill(database: str) -> None:
    """From here on ``database`` ("store" or "default", SQLite) cannot grow: a full disk.

    A file-size limit (RLIMIT_FSIZE) on this process makes every write past it fail with
    EFBIG (SIGXFSZ ignored), which SQLite reports as "disk I/O error"/"database or disk is
    full". The limit is where the database's write-ahead log ends: its log is emptied
    (a checkpoint) and then filled with commits that change nothing (``user_version`` set
    to itself), so its next commit starts past the limit; every other database's log is
    emptied, so its writes stay far below the limit and succeed. Called where no
    transaction is open (between batches).
    """
    import resource
    import signal

    from django.db import connections

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    sqlite = [alias for alias in connections if connections[alias].vendor == "sqlite"]
    for alias in sqlite:
        with connections[alias].cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with connections[database].cursor() as cursor:
        cursor.execute("PRAGMA user_version")
        version = cursor.fetchone()[0]
        for _ in range(100):  # ~400 KB of log, under the 1,000 pages that checkpoint it
            cursor.execute(f"PRAGMA user_version = {int(version)}")
    log = f"{connections[database].settings_dict['NAME']}-wal"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(log), hard))


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
