"""A cascade's claim on its sessions: two confirmations of one plan never both run.

A cascade runs in many short store transactions, so the fingerprint check at its start
cannot by itself stop a second operator who confirmed the same preview a moment later: both
checks pass before either deletes anything, and the two then take turns, each deleting part
of the plan. So a cascade first claims every session of its plan in the store (one
transaction; a row per session, keyed by the session id, so the database itself refuses the
second claim, whichever process or machine makes it), then plans again and checks the
fingerprint, and gives the claim up when it ends, whatever ended it.

A claim whose process is known dead (``core.processes``) or that went unrenewed for
``CLAIM_LEASE_SECONDS`` (the cascade renews it between batches) is a killed cascade's and is
taken over; the sessions it did not delete are planned again like any others.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence

from sessions_admin.core import db
from sessions_admin.core.errors import SessionBeingDeleted, StoreError
from sessions_admin.core.processes import process_dead, this_process
from sessions_admin.core.schema import DELETE_CLAIMS_SQL, existing_tables
from sessions_admin.routers import store_alias

log = logging.getLogger(__name__)

TABLE = "sessions_admin_delete_claims"
# Far longer than one batch takes (tens of milliseconds, seconds for a large session's
# parts): a claim this old belongs to a cascade that stopped without giving it up.
CLAIM_LEASE_SECONDS = 120.0


class DeleteUnderWay(SessionBeingDeleted):
    """Another cascade, still running, has claimed sessions of this plan."""

    def __init__(self, session_id: str, operation: str, actor: str, claimed_at: float):
        self.session_id = session_id
        self.operation = operation
        self.actor = actor
        self.claimed_at = claimed_at
        seconds = max(0, int(time.time() - claimed_at))
        # Its own words, not SessionBeingDeleted's (those are about a delete in parts).
        StoreError.__init__(
            self,
            f"Session {session_id} is already being deleted by another delete ({actor}, "
            f"started {seconds} s ago). Nothing was changed: wait for it to finish and check "
            "the audit log; what it did not delete can be previewed again then.",
        )


def _ensure_table() -> None:
    if TABLE not in existing_tables(store_alias()):
        real = "DOUBLE PRECISION" if db.vendor() == "postgresql" else "REAL"
        db.execute(DELETE_CLAIMS_SQL.format(real=real))


# The operations this process is running: a claim of this process naming another one was
# left by a cascade whose release failed (the store could not be written then).
_running: set[str] = set()


def _expired(owner_json: str, operation: str, renewed_at: float, now: float) -> bool:
    try:
        owner = json.loads(owner_json)
    except ValueError:
        owner = None
    if owner == this_process() and operation not in _running:
        return True
    return process_dead(owner) or now - renewed_at > CLAIM_LEASE_SECONDS


@db.store_operation
def claim(session_ids: Sequence[str], *, operation: str, actor: str) -> None:
    """Claim these sessions for ``operation`` or raise ``DeleteUnderWay`` (nothing claimed)."""
    ids = sorted(set(session_ids))
    if not ids:
        return
    _ensure_table()
    now = time.time()
    taken_over: set[str] = set()
    rows = db.fetchall_in(
        f"SELECT session_id, operation, actor, owner, claimed_at, renewed_at FROM {TABLE} "
        "WHERE session_id IN ({marks})" + db.for_update(),
        ids,
    )
    for session_id, other, other_actor, owner, claimed_at, renewed_at in rows:
        if other == operation or _expired(owner, other, float(renewed_at), now):
            taken_over.add(other)
        else:
            raise DeleteUnderWay(session_id, other, other_actor, float(claimed_at))
    # A stopped cascade's whole claim goes, also on the sessions it deleted before it stopped.
    for other in sorted(taken_over):
        db.execute(f"DELETE FROM {TABLE} WHERE operation = %s", [other])
    owner = json.dumps(this_process())
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        values = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(chunk))
        params = [p for sid in chunk for p in (sid, operation, actor, owner, now, now)]
        inserted = db.execute(
            f"INSERT INTO {TABLE} (session_id, operation, actor, owner, claimed_at, renewed_at) "
            f"VALUES {values} ON CONFLICT (session_id) DO NOTHING",
            params,
        )
        if inserted != len(chunk):
            # PostgreSQL: a cascade claiming the same sessions committed while this one waited.
            taken = db.fetchone(
                f"SELECT session_id, operation, actor, claimed_at FROM {TABLE} "
                f"WHERE session_id IN ({db.placeholders(chunk)}) AND operation <> %s",
                [*chunk, operation],
            )
            if taken is not None:
                raise DeleteUnderWay(taken[0], taken[1], taken[2], float(taken[3]))
    _running.add(operation)


@db.store_operation
def _renew(operation: str) -> None:
    db.execute(f"UPDATE {TABLE} SET renewed_at = %s WHERE operation = %s", [time.time(), operation])


def renew(*, operation: str) -> None:
    """Between batches: the cascade is still running. A store that cannot be written now
    fails the next batch, which is what the cascade reports."""
    try:
        _renew(operation)
    except Exception:  # noqa: BLE001
        log.warning("delete claim of %s not renewed", operation, exc_info=True)


@db.store_operation
def _drop(operation: str) -> None:
    db.execute(f"DELETE FROM {TABLE} WHERE operation = %s", [operation])


def release(*, operation: str) -> None:
    """Give the claim up. A store that cannot be written now leaves it to expire (the lease)."""
    _running.discard(operation)
    try:
        _drop(operation)
    except Exception:  # noqa: BLE001 - the cascade's own outcome is what the caller reports
        log.warning("delete claim of %s left to expire", operation, exc_info=True)


def operations_claiming(session_ids: Sequence[str]) -> list[str]:
    """The cascades (running or stopped) that claimed any of these sessions."""
    ids = list(dict.fromkeys(session_ids))
    if not ids or TABLE not in existing_tables(store_alias()):
        return []
    rows = db.fetchall_in(f"SELECT operation FROM {TABLE} WHERE session_id IN ({{marks}})", ids)
    return sorted({row[0] for row in rows})
