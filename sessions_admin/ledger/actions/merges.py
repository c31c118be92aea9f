"""Merging sessions and undoing a merge, audited; merges' entries a dead process left pending
are completed from the store's merge records."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta

from django.utils import timezone

from sessions_admin import core
from sessions_admin.core import db as core_db
from sessions_admin.core import fingerprints
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.merge import confirmation_problem
from sessions_admin.core.merge_moves import recorded_children
from sessions_admin.core.processes import this_process
from sessions_admin.core.text import operator_identifier, operator_identifiers, operator_text
from sessions_admin.ledger import erasure as erasure_ledger
from sessions_admin.ledger.actions.audit import (
    STALE_PENDING_SECONDS,
    _audit_alias,
    _audited,
    _check_fingerprint,
    _counts,
    complete_later,
    may_complete_later,
)
from sessions_admin.ledger.models import AuditAction, AuditEntry, TrashEntry, TrashSession


def merge(
    *,
    actor,
    session_ids: Sequence[str],
    target_id: str | None,
    expected_fingerprint: str,
    reason: str = "",
    continue_history: bool = False,
    typed_count: int | None = None,
    differences: dict[str, list] | None = None,
) -> core.MergeResult:
    """``core.merge_sessions``, audited. Sessions whose users, sources or keys differ merge only
    confirmed (``core.merge.confirmation_problem``: ``typed_count`` and a reason), what differs
    kept in the entry; ``differences`` is accepted for callers that pass it, and recomputed."""
    ids = operator_identifiers(session_ids)
    target_id = operator_identifier(target_id, field="target session id", required=False)
    _check_fingerprint(expected_fingerprint)
    reason = operator_text(reason, field="reason")
    # The erasure itself stops on a merge made after its plan (``core.erasure``); refused
    # here first, so the request is not left waiting for an unmerge.
    erasure_ledger.refuse_under_erasure([*ids, *([target_id] if target_id else [])])
    before = _counts(ids)
    try:
        plan = core.plan_merge(session_ids=ids, target_id=target_id)
    except core.StoreError:
        plan = None  # the merge itself refuses it below, audited with why
    if (
        plan is not None
        and fingerprints.matches(expected_fingerprint, plan.fingerprint)
        and plan.differs
    ):
        if problem := confirmation_problem(plan, typed_count=typed_count, reason=reason):
            raise InvalidInput(f"{problem} Nothing was merged.")
        differences = {d.label: list(d.values) for d in plan.differences}
    if differences:
        before["confirmed_differences"] = differences
    # Its process: a merge killed before its outcome was recorded is completed from the store
    # at once once that process is known dead (``complete_stale_merges``).
    before["process"] = this_process()
    return _audited(
        actor=actor,
        action=AuditAction.MERGE,
        session_ids=ids,
        reason=reason,
        before=before,
        run=lambda: core.merge_sessions(
            session_ids=ids,
            target_id=target_id,
            expected_fingerprint=expected_fingerprint,
            continue_history=continue_history,
        ),
        after=lambda r: {
            "merge_id": r.merge_id,
            "target": r.target_id,
            "moved_messages": r.moved_messages,
            **(
                {"rewritten_responses": list(r.rewritten_responses)}
                if r.rewritten_responses
                else {}
            ),
            **_counts([r.target_id]),
        },
    )


def unmerge(*, actor, merge_id: int, reason: str = "") -> core.UnmergeResult:
    reason = operator_text(reason, field="reason")
    try:
        merged = core.merge_record(merge_id=merge_id)
        ids = [merged.target_id, *merged.absorbed_ids]
    except core.MergeNotFound:
        ids = []
    return _audited(
        actor=actor,
        action=AuditAction.UNMERGE,
        session_ids=ids,
        reason=reason,
        before={"merge_id": merge_id, **_counts(ids), "process": this_process()},
        run=lambda: (
            _refuse_stray_moves_in_place(ids[1:])
            or _refuse_children_in_trash(merge_id)
            or core.unmerge(merge_id=merge_id)
        ),
        after=lambda r: {
            "merge_id": merge_id,
            "returned_messages": r.returned_messages,
            **_counts(ids),
        },
    )


def _refuse_children_in_trash(merge_id: int) -> None:
    """Refuse an unmerge while a child the merge moved onto its target is in the trash: the
    unmerge gives back below the husk only the children in the store, so that one would come
    back from the trash below the target, another person's session, for good (attack round
    44). Restored first, it goes back below the husk with the rest."""
    row = core_db.fetchone(
        "SELECT prior_state FROM sessions_admin_merges WHERE id = %s", [merge_id]
    )
    try:
        prior = json.loads(row[0]) if row and row[0] else {}
    except (TypeError, ValueError):
        return
    moved = dict(recorded_children(prior))
    gone = sorted(set(moved) - core.lineage.existing_session_ids(sorted(moved)))
    if not gone:
        return
    trashed = (
        TrashSession.objects.filter(session_id__in=gone)
        .exclude(entry__state=TrashEntry.RESTORED)
        .order_by("entry_id")
        .values_list("session_id", "entry_id")
        .first()
    )
    if trashed is not None:
        child, entry_id = trashed
        raise InvalidInput(
            f"Session {child}, which merge #{merge_id} moved from below {moved[child]}, is in "
            f"the trash (entry #{entry_id}): restore it first, then undo the merge, so that it "
            "goes back below its own session. Nothing was changed."
        )


def _refuse_stray_moves_in_place(husks: Sequence[str]) -> None:
    """Refuse an unmerge while messages a runtime wrote into one of its husks after the merge
    were moved out (``move_stray_messages``) and not moved back: the unmerge gives a husk only
    the rows the merge took, so those would stay with the target, apart from the conversation
    they were written in (docs/attach.md: undo such a move first)."""
    if not husks:
        return
    wanted = set(husks)
    for entry_id, after in (
        AuditEntry.objects.using(_audit_alias())
        .filter(action=AuditAction.MOVE_STRAY_MESSAGES, outcome=AuditEntry.OK)
        .order_by("pk")
        .values_list("pk", "after")
    ):
        if not isinstance(after, dict) or after.get("from") not in wanted:
            continue
        moved = [m for m in after.get("message_ids") or [] if isinstance(m, int)]
        away = core_db.fetchall_in(
            "SELECT id FROM messages WHERE id IN ({marks}) AND session_id <> %s",
            moved,
            after=[after["from"]],
        )
        if away:
            raise InvalidInput(
                f"Move #{entry_id} took {len(away)} message(s) a runtime wrote into "
                f"{after['from']} after the merge to {after.get('to')}, and they are still "
                'there: move them back first (the session\'s "Written after it ended" page), '
                "then undo the merge. Nothing was changed."
            )


def complete_stale_merges(*, older_than_seconds: float = STALE_PENDING_SECONDS) -> list[int]:
    """Complete merges' entries left ``pending`` (the process died after the store commit, or
    the dashboard database refused the outcome) from the store's merge records: ``ok`` naming
    the merge if one of exactly these sessions was recorded after the entry, else ``failed``.

    Only entries older than ``older_than_seconds`` (a younger one may be a merge still
    running). Returns their ids.
    """
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    completed = []
    for entry in AuditEntry.objects.using(_audit_alias()).filter(
        action=AuditAction.MERGE, outcome=AuditEntry.PENDING
    ):
        if not may_complete_later(entry, cutoff):
            continue
        asked = set(entry.session_ids)
        made = None
        for merge_id, target, absorbed in core_db.fetchall(
            "SELECT id, target_session_id, absorbed_session_ids FROM sessions_admin_merges "
            "WHERE created_at >= %s ORDER BY id",
            [entry.created_at.timestamp() - 1],
        ):
            # The target is one of them, or (none named) a session the merge made; a merge
            # another entry records as its own is not this one's.
            if set(json.loads(absorbed or "[]")) | ({target} & asked) == asked and not (
                AuditEntry.objects.using(_audit_alias())
                .filter(action=AuditAction.MERGE, outcome=AuditEntry.OK, after__merge_id=merge_id)
                .exclude(pk=entry.pk)
                .exists()
            ):
                made = (merge_id, target)
                break
        if made is not None:
            outcome, after = AuditEntry.OK, {"merge_id": made[0], "target": made[1]}
            detail = (
                "Completed later: the merge committed in the store (merge "
                f"#{made[0]}), but its outcome could not be recorded then."
            )
        else:
            outcome, after = AuditEntry.FAILED, {}
            detail = "Completed later: the store records no such merge, so nothing was merged."
        if complete_later(entry, outcome=outcome, after=after, detail=detail):
            completed.append(entry.pk)
    return completed


def complete_stale_unmerges(*, older_than_seconds: float = STALE_PENDING_SECONDS) -> list[int]:
    """Complete unmerges' entries left ``pending`` from the store's merge record: ``ok`` if
    the merge was undone after the entry was written, ``failed`` if it was not. Only entries
    older than ``older_than_seconds``. Returns their ids."""
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    completed = []
    for entry in AuditEntry.objects.using(_audit_alias()).filter(
        action=AuditAction.UNMERGE, outcome=AuditEntry.PENDING
    ):
        if not may_complete_later(entry, cutoff):
            continue
        merge_id = (entry.before or {}).get("merge_id")
        row = (
            core_db.fetchone(
                "SELECT undone_at FROM sessions_admin_merges WHERE id = %s", [int(merge_id)]
            )
            if isinstance(merge_id, int)
            else None
        )
        # Undone after this entry was written, and by no other unmerge that says so itself.
        by_another = (
            AuditEntry.objects.using(_audit_alias())
            .filter(action=AuditAction.UNMERGE, outcome=AuditEntry.OK, before__merge_id=merge_id)
            .exclude(pk=entry.pk)
            .exists()
        )
        undone = (
            not by_another
            and row is not None
            and row[0] is not None
            and row[0] >= entry.created_at.timestamp() - 1
        )
        if undone:
            outcome, after = AuditEntry.OK, {"merge_id": merge_id}
            detail = (
                f"Completed later: merge #{merge_id} was undone in the store, but the outcome "
                "could not be recorded then."
            )
        else:
            outcome, after = AuditEntry.FAILED, {}
            detail = f"Completed later: merge #{merge_id} was not undone by it; nothing changed."
        if complete_later(entry, outcome=outcome, after=after, detail=detail):
            completed.append(entry.pk)
    return completed
