"""Retention policies, audited: creating, enabling, deleting one, and its runs (the
operator's "Run now", the scheduler's due runs), each a bulk delete job."""

from __future__ import annotations

import logging

from django.utils import timezone

from sessions_admin import core
from sessions_admin.core import fingerprints
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.text import operator_text
from sessions_admin.ledger import retention as retention_ledger
from sessions_admin.ledger import worker
from sessions_admin.ledger.actions.audit import _audited, _name, record
from sessions_admin.ledger.models import AuditAction, AuditEntry, RetentionPolicy

MAX_HELD_NAMED = 1000  # held sessions a retention run's entry names one by one

logger = logging.getLogger(__name__)


def _policy_state(policy: RetentionPolicy) -> dict:
    every = policy.every_hours
    return {
        "policy": policy.pk,
        "name": policy.name,
        "rule": retention_ledger.describe(policy),
        # A stored value the rules refuse (NaN, text) is kept as its text: jsonb has no NaN.
        "every_hours": every if retention_ledger.problem_of(policy) is None else repr(every),
        "enabled": policy.enabled,
    }


def create_retention_policy(*, actor, reason: str = "", **fields) -> RetentionPolicy:
    """A new policy, disabled: its page shows what a run would delete before anyone enables it."""
    reason = operator_text(reason, field="reason")
    fields["name"] = operator_text(fields.get("name", ""), field="name", required=True)
    policy = RetentionPolicy(**fields, enabled=False, created_by=_name(actor))
    retention_ledger.check(policy)

    def save() -> RetentionPolicy:
        policy.save()
        return policy

    return _audited(
        actor=actor,
        action=AuditAction.RETENTION_POLICY_CREATE,
        session_ids=[],
        reason=reason,
        before=None,
        run=save,
        after=_policy_state,
    )


def set_retention_policy_enabled(
    *, actor, policy_id: int, enabled: bool, reason: str = ""
) -> RetentionPolicy:
    """Enable (first run one period from now) or disable a policy."""
    reason = operator_text(reason, field="reason")
    policy = RetentionPolicy.objects.filter(pk=policy_id).first()
    if policy is None:
        raise InvalidInput(f"There is no retention policy #{policy_id}.")
    if enabled:
        retention_ledger.check_stored(policy)

    def switch() -> RetentionPolicy:
        policy.enabled = enabled
        policy.next_run_at = (
            timezone.now() + timezone.timedelta(hours=policy.every_hours) if enabled else None
        )
        policy.save(update_fields=["enabled", "next_run_at"])
        return policy

    return _audited(
        actor=actor,
        action=AuditAction.RETENTION_POLICY_ENABLE
        if enabled
        else AuditAction.RETENTION_POLICY_DISABLE,
        session_ids=[],
        reason=reason,
        before=_policy_state(policy),
        run=switch,
        after=lambda p: {**_policy_state(p), "next_run_at": str(p.next_run_at)},
    )


def delete_retention_policy(*, actor, policy_id: int, reason: str = "") -> None:
    reason = operator_text(reason, field="reason")
    policy = RetentionPolicy.objects.filter(pk=policy_id).first()
    if policy is None:
        raise InvalidInput(f"There is no retention policy #{policy_id}.")
    _audited(
        actor=actor,
        action=AuditAction.RETENTION_POLICY_DELETE,
        session_ids=[],
        reason=reason,
        before=_policy_state(policy),
        run=lambda: policy.delete(),
        after=lambda _: {"policy": policy_id, "deleted": True},
    )


def run_retention_policy(
    *, actor, policy_id: int, reason: str, expected_fingerprint: str | None = None
) -> int | None:
    """One run of a policy now: a bulk delete job of what it selects (None: nothing matched).

    The scheduler calls this for a due run it claimed (``start_due_policies``) and
    ``manage.py apply_retention`` for its pass, both with no actor: the policy itself is
    the actor then (``retention.actor_of``). The page's "Run now" passes the operator and
    the fingerprint of the preview it showed: a run whose selection changed since is
    refused (``PlanChanged``), so it deletes exactly the sessions shown. A stored policy
    the rules refuse never runs; its refusal is audited. Sessions a legal hold keeps are
    named with the hold in the entry (``kept_for_holds``).
    """
    reason = operator_text(reason, field="reason", required=True)
    policy = RetentionPolicy.objects.filter(pk=policy_id).first()
    if policy is None:
        raise InvalidInput(f"There is no retention policy #{policy_id}.")
    if actor is None:
        actor = retention_ledger.actor_of(policy)
    if problem := retention_ledger.problem_of(policy):
        entry = record(
            actor=actor,
            action=AuditAction.RETENTION_RUN,
            session_ids=[],
            before=_policy_state(policy),
            reason=reason,
            outcome=AuditEntry.FAILED,
            detail=problem,
        )
        refused = InvalidInput(problem)
        refused.audited_entry = entry.pk
        raise refused
    preview = retention_ledger.dry_run(policy, rows=0)
    ids = list(preview.session_ids)

    def run() -> int | None:
        if expected_fingerprint is not None and not fingerprints.matches(
            expected_fingerprint, preview.fingerprint
        ):
            raise core.PlanChanged("retention run")
        return retention_ledger.start_run(policy, ids=ids, actor=_name(actor), reason=reason)

    job_id = _audited(
        actor=actor,
        action=AuditAction.RETENTION_RUN,
        session_ids=ids,
        reason=reason,
        before={
            **_policy_state(policy),
            "selected": len(ids),
            "messages": preview.message_count,
            "mode": policy.mode,
            "fingerprint": preview.fingerprint,
            "kept_for_holds": [skip.describe() for skip in preview.held[:MAX_HELD_NAMED]],
            "kept_for_holds_count": len(preview.held),
        },
        run=run,
        after=lambda job: {"job": job},
    )
    if job_id is not None:
        worker.ensure_worker_running()
    return job_id


def start_due_policies() -> list[int]:
    """Start every enabled policy whose run is due (claimed once across processes); the jobs.

    Each run is audited with the policy as its actor.
    """
    started = []
    for policy_id in retention_ledger.due_policy_ids():
        if not retention_ledger.claim_due(policy_id):
            continue
        try:
            job_id = run_retention_policy(
                actor=None, policy_id=policy_id, reason="scheduled retention run"
            )
        except Exception:
            logger.exception("retention policy %s: the scheduled run failed", policy_id)
            continue
        if job_id is not None:
            started.append(job_id)
    return started
