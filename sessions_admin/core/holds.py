"""Legal holds: sessions that no delete may remove, and no move take messages from, while
the hold stands.

A hold on a session covers its whole lineage (everything sharing its lineage root, including
what the runtime adds later), found across the store and what is kept elsewhere (the trash,
``set_lineage_elsewhere``): a session only in the trash can be held. A hold on a user covers
their sessions and each one's lineage (delegates and children left without a user id). A merge
target is covered by every hold on a session it absorbed (merge not undone).

Holds live in the store, so every process that deletes reads the same ones, and the delete
checks them under the store's write lock (``deletion.steps``): a hold placed after a preview
or during a job still stops it. Merges, unmerges and stray moves call ``refuse_moving_out``:
messages never leave a held session for one the same hold does not cover. Placing and
releasing are audited by ``ledger.actions``; docs/retention.md is the operator's account."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sessions_admin.core import db, lineage
from sessions_admin.core.db import store_operation
from sessions_admin.core.errors import InvalidInput, SessionNotFound, StoreError
from sessions_admin.core.merge_moves import merge_moves
from sessions_admin.core.rows import parse_model_config
from sessions_admin.core.text import exact_id_problem

SESSION = "session"
USER = "user"
KINDS = {
    SESSION: "a session and its whole lineage",
    USER: "every session of a user, with their lineage",
}

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

    @property
    def description(self) -> str:
        return self.describe()

    def describe(self) -> str:
        """The hold in words, as every refusal, preview and record names it: its number and
        what kind of subject it has. Its subject and reason are for the holds page (support
        and admins): these words also reach viewers (a merge preview, a refused operation's
        audit entry, a job's page), so they carry neither (attack round 42)."""
        what = "a session and its lineage" if self.kind == SESSION else "a user's sessions"
        return f"legal hold #{self.id} on {what}"

    def describe_whole(self) -> str:
        """The hold with its subject and reason, for the readers who may know them (support
        and admins: the holds page, a session's own page)."""
        if self.kind == SESSION:
            what = f"session {self.subject} and its lineage"
        else:
            what = f"user {self.subject}"
        return f"legal hold #{self.id} on {what} ({self.reason})"


class SessionsHeld(StoreError):
    """A delete reached sessions under a legal hold: nothing of it was deleted."""

    NAMED = 10  # sessions the message names, each with its hold
    OUTCOME = "Nothing was deleted: release the hold first, or leave those sessions out."

    def __init__(self, held: dict[str, Hold], *, outcome: str = OUTCOME):
        self.held = held
        holds = {hold.id: hold for hold in held.values()}
        count = len(held)
        sessions = "1 session is" if count == 1 else f"{count} sessions are"
        named = "; ".join(hold.describe() for _, hold in sorted(holds.items()))
        which = "; ".join(
            f"{sid}, hold #{hold.id}" for sid, hold in sorted(held.items())[: self.NAMED]
        )
        more = f"; and {count - self.NAMED} more" if count > self.NAMED else ""
        super().__init__(f"{sessions} under {named} ({which}{more}). {outcome}")


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


# --- what a hold covers ------------------------------------------------------------------
# A session's lineage root is found by following, upward, its parent link or the session it
# reset from: in the store (``lineage.roots_of``), then through the sessions kept elsewhere
# (the dashboard's trash, ``set_lineage_elsewhere``), then in the store again, so a segment in
# the trash and the store sessions around it share one root. A session hold covers every
# session with its subject's root; a user hold covers every session with the root of one of
# that user's sessions (a delegate or compression child the runtime left without a user id
# included). A merge target holds the absorbed sessions' messages until the merge is undone:
# it is covered by whatever covers one of them.

MERGE_DEPTH = 20  # merges of merges followed when a target is covered through its absorbed


@dataclass(frozen=True)
class Elsewhere:
    """Sessions kept outside the store (the trash), as much as a hold needs of them.

    ``up``: session -> the session it continues (its parent, the session it reset from,
    or, for a session kept when its parent was deleted, that parent). ``users``: every
    session kept there -> its user id.
    """

    up: Mapping[str, str] = field(default_factory=dict)
    users: Mapping[str, str | None] = field(default_factory=dict)


NOWHERE = Elsewhere()
_elsewhere: Callable[[], Elsewhere] | None = None


def set_lineage_elsewhere(source: Callable[[], Elsewhere] | None) -> None:
    """Where this process keeps sessions removed from the store (a dashboard's trash: the
    ledger sets it); holds then cover them and the store sessions their lineage links."""
    global _elsewhere
    _elsewhere = source


def _elsewhere_now() -> Elsewhere:
    return _elsewhere() if _elsewhere is not None else NOWHERE


def _roots(ids: Sequence[str], elsewhere: Elsewhere) -> dict[str, str]:
    """Each id's lineage root across the store and ``elsewhere`` (an id found nowhere is its own)."""
    roots: dict[str, str] = {}
    at = {sid: sid for sid in dict.fromkeys(ids)}
    seen = {sid: {sid} for sid in at}
    for _ in range(lineage.MAX_DEPTH):
        if not at:
            break
        in_store = lineage.roots_of(sorted(set(at.values())))
        following: dict[str, str] = {}
        for origin, node in at.items():
            node = in_store.get(node, node)
            path = seen[origin]
            path.add(node)
            moved = False
            while node in elsewhere.up and elsewhere.up[node] not in path:
                node = elsewhere.up[node]
                path.add(node)
                moved = True
            if moved:
                following[origin] = node  # it may go on upward in the store
            else:
                roots[origin] = node
        at = following
    roots.update(at)
    return roots


def _users_of(ids: Sequence[str], elsewhere: Elsewhere) -> dict[str, str | None]:
    users: dict[str, str | None] = {
        sid: elsewhere.users[sid] for sid in ids if sid in elsewhere.users
    }
    users.update(db.fetchall_in("SELECT id, user_id FROM sessions WHERE id IN ({marks})", ids))
    return users


def _sessions_of_users(user_ids: Sequence[str], elsewhere: Elsewhere) -> list[tuple[str, str]]:
    """(session, user) for every session of these users, in the store and elsewhere."""
    wanted = set(user_ids)
    found = [(sid, uid) for sid, uid in elsewhere.users.items() if uid in wanted]
    # Through the search box's index on lower(user_id) (schema.LOWER_INDEX_SQL): a plain
    # user_id has none, and this runs for every batch of a delete while a user hold stands.
    found += [
        (r[0], r[1])
        for r in db.fetchall(
            "SELECT id, user_id FROM sessions "
            f"WHERE lower(user_id) IN ({', '.join('lower(%s)' for _ in user_ids)})",
            list(user_ids),
        )
        if r[1] in wanted
    ]
    return found


def user_session_count(user_id: str) -> int:
    """How many sessions a hold on ``user_id`` covers now, in the store and elsewhere (a hold
    on a user also covers the sessions the user starts later)."""
    return len({sid for sid, _uid in _sessions_of_users([user_id], _elsewhere_now())})


def _merged_into(target_ids: Sequence[str]) -> dict[str, list[str]]:
    """target -> the sessions merges not undone absorbed into it (their messages are in it)."""
    absorbed: dict[str, list[str]] = {}
    for start in range(0, len(target_ids), 500):
        chunk = list(target_ids[start : start + 500])
        for target, ids in db.fetchall(
            "SELECT target_session_id, absorbed_session_ids FROM sessions_admin_merges "
            f"WHERE undone_at IS NULL AND target_session_id IN ({db.placeholders(chunk)})",
            chunk,
        ):
            try:
                absorbed.setdefault(target, []).extend(str(s) for s in json.loads(ids))
            except (TypeError, ValueError):
                continue
    return absorbed


def _covering(
    ids: Sequence[str],
    standing: Sequence[Hold],
    elsewhere: Elsewhere,
    depth: int = 0,
    *,
    through_merges: bool = True,
) -> dict[str, list[Hold]]:
    ids = list(dict.fromkeys(s for s in ids if s))
    if not ids or not standing:
        return {}
    session_holds = [hold for hold in standing if hold.kind == SESSION]
    user_holds = {hold.subject: hold for hold in standing if hold.kind == USER}
    theirs = _sessions_of_users(sorted(user_holds), elsewhere) if user_holds else []
    roots = _roots(
        [*ids, *(hold.subject for hold in session_holds), *(s for s, _ in theirs)], elsewhere
    )
    by_root: dict[str, dict[int, Hold]] = {}
    for hold in session_holds:
        by_root.setdefault(roots.get(hold.subject, hold.subject), {})[hold.id] = hold
    for session_id, user_id in theirs:
        hold = user_holds[user_id]
        by_root.setdefault(roots.get(session_id, session_id), {})[hold.id] = hold
    users = _users_of(ids, elsewhere) if user_holds else {}
    covering: dict[str, dict[int, Hold]] = {}
    for session_id in ids:
        found = dict(by_root.get(roots.get(session_id, session_id), {}))
        own = user_holds.get(users.get(session_id))  # type: ignore[arg-type]
        if own is not None:
            found[own.id] = own
        if found:
            covering[session_id] = found
    if through_merges and depth < MERGE_DEPTH:
        absorbed = _merged_into(ids)
        if absorbed:
            inner = _covering(
                [s for found in absorbed.values() for s in found], standing, elsewhere, depth + 1
            )
            for target, found in absorbed.items():
                for session_id in found:
                    for hold in inner.get(session_id, []):
                        covering.setdefault(target, {})[hold.id] = hold
        # A session a merge moved below its target (a delegate of the absorbed session), and
        # everything below it, stays covered by what covers the session it was below (attack
        # round 44: a hold on the absorbed session's user, placed after the merge, left its
        # delegate to a bulk delete and a purge).
        origins = _moved_origins(ids, elsewhere)
        if origins:
            inner = _covering(
                sorted({p for parents in origins.values() for p in parents}),
                standing,
                elsewhere,
                depth + 1,
            )
            for session_id, parents in origins.items():
                for parent in parents:
                    for hold in inner.get(parent, []):
                        covering.setdefault(session_id, {})[hold.id] = hold
    return {sid: [found[k] for k in sorted(found)] for sid, found in covering.items()}


def _moved_origins(ids: Sequence[str], elsewhere: Elsewhere) -> dict[str, set[str]]:
    """id -> the absorbed sessions that it, or a session above it, was below before a merge
    not undone moved it onto the merge's target (``merge_moves``); ids with none are left out.
    Upward by parent links in the store, then through ``elsewhere`` (the trash)."""
    moves = merge_moves(children_only=True)
    if not moves.children:
        return {}
    origins: dict[str, set[str]] = {}
    at = {sid: sid for sid in ids}
    seen = {sid: {sid} for sid in ids}
    for _ in range(lineage.MAX_DEPTH):
        if not at:
            break
        for origin, node in at.items():
            if before := moves.parents_before(node):
                origins.setdefault(origin, set()).update(before)
        parents = dict(
            db.fetchall_in(
                "SELECT id, parent_session_id FROM sessions WHERE id IN ({marks})",
                sorted(set(at.values())),
            )
        )
        following: dict[str, str] = {}
        for origin, node in at.items():
            up = parents.get(node) or elsewhere.up.get(node)
            if up and up not in seen[origin]:
                seen[origin].add(up)
                following[origin] = up
        at = following
    return origins


def holds_covering(session_ids: Sequence[str]) -> dict[str, tuple[Hold, ...]]:
    """The sessions among these that standing holds cover, each with every hold covering it
    (oldest first). The ids may be of sessions in the store or kept elsewhere (the trash)."""
    holds = active_holds()
    if not holds:
        return {}
    covering = _covering(list(session_ids), holds, _elsewhere_now())
    return {sid: tuple(found) for sid, found in covering.items()}


def holds_on(session_ids: Sequence[str]) -> dict[str, Hold]:
    """The sessions among these that a standing hold covers, each with (one of) its holds.

    Without any standing hold (the usual case) this is one read of a small table;
    otherwise a lineage walk for the asked sessions (``holds_covering``).
    """
    return {sid: found[0] for sid, found in holds_covering(session_ids).items()}


def refuse_held(session_ids: Sequence[str]) -> None:
    """Raise ``SessionsHeld`` if a standing hold covers any of these sessions."""
    held = holds_on(session_ids)
    if held:
        raise SessionsHeld(held)


def held_among_rows(rows: Sequence[dict]) -> dict[str, Hold]:
    """Holds covering session rows no longer in the store (the trash's copies).

    Their lineage is walked through the rows' own links, the sessions kept elsewhere
    (``set_lineage_elsewhere``) and the store; a row is also covered by a hold on its user.
    """
    holds = active_holds()
    if not holds:
        return {}
    known = _elsewhere_now()
    up = dict(known.up)
    users = dict(known.users)
    for row in rows:
        session_id = row.get("id")
        if not session_id:
            continue
        users.setdefault(str(session_id), row.get("user_id"))
        parent = row.get("parent_session_id") or parse_model_config(row.get("model_config")).get(
            "_reset_from"
        )
        if isinstance(parent, str) and parent:
            up.setdefault(str(session_id), parent)
    covering = _covering(
        [str(row.get("id")) for row in rows if row.get("id")], holds, Elsewhere(up, users)
    )
    return {sid: found[0] for sid, found in covering.items()}


class HeldMessagesWouldLeave(SessionsHeld):
    """Messages under a legal hold would move into sessions the hold does not cover: refused.

    A ``SessionsHeld`` (``held`` names the session they would leave), so whoever handles a
    held session's refusal handles this one too."""

    def __init__(self, *, action: str, from_session: str, to_session: str, holds: Sequence[Hold]):
        self.from_session = from_session
        self.to_session = to_session
        self.holds = tuple(holds)
        self.held = {from_session: self.holds[0]}
        named = "; ".join(hold.describe() for hold in self.holds)
        StoreError.__init__(
            self,
            f"The {action} would move messages of session {from_session}, under {named}, into "
            f"session {to_session}, which the hold does not cover. Nothing was changed: release "
            "the hold first.",
        )


def refuse_moving_out(*, moves: Sequence[tuple[str, str]], action: str) -> None:
    """Raise the first of ``held_moves``' refusals. Called by merges, their undo and the moves
    of stray messages, under their locks."""
    refused = held_moves(moves=moves, action=action)
    if refused:
        raise refused[0]


def held_moves(*, moves: Sequence[tuple[str, str]], action: str) -> list[HeldMessagesWouldLeave]:
    """A refusal for each (from, to) move of messages that would take them out of a standing
    hold: every hold covering ``from`` must cover ``to`` too (a preview shows them)."""
    holds = active_holds()
    if not holds or not moves:
        return []
    elsewhere = _elsewhere_now()
    covering = _covering([s for move in moves for s in move], holds, elsewhere)
    # Where they go must be held by its own lineage or user, not only as the target of a merge
    # (messages moved there on their own would lose the hold when the merge is undone).
    receiving = _covering([to for _, to in moves], holds, elsewhere, through_merges=False)
    refused: list[HeldMessagesWouldLeave] = []
    for from_session, to_session in moves:
        if from_session == to_session:
            continue
        kept = {hold.id for hold in receiving.get(to_session, [])}
        leaving = [hold for hold in covering.get(from_session, []) if hold.id not in kept]
        if leaving:
            refused.append(
                HeldMessagesWouldLeave(
                    action=action, from_session=from_session, to_session=to_session, holds=leaving
                )
            )
    return refused


def in_lineage_elsewhere(session_id: str) -> bool:
    """Whether the session is kept outside the store (in the trash): a hold can still name it."""
    return session_id in _elsewhere_now().users


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
    # Taken as given: a subject with spaces around it or an invisible character looks like
    # the id but covers nothing, so it is refused (the rule erasure's subjects follow).
    if problem := exact_id_problem(subject, "session id" if kind == SESSION else "user id"):
        raise InvalidInput(f"{problem} Nothing was placed on hold.")
    reason = _clean(reason, "reason for the hold")
    if (
        kind == SESSION
        and lineage.session_row(subject, lock=True) is None
        and not in_lineage_elsewhere(subject)
    ):
        # A session only in the trash can be held too: its trash operation (and what its
        # lineage links in the store) is then kept from a purge.
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
