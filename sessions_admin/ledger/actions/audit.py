"""Operator actions' audit machinery: every edge that acts goes through it.

Views and commands call ``ledger.actions``, never the core's mutating functions, so no store
change lacks its entry. An action (1) checks operator text (``core.text``: ``InvalidInput``
before anything is written); (2) commits a ``pending`` entry (actor, action, sessions,
``before``, reason), or runs nothing if it cannot (``DashboardNotWritten``); (3) runs the core
operation in its own store transaction; (4) completes the entry: ``ok`` with ``after``,
``failed`` with the error (re-raised for the edge) or ``partial`` with exactly what committed
(its trash operation). Killed between 3 and 4, ``pending`` stays ("outcome unknown"); a
completion the database refuses is logged at ERROR and raised (``AuditIncomplete``), never
swallowed. Entries name the request's client (``ledger.context``); refusals before an action
runs (permission, stale preview, no reason, CSRF, sign-in) go through ``record_refusal``; an error
``_audited`` recorded is marked (``audited_entry``) so the view does not record it twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import connections, models, router, transaction
from django.utils import timezone

from sessions_admin.core import DeletePartlyApplied, faults
from sessions_admin.core import db as core_db
from sessions_admin.core import erasure as erasure_core
from sessions_admin.core.errors import StoreError
from sessions_admin.core.processes import process_dead
from sessions_admin.core.text import operator_identifier
from sessions_admin.ledger.context import current_client, running_audit_entry
from sessions_admin.ledger.models import AuditEntry, AuditSession
from sessions_admin.store import cached
from sessions_admin.store.models import Session

T = TypeVar("T")
MAX_AUDIT_SESSIONS = 10_000
ENTRY_SESSION_IDS = 1000  # ids kept on the entry itself; AuditSession rows hold up to the max
DETAIL_MAX = 4000
# A cascade's entry still pending after this long is not running any more (a job's lease, too).
STALE_PENDING_SECONDS = 600

logger = logging.getLogger(__name__)
# One line per action as its audit entry gets its outcome (ok, failed, partial, refused), with
# the request's id and operator (console/logformat.py); never a traceback for a refusal.
action_log = logging.getLogger("sessions_admin.action")


def _log_outcome(
    *, entry_id: int, action: str, outcome: str, actor: str, sessions: int, detail: str
) -> None:
    fields = {
        "action": action,
        "outcome": outcome,
        "entry": entry_id,
        "actor": actor,
        "sessions": sessions,
    }
    level = logging.WARNING if outcome in (AuditEntry.FAILED, AuditEntry.PARTIAL) else logging.INFO
    why = f": {' '.join(detail.split())[:300]}" if detail else ""
    action_log.log(
        level,
        "%s %s by %s (audit #%s, %s sessions)%s",
        action,
        outcome,
        actor,
        entry_id,
        sessions,
        why,
        extra={"action_fields": fields},
    )


class AuditIncomplete(RuntimeError):
    """The store change happened, but its audit entry could not be completed.

    Not a ``StoreError``: the edges must not say "nothing changed". The entry
    stays ``pending`` (outcome unknown) in the audit log.
    """

    def __init__(self, action: str, entry_id: int, error: BaseException):
        self.action = action
        self.entry_id = entry_id
        super().__init__(
            f"The {action} was applied to the store, but its audit entry #{entry_id} could not "
            f"be completed ({error}); the entry stays 'pending' in the audit log."
        )


def _name(actor: Any) -> str:
    return getattr(actor, "get_username", lambda: str(actor))() if actor is not None else "system"


def _audit_alias() -> str:
    return router.db_for_write(AuditEntry)


def _storable(value: Any) -> Any:
    """``value`` with every string made storable in the audit log (text, JSON, jsonb).

    The last line of defence for what the operator did not type (error messages,
    rows read back from a SQLite store): a NUL or a lone surrogate is written as
    its escape (``\\x00``, ``\\ud800``) instead of making the audit write fail.
    Operator text never gets here invalid: ``core.text`` refused it before.
    """
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "\\x00")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value


def _insert_row(instance: models.Model, alias: str) -> None:
    """INSERT ``instance`` as a new row and set its primary key, as ``save()`` does for a new
    row (each field's ``pre_save`` and database value, defaults and ``auto_now_add``
    included) without the ORM's query building, which cost more than the write itself: an
    audit entry is written for every API append (docs/benchmarks.md, "HTTP API appends")."""
    meta = instance._meta
    connection = connections[alias]
    quote = connection.ops.quote_name
    fields = [field for field in meta.concrete_fields if field is not meta.pk]
    values = [
        field.get_db_prep_save(field.pre_save(instance, True), connection) for field in fields
    ]
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))})"
    )
    with connection.cursor() as cursor:
        if connection.features.can_return_columns_from_insert:
            cursor.execute(f"{sql} RETURNING {quote(meta.pk.column)}", values)
            instance.pk = cursor.fetchone()[0]
        else:
            cursor.execute(sql, values)
            instance.pk = cursor.lastrowid
    instance._state.adding = False
    instance._state.db = alias


def _link_sessions(entry: AuditEntry, session_ids, *, already=()) -> None:
    """One AuditSession row per session id not linked yet (up to the maximum)."""
    skip = set(already)
    wanted = [sid for sid in dict.fromkeys(session_ids) if sid not in skip]
    room = MAX_AUDIT_SESSIONS - len(skip)
    # A bulk delete can name 100k sessions: its job items hold the full list.
    linked = wanted[: max(room, 0)]
    if not linked:
        return
    connection = connections[_audit_alias()]
    quote = connection.ops.quote_name
    meta = AuditSession._meta
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {quote(meta.db_table)} "
            f"({quote(meta.get_field('entry').column)}, {quote(meta.get_field('session_id').column)}) "
            "VALUES (%s, %s)",
            [(entry.pk, sid) for sid in linked],
        )


def record(
    *,
    actor: Any,
    action: str,
    session_ids: Sequence[str],
    before: dict | None = None,
    after: dict | None = None,
    reason: str = "",
    outcome: str = AuditEntry.OK,
    detail: str = "",
) -> AuditEntry:
    """Write one finished audit entry (for callers that record after the fact, like imports).

    Its text is made storable rather than refused: the operation it records already happened.
    """
    ids = [_storable(str(sid)) for sid in session_ids]
    client = current_client()
    entry = AuditEntry(
        client_address=client.address,
        user_agent=_storable(client.user_agent),
        actor=actor if getattr(actor, "pk", None) else None,
        actor_name=_storable(_name(actor))[:150],
        action=action,
        session_ids=ids[:ENTRY_SESSION_IDS],
        before=_storable(before or {}),
        after=_storable(after or {}),
        reason=_storable(reason or ""),
        outcome=outcome,
        detail=_storable(detail)[:DETAIL_MAX],
        completed_at=None if outcome == AuditEntry.PENDING else timezone.now(),
    )
    with transaction.atomic(using=_audit_alias()):
        _insert_row(entry, _audit_alias())
        _link_sessions(entry, ids)
    if outcome != AuditEntry.PENDING:
        _log_outcome(
            entry_id=entry.pk,
            action=action,
            outcome=outcome,
            actor=entry.actor_name,
            sessions=len(ids),
            detail=entry.detail,
        )
    return entry


def _complete(
    entry: AuditEntry,
    *,
    outcome: str,
    linked: Sequence[str],
    more_ids: Sequence[str] = (),
    after: dict | None = None,
    detail: str = "",
) -> None:
    """Turn the pending ``entry`` into its outcome, linking ``more_ids`` (sessions it created)."""
    more = [_storable(str(sid)) for sid in more_ids if sid]
    ids = list(dict.fromkeys([*linked, *more]))
    with transaction.atomic(using=_audit_alias()):
        updated = (
            AuditEntry.objects.using(_audit_alias())
            .filter(pk=entry.pk, outcome=AuditEntry.PENDING)
            .update(
                outcome=outcome,
                session_ids=ids[:ENTRY_SESSION_IDS],
                after=_storable(after or {}),
                detail=_storable(detail)[:DETAIL_MAX],
                completed_at=timezone.now(),
            )
        )
        if updated != 1:
            raise RuntimeError(f"audit entry #{entry.pk} is no longer pending (or was deleted)")
        _link_sessions(entry, more, already=linked)
    _log_outcome(
        entry_id=entry.pk,
        action=entry.action,
        outcome=outcome,
        actor=entry.actor_name,
        sessions=len(ids),
        detail=detail,
    )


def may_complete_later(entry: AuditEntry, cutoff) -> bool:
    """Whether another call may complete this pending ``entry`` now: the process it recorded
    (``before["process"]``) is known dead, at once; otherwise only once it is older than
    ``cutoff`` (a process on another machine, or one still working, may yet complete it)."""
    process = (entry.before or {}).get("process")
    return entry.created_at < cutoff or (process is not None and process_dead(process))


def complete_later(entry: AuditEntry, *, outcome: str, after: dict, detail: str) -> bool:
    """Complete a pending ``entry`` another process left (its outcome read back from the
    databases); False when its own process completed it meanwhile."""
    try:
        _complete(
            entry, outcome=outcome, linked=list(entry.session_ids), after=after, detail=detail
        )
    except RuntimeError:
        return False
    return True


class DashboardNotWritten(StoreError):
    """The action's intent could not be recorded (the dashboard database refused the write),
    so it did not run: nothing was changed, in the store or in the audit log."""

    def __init__(self, action: str, storage: str, error: BaseException):
        self.action = action
        why = "its disk is full" if storage == "full" else f"{type(error).__name__}: {error}"
        super().__init__(
            f"The dashboard database could not be written ({why}): nothing was changed. "
            f"The {action} did not run; free space on its disk, or make it writable, then retry."
        )


def _failure_detail(error: Exception) -> str:
    """What a failed action's entry says: the refusal, a database that could not be written,
    or that a bug escaped the core."""
    # A StoreError is the core's "refused, nothing changed"; anything else
    # escaped the core's transaction, which rolled back.
    if isinstance(error, StoreError | erasure_core.ErasureStopped | DeletePartlyApplied):
        return str(error)
    if core_db.connection_lost(error):
        return (
            "The database server closed the connection (it restarted or stopped): what the "
            f"operation had not committed rolled back. ({type(error).__name__}: {error})"
        )
    if storage := core_db.storage_failure(error):
        why = "its disk is full" if storage == "full" else "a disk I/O error or a read-only file"
        return (
            f"A database could not be written ({why}): the operation rolled back. "
            f"({type(error).__name__}: {error})"
        )
    return f"Unexpected error ({type(error).__name__}): {error}"


def _audited(
    *,
    actor: Any,
    action: str,
    session_ids: Sequence[str],
    reason: str,
    before: dict | None,
    run: Callable[[], T],
    after: Callable[[T], dict],
    result_ids: Callable[[T], Sequence[str | None]] = lambda _: (),
    failed_ids: Callable[[Exception], Sequence[str]] = lambda _: (),
    partly: Callable[[Exception], T | None] = lambda _: None,
    leave_pending: bool = False,
) -> T:
    """Record the intent (committed), run the store operation, then record its outcome.

    ``reason`` and every other operator text must already be through ``core.text``.
    ``failed_ids``: the sessions a failed operation still wrote (an interrupted import
    keeps the batches it committed), linked to the failed entry. ``partly``: what a
    failed operation committed all the same (a delete's first batches), or None; the
    entry is then ``partial``, its ``after`` that result (the trash operation with it)
    and its detail what stopped the rest. ``leave_pending``: ``run`` handed the work to a
    job (a long cascade or restore) that completes the entry; it stays pending here.
    """
    audit = _caller_transaction()
    if audit:
        # The pending entry would only commit with the caller's transaction: a crash
        # after the store commit would leave no trace. Refuse rather than pretend.
        raise RuntimeError(
            f"Operator actions must not run inside a transaction on {audit!r}: "
            "the audit entry has to be committed before the store changes."
        )
    linked = [_storable(str(sid)) for sid in dict.fromkeys(session_ids)]
    try:
        entry = record(
            actor=actor,
            action=action,
            session_ids=linked,
            before=before,
            reason=reason,
            outcome=AuditEntry.PENDING,
        )
    except Exception as error:
        if storage := core_db.storage_failure(error):
            raise DashboardNotWritten(action.replace("_", " "), storage, error) from error
        raise
    try:
        with running_audit_entry(entry.pk):
            result = run()
    except Exception as error:
        # Recorded here: the edge's record_refusal must not record it again.
        error.audited_entry = entry.pk
        detail = _failure_detail(error)
        committed = partly(error)
        if committed is not None:
            cached.forget_all()  # what did commit shows at once, as after an ok action
        lost = core_db.connection_lost(getattr(error, "error", None) or error)
        failure = error

        def record_outcome() -> None:
            if committed is not None:
                _complete(
                    entry,
                    outcome=AuditEntry.PARTIAL,
                    linked=linked,
                    more_ids=failed_ids(failure),
                    after=after(committed),
                    detail=str(failure),
                )
            else:
                _complete(
                    entry,
                    outcome=AuditEntry.FAILED,
                    linked=linked,
                    more_ids=failed_ids(failure),
                    detail=detail,
                )

        try:
            core_db.when_server_back(record_outcome, lost=lost)
        except Exception:
            # The store did not change; the operator still needs the refusal itself.
            logger.exception(
                "Audit entry #%s (%s, failed: %s) could not be completed; it stays pending.",
                entry.pk,
                action,
                detail,
            )
        raise
    if leave_pending:
        return result
    # The store change is committed; until the next line completes, the entry says "pending".
    faults.checkpoint("audit.after_store_commit")
    # The operator who merged or deleted expects the fork groups and counts to show it.
    cached.forget_all()
    try:
        state_after = after(result)
    except Exception as error:  # reading the new state is a courtesy; the outcome is known
        logger.warning("Could not read the state after %s: %s", action, error)
        state_after = {"unreadable": f"{type(error).__name__}: {error}"}
    try:
        _complete(
            entry,
            outcome=AuditEntry.OK,
            linked=linked,
            more_ids=[sid for sid in result_ids(result) if sid],
            after=state_after,
        )
    except Exception as error:
        logger.error(
            "The %s by %s was applied to the store, but audit entry #%s could not be "
            "completed; it stays pending. After: %r",
            action,
            _name(actor),
            entry.pk,
            state_after,
            exc_info=True,
        )
        raise AuditIncomplete(action, entry.pk, error) from error
    return result


def record_refusal(
    *,
    request: Any = None,
    actor: Any = None,
    action: str,
    why: str | BaseException,
    session_ids: Sequence[str] = (),
    before: dict | None = None,
) -> AuditEntry | None:
    """Record an attempt refused before (or instead of) its action: outcome ``refused``.

    Who: ``actor``, or the request's user ("anonymous" when signed out); what:
    ``action``, the sessions and ``before`` (plus the request's method and path);
    from where: the request's client (every entry has it); why: ``why``. An error
    ``_audited`` already recorded is skipped (None). Recording never raises: a
    refusal is shown to the operator even when the audit database fails (logged).
    """
    if getattr(why, "audited_entry", None) is not None:
        return None
    if actor is None and request is not None:
        user = getattr(request, "user", None)
        actor = user if getattr(user, "is_authenticated", False) else "anonymous"
    what = dict(before or {})
    if request is not None:
        what.setdefault("method", request.method)
        what.setdefault("path", request.path)
    try:
        return record(
            actor=actor,
            action=action[:40],
            session_ids=[str(sid) for sid in session_ids][:MAX_AUDIT_SESSIONS],
            before=what,
            outcome=AuditEntry.REFUSED,
            detail=str(why),
        )
    except Exception:
        logger.exception("Could not audit the refused %s by %s: %s", action, _name(actor), why)
        return None


def _caller_transaction() -> str | None:
    """The audit database's alias when the caller holds a transaction open on it."""
    alias = _audit_alias()
    return alias if connections[alias].in_atomic_block else None


def _check_fingerprint(fingerprint: Any) -> None:
    """A preview's fingerprint is compared, not stored; still, PostgreSQL cannot compare a NUL."""
    if fingerprint:
        operator_identifier(fingerprint, field="fingerprint", max_length=200)


def _counts(session_ids: Sequence[str]) -> dict:

    return {
        s.id: {"messages": s.message_count, "ended": s.end_reason if s.ended_at else None}
        for s in Session.objects.filter(id__in=list(session_ids)[:200])
    }
