"""Carrying out an erasure plan: batches under the store's lock, children first, no trash copy.

Before each batch the plan is checked against what changed since it was made: a merge that
moved more of the subject's messages (``MergedSincePlan``), a child started below the subject
(``ChildrenSincePlan``, which grows the plan), a hold placed meanwhile (``HeldMidway``). Rows a
runtime wrote meanwhile are swept and counted; side rows (switch events, merges, holds, slugs)
are deleted, tombstoned or redacted. Every step is idempotent, so a killed run resumes from its
recorded plan."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace

from sessions_admin.core import db, events, faults, fingerprints, holds
from sessions_admin.core.db import store_operation
from sessions_admin.core.deletion import (
    NO_TRASH,
    GoneRows,
    PlanChanged,
    as_sentence,
    conversation_names_of,
    database_words,
    delete_in_batches,
    failed_database,
    ordered_children_first,
    response_ids_of,
)
from sessions_admin.core.deletion.restore import RESTORE_LOCK
from sessions_admin.core.erasure.counts import (
    SIDE_ROW_KEYS,
    ErasureResult,
    LateRows,
    RowsPresent,
    _erased,
    counted_before,
    erased_so_far,
    rows_present,
)
from sessions_admin.core.erasure.files import _purge_leftovers, _secure_delete
from sessions_admin.core.erasure.plan import (
    ErasurePlan,
    _chunks,
    _descendants,
    _first_values_in,
    _holds_naming,
    _identifiers_of,
    _merges_touching,
    _moved_messages,
    _side_rows,
    _theirs_or_nobodys,
    keyed_below_closed_merges,
    merge_targets_of,
    plan_erasure,
)
from sessions_admin.core.erasure.subject import Subject, redact_text
from sessions_admin.core.errors import StoreError
from sessions_admin.core.merge import CLOSED_BY_ERASURE
from sessions_admin.core.merge_moves import recorded_children
from sessions_admin.core.rows import recompute_counters
from sessions_admin.routers import responses_alias


class MergedSincePlan(StoreError):
    """A merge made after the erasure's plan names one of the sessions it is deleting: nothing
    of that batch is deleted (another person's messages may be in the subject's session now,
    or the subject's in another person's)."""

    def __init__(self, merges: Sequence[tuple[int, str, list[str]]]):
        self.merge_ids = tuple(m[0] for m in merges)
        said = "; ".join(
            f"merge #{merge_id} (into {target}, of {', '.join(absorbed)})"
            for merge_id, target, absorbed in merges
        )
        super().__init__(
            f"The store changed since the erasure was planned: {said} now joins one of the "
            "subject's sessions with other sessions. Nothing more was erased: undo that merge "
            "(support can, from the session's page), and the erasure finishes when it runs "
            "again."
        )


def _merges_since(plan: ErasurePlan, batch: Sequence[str]) -> StoreError | None:
    """Under the delete's lock: a standing merge naming a session of ``batch`` that the plan
    did not know, as the refusal that stops the batch."""
    if plan.known_merges is None:
        return None
    known = set(plan.known_merges)
    found = [
        (merge_id, target, absorbed)
        for merge_id, target, absorbed, _prior, undone_at in _merges_touching(set(batch))
        if undone_at is None and merge_id not in known
    ]
    return MergedSincePlan(found) if found else None


class ChildrenSincePlan(StoreError):
    """Under a delete batch's lock: sessions a runtime started below the batch's after the plan
    (a delegate, a compression), with the subject's user id or none. Nothing of the batch was
    deleted, so their links still stand: ``erase`` adds them to its plan (``_grown``) and goes
    on, children first. Another user's child is not among them: it stays, unlinked."""

    def __init__(self, session_ids: Sequence[str]):
        self.session_ids = tuple(session_ids)
        super().__init__(
            f"{len(self.session_ids)} sessions were started below the subject's while the "
            f"erasure ran ({', '.join(self.session_ids[:5])})."
        )


def _children_since(plan: ErasurePlan, batch: Sequence[str]) -> StoreError | None:
    """Under the delete's lock: the subject's (or nobody's) children of ``batch`` that the
    plan does not name, as ``ChildrenSincePlan``."""
    planned = {*plan.session_ids, *plan.kept_targets}
    found = sorted(
        sid
        for sid, user_id in db.fetchall(
            f"SELECT id, user_id FROM sessions WHERE parent_session_id IN "
            f"({db.placeholders(batch)})",
            list(batch),
        )
        if sid not in planned and (not user_id or user_id == plan.subject.user_id)
    )
    return ChildrenSincePlan(found) if found else None


def _grown(plan: ErasurePlan, started: Sequence[str]) -> tuple[ErasurePlan, tuple[str, ...]]:
    """``plan`` with the sessions a runtime started below it while it ran, and everything below
    those that is the subject's or nobody's (children first, before the rest); and the
    sessions added. Their rows in sessions_admin's own tables are found, and counted, with
    the rest written meanwhile (``_written_meanwhile``, after the sessions are gone)."""
    below = _descendants(started)
    added = tuple(
        sid
        for sid in ordered_children_first(sorted(_theirs_or_nobodys(plan.subject, sorted(below))))
        if sid not in set(plan.session_ids) | set(plan.kept_targets)
    )
    chats, keys = _identifiers_of(added)
    return (
        replace(
            plan,
            session_ids=(*added, *plan.session_ids),
            erased_chat_ids=tuple(dict.fromkeys([*plan.erased_chat_ids, *chats])),
            erased_session_keys=tuple(dict.fromkeys([*plan.erased_session_keys, *keys])),
        ),
        added,
    )


# A runtime that keeps starting children below the subject's sessions (or writing erased ones
# again) makes the erasure go round again and again; after this many rounds it stops.
MAX_GROWTH_ROUNDS = 50


class RuntimeOutpacedErasure(StoreError):
    """A runtime kept starting sessions below the subject's, or writing erased sessions again,
    round after round: what was erased stays erased, the rest waits for a run once it stops."""

    def __init__(self, rounds: int):
        super().__init__(
            f"A runtime kept starting sessions below the subject's, or writing erased sessions "
            f"again, through {rounds} rounds of the erasure: what it erased stays erased. Stop "
            "the runtime (or reset the subject's sessions), then run the erasure again: it "
            "finishes from where it stopped."
        )


def _messages_up_to(session_ids: Sequence[str], mark: int | None) -> int:
    """How many messages of these sessions have an id up to ``mark`` (all of them: None)."""
    if not session_ids:
        return 0
    above = "" if mark is None else " AND id <= %s"
    return sum(
        int(
            db.fetchone(
                f"SELECT COUNT(*) FROM messages WHERE session_id IN ({db.placeholders(chunk)})"
                + above,
                [*chunk, *([] if mark is None else [mark])],
            )[0]
        )
        for chunk in _chunks(list(session_ids))
    )


def _present(ids: Sequence[str]) -> set[str]:
    return _first_values_in("SELECT id FROM sessions WHERE id IN ({marks})", list(ids))


def _written_meanwhile(
    plan: ErasurePlan, late: LateRows, trashed_ids: Sequence[str]
) -> tuple[ErasurePlan, LateRows]:
    """``plan`` with what was written about the subject while the erasure ran (or between a
    failed run and its retry) that it did not list, after its sessions are gone: the slugs
    and stored responses a runtime's turn wrote for an erased session, the slug history the
    poller recorded of it, a hold on the subject placed and released meanwhile, and the
    other rows of sessions_admin's own tables naming an erased session (``_side_rows``,
    again); and the holds whose reason names the subject (redacted). They go with the plan's
    own, and ``late`` counts them (the receipt hashes the slugs and responses too)."""
    ids = list(plan.session_ids)
    responses = sorted(set(response_ids_of(ids)) - set(plan.response_ids))
    names = sorted(
        set(conversation_names_of(ids, response_ids=responses)) - set(plan.conversation_names)
    )
    side = _side_rows(
        plan.subject,
        ids,
        sorted({*plan.conversation_names, *names}),
        [],
        trashed_ids=trashed_ids,
    )
    side_rows = {table: [list(row) for row in rows] for table, rows in plan.side_rows.items()}
    fresh = 0
    for table, rows in side.items():
        listed = {tuple(row) for row in side_rows.get(table, [])}
        added = [list(row) for row in rows if tuple(row) not in listed]
        if added:
            side_rows.setdefault(table, []).extend(added)
            # Switch events are tombstoned, not deleted: not counted as lost.
            fresh += 0 if table == "sessions_admin_switch_events" else len(added)
    gone_holds = {row[0] for row in side_rows.get("sessions_admin_holds", [])}
    redacted = sorted(
        set(plan.redacted_holds) | set(_holds_naming(plan.redaction_subject, gone_holds))
    )
    grown = replace(
        plan,
        conversation_names=(*plan.conversation_names, *names),
        response_ids=(*plan.response_ids, *responses),
        side_rows=side_rows,
        redacted_holds=tuple(redacted),
    )
    if grown == plan:
        return plan, late
    return grown, replace(
        late,
        conversations=late.conversations + len(names),
        responses=late.responses + len(responses),
        side_rows=late.side_rows + fresh,
    )


@store_operation
def _delete_other_messages(message_ids: Sequence[int]) -> int:
    sessions = {
        r[0]
        for r in db.fetchall(
            f"SELECT DISTINCT session_id FROM messages WHERE id IN ({db.placeholders(message_ids)})",
            list(message_ids),
        )
    }
    removed = db.execute(
        f"DELETE FROM messages WHERE id IN ({db.placeholders(message_ids)})", list(message_ids)
    )
    for session_id in sessions:
        recompute_counters(session_id)
    return removed


@store_operation
def _delete_side_rows(side_rows: dict) -> int:
    removed = 0
    for table, rows in side_rows.items():
        if table == "sessions_admin_switch_events":
            # Tombstoned, not deleted: the rows stay (they are not counted as lost).
            _tombstone_switch_events([row[0] for row in rows])
            continue
        columns = SIDE_ROW_KEYS[table]
        for row in rows:
            where = " AND ".join(f"{c} = %s" for c in columns)
            removed += db.execute(f"DELETE FROM {table} WHERE {where}", list(row[: len(columns)]))
    return removed


# What an erased session's switch events become: the numbering a follower's cursor relies on
# stays whole (core.events), and nothing in the row names the session, its chat or its key.
ERASED_SESSION = ""


def _tombstone_switch_events(seqs: Sequence[int]) -> int:
    """Empty the erased sessions' switch events of every id and key, keeping their ``seq``.

    The log is numbered 1, 2, 3... without a gap so that a follower's cursor (``seq``) never
    skips an event; deleting these rows would leave gaps. A tombstone keeps its ``seq``,
    time and reason, names no session (``new_session_id`` empty, the rest NULL) and has the
    history origin, so a follower reading it tells no listener.

    An event whose new session is another person's, still in the store (a group chat's key
    reset from the subject's session to theirs), stays theirs: only the fields naming a
    session no longer in the store (the subject's, erased) are emptied, so that person's
    listeners still hear their session switch.
    """
    changed = 0
    for chunk in _chunks(list(seqs)):
        rows = db.fetchall(
            "SELECT seq, new_session_id, previous_session_id, parent_session_id FROM "
            f"sessions_admin_switch_events WHERE seq IN ({db.placeholders(chunk)})",
            list(chunk),
        )
        kept = _present([sid for row in rows for sid in row[1:] if sid])
        whole = [row[0] for row in rows if row[1] not in kept]
        if whole:
            changed += db.execute(
                "UPDATE sessions_admin_switch_events SET new_session_id = %s, "
                "previous_session_id = NULL, parent_session_id = NULL, session_key = NULL, "
                f"source = NULL, origin = %s WHERE seq IN ({db.placeholders(whole)})",
                [ERASED_SESSION, events.HISTORY_ORIGIN, *whole],
            )
        for seq, _new, previous, parent in rows:
            if seq in whole:
                continue
            changed += db.execute(
                "UPDATE sessions_admin_switch_events SET previous_session_id = %s, "
                "parent_session_id = %s WHERE seq = %s",
                [
                    previous if previous in kept else None,
                    parent if parent in kept else None,
                    seq,
                ],
            )
    return changed


def switch_events_of(*, session_ids: Sequence[str]) -> tuple[int, ...]:
    """The ``seq`` of every switch event naming one of ``session_ids`` (reads only): for
    sessions no longer in the store (the trash's), whose events ``plan_erasure`` cannot list."""
    seqs: set[int] = set()
    for chunk in _chunks(list(session_ids)):
        marks = db.placeholders(chunk)
        seqs |= {
            int(r[0])
            for r in db.fetchall(
                "SELECT seq FROM sessions_admin_switch_events WHERE new_session_id IN "
                f"({marks}) OR previous_session_id IN ({marks}) OR parent_session_id IN ({marks})",
                [*chunk, *chunk, *chunk],
            )
        }
    return tuple(sorted(seqs))


ERASED_WORDS = "[erased]"


@store_operation
def _redact_holds(hold_ids: Sequence[int], subject: Subject) -> int:
    """The subject's identifiers in these holds' reasons become ``[erased]`` (whole tokens)."""
    replacements = dict.fromkeys(subject.strings, ERASED_WORDS)
    changed = 0
    for hold_id, reason, release_reason in db.fetchall(
        "SELECT id, reason, release_reason FROM sessions_admin_holds WHERE id IN "
        f"({db.placeholders(hold_ids)})",
        list(hold_ids),
    ):
        changed += db.execute(
            "UPDATE sessions_admin_holds SET reason = %s, release_reason = %s WHERE id = %s",
            [
                redact_text(reason, replacements),
                None if release_reason is None else redact_text(release_reason, replacements),
                hold_id,
            ],
        )
    return changed


@store_operation
def _close_merges(
    merge_ids: Sequence[int],
    erased: Sequence[str],
    *,
    known_moved: Sequence[int] = (),
    found_moved: Callable[[list[tuple[int, str]]], None] = lambda _moved: None,
) -> int:
    """Merge records that moved the subject's rows into a session that stays: their saved
    prior state (the subject's rows) goes, the erased sessions leave the absorbed list, and
    the record says it can no longer be undone (``core.merge.unmerge`` refuses it). A key
    the merge copied from an erased session onto the target (it had none) is taken back:
    the target gets its own prior value again, while it still holds the copied one.

    The record is the last thing that says which messages the merge moved, so before it is
    closed, in the same transaction, the subject's moved messages the store holds again and
    the plan did not list (``known_moved``) go: a restore of a trash entry holding them that
    committed after the plan was made (attack round 44, Q1: it raced the confirmation). They
    are handed to ``found_moved`` first (the caller records them with the plan), a hold on
    the session holding them stops it, and the count of them is returned. Under the restore
    lock: a restore still writing finishes first, and one after it is refused by the
    dashboard's check in its own transaction (the erasure recorded its plan before this)."""
    db.lock_names(RESTORE_LOCK)
    erased_set = set(erased)
    wanted = set(merge_ids)
    merges = [m for m in _merges_touching(erased_set) if m[0] in wanted]
    known = set(known_moved)
    back = [pair for pair in _moved_messages(merges, erased_set) if pair[0] not in known]
    if back:
        holds.refuse_held(sorted({sid for _mid, sid in back}))
        found_moved(back)
        _delete_other_messages([mid for mid, _sid in back])
        faults.checkpoint("erasure.closing_merges")
    for merge_id in merge_ids:
        row = db.fetchone(
            "SELECT target_session_id, absorbed_session_ids, prior_state "
            "FROM sessions_admin_merges WHERE id = %s",
            [merge_id],
        )
        if row is None:
            continue
        target, absorbed, prior = row[0], json.loads(row[1] or "[]"), json.loads(row[2] or "{}")
        saved = prior.get("sessions") or {}
        own = (saved.get(target) or {}).get("session_key")
        copied = (prior.get("target_after") or {}).get("session_key")
        erased_keys = {
            (saved.get(sid) or {}).get("session_key") for sid in absorbed if sid in erased_set
        }
        if copied and copied != own and copied in erased_keys:
            db.execute(
                "UPDATE sessions SET session_key = %s WHERE id = %s AND session_key = %s",
                [own, target, copied],
            )
        kept = [sid for sid in absorbed if sid not in erased_set]
        # What it moved of the other people it absorbed stays on record (attack round 44: one
        # merge took bob's and carol's sessions into alice's; bob's erasure closed it, and
        # carol's erasure and holds no longer found her moved messages and delegate).
        others = {
            **CLOSED_BY_ERASURE,
            "messages": {
                sid: ranges for sid, ranges in (prior.get("messages") or {}).items() if sid in kept
            },
            "children": [
                [child, before]
                for child, before in recorded_children(prior)
                if before in kept and child not in erased_set
            ],
        }
        db.execute(
            "UPDATE sessions_admin_merges SET absorbed_session_ids = %s, prior_state = %s "
            "WHERE id = %s",
            [db.dumps(kept), db.dumps(others), merge_id],
        )
    return len(back)


@store_operation
def _take_back_keys(merge_ids: Sequence[str], keys: Sequence[str], erased: Sequence[str]) -> int:
    """The erased sessions' keys off what a closed merge's target passed on (a branch of the
    target inherited the key the merge copied onto it: ``_close_merges`` gives the target its
    own back) and off the switch log's events about those sessions. Only below those targets:
    a key another person's session holds too (a group chat's) is theirs as well and stays.
    Returns the sessions changed."""
    if not keys or not merge_ids:
        return 0
    below = keyed_below_closed_merges(merge_ids, keys, erased)
    for sid in below:
        db.execute("UPDATE sessions SET session_key = NULL WHERE id = %s", [sid])
    targets = merge_targets_of(merge_ids)
    for chunk in _chunks(sorted((below | targets) - set(erased))):
        db.execute(
            "UPDATE sessions_admin_switch_events SET session_key = NULL "
            f"WHERE new_session_id IN ({db.placeholders(chunk)}) "
            f"AND session_key IN ({db.placeholders(keys)})",
            [*chunk, *keys],
        )
    return len(below)


def _delete_slug_rows(names: Sequence[str], response_ids: Sequence[str]) -> None:
    """What the sessions' deletes left: slugs and responses found by the subject's strings."""
    alias = responses_alias()
    for chunk in _chunks(list(names)):
        db.execute(
            f"DELETE FROM conversations WHERE name IN ({db.placeholders(chunk)})",
            list(chunk),
            alias=alias,
        )
    for chunk in _chunks(list(response_ids)):
        db.execute(
            f"DELETE FROM responses WHERE response_id IN ({db.placeholders(chunk)})",
            list(chunk),
            alias=alias,
        )


# What a request a hold stopped partway says of the rest (HeldMidway, and a run again while
# that hold stands: ``ledger.erasure.refuse_held``).
REST_WAITS_FOR_THE_HOLD = (
    "the rest waits. Once the hold is released, run the erasure again: it finishes from "
    "where it stopped."
)


class HeldMidway(holds.SessionsHeld):
    """A legal hold placed while the erasure ran stopped it after it had erased some of the
    plan: the held sessions and the rest wait, nothing of them changed. Once the hold is
    released, running the request again finishes it."""

    def __init__(self, held: holds.SessionsHeld, *, erased: RowsPresent, planned: RowsPresent):
        super().__init__(
            held.held,
            outcome=(
                f"It was placed while the erasure ran: {erased.sessions} of "
                f"{planned.sessions} sessions ({erased.messages} messages) were erased "
                f"before it; {REST_WAITS_FOR_THE_HOLD}"
            ),
        )
        self.erased_so_far = erased
        self.planned = planned


class ErasureStopped(Exception):
    """An erasure stopped because a database could not be written (a full disk, a read-only
    file): the store (``database`` "store") or the dashboard's (``deletion.TRASH_DATABASE``,
    tagged on the error where the dashboard writes: the lease renewed between batches, its
    side of the erasure).

    Not a ``StoreError`` (those mean nothing changed): what it erased before stays erased
    (nothing of an erasure is restorable), and running the request again finishes it from
    the plan it recorded. ``erased``: the plan's rows gone so far, across every run (None
    when they could not be counted), of ``planned`` (counted before the first run);
    ``store_done``: the store's side was finished and the dashboard's rolled back.
    """

    def __init__(
        self,
        *,
        error: BaseException,
        erased: RowsPresent | None,
        planned: RowsPresent | None = None,
        store_done: bool = False,
    ):
        self.error = error
        self.storage = db.storage_failure(error) or "unwritable"
        self.database = failed_database(error)
        self.erased = erased
        self.planned = planned
        self.store_done = store_done
        if erased is None:
            what = "what it erased before it stopped could not be counted"
        elif store_done:
            what = (
                f"the store's side is erased ({erased.sessions} sessions, {erased.messages} "
                "messages); the dashboard's side (its trash, the audit log's redaction, the "
                "receipt) rolled back, nothing of it changed"
            )
        else:
            of = planned or erased
            what = (
                f"{erased.sessions} of {of.sessions} sessions ({erased.messages} of "
                f"{of.messages} messages) were erased before it stopped; the trash, the audit "
                "log and the receipt are not changed yet"
            )
        space = "free space on its disk" + (
            "" if self.storage == "full" else " or make it writable"
        )
        super().__init__(
            as_sentence(f"{database_words(self.database, self.storage)}: {what}. ")
            + as_sentence(
                f"{space}, then run the erasure again (its page, or manage.py erase_subject "
                "--yes): it finishes from where it stopped."
            )
        )

    @property
    def erased_any(self) -> bool:
        """Whether anything of the plan is gone (this run's or an earlier one's)."""
        return self.erased is None or self.store_done or any(asdict(self.erased).values())


def erase(
    *,
    subject: Subject,
    expected_fingerprint: str | None = None,
    plan: ErasurePlan | None = None,
    before: RowsPresent | None = None,
    late: LateRows | None = None,
    progress: Callable[[ErasurePlan, LateRows], None] | None = None,
    between_batches: Callable[[], None] | None = None,
    switch_events: Sequence[int] = (),
    trashed_ids: Sequence[str] = (),
) -> ErasureResult:
    """Purge everything ``plan_erasure`` lists for ``subject`` (no trash; nothing restorable).

    ``expected_fingerprint``: refuse if the plan changed since it was shown (None: erase
    what the plan is now). ``plan``: carry out this plan as it was recorded instead (a
    resumed erasure: its earlier run changed the store, so no fingerprint is compared);
    every step is idempotent, so what a killed run did is not done twice and what it left
    is done. ``before`` and ``late``: the plan's rows counted before its first run and what
    was deleted since that the count did not see (``counted_before``, ``LateRows``), so the
    counts are what the databases lost across every run. ``progress`` is called with the
    plan and ``LateRows`` whenever either changed (after a batch that deleted late rows, or
    once sessions a runtime started meanwhile were added to the plan), for the caller to
    record before going on;
    ``between_batches`` after each committed delete batch (the caller renews its lease
    there). ``switch_events``: more events to tombstone, those of the subject's sessions
    that are no longer in the store (the trash's: ``switch_events_of``). ``trashed_ids``:
    the subject's sessions the dashboard's trash holds (a runtime writing one of them again
    meanwhile has it erased too). Refused while a hold stands.

    A session a runtime starts below one of the subject's while this runs (the subject's
    user id, or none) is erased with it and counted (``ChildrenSincePlan``); so is a message
    a runtime appends to one of them with its own SQL (the core's writers are refused).
    A refusal met midway (a ``StoreError``: a hold placed, a merge made, a runtime that
    kept writing) after some of the plan was erased carries ``erased_so_far`` and
    ``planned`` (a hold's is ``HeldMidway``).
    """
    if plan is None:
        plan = plan_erasure(subject=subject)
        if expected_fingerprint is not None and not fingerprints.matches(
            expected_fingerprint, plan.fingerprint
        ):
            raise PlanChanged("erasure")
    holds.refuse_held(plan.held_scope)
    if before is None:
        before, late = counted_before(plan=plan)
    tally = [late or LateRows(mark=None)]
    recorded = list(tally)  # what ``progress`` was last told (the record holds the plan too)

    def gone(rows: GoneRows) -> None:
        # Slugs and responses the plan did not list were written after it: late too.
        now, mark = tally[0], tally[0].mark
        tally[0] = replace(
            now,
            messages=now.messages
            + (0 if mark is None else sum(1 for mid in rows.message_ids if mid > mark)),
            conversations=now.conversations
            + len(set(rows.conversation_names) - set(plan.conversation_names)),
            responses=now.responses + len(set(rows.response_ids) - set(plan.response_ids)),
        )

    def refuse(batch: Sequence[str]) -> StoreError | None:
        return _merges_since(plan, batch) or _children_since(plan, batch)

    rounds = [0]

    def another_round() -> None:
        rounds[0] += 1
        if rounds[0] > MAX_GROWTH_ROUNDS:
            raise RuntimeOutpacedErasure(MAX_GROWTH_ROUNDS)

    def record() -> None:
        if progress is not None:
            progress(plan, tally[0])
            recorded[0] = tally[0]

    def written_again() -> tuple[list[str], list[str]]:
        """The plan's sessions a runtime still holding their ids wrote again after their
        delete (Hermes's API server re-creates the session a slug's stored response names),
        and the subject's sessions in the trash written again: they go too."""
        back = sorted(_present(plan.session_ids))
        reborn = sorted(_theirs_or_nobodys(plan.subject, sorted(set(trashed_ids) - set(back))))
        return back, reborn

    def take_written_again() -> list[str] | None:
        """``written_again``'s sessions, put in the plan (and recorded) to go in another round;
        None when there are none."""
        nonlocal plan
        back, reborn = written_again()
        if not (back or reborn):
            return None
        another_round()
        plan, added = _grown(plan, reborn) if reborn else (plan, ())
        tally[0] = replace(
            tally[0],
            added=(*tally[0].added, *added),
            recreated=tally[0].recreated + len(back),
            # A session a restore brought back from the trash holds messages older than the
            # count's mark: neither the count nor a batch (``gone``) sees them, and the trash
            # entry, restored, loses nothing of them (attack round 45, S1). Newer ones are
            # counted by the batch that deletes them.
            messages=tally[0].messages + _messages_up_to(added, tally[0].mark),
        )
        record()  # before they go, as the children started are
        return back

    def moved_back(moved: list[tuple[int, str]]) -> None:
        """Moved messages a restore put back after the plan was made: in the plan, counted as
        late, and recorded before they go (a resumed run deletes and counts them too)."""
        nonlocal plan
        # Counted once: a busy store retries the step, which finds them again.
        known = {mid for mid, _sid in plan.other_messages}
        new = sorted({pair for pair in moved if pair[0] not in known})
        if not new:
            return
        plan = replace(plan, other_messages=tuple(sorted({*plan.other_messages, *new})))
        tally[0] = replace(tally[0], other_messages=tally[0].other_messages + len(new))
        record()

    def delete_sessions() -> None:
        nonlocal plan
        done: set[str] = set()
        while True:
            try:
                for batch, *_counts in delete_in_batches(
                    [sid for sid in plan.session_ids if sid not in done],
                    actor="erasure",
                    reason="erasure",
                    trash=NO_TRASH,
                    refuse=refuse,
                    gone=gone,
                ):
                    done.update(batch)
                    # A batch committed, the next not begun: a kill here is resumed from the plan.
                    faults.checkpoint("erasure.between_batches")
                    if tally[0] != recorded[0]:
                        record()
                    if between_batches is not None:
                        between_batches()
                back = take_written_again()
                if back is None:
                    return
                done -= set(back)
            except ChildrenSincePlan as started:
                another_round()
                plan, added = _grown(plan, started.session_ids)
                tally[0] = replace(tally[0], added=(*tally[0].added, *added))
                # Recorded before they are deleted: a resumed run erases and counts them too.
                record()

    _secure_delete(True)
    try:
        while True:
            delete_sessions()
            grown_plan, tally[0] = _written_meanwhile(plan, tally[0], trashed_ids)
            if grown_plan is not plan:
                plan = grown_plan
                record()  # before they go, as added sessions are
            ids = [message_id for message_id, _ in plan.other_messages]
            for chunk in _chunks(ids):
                _delete_other_messages(list(chunk))
            _delete_slug_rows(plan.conversation_names, plan.response_ids)
            if plan.side_rows:
                _delete_side_rows(plan.side_rows)
            if switch_events:
                _delete_side_rows(
                    {"sessions_admin_switch_events": [[seq] for seq in switch_events]}
                )
            if plan.closed_merges:
                _close_merges(
                    plan.closed_merges,
                    plan.session_ids,
                    known_moved=[mid for mid, _sid in plan.other_messages],
                    found_moved=moved_back,
                )
            _take_back_keys(
                plan.closed_merges, plan.redaction_subject.session_keys, plan.session_ids
            )
            if plan.redacted_holds:
                _redact_holds(plan.redacted_holds, plan.redaction_subject)
            after = rows_present(plan=plan)
            index_merged, storage = _purge_leftovers()
            # Once more, after all of it: what a runtime wrote meanwhile goes in another round.
            if take_written_again() is None:
                if not set(response_ids_of(list(plan.session_ids))) - set(plan.response_ids):
                    break
                another_round()
    except StoreError as stopped:
        # Refused midway (a hold placed, a merge made, a runtime that kept writing): what was
        # erased before stays erased; the error carries how much (``erased_so_far``), for the
        # request and its audit entry (``partial``).
        erased = erased_so_far(plan, before, tally[0])
        if erased is None or not any(asdict(erased).values()):
            raise
        if isinstance(stopped, holds.SessionsHeld):
            raise HeldMidway(stopped, erased=erased, planned=before) from stopped
        stopped.erased_so_far = erased
        stopped.planned = before
        raise
    except Exception as error:
        if db.storage_failure(error):
            raise ErasureStopped(
                error=error, planned=before, erased=erased_so_far(plan, before, tally[0])
            ) from error
        raise
    finally:
        _secure_delete(False)
    return ErasureResult(
        **_erased(before, after, tally[0]),
        storage=tuple(storage),
        index_merged=index_merged,
        plan=plan,
    )
