"""Crash points for the kill -9 tests: a process dies exactly where a test asks.

``checkpoint(name)`` does nothing unless ``SESSIONS_ADMIN_CRASH_AT`` names
that point (``name``, or ``name@N`` for its Nth hit; a comma-separated list
is allowed), in which case the process kills itself with SIGKILL: no
``finally`` runs, no transaction is rolled back or committed by Python,
exactly like a power cut or the OOM killer.
The variable is read once at import, so a checkpoint costs one truth test
when crash testing is off. Tests run the operation in a child process with
the variable set and then check the store it left behind
(tests/store/test_crash.py).
"""

from __future__ import annotations

import os
import signal

CRASH_AT_VARIABLE = "SESSIONS_ADMIN_CRASH_AT"

# Every point the core can crash at; a test naming another is a typo, refused at start.
POINTS = frozenset(
    {
        # merge_sessions: messages and children moved, counters not yet updated, not committed.
        "merge.after_move",
        # merge_sessions: everything written (merge record too), the transaction not yet committed.
        "merge.before_commit",
        # A delete batch: its rows copied into the trash (committed), the store delete not run.
        "delete.after_trash_copy",
        # A delete batch: the store rows deleted, the store transaction not yet committed.
        "delete.before_commit",
        # A delete batch committed, before its trash entry is marked complete.
        "delete.after_commit",
        # Cascade delete: a batch committed, the next one not started.
        "cascade.between_batches",
        # Trash restore: every row back in the store, the transaction not yet committed.
        "restore.before_commit",
        # Bulk-delete job: a batch committed in the store, its job items not yet marked done.
        "job.after_batch_commit",
        # Bulk-delete job: every item processed, the job not yet marked done.
        "job.before_done",
    }
)


def _points_from_environment() -> dict[str, int]:
    """``{point: on which hit to die}`` from ``name`` or ``name@N`` (the Nth time it is reached)."""
    armed: dict[str, int] = {}
    for item in os.environ.get(CRASH_AT_VARIABLE, "").split(","):
        name, _, nth = item.strip().partition("@")
        if not name:
            continue
        if name not in POINTS:
            raise ValueError(
                f"{CRASH_AT_VARIABLE} names an unknown crash point {name!r}; "
                f"known: {', '.join(sorted(POINTS))}."
            )
        armed[name] = int(nth) if nth else 1
    return armed


_armed = _points_from_environment()
_hits: dict[str, int] = {}


def checkpoint(name: str) -> None:
    """Die here (SIGKILL) if the environment asked for a crash at ``name`` (on this hit)."""
    if _armed and name in _armed:
        _hits[name] = _hits.get(name, 0) + 1
        if _hits[name] == _armed[name]:
            os.kill(os.getpid(), signal.SIGKILL)
