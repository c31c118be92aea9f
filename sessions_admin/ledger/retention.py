"""Retention policies: the dashboard's schedule for ``core.retention`` rules.

A policy (``RetentionPolicy``) is created disabled; its page shows what a run would
delete now. Enabled, it is due at ``next_run_at``; whoever starts a due run first (a
dashboard process's scheduler thread, ``manage.py run_jobs --schedule``,
``manage.py apply_retention``) claims it by moving ``next_run_at`` on in one
conditional UPDATE, so several processes or hosts never start the same run twice. A
run is an ordinary bulk delete job (trash first, short batches, resumable, progress on
its page), purged instead of trashed when the policy says so; the audited door is
``ledger.actions.run_retention_policy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.utils import timezone

from sessions_admin.core import deletion
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.retention import RetentionRule, select_sessions
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import RetentionPolicy

MIN_EVERY_HOURS = 0.25
MAX_EVERY_HOURS = 24 * 366


def rule_of(policy: RetentionPolicy) -> RetentionRule:
    return RetentionRule(
        older_than_days=float(policy.older_than_days),
        source=policy.source,
        status=policy.status,
        end_reason=policy.end_reason,
        title=policy.title,
    )


def check(policy: RetentionPolicy) -> None:
    """Refuse a policy that cannot run, in words (the form and the command show them)."""
    if not policy.name.strip():
        raise InvalidInput("Give the policy a name.")
    rule_of(policy).check()
    if policy.mode not in (RetentionPolicy.TRASH, RetentionPolicy.PURGE):
        raise InvalidInput("A policy either moves sessions to the trash or purges them.")
    if not (MIN_EVERY_HOURS <= float(policy.every_hours) <= MAX_EVERY_HOURS):
        raise InvalidInput(f"Run every {MIN_EVERY_HOURS:g} to {MAX_EVERY_HOURS:g} hours.")


def selected_ids(policy: RetentionPolicy) -> list[str]:
    """What a run of the policy would delete now (live and held sessions left out)."""
    ids = select_sessions(rule_of(policy))
    return list(deletion.preview_bulk_delete(session_ids=ids).session_ids) if ids else []


def dry_run(policy: RetentionPolicy) -> deletion.BulkDeletePreview:
    return deletion.preview_bulk_delete(session_ids=select_sessions(rule_of(policy)))


def describe(policy: RetentionPolicy) -> str:
    mode = "purged" if policy.mode == RetentionPolicy.PURGE else "moved to the trash"
    return f"{rule_of(policy).describe()}; {mode}"


def due_policy_ids(now: datetime | None = None) -> list[int]:
    now = now or timezone.now()
    return list(
        RetentionPolicy.objects.filter(enabled=True, next_run_at__lte=now)
        .order_by("next_run_at", "pk")
        .values_list("pk", flat=True)
    )


def claim_due(policy_id: int, now: datetime | None = None) -> bool:
    """Take a due run: move ``next_run_at`` on, unless another process did first."""
    now = now or timezone.now()
    policy = RetentionPolicy.objects.filter(pk=policy_id, enabled=True).first()
    if policy is None or policy.next_run_at is None or policy.next_run_at > now:
        return False
    claimed = RetentionPolicy.objects.filter(
        pk=policy_id, enabled=True, next_run_at=policy.next_run_at
    ).update(next_run_at=now + timedelta(hours=policy.every_hours), last_run_at=now)
    return claimed == 1


def start_run(policy: RetentionPolicy, *, ids: Sequence[str], actor: str) -> int | None:
    """A bulk delete job for the run (None when nothing matches now)."""
    RetentionPolicy.objects.filter(pk=policy.pk).update(last_run_at=timezone.now())
    if not ids:
        return None
    try:
        return jobs.create_bulk_delete_job(
            session_ids=ids,
            include_live=False,
            actor=actor,
            reason=f"retention policy #{policy.pk} {policy.name!r}: {describe(policy)}",
            description=f"Retention: {policy.name}"[:2000],
            purge=policy.mode == RetentionPolicy.PURGE,
            policy_id=policy.pk,
        )
    except InvalidInput:
        return None  # everything it picked went (or went live) since the selection
