"""Legal holds: sessions that no delete may remove while the hold stands.

A hold names a session, and so its whole lineage (every session whose lineage root,
``lineage.roots_of``, is the held session's: its compression segments, branches,
delegates and the sessions a reset started from it), or a user (every session with that
``user_id``, including the ones the runtime starts after the hold).

Holds live in the store (``sessions_admin_holds``), beside the sessions they protect, so
every process that deletes reads the same holds, and the delete itself checks them under
the store's write lock (``deletion._locked_delete``): a hold placed after a preview was
shown, or while a bulk job runs, still stops the delete. Placing and releasing a hold is
audited by the ledger's doors (``ledger.actions.place_hold`` / ``release_hold``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from sessions_admin.core import db, lineage
from sessions_admin.core.db import store_operation
from sessions_admin.core.errors import InvalidInput, SessionNotFound, StoreError

SESSION = "session"
USER = "user"
KINDS = {SESSION: "a session and its whole lineage", USER: "every session of a user"}

_COLUMNS = (
    "id, kind, subject, reason, placed_by, placed_at, released_at, released_by, release_reason"
)


@dataclass(frozen=True)
class Hold:
    id: int
    kind: str
    subject: str
    reason: str
    placed_by: str
    placed_at: float
    released_at: float | None
    released_by: str
    release_reason: str

    @property
    def active(self) -> bool:
        return self.released_at is None

    def describe(self) -> str:
        """The hold in words, as every refusal names it."""
        if self.kind == SESSION:
            what = f"session {self.subject} and its lineage"
        else:
            what = f"user {self.subject}"
        return f"legal hold #{self.id} on {what} ({self.reason})"


class SessionsHeld(StoreError):
    """A delete reached sessions under a legal hold: nothing of it was deleted."""

    def __init__(self, held: dict[str, Hold]):
        self.held = held
        holds = {hold.id: hold for hold in held.values()}
        count = len(held)
        sessions = "1 session is" if count == 1 else f"{count} sessions are"
        named = "; ".join(hold.describe() for _, hold in sorted(holds.items()))
        super().__init__(
            f"{sessions} under {named}. Nothing was deleted: release the hold first, or leave "
            "those sessions out."
        )


def _hold(row: Sequence) -> Hold:
    return Hold(
        id=int(row[0]),
        kind=row[1],
        subject=row[2],
        reason=row[3],
        placed_by=row[4],
        placed_at=float(row[5]),
        released_at=None if row[6] is None else float(row[6]),
        released_by=row[7] or "",
        release_reason=row[8] or "",
    )


def active_holds() -> list[Hold]:
    return [
        _hold(row)
        for row in db.fetchall(
            f"SELECT {_COLUMNS} FROM sessions_admin_holds WHERE released_at IS NULL ORDER BY id"
        )
    ]


def recent_holds(*, limit: int = 200) -> list[Hold]:
    """Active holds first, then the most recently released."""
    return [
        _hold(row)
        for row in db.fetchall(
            f"SELECT {_COLUMNS} FROM sessions_admin_holds "
            "ORDER BY CASE WHEN released_at IS NULL THEN 0 ELSE 1 END, id DESC LIMIT %s",
            [int(limit)],
        )
    ]


def get_hold(*, hold_id: int) -> Hold | None:
    row = db.fetchone(f"SELECT {_COLUMNS} FROM sessions_admin_holds WHERE id = %s", [int(hold_id)])
    return _hold(row) if row else None


def holds_on(session_ids: Sequence[str]) -> dict[str, Hold]:
    """The sessions among these that a standing hold covers, each with (one of) its holds.

    Without any standing hold (the usual case) this is one indexed-free read of a
    small table; otherwise one lineage walk for the asked sessions.
    """
    holds = active_holds()
    ids = list(dict.fromkeys(s for s in session_ids if s))
    if not holds or not ids:
        return {}
    held: dict[str, Hold] = {}
    by_user = {hold.subject: hold for hold in holds if hold.kind == USER}
    if by_user:
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            for session_id, user_id in db.fetchall(
                f"SELECT id, user_id FROM sessions WHERE id IN ({db.placeholders(chunk)})",
                chunk,
            ):
                if user_id in by_user:
                    held[session_id] = by_user[user_id]
    session_holds = [hold for hold in holds if hold.kind == SESSION]
    if session_holds:
        held_roots: dict[str, Hold] = {}
        subject_roots = lineage.roots_of([hold.subject for hold in session_holds])
        for hold in session_holds:
            held_roots.setdefault(subject_roots.get(hold.subject, hold.subject), hold)
        roots = lineage.roots_of([sid for sid in ids if sid not in held])
        for session_id in ids:
            if session_id in held:
                continue
            root = roots.get(session_id, session_id)
            hold = held_roots.get(root) or held_roots.get(session_id)
            if hold is not None:
                held[session_id] = hold
    return held


def refuse_held(session_ids: Sequence[str]) -> None:
    """Raise ``SessionsHeld`` if a standing hold covers any of these sessions."""
    held = holds_on(session_ids)
    if held:
        raise SessionsHeld(held)


def held_among_rows(rows: Sequence[dict]) -> dict[str, Hold]:
    """Holds covering session rows no longer in the store (the trash's copies): by user, or
    by the held session's own id (its lineage is not in the store to walk)."""
    holds = active_holds()
    if not holds:
        return {}
    by_user = {hold.subject: hold for hold in holds if hold.kind == USER}
    by_session = {hold.subject: hold for hold in holds if hold.kind == SESSION}
    held: dict[str, Hold] = {}
    for row in rows:
        hold = by_session.get(row.get("id")) or by_user.get(row.get("user_id"))
        if hold is not None:
            held[str(row.get("id"))] = hold
    return held


def _clean(text: str, what: str) -> str:
    text = (text or "").strip()
    if not text:
        raise InvalidInput(f"Give the {what}.")
    return text


@store_operation
def place_hold(*, kind: str, subject: str, reason: str, actor: str) -> Hold:
    """Put a session (its whole lineage) or a user under a legal hold."""
    if kind not in KINDS:
        raise InvalidInput(f"A hold is on a session or a user, not {kind!r}.")
    subject = _clean(subject, "session id" if kind == SESSION else "user id")
    reason = _clean(reason, "reason for the hold")
    if kind == SESSION and lineage.session_row(subject, lock=True) is None:
        raise SessionNotFound(subject)
    existing = db.fetchone(
        "SELECT id FROM sessions_admin_holds WHERE kind = %s AND subject = %s "
        "AND released_at IS NULL",
        [kind, subject],
    )
    if existing:
        raise InvalidInput(
            f"{'Session' if kind == SESSION else 'User'} {subject} is already under legal hold "
            f"#{existing[0]}."
        )
    now = time.time()
    db.execute(
        "INSERT INTO sessions_admin_holds (kind, subject, reason, placed_by, placed_at) "
        "VALUES (%s, %s, %s, %s, %s)",
        [kind, subject, reason, actor, now],
    )
    row = db.fetchone(
        f"SELECT {_COLUMNS} FROM sessions_admin_holds WHERE kind = %s AND subject = %s "
        "AND released_at IS NULL ORDER BY id DESC LIMIT 1",
        [kind, subject],
    )
    return _hold(row)


@store_operation
def release_hold(*, hold_id: int, reason: str, actor: str) -> Hold:
    """End a hold: its sessions can be deleted again (by a later, separate delete)."""
    reason = _clean(reason, "reason for releasing the hold")
    row = db.fetchone(
        f"SELECT {_COLUMNS} FROM sessions_admin_holds WHERE id = %s" + db.for_update(),
        [int(hold_id)],
    )
    if row is None:
        raise InvalidInput(f"There is no legal hold #{hold_id}.")
    hold = _hold(row)
    if not hold.active:
        raise InvalidInput(f"Legal hold #{hold.id} was already released.")
    db.execute(
        "UPDATE sessions_admin_holds SET released_at = %s, released_by = %s, "
        "release_reason = %s WHERE id = %s",
        [time.time(), actor, reason, hold.id],
    )
    return get_hold(hold_id=hold.id)
