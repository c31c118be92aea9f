"""Deleting one session larger than a batch in parts, each part a step of its own.

In one store transaction, deleting all of its messages would hold the store's write lock for
seconds (a 20,000-message session), and every runtime append would wait for it. Between
parts the session is marked being deleted (``core.being_deleted``, which the core's writers
check; a purge's parts are kept there too).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sessions_admin.core import being_deleted, db, faults, holds
from sessions_admin.core.db import store_operation
from sessions_admin.core.deletion.give_back import stop_deleting
from sessions_admin.core.deletion.plan import kept_whole
from sessions_admin.core.deletion.steps import (
    COPY_ATTEMPTS,
    DeleteGivenBack,
    DeleteRun,
    GoneRows,
    KeptFromDelete,
    _complete_on_commit,
    _copy_then_delete,
    _delete_whole,
    _give_back,
)
from sessions_admin.core.deletion.trash import NoTrash, _all_columns, same_rows
from sessions_admin.core.errors import StoreBusy


def _delete_in_parts(
    session_id: str,
    run: DeleteRun,
    part_messages: int,
    between_parts: Callable[[], bool | None] | None,
) -> tuple[int, int, int]:
    """Delete one large session in several short store transactions (``core.being_deleted``).

    The session is marked being deleted (the core then refuses writes to it); its oldest
    ``part_messages`` messages at a time go, each part copied to the trash and deleted under the
    lock like a batch; last the session row with what is left, its mark cleared in that
    transaction. Every part is an entry of the delete's operation: restoring any restores the lot.
    A purge (``NO_TRASH``) keeps its parts in the store instead (``being_deleted.keep_part``),
    dropped with the session row, so a purge stopped before its last step gives the session back
    whole as a delete into the trash does (``_give_back_parts``): a hold placed, or the session
    going live, midway keeps it whole in either mode. ``between_parts`` returning False (its job
    was cancelled) gives the session back and raises ``DeleteGivenBack``.
    """
    if not being_deleted.table_present():
        _create_deletions_table()
    if isinstance(run.trash, NoTrash):
        _create_parts_table()
    kept = _mark_being_deleted(session_id, run)
    if kept is not None:
        raise kept.error()
    removed = 0
    while True:
        ids = [
            r[0]
            for r in db.fetchall(
                "SELECT id FROM messages WHERE session_id = %s ORDER BY id LIMIT %s",
                [session_id, part_messages + 1],
            )
        ]
        if len(ids) <= part_messages:
            break
        removed += _delete_part(session_id, ids[:part_messages], run)
        faults.checkpoint("delete.between_parts")
        if between_parts is not None and between_parts() is False:
            stop_deleting(session_ids=[session_id], trash=run.trash)
            raise DeleteGivenBack(session_id)
    if isinstance(run.trash, NoTrash):
        # A purge keeps every part in the store until this last step, those of a run killed
        # before this one too: they are what it deleted of the session before its row.
        removed = being_deleted.kept_part_messages(session_id)
    sessions, messages, entry_id = _delete_whole([session_id], run, in_parts=True)
    return sessions, removed + messages, entry_id


@store_operation
def _create_deletions_table() -> None:
    """On a store an older version attached: committed on its own, before anything is marked."""
    being_deleted.ensure_table()


@store_operation
def _create_parts_table() -> None:
    """Before a purge in parts marks its session: where its parts are kept (committed apart)."""
    being_deleted.ensure_parts_table()


def _kept_whole(session_id: str, ended_at: float | None, run: DeleteRun) -> KeptFromDelete | None:
    """Under the session's row lock: a hold on it, (``keep_live``) its being live, or (``whole``)
    its conversation to keep whole keeps it whole: what a delete in parts took of it comes
    back (``_give_back_parts``)."""
    held = holds.holds_on([session_id])
    if held or (run.keep_live and ended_at is None):
        _give_back([session_id], run)
        return KeptFromDelete(held=held) if held else KeptFromDelete(live=(session_id,))
    if run.whole is not None:
        kept = kept_whole([session_id], run.whole, lock=True)
        if kept:
            _give_back([session_id], run)
            return KeptFromDelete(whole=kept)
    if run.refuse is not None and (refused := run.refuse([session_id])) is not None:
        _give_back([session_id], run)
        return KeptFromDelete(refused=refused)
    return None


@store_operation
def _mark_being_deleted(session_id: str, run: DeleteRun) -> KeptFromDelete | None:
    """Put the session in the being-deleted state, under its row lock (refused: what stops it)."""
    row = db.fetchone(
        "SELECT id, ended_at FROM sessions WHERE id = %s" + db.for_update(), [session_id]
    )
    if row is None:
        return None  # gone meanwhile: the whole-session step finds nothing to do
    kept = _kept_whole(session_id, row[1], run)
    if kept is not None:
        return kept
    if being_deleted.marks_on([session_id]):
        # A delete killed between parts (or another one running): this one carries on with it.
        db.execute(
            "UPDATE sessions_admin_deletions SET operation = %s, actor = %s, keep_live = %s "
            "WHERE session_id = %s",
            [run.operation, run.actor, int(run.keep_live), session_id],
        )
    else:
        db.execute(
            "INSERT INTO sessions_admin_deletions (session_id, operation, actor, started_at, "
            "keep_live) VALUES (%s, %s, %s, %s, %s)",
            [session_id, run.operation, run.actor, time.time(), int(run.keep_live)],
        )
    return None


def _part_payload(session_id: str, message_ids: Sequence[int], *, lock: bool = False) -> dict:
    """A part's trash payload: some messages of a session whose row is not (yet) in it.

    ``lock``: the messages read stay locked (PostgreSQL) until the part's delete commits.
    """
    return {
        "sessions": [],
        "messages": _all_columns(
            "messages",
            f"id IN ({db.placeholders(message_ids)}) AND session_id = %s ORDER BY id"
            + (db.for_update() if lock else ""),
            [*message_ids, session_id],
        ),
        "conversations": [],
        "responses": [],
        "kept_children": [],
        "dependents": {},
        "part_of": session_id,
    }


def _delete_part(session_id: str, message_ids: list[int], run: DeleteRun) -> int:
    """One part of ``_delete_in_parts``: trash then delete these messages; how many went."""
    for _ in range(COPY_ATTEMPTS + 1):
        payload = _part_payload(session_id, message_ids)
        if not payload["messages"]:
            return 0
        done = _copy_then_delete(
            [session_id],
            payload,
            lambda copied, committed: _locked_delete_part(
                session_id, copied=copied, committed=committed, run=run
            ),
            run,
        )
        if done is not None:
            return done
        # Changed under us (a runtime rewrote one of these messages): read the part again. One
        # that keeps changing makes the delete give up as busy, nothing of the part deleted.
    raise StoreBusy("deleting a session in parts", COPY_ATTEMPTS + 1)


@store_operation
def _locked_delete_part(
    session_id: str,
    *,
    copied: tuple[int, bytes, dict],
    committed: list,
    run: DeleteRun,
) -> int | KeptFromDelete | None:
    """Under the store's write lock: delete one part's messages if they are still as copied."""
    row = db.fetchone(
        "SELECT id, ended_at FROM sessions WHERE id = %s" + db.for_update(), [session_id]
    )
    entry_id, copied_key, copied_payload = copied
    if row is None:
        return 0  # another delete finished it meanwhile
    if not being_deleted.marks_on([session_id]):
        return KeptFromDelete(given_back=session_id)  # a restore or another delete gave it back
    kept = _kept_whole(session_id, row[1], run)
    if kept is not None:
        return kept
    message_ids = [m["id"] for m in copied_payload["messages"]]
    now = _part_payload(session_id, message_ids, lock=True)
    if not same_rows(now, copied_key, copied_payload) or not run.trash.is_pending(entry_id):
        return None
    # Under the lock, as for a whole batch: a pending part of a process that died before its
    # commit is dropped (its rows are all here), one that died after it is settled.
    run.trash.discard_unfinished([session_id], keep=entry_id)
    if isinstance(run.trash, NoTrash):
        # A purge keeps no trash copy: the part is kept in the store, in this transaction,
        # until the session row goes, so a stop before then can still give it back.
        being_deleted.keep_part(session_id, message_ids)
    faults.checkpoint("delete.after_trash_copy")
    db.execute(f"DELETE FROM messages WHERE id IN ({db.placeholders(message_ids)})", message_ids)
    faults.checkpoint("delete.before_commit")
    _complete_on_commit(
        entry_id,
        committed,
        run,
        messages=len(message_ids),
        # A purge's part is kept in the store until its session's row goes (counted then).
        gone=GoneRows(
            session_ids=(),
            message_ids=() if isinstance(run.trash, NoTrash) else tuple(message_ids),
        ),
    )
    return len(message_ids)
