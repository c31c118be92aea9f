"""Crash points for the kill -9 tests: a process dies exactly where a test asks.

``checkpoint(name)`` does nothing unless ``SESSIONS_ADMIN_CRASH_AT`` names that point (``name``
or ``name@N`` for its Nth hit, comma-separated), in which case the process SIGKILLs itself: no
``finally`` runs, nothing is rolled back or committed by Python, like a power cut. The variable
is read once at import, so a checkpoint costs one truth test when crash testing is off
(tests/core/test_crash.py).

``SESSIONS_ADMIN_PAUSE_AT`` (same syntax) stops there instead, transaction open: it creates
``<SESSIONS_ADMIN_PAUSE_DIR>/<point>.reached`` and waits (at most a minute) for
``<point>.release`` (tests/core/test_races.py). ``run_at(name, action, nth=1)`` runs
``action`` at a point's Nth hit (the disk-full tests' file-size limit)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

CRASH_AT_VARIABLE = "SESSIONS_ADMIN_CRASH_AT"
PAUSE_AT_VARIABLE = "SESSIONS_ADMIN_PAUSE_AT"
PAUSE_DIR_VARIABLE = "SESSIONS_ADMIN_PAUSE_DIR"
PAUSE_LIMIT_SECONDS = 60.0

# Every point the core can crash at; a test naming another is a typo, refused at start.
POINTS = frozenset(
    {
        # merge_sessions: messages and children moved, counters not yet updated, not committed.
        "merge.after_move",
        # merge_sessions: everything written (merge record too), the transaction not yet committed.
        "merge.before_commit",
        # unmerge: everything given back, the transaction not yet committed.
        "unmerge.before_commit",
        # A delete batch: its rows copied into the trash (committed), the store delete not run.
        "delete.after_trash_copy",
        # A delete batch: the store rows deleted, the store transaction not yet committed.
        "delete.before_commit",
        # A delete batch committed, before its trash entry is marked complete.
        "delete.after_commit",
        # A session deleted in parts: a part committed (and its entry marked), the next not begun.
        "delete.between_parts",
        # Cascade delete: the plan checked against the preview, its sessions not yet claimed.
        "cascade.checked",
        # Cascade delete: a batch committed, the next one not started.
        "cascade.between_batches",
        # Trash restore: every row back in the store, the transaction not yet committed.
        "restore.before_commit",
        # Trash restore: the store committed, its trash entries not yet marked restored.
        "restore.after_commit",
        # Bulk-delete job: a batch committed in the store, its job items not yet marked done.
        "job.after_batch_commit",
        # Bulk-delete job: every item processed, the job not yet marked done.
        "job.before_done",
        # create_session: the checks done (locks held), the new row not yet inserted.
        "create.before_insert",
        # create_session: the new row inserted (a key's previous live session ended), not committed.
        "create.before_commit",
        # reset_session_key: the new session inserted, the transaction not yet committed.
        "reset.before_commit",
        # resume_session: the session reopened, the transaction not yet committed.
        "resume.before_commit",
        # rotate_for_compression: the continuation inserted, the transaction not yet committed.
        "compression.before_commit",
        # resolve_conversation: a continuation of an ended session inserted, not yet committed.
        "continuation.before_commit",
        # An erasure: a delete batch committed (store side), the next one not begun.
        "erasure.between_batches",
        # An erasure: its plan recorded on the request, nothing erased yet.
        "erasure.after_plan_recorded",
        # An erasure: closing a merge's record, the moved messages a restore put back deleted,
        # not committed.
        "erasure.closing_merges",
        # An erasure: the store's side done, the dashboard's (trash, audit) not begun.
        "erasure.after_store",
        # An erasure: the dashboard's side half done (trash and job items), not committed.
        "erasure.during_dashboard",
        # A trash purge: its entries deleted (and its plan on its audit entry), not committed.
        "purge.before_commit",
        # A trash purge: committed, its audit entry not yet completed.
        "purge.after_commit",
        # ledger.actions: the store operation committed, its pending audit entry not yet completed.
        "audit.after_store_commit",
    }
)


def _points_from_environment(variable: str = CRASH_AT_VARIABLE) -> dict[str, int]:
    """``{point: on which hit to act}`` from ``name`` or ``name@N`` (the Nth time it is reached)."""
    armed: dict[str, int] = {}
    for item in os.environ.get(variable, "").split(","):
        name, _, nth = item.strip().partition("@")
        if not name:
            continue
        if name not in POINTS:
            raise ValueError(
                f"{variable} names an unknown point {name!r}; known: {', '.join(sorted(POINTS))}."
            )
        armed[name] = int(nth) if nth else 1
    return armed


_armed = _points_from_environment()
_paused = _points_from_environment(PAUSE_AT_VARIABLE)
_hits: dict[str, int] = {}
_actions: dict[str, tuple[int, Callable[[], None]]] = {}


def run_at(name: str, action: Callable[[], None], *, nth: int = 1) -> None:
    """Run ``action`` when ``name`` is reached for the ``nth`` time (in this process)."""
    if name not in POINTS:
        raise ValueError(f"unknown point {name!r}; known: {', '.join(sorted(POINTS))}.")
    _actions[name] = (nth, action)


def checkpoint(name: str) -> None:
    """Die here (SIGKILL), or wait for a test's release, if the environment asked for ``name``."""
    if not (_armed or _paused or _actions) or (
        name not in _armed and name not in _paused and name not in _actions
    ):
        return
    _hits[name] = _hits.get(name, 0) + 1
    if name in _actions and _actions[name][0] == _hits[name]:
        _actions[name][1]()
    if _armed.get(name) == _hits[name]:
        os.kill(os.getpid(), signal.SIGKILL)
    if _paused.get(name) == _hits[name]:
        _wait_for_release(name)


def _wait_for_release(name: str) -> None:
    folder = Path(os.environ.get(PAUSE_DIR_VARIABLE) or ".")
    (folder / f"{name}.reached").write_text(str(os.getpid()))
    deadline = time.monotonic() + PAUSE_LIMIT_SECONDS
    while not (folder / f"{name}.release").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
