"""Operator actions: the core operation plus its audit entry, for every edge that acts.

Views and commands call these, never the core's mutating functions directly,
so no action escapes the audit trail. A refused or failed action is audited
too (outcome ``failed``) and its error re-raised for the edge to show.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sessions_admin import core
from sessions_admin.core.errors import InvalidInput, StoreError
from sessions_admin.ledger.models import AuditEntry, AuditSession
from sessions_admin.store import cached

T = TypeVar("T")
MAX_AUDIT_SESSIONS = 10_000


def _name(actor: Any) -> str:
    return getattr(actor, "get_username", lambda: str(actor))() if actor is not None else "system"


def record(
    *,
    actor: Any,
    action: str,
    session_ids: Sequence[str],
    before: dict | None = None,
    after: dict | None = None,
    reason: str = "",
    outcome: str = "ok",
    detail: str = "",
) -> AuditEntry:
    entry = AuditEntry.objects.create(
        actor=actor if getattr(actor, "pk", None) else None,
        actor_name=_name(actor),
        action=action,
        session_ids=list(session_ids)[:1000],
        before=before or {},
        after=after or {},
        reason=reason,
        outcome=outcome,
        detail=detail[:4000],
    )
    # A bulk delete can name 100k sessions: its job items hold the full list.
    AuditSession.objects.bulk_create(
        (
            AuditSession(entry=entry, session_id=sid)
            for sid in list(dict.fromkeys(session_ids))[:MAX_AUDIT_SESSIONS]
        ),
        batch_size=1000,
    )
    return entry


def _require_reason(reason: str) -> str:
    if not reason or not reason.strip():
        raise InvalidInput("Give a reason: it is required for destructive actions.")
    return reason.strip()


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
) -> T:
    try:
        result = run()
    except StoreError as error:
        record(
            actor=actor,
            action=action,
            session_ids=session_ids,
            before=before,
            reason=reason,
            outcome="failed",
            detail=str(error),
        )
        raise
    # The operator who merged or deleted expects the fork groups and counts to show it.
    cached.forget_all()
    record(
        actor=actor,
        action=action,
        session_ids=[*session_ids, *(sid for sid in result_ids(result) if sid)],
        before=before,
        after=after(result),
        reason=reason,
    )
    return result


def _counts(session_ids: Sequence[str]) -> dict:
    from sessions_admin.store.models import Session

    return {
        s.id: {"messages": s.message_count, "ended": s.end_reason if s.ended_at else None}
        for s in Session.objects.filter(id__in=list(session_ids)[:200])
    }


def merge(
    *,
    actor,
    session_ids: Sequence[str],
    target_id: str | None,
    expected_fingerprint: str,
    reason: str = "",
) -> core.MergeResult:
    ids = list(session_ids)
    return _audited(
        actor=actor,
        action="merge",
        session_ids=ids,
        reason=reason,
        before=_counts(ids),
        run=lambda: core.merge_sessions(
            session_ids=ids, target_id=target_id, expected_fingerprint=expected_fingerprint
        ),
        after=lambda r: {
            "merge_id": r.merge_id,
            "target": r.target_id,
            "moved_messages": r.moved_messages,
            **_counts([r.target_id]),
        },
    )


def unmerge(*, actor, merge_id: int, reason: str = "") -> core.UnmergeResult:
    try:
        merged = core.merge_record(merge_id=merge_id)
        ids = [merged.target_id, *merged.absorbed_ids]
    except core.MergeNotFound:
        ids = []
    return _audited(
        actor=actor,
        action="unmerge",
        session_ids=ids,
        reason=reason,
        before={"merge_id": merge_id, **_counts(ids)},
        run=lambda: core.unmerge(merge_id=merge_id),
        after=lambda r: {
            "merge_id": merge_id,
            "returned_messages": r.returned_messages,
            **_counts(ids),
        },
    )


def resume(*, actor, ref: str, reason: str = "") -> core.ResumeResult:
    try:
        asked = [core.resolve_session_ref(ref)]
    except StoreError:
        asked = []  # the refusal is audited below, with the reference as given
    return _audited(
        actor=actor,
        action="resume",
        session_ids=asked,
        reason=reason,
        before={"ref": ref, **_counts(asked)},
        run=lambda: core.resume_session(ref=ref),
        after=lambda r: {"resumed": r.session_id, "switched_from": r.switched_from_session_id},
        result_ids=lambda r: [r.session_id, r.switched_from_session_id],
    )


def reset(
    *, actor, session_key: str, summary: str | None = None, reason: str = ""
) -> core.ResetResult:
    live = core.live_session_for_key(session_key)
    return _audited(
        actor=actor,
        action="reset",
        session_ids=[s for s in [live] if s],
        reason=reason,
        before={"session_key": session_key, "live": live},
        run=lambda: core.reset_session_key(session_key=session_key, summary=summary or None),
        after=lambda r: {"ended": r.ended_session_id, "new": r.new_session_id},
        result_ids=lambda r: [r.ended_session_id, r.new_session_id],
    )


def rewrite(*, actor, session_id: str, action: str, reason: str = "") -> core.RewriteResult:
    operations = {
        "undo": core.undo_last_turn,
        "redo": core.redo_turn,
        "retry": core.retry_last_turn,
    }
    if action not in operations:
        raise InvalidInput(f"Unknown transcript action {action!r}.")
    return _audited(
        actor=actor,
        action=action,
        session_ids=[session_id],
        reason=reason,
        before=_counts([session_id]),
        run=lambda: operations[action](session_id=session_id),
        after=lambda r: {"message_ids": list(r.message_ids), "message_count": r.message_count},
    )


def cascade_delete(
    *,
    actor,
    session_ids: Sequence[str],
    include_branches: bool,
    expected_fingerprint: str,
    reason: str,
) -> core.DeleteResult:
    ids = list(session_ids)
    reason = _require_reason(reason)
    return _audited(
        actor=actor,
        action="cascade_delete",
        session_ids=ids,
        reason=reason,
        before=_counts(ids),
        run=lambda: core.execute_cascade_delete(
            session_ids=ids,
            include_branches=include_branches,
            expected_fingerprint=expected_fingerprint,
            actor=_name(actor),
            reason=reason,
        ),
        after=lambda r: {
            "deleted_sessions": r.deleted_sessions,
            "deleted_messages": r.deleted_messages,
            "trash_entries": list(r.trash_entry_ids),
        },
    )


def start_bulk_delete(
    *, actor, session_ids: Sequence[str], include_live: bool, reason: str, description: str = ""
) -> int:
    from sessions_admin.ledger.worker import ensure_worker_running

    ids = list(session_ids)
    reason = _require_reason(reason)
    job_id = _audited(
        actor=actor,
        action="bulk_delete",
        session_ids=ids,
        reason=reason,
        before={"selected": len(ids), "include_live": include_live, "description": description},
        run=lambda: core.create_bulk_delete_job(
            session_ids=ids,
            include_live=include_live,
            actor=_name(actor),
            reason=reason,
            description=description,
        ),
        after=lambda job: {"job": job},
    )
    ensure_worker_running()
    return job_id


def restore(*, actor, entry_id: int, reason: str = "") -> core.RestoreResult:
    from sessions_admin.ledger.models import TrashEntry

    entry = TrashEntry.objects.filter(pk=entry_id).first()
    ids = list(entry.session_ids) if entry else []
    return _audited(
        actor=actor,
        action="restore",
        session_ids=ids,
        reason=reason,
        before={"trash_entry": entry_id},
        run=lambda: core.restore_trash_entry(entry_id=entry_id, actor=_name(actor)),
        after=lambda r: {
            "restored_sessions": len(r.restored_sessions),
            "restored_messages": r.restored_messages,
            "skipped_conversations": list(r.skipped_conversations),
        },
    )


def purge(*, actor, older_than_days: float | None, reason: str) -> int:
    reason = _require_reason(reason)
    return _audited(
        actor=actor,
        action="purge_trash",
        session_ids=[],
        reason=reason,
        before={"older_than_days": older_than_days},
        run=lambda: core.purge_trash(older_than_days=older_than_days),
        after=lambda n: {"purged_entries": n},
    )


def cancel_bulk_delete(*, actor, job_id: int, reason: str = "") -> None:
    before = core.job_progress(job_id=job_id)
    _audited(
        actor=actor,
        action="cancel_bulk_delete",
        session_ids=[],
        reason=reason,
        before={"job": job_id, "state": before.state, "processed": before.processed},
        run=lambda: core.cancel_job(job_id=job_id),
        after=lambda _: {"job": job_id, "state": core.job_progress(job_id=job_id).state},
    )
