"""Retention policies: the dashboard's schedule for ``core.retention`` rules.

A policy (``RetentionPolicy``) is created disabled; its page shows what a run would
delete now. Enabled, it is due at ``next_run_at``; whoever starts a due run first (a
dashboard process's scheduler thread, ``manage.py run_jobs --schedule``,
``manage.py apply_retention``) claims it by moving ``next_run_at`` on in one
conditional UPDATE, so several processes or hosts never start the same run twice. A run is
an ordinary bulk delete job of exactly the sessions its selection listed (``expected_ids``),
each conversation kept whole if it went on meanwhile (``core.deletion.kept_whole``), purged
instead of trashed when the policy says so; the audited door is
``ledger.actions.run_retention_policy``. A stored policy whose values the rules refuse
(``check``: a row written before them, or by hand) never runs: every door checks it
first and says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timedelta

from django.utils import timezone

from sessions_admin.core import db, fingerprints
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.retention import (
    HeldSkip,
    RetentionPlan,
    RetentionRule,
    number_problem,
    plan_retention,
)
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import RetentionPolicy

MIN_EVERY_HOURS = 0.25
MAX_EVERY_HOURS = 24 * 366
ROWS_SHOWN = 200  # sessions a preview lists (the count says how many more)


def rule_of(policy: RetentionPolicy) -> RetentionRule:
    """The policy's rule, its values as stored (``RetentionRule.check`` judges them): a policy
    stores each of the rule's fields under the field's own name."""
    return RetentionRule(**{f.name: getattr(policy, f.name) for f in fields(RetentionRule)})


def check(policy: RetentionPolicy) -> None:
    """Refuse a policy that cannot run, in words (the form and the command show them)."""
    if not isinstance(policy.name, str) or not policy.name.strip():
        raise InvalidInput("Give the policy a name.")
    rule_of(policy).check()
    if policy.mode not in (RetentionPolicy.TRASH, RetentionPolicy.PURGE):
        raise InvalidInput("A policy either moves sessions to the trash or purges them.")
    if problem := number_problem(policy.every_hours, low=MIN_EVERY_HOURS, high=MAX_EVERY_HOURS):
        raise InvalidInput(
            f"Run every {MIN_EVERY_HOURS:g} to {MAX_EVERY_HOURS:g} hours ({problem})."
        )


def problem_of(policy: RetentionPolicy) -> str | None:
    """Why a stored policy cannot run (None: it can)."""
    try:
        check(policy)
    except InvalidInput as problem:
        return (
            f"Retention policy #{policy.pk} cannot run: {problem} Nothing was deleted; "
            "delete the policy and create it again with valid values."
        )
    return None


def check_stored(policy: RetentionPolicy) -> None:
    if problem := problem_of(policy):
        raise InvalidInput(problem)


def actor_of(policy: RetentionPolicy) -> str:
    """Who a run nobody started by hand is audited as: the policy itself."""
    return f"retention policy #{policy.pk} {policy.name}"[:150]


@dataclass(frozen=True)
class RetentionPreview:
    """What a run of a policy would delete now: the plan, its messages and the first rows."""

    plan: RetentionPlan
    message_count: int
    rows: tuple[dict, ...]  # the first ``ROWS_SHOWN`` sessions, oldest first
    # Whose preview this is: the policy's id, its mode and its rule, as the fingerprint binds
    # them (attack round 45: a trash policy's preview confirmed another policy's purge of the
    # same sessions, a purge never previewed).
    policy: dict

    @property
    def session_ids(self) -> tuple[str, ...]:
        return self.plan.session_ids

    @property
    def count(self) -> int:
        return len(self.plan.session_ids)

    @property
    def more(self) -> int:
        return max(0, self.count - len(self.rows))

    @property
    def held(self) -> tuple[HeldSkip, ...]:
        return self.plan.held

    @property
    def held_excluded(self) -> int:
        return len(self.plan.held)

    @property
    def fingerprint(self) -> str:
        return fingerprints.plan_fingerprint(
            "retention-run", {"policy": self.policy, "plan": self.plan.fingerprint}
        )


def selected_ids(policy: RetentionPolicy) -> list[str]:
    """What a run of the policy would delete now (live and held conversations left out)."""
    check_stored(policy)
    return list(plan_retention(rule_of(policy)).session_ids)


def dry_run(policy: RetentionPolicy, *, rows: int = ROWS_SHOWN) -> RetentionPreview:
    check_stored(policy)
    plan = plan_retention(rule_of(policy))
    shown = list(plan.session_ids[:rows])
    found = {
        row["id"]: row
        for row in db.fetchall_in(
            "SELECT id, source, title, started_at, ended_at, end_reason, message_count "
            "FROM sessions WHERE id IN ({marks})",
            shown,
            dicts=True,
        )
    }
    return RetentionPreview(
        plan=plan,
        message_count=plan.message_count,
        rows=tuple(found[sid] for sid in shown if sid in found),
        policy=_whose(policy),
    )


def _whose(policy: RetentionPolicy) -> dict:
    """The policy as a preview's fingerprint binds it: id, mode and rule (days as a float, as
    read back from the database whatever the caller's object holds)."""
    rule = asdict(rule_of(policy))
    rule["older_than_days"] = float(rule["older_than_days"])
    return {"id": policy.pk, "mode": policy.mode, "rule": rule}


def stale_or_empty(preview: RetentionPreview, fingerprint: str | None) -> str | None:
    """Why a run confirmed with ``fingerprint`` deletes nothing before its other checks: the
    selection changed since the preview with that fingerprint, or nothing matches (None: go
    on). The console's "Run now" and the API's run ask the same."""
    if not fingerprints.matches(fingerprint, preview.fingerprint):
        return (
            "What the policy selects changed since its preview was shown (or no preview "
            f"was shown): it now deletes {preview.count:,} session"
            f"{'' if preview.count == 1 else 's'}. Nothing was deleted: review the new preview "
            "and confirm again."
        )
    if preview.count == 0:
        return "Nothing to delete: no whole conversation matches the policy now."
    return None


def unconfirmed_purge(policy: RetentionPolicy, *, count: int | None = None) -> str | None:
    """Why enabling (``count`` None) or running (``count`` sessions) a purging policy without
    its explicit confirmation is refused (None: it does not purge)."""
    if policy.mode != RetentionPolicy.PURGE:
        return None
    if count is None:
        return (
            "This policy purges: every run deletes its sessions permanently, with no copy in "
            "the trash. Tick the box (confirm_purge) to confirm that, then enable it."
        )
    return (
        f"This policy purges: the {count:,} session{'' if count == 1 else 's'} are deleted "
        "permanently and cannot be restored. Tick the box (confirm_purge) to confirm. "
        "Nothing was deleted."
    )


def describe(policy: RetentionPolicy) -> str:
    try:
        check(policy)
    except InvalidInput as problem:
        return f"cannot run: {problem}"
    mode = (
        "purged (cannot be restored)"
        if policy.mode == RetentionPolicy.PURGE
        else "moved to the trash"
    )
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
    if problem_of(policy):
        # It cannot run (nor say when next): disabled by whoever claims it, so its refusal
        # is audited once, not at every check.
        return (
            RetentionPolicy.objects.filter(
                pk=policy_id, enabled=True, next_run_at=policy.next_run_at
            ).update(enabled=False, next_run_at=None)
            == 1
        )
    claimed = RetentionPolicy.objects.filter(
        pk=policy_id, enabled=True, next_run_at=policy.next_run_at
    ).update(next_run_at=now + timedelta(hours=policy.every_hours), last_run_at=now)
    return claimed == 1


def start_run(
    policy: RetentionPolicy, *, ids: Sequence[str], actor: str, reason: str
) -> int | None:
    """A bulk delete job for the run (None when nothing matches now)."""
    RetentionPolicy.objects.filter(pk=policy.pk).update(last_run_at=timezone.now())
    if not ids:
        return None
    try:
        return jobs.create_bulk_delete_job(
            session_ids=ids,
            include_live=False,
            actor=actor,
            reason=f"{reason} (retention policy #{policy.pk} {policy.name!r}: {describe(policy)})",
            description=f"Retention: {policy.name}"[:2000],
            purge=policy.mode == RetentionPolicy.PURGE,
            policy_id=policy.pk,
            expected_ids=ids,  # exactly the run's selection, nothing linked to it since
        )
    except InvalidInput:
        return None  # everything it picked went (or went live) since the selection
