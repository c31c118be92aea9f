"""Deleting in batches: a cascade's plan, a job's batch, one restorable trash operation.

A delete that fails after some batches committed (a full disk, a database restart) raises
``DeletePartlyApplied`` with exactly what committed and its trash operation, never the bare
error of the batch that failed: those batches stay deleted, restorable as one operation, and
the rest stays in the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from django.db import DatabaseError, OperationalError

from sessions_admin.core import being_deleted, db, faults, fingerprints, holds
from sessions_admin.core.deletion import claims
from sessions_admin.core.deletion.parts import _delete_in_parts
from sessions_admin.core.deletion.plan import (
    DeletePlan,
    DeleteResult,
    WholeConversations,
    lost_undo_words,
    plan_cascade_delete,
)
from sessions_admin.core.deletion.steps import DeleteRun, GoneRows, _delete_whole
from sessions_admin.core.deletion.trash import (
    TRASH_DATABASE,
    Trash,
    _trash_or_default,
    new_operation_id,
)
from sessions_admin.core.errors import InvalidInput, StoreError
from sessions_admin.core.merge import PlanChanged
from sessions_admin.core.text import says_something

# One store transaction deletes at most this many sessions / messages, so a
# runtime writer waits on us for tens of milliseconds, not seconds (a session
# larger than that goes in a batch of its own). Deleting a message costs its
# full-text index entry too: about 0.1 ms a message on a 2-core machine, so
# 2,000 held the write lock for over 250 ms where 500 hold it under 100 ms
# (bench/writes.py).
BATCH_SESSIONS = 200


BATCH_MESSAGES = 500


def delete_batch(
    batch: list[str],
    *,
    actor: str,
    reason: str,
    job_id: int | None,
    trash: Trash | None = None,
    operation: str | None = None,
    keep_live: bool = False,
    part_messages: int | None = None,
    between_parts: Callable[[], bool | None] | None = None,
    whole: WholeConversations | None = None,
    committed: list | None = None,
    deleted: list | None = None,
    refuse: Callable[[list[str]], StoreError | None] | None = None,
    gone: Callable[[GoneRows], None] | None = None,
) -> tuple[int, int, int]:
    """Trash then delete one batch (children first). Returns (sessions, messages, trash id).

    ``operation``: the operator action the batch belongs to (restored with its other batches).
    Rows are read and their trash copy committed before the store's write lock, so the runtime's
    writers wait only for the delete; under the lock they are read again and deleted only if
    unchanged (else copied again; after ``COPY_ATTEMPTS`` the copy is taken under the lock).
    One session over ``part_messages`` messages (default ``BATCH_MESSAGES``) goes in parts
    (``_delete_in_parts``), ``between_parts`` called after each (False gives it back:
    ``DeleteGivenBack``). Nothing of the batch is deleted if, under the lock, a session is live
    with ``keep_live`` (``SessionsWentLive``), held (``SessionsHeld``) or, with ``whole``, in a
    conversation that must stay whole (``ConversationsKept``). ``committed`` receives each store
    commit as it happens (trash entry, sessions, messages), kept whatever is raised afterwards;
    ``deleted`` the id of each session whose row it deleted (a session of the batch another
    delete took first is not among them, nor in this batch's trash entry). ``refuse``: the
    caller's own check under the lock, for the batch (or the session in parts) about to go;
    the error it returns stops the batch as a hold does. ``gone``: told what each store commit
    deleted (``DeleteRun.gone``).
    """
    run = DeleteRun(
        actor=actor,
        reason=reason,
        job_id=job_id,
        trash=_trash_or_default(trash),
        operation=operation or new_operation_id(),
        keep_live=keep_live,
        whole=whole,
        committed=committed,
        deleted=deleted,
        refuse=refuse,
        gone=gone,
    )
    part_messages = part_messages or BATCH_MESSAGES
    if len(batch) == 1:
        row = db.fetchone("SELECT message_count FROM sessions WHERE id = %s", [batch[0]])
        if row is not None and (int(row[0] or 0) > part_messages or being_deleted.marks_on(batch)):
            return _delete_in_parts(batch[0], run, part_messages, between_parts)
    return _delete_whole(batch, run)


def delete_in_batches(
    session_ids: Sequence[str],
    *,
    actor: str,
    reason: str,
    job_id: int | None = None,
    batch_sessions: int | None = None,
    batch_messages: int | None = None,
    trash: Trash | None = None,
    operation: str | None = None,
    whole: WholeConversations | None = None,
    committed: list | None = None,
    between_parts: Callable[[], bool | None] | None = None,
    refuse: Callable[[list[str]], StoreError | None] | None = None,
    gone: Callable[[GoneRows], None] | None = None,
) -> Iterable[tuple[list[str], int, int, int]]:
    """Delete sessions (given children first) in short batches; yield (batch, sessions, messages, trash id).

    Every batch's trash entry belongs to ``operation`` (a new one if not given):
    one call is one restorable unit, however many batches it takes. ``whole``: each
    batch keeps the conversations it must (``kept_whole``), raising ``ConversationsKept``.
    """
    operation = operation or new_operation_id()
    # Read when called (not bound as defaults), so a test can lower them for a whole cascade.
    batch_sessions = batch_sessions or BATCH_SESSIONS
    batch_messages = batch_messages or BATCH_MESSAGES
    pending = list(session_ids)
    while pending:
        batch: list[str] = []
        weight = 0
        while pending and len(batch) < batch_sessions:
            candidate = pending[0]
            row = db.fetchone("SELECT message_count FROM sessions WHERE id = %s", [candidate])
            size = int(row[0] or 0) if row else 0
            if batch and weight + size > batch_messages:
                break
            batch.append(pending.pop(0))
            weight += size
        deleted, messages, trash_id = delete_batch(
            batch,
            actor=actor,
            reason=reason,
            job_id=job_id,
            trash=trash,
            operation=operation,
            part_messages=batch_messages,
            between_parts=between_parts,
            whole=whole,
            committed=committed,
            refuse=refuse,
            gone=gone,
        )
        yield batch, deleted, messages, trash_id


def execute_cascade_delete(
    *,
    session_ids: Sequence[str],
    include_branches: bool = False,
    expected_fingerprint: str,
    actor: str,
    reason: str,
    trash: Trash | None = None,
    lose_undo: bool = False,
    operation: str | None = None,
) -> DeleteResult:
    """Delete exactly the previewed plan (refused if the store changed since).

    However many batches it takes, the delete is one trash operation: restoring
    any of its entries restores them all.

    A plan holding a session a merge that can still be undone needs (``plan.merges``)
    runs only with ``lose_undo``: the operator confirmed that the merge can no longer be
    undone (until the trash entry is restored; the trash page names the merge).
    """
    # The caller's id, when it records it before the delete runs (its audit entry): what
    # committed can then be read from the trash even if the caller never learns the result.
    operation = operation or new_operation_id()
    plan = claim_cascade(
        session_ids=session_ids,
        include_branches=include_branches,
        expected_fingerprint=expected_fingerprint,
        actor=actor,
        reason=reason,
        lose_undo=lose_undo,
        operation=operation,
    )
    try:
        return delete_claimed_cascade(
            plan.session_ids,
            actor=actor,
            reason=reason,
            trash=trash,
            operation=operation,
            whole=cascade_whole(plan),
            plan=plan,
        )
    finally:
        claims.release(operation=operation)


def claim_cascade(
    *,
    session_ids: Sequence[str],
    include_branches: bool,
    expected_fingerprint: str,
    actor: str,
    reason: str,
    lose_undo: bool,
    operation: str,
) -> DeletePlan:
    """Every check a confirmed cascade makes before its first batch, and its claim: the plan
    against the preview's fingerprint, the claim on its sessions (``claims``), the plan again
    under the claim, its holds and the merges whose undo it loses. Returns the plan, claimed
    for ``operation`` (the caller deletes it and releases the claim); refused, nothing is
    claimed. A cascade too long for a request (``ledger.jobs``) is checked here in the
    request and deleted by the worker, as one that runs in the request is."""
    if not says_something(reason or ""):
        raise InvalidInput("A reason is required for a delete.")
    plan = plan_cascade_delete(session_ids=session_ids, include_branches=include_branches)
    if not fingerprints.matches(expected_fingerprint, plan.fingerprint):
        raise PlanChanged("delete")
    faults.checkpoint("cascade.checked")
    # A second confirmation of the same preview passed the check above too: the claim lets
    # one of them run, and the plan is checked again under it (the other may have finished).
    try:
        claims.claim(plan.session_ids, operation=operation, actor=actor)
    except (OperationalError, DatabaseError) as error:
        if where := db.storage_failure(error):
            raise DatabaseNotWritten("store", where) from error
        raise
    try:
        plan = plan_cascade_delete(session_ids=session_ids, include_branches=include_branches)
        if not fingerprints.matches(expected_fingerprint, plan.fingerprint):
            raise PlanChanged("delete")
        holds.refuse_held(plan.session_ids)
        if plan.merges and not lose_undo:
            raise InvalidInput(lost_undo_words(plan) + " Confirm that, or undo the merge first.")
    except BaseException:
        claims.release(operation=operation)
        raise
    return plan


def cascade_whole(plan: DeletePlan) -> WholeConversations:
    """Between its batches, a session the runtime links to one still to go (a delegate, a
    continuation) or a merge made meanwhile stops the cascade before that batch."""
    return WholeConversations(
        remaining=set(plan.session_ids),
        cut=frozenset(child for child, _ in plan.kept_children),
        lose_undo_of=frozenset(plan.lost_undos),
    )


def delete_claimed_cascade(
    session_ids: Sequence[str],
    *,
    actor: str,
    reason: str,
    trash: Trash | None,
    operation: str,
    whole: WholeConversations,
    plan: DeletePlan | None = None,
    job_id: int | None = None,
    after_batch: Callable[[list[str], int, int], None] | None = None,
    between_parts: Callable[[], None] | None = None,
) -> DeleteResult:
    """Delete a claimed cascade's sessions (children first) in batches of ``operation``.

    ``after_batch(batch, sessions, messages)`` after each commit (a job's progress);
    ``between_parts()`` between the parts of a large session (a job renews its lease). Raises
    ``DeletePartlyApplied`` when a batch fails after others committed (of this call)."""
    committed: list[tuple[int, int, int]] = []
    try:
        for batch, sessions, messages, _entry in delete_in_batches(
            session_ids,
            actor=actor,
            reason=reason,
            job_id=job_id,
            trash=trash,
            operation=operation,
            whole=whole,
            committed=committed,
            between_parts=between_parts,
        ):
            faults.checkpoint("cascade.between_batches")
            claims.renew(operation=operation)
            if after_batch is not None:
                after_batch(batch, sessions, messages)
    except Exception as error:
        if not committed:
            if where := db.storage_failure(error):
                raise DatabaseNotWritten(failed_database(error), where) from error
            raise
        raise DeletePartlyApplied(
            result=_committed_result(committed, operation, plan),
            planned_sessions=len(session_ids),
            planned_messages=plan.message_count if plan else 0,
            error=error,
        ) from error
    return _committed_result(committed, operation, plan)


def _committed_result(
    committed: Sequence[tuple[int, int, int]], operation: str, plan: DeletePlan | None
) -> DeleteResult:
    """What the store committed, commit by commit (a session's parts count its messages)."""
    return DeleteResult(
        deleted_sessions=sum(sessions for _entry, sessions, _messages in committed),
        deleted_messages=sum(messages for _entry, _sessions, messages in committed),
        trash_entry_ids=tuple(entry for entry, _sessions, _messages in committed),
        operation=operation,
        lost_undos=plan.lost_undos if plan else (),
    )


def failed_database(error: BaseException) -> str:
    """Which database refused the write: the trash's (tagged where it is written) or the store."""
    return getattr(error, "database", None) or "store"


class DeletePartlyApplied(Exception):
    """A delete failed after some of its batches committed: those stay deleted, in the trash.

    Not a ``StoreError`` (those mean nothing changed). ``result`` is exactly what
    committed, batch by batch, with the trash operation restoring it (undo) and
    the rest of the plan still in the store (planning the delete again finishes it).
    ``error`` is what stopped it; ``database``/``storage`` say whether a database
    could not be written (``db.storage_failure``), and which.
    """

    def __init__(
        self,
        *,
        result: DeleteResult,
        planned_sessions: int,
        planned_messages: int,
        error: BaseException,
    ):
        self.result = result
        self.planned_sessions = planned_sessions
        self.planned_messages = planned_messages
        self.error = error
        self.storage = db.storage_failure(error)
        self.database = failed_database(error) if self.storage else None
        batches = len(result.trash_entry_ids)
        if self.storage:
            why = f"{database_words(self.database, self.storage)}: "
        else:
            why = f"the delete stopped ({error}): "
        super().__init__(
            as_sentence(why)
            + f"{batches} {'batch was' if batches == 1 else 'batches were'} deleted before it "
            f"({result.deleted_sessions} of {planned_sessions} sessions, "
            f"{result.deleted_messages} of {planned_messages} messages), restorable from the "
            f"trash as one operation (entry #{result.trash_entry_ids[0]}). The rest is still in "
            "the store: delete it again to finish, or restore the trash entry to undo."
        )


def database_words(database: str, storage: str) -> str:
    """ "the store's disk is full" / "the dashboard database could not be written (...)"."""
    why = (
        "its disk is full"
        if storage == "full"
        else "a disk I/O error: a full disk or a read-only file"
    )
    if database == TRASH_DATABASE:
        return f"the dashboard database could not be written ({why})"
    if storage == "full":
        return "the store's disk is full"
    return f"the store could not be written ({why})"


def as_sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


class DatabaseNotWritten(StoreError):
    """A delete stopped because a database could not be written, before anything committed."""

    def __init__(self, database: str, storage: str):
        self.database = database
        self.storage = storage
        super().__init__(as_sentence(f"{database_words(database, storage)}: nothing was changed."))
