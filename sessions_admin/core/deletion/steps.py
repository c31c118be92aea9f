"""One step of a delete, shared by whole batches (``batches``) and parts (``parts``).

Each step first commits its rows' trash copy, then deletes them from the store in one short
store transaction, children before parents, only if they are still exactly as copied: nothing
is lost silently, no message is left without its session, no conversation points at a
deleted session, and the FTS triggers keep the search index in step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import transaction

from sessions_admin.core import being_deleted, db, faults, holds, idempotency
from sessions_admin.core.db import store_operation
from sessions_admin.core.deletion import fts_merges
from sessions_admin.core.deletion.give_back import _give_back_parts
from sessions_admin.core.deletion.plan import ConversationsKept, WholeConversations, kept_whole
from sessions_admin.core.deletion.trash import (
    TRASH_DATABASE,
    Trash,
    rows_key,
    same_rows,
    snapshot_rows,
)
from sessions_admin.core.errors import StoreError
from sessions_admin.routers import responses_alias

# A batch whose rows keep changing between its trash copy and the store lock is
# copied again this many times, then copied under the lock.
COPY_ATTEMPTS = 3


class SessionsWentLive(StoreError):
    """A delete that keeps live sessions found some of its sessions live under the store's lock
    (a runtime reopened them after the preview): they were kept, whole, and nothing else changed."""

    def __init__(self, session_ids: Sequence[str]):
        self.session_ids = tuple(session_ids)
        count = len(self.session_ids)
        which = "1 session" if count == 1 else f"{count} sessions"
        super().__init__(
            f"{which} went live again while being deleted ({', '.join(self.session_ids[:5])}): "
            "kept, with every message."
        )


class DeleteGivenBack(StoreError):
    """A session being deleted in parts was given back meanwhile (restored from the trash, or
    kept by another delete): this delete stopped and left it as it is."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        super().__init__(
            f"Session {session_id} was given back while being deleted (restored from the trash, "
            "or kept by another delete): it was left as it is."
        )


@dataclass(frozen=True)
class GoneRows:
    """What one store commit of a delete took out of the databases: the sessions whose rows it
    deleted, the messages (a purge's parts count when their session's row goes: until then
    they can be put back), the slugs and the stored responses."""

    session_ids: tuple[str, ...]
    message_ids: tuple[int, ...]
    conversation_names: tuple[str, ...] = ()
    response_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeleteRun:
    """One delete, as each of its steps sees it: who and why, the trash and operation its
    entries go to, and whether a session found live under the lock is kept."""

    actor: str
    reason: str
    job_id: int | None
    trash: Trash
    operation: str
    keep_live: bool
    # A delete of a previewed set: the conversations it must keep whole (``kept_whole``).
    whole: WholeConversations | None = None
    # Where each store commit is recorded as it happens, (trash entry, sessions, messages):
    # what a delete that fails later knows it committed (``DeletePartlyApplied``).
    committed: list | None = None
    # Where the id of each session whose row a store commit deleted is added as it commits:
    # exactly the sessions its trash entries hold, not those another delete took first.
    deleted: list | None = None
    # The caller's own check under the lock (an erasure's: no merge made since its plan):
    # the refusal that stops the batch, or None to go on.
    refuse: Callable[[list[str]], StoreError | None] | None = None
    # Called as each store commit happens, with what it took out of the databases
    # (``GoneRows``): an erasure counts there what a runtime wrote after its rows were counted.
    gone: Callable[[GoneRows], None] | None = None

    def open_entry(self, session_ids: Sequence[str], rows: dict) -> int:
        try:
            return self.trash.open_entry(
                session_ids=session_ids,
                rows=rows,
                actor=self.actor,
                reason=self.reason,
                job_id=self.job_id,
                operation=self.operation,
            )
        except Exception as error:
            error.database = TRASH_DATABASE  # not the store: said so (``DeletePartlyApplied``)
            raise


@dataclass(frozen=True)
class KeptFromDelete:
    """Why a step under the lock deleted nothing: sessions this delete must keep (held, live
    again, of a conversation kept whole), or one given back meanwhile. ``error`` says it."""

    held: dict | None = None
    live: tuple[str, ...] = ()
    given_back: str | None = None
    whole: dict | None = None  # session -> why its conversation stays whole
    refused: StoreError | None = None  # ``DeleteRun.refuse``'s

    def error(self) -> StoreError:
        if self.refused is not None:
            return self.refused
        if self.given_back:
            return DeleteGivenBack(self.given_back)
        if self.whole:
            return ConversationsKept(self.whole)
        return holds.SessionsHeld(self.held) if self.held else SessionsWentLive(self.live)


@store_operation
def _locked_delete(
    batch: list[str],
    *,
    copied: tuple[int, bytes, dict] | None,
    committed: list,
    run: DeleteRun,
    in_parts: bool = False,
) -> tuple[int, int, int] | KeptFromDelete | None:
    """Under the store's write lock: delete the batch's rows, their trash copy committed first.

    With ``copied`` (a pending trash entry and the rows it holds, copied before
    the lock) the rows go only if they are still exactly those and the entry is
    still pending; otherwise nothing changes and None says to copy again.
    Without it the rows are copied here, under the lock.

    A held session (or, with ``keep_live``, a live one, or with ``run.whole`` one of a
    conversation to keep whole) stops the batch: nothing of it is deleted, and such a
    session a delete had started in parts gets its parts back (``_give_back_parts``), in
    this transaction; ``KeptFromDelete`` says which. ``in_parts``: the last step of a delete
    in parts, which goes only while its session is still marked (a cancel, or another delete
    keeping it, gave it back meanwhile: ``DeleteGivenBack``, nothing deleted).
    """
    batch, payload = snapshot_rows(batch, lock=True)
    # Under the lock: a hold placed after the preview, or while a job runs, still stops it.
    marked = being_deleted.marks_on(batch)
    if in_parts and batch and not marked:
        return KeptFromDelete(given_back=batch[0])
    held = holds.holds_on(batch)
    if held:
        _give_back([sid for sid in batch if sid in marked and sid in held], run)
        return KeptFromDelete(held=held)
    if run.refuse is not None and batch and (refused := run.refuse(batch)) is not None:
        _give_back([sid for sid in batch if sid in marked], run)
        return KeptFromDelete(refused=refused)
    if run.whole is not None and batch:
        # A conversation continued, or merged, after the preview stays whole.
        kept = kept_whole(batch, run.whole, lock=True)
        if kept:
            _give_back([sid for sid in batch if sid in marked and sid in kept], run)
            return KeptFromDelete(whole=kept)
    if run.keep_live and batch:
        live = [s["id"] for s in payload["sessions"] if s.get("ended_at") is None]
        if live:
            _give_back([sid for sid in live if sid in marked], run)
            return KeptFromDelete(live=tuple(live))
    if copied is not None:
        entry_id, copied_key, copied_payload = copied
        if (
            not batch
            or not same_rows(payload, copied_key, copied_payload)
            or not run.trash.is_pending(entry_id)
        ):
            return None
        run.trash.discard_unfinished(batch, keep=entry_id)
    elif not batch:
        return 0, 0, 0
    else:
        run.trash.discard_unfinished(batch)
        entry_id = run.open_entry(batch, payload)
    faults.checkpoint("delete.after_trash_copy")
    marks = db.placeholders(batch)
    names = [row["name"] for row in payload["conversations"]]
    response_ids = [row["response_id"] for row in payload["responses"]]
    try:
        if payload["kept_children"]:
            db.execute(
                f"UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id IN ({marks}) "
                f"AND id NOT IN ({marks})",
                [*batch, *batch],
            )
        with transaction.atomic(using=responses_alias()):
            if names:
                db.execute(
                    f"DELETE FROM conversations WHERE name IN ({db.placeholders(names)})",
                    names,
                    alias=responses_alias(),
                )
            if response_ids:
                db.execute(
                    f"DELETE FROM responses WHERE response_id IN ({db.placeholders(response_ids)})",
                    response_ids,
                    alias=responses_alias(),
                )
        message_ids = [row["id"] for row in payload["messages"]]
        if marked:  # the last step of a purge in parts: the parts it kept go now
            message_ids += being_deleted.kept_part_ids(batch)
        db.execute(f"DELETE FROM messages WHERE session_id IN ({marks})", batch)
        # Children before parents inside the batch too (the foreign key is checked per statement).
        db.execute(f"DELETE FROM sessions WHERE id IN ({marks})", batch)
        idempotency.forget_keys_of(batch)
        if marked:  # the last step of a delete in parts: the session is gone, so is its state
            db.execute(f"DELETE FROM sessions_admin_deletions WHERE session_id IN ({marks})", batch)
            being_deleted.drop_parts(batch)  # a purge's copies of its parts: no longer needed
    except Exception:
        run.trash.discard(entry_id)
        raise
    faults.checkpoint("delete.before_commit")
    _complete_on_commit(
        entry_id,
        committed,
        run,
        messages=len(payload["messages"]),
        gone=GoneRows(
            session_ids=tuple(row["id"] for row in payload["sessions"]),
            message_ids=tuple(message_ids),
            conversation_names=tuple(names),
            response_ids=tuple(response_ids),
        ),
    )
    return len(payload["sessions"]), len(payload["messages"]), entry_id


def _complete_on_commit(
    entry_id: int, committed: list, run: DeleteRun, *, messages: int, gone: GoneRows
) -> None:
    """Once the store commits the delete, its trash entry is complete (its rows only there).
    ``gone``: what it deleted (no session for a part of one), for ``DeleteRun.gone``."""
    session_ids = gone.session_ids

    def mark_complete() -> None:
        committed.append(entry_id)
        if run.committed is not None:
            run.committed.append((entry_id, len(session_ids), messages))
        if run.deleted is not None:
            run.deleted.extend(session_ids)
        if run.gone is not None:
            run.gone(gone)
        faults.checkpoint("delete.after_commit")
        try:
            run.trash.mark_complete(entry_id)
        except Exception as error:
            error.database = TRASH_DATABASE
            raise

    transaction.on_commit(mark_complete, using="store")


def _delete_whole(
    batch: list[str], run: DeleteRun, *, in_parts: bool = False
) -> tuple[int, int, int]:
    """``delete_batch`` for whole sessions: each of them, with all its rows, in one transaction.
    ``in_parts``: the last step of ``_delete_in_parts`` (see ``_locked_delete``)."""
    for _ in range(COPY_ATTEMPTS):
        present, payload = snapshot_rows(batch, lock=False)
        if not present:
            return 0, 0, 0
        done = _copy_then_delete(
            present,
            payload,
            lambda copied, committed, present=present: _locked_delete(
                present, copied=copied, committed=committed, run=run, in_parts=in_parts
            ),
            run,
        )
        if done is not None:
            return done
    done = _locked_delete(batch, copied=None, committed=[], run=run, in_parts=in_parts)
    if isinstance(done, KeptFromDelete):
        raise done.error()
    fts_merges.after_commit()
    return done


def _copy_then_delete(
    session_ids: list[str],
    payload: dict,
    locked: Callable[[tuple[int, bytes, dict], list], object],
    run: DeleteRun,
):
    """Commit ``payload``'s trash copy (a pending entry), then run ``locked(copied, committed)``
    (the delete under the store's lock, given the entry and the rows' key).

    Returns what ``locked`` returned; None (the rows changed: copy again) with the entry
    dropped. A ``KeptFromDelete`` answer drops the entry and raises its error; so does a failure
    before the store committed.
    """
    entry_id = run.open_entry(session_ids, payload)
    committed: list = []
    try:
        # Keyed here, before the lock: the runtime waits only for the re-read's key.
        done = locked((entry_id, rows_key(payload), payload), committed)
    except Exception:
        if not committed:  # the store delete never committed: the copy is not needed
            run.trash.discard(entry_id)
        raise
    if done is None or isinstance(done, KeptFromDelete):
        run.trash.discard(entry_id)
    if isinstance(done, KeptFromDelete):
        raise done.error()
    if done is not None:
        fts_merges.after_commit()
    return done


def _give_back(session_ids: Sequence[str], run: DeleteRun) -> None:
    """``_give_back_parts`` inside a delete: the parts it gives back are no longer what the
    delete committed (``DeletePartlyApplied`` counts only what stays in the trash)."""
    given = set(_give_back_parts(session_ids, trash=run.trash))
    if given and run.committed is not None:
        run.committed[:] = [done for done in run.committed if done[0] not in given]
