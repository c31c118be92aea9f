"""``manage.py apply_retention [--dry-run] [--policy ID]``: one pass of the retention policies.

For cron: each enabled policy (or the one named) runs now, through the same audited
door as the schedule and the page (``ledger.actions.run_retention_policy``); its job
is run here to the end, so the pass is done when the command returns; each run is
audited with the policy as its actor. ``--dry-run`` lists what each would delete (every
session: id, source, title) and every session a legal hold keeps (with the hold's
``#id``), and changes nothing. A policy the rules refuse (a stored 0 or NaN days) is
reported and skipped; the command then exits with an error.
"""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.core.errors import StoreError
from sessions_admin.ledger import actions, jobs, retention
from sessions_admin.ledger.models import AuditAction, AuditEntry, DeleteJob, RetentionPolicy

DRY_RUN_ALL = 10**9  # a dry run lists every session it would delete
WAIT_SECONDS = 0.2  # between looks at a job this process's background worker runs


class Command(BaseCommand):
    help = "Run the enabled retention policies once (for cron); --dry-run only counts."

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="count, delete nothing")
        parser.add_argument("--policy", type=int, help="only this policy (enabled or not)")

    def handle(self, *args, **options):
        policies = RetentionPolicy.objects.order_by("pk")
        if options["policy"] is not None:
            policies = policies.filter(pk=options["policy"])
            if not policies.exists():
                raise CommandError(f"There is no retention policy #{options['policy']}.")
        else:
            policies = policies.filter(enabled=True)
            if not policies.exists():
                # A cron line that silently does nothing looks like one that works.
                self.stdout.write(
                    "No retention policy is enabled: nothing to run (enable one on the "
                    "Retention page, or name one with --policy)."
                )
                return
        refused = []
        for policy in policies:
            label = f"#{policy.pk} {policy.name} ({retention.describe(policy)})"
            try:
                if options["dry_run"]:
                    self._dry_run(label, retention.dry_run(policy, rows=DRY_RUN_ALL))
                    continue
                job_id = actions.run_retention_policy(
                    actor=None, policy_id=policy.pk, reason="manage.py apply_retention"
                )
                self._held(_kept_for_holds(policy))
                if job_id is None:
                    self.stdout.write(f"{label}: nothing to delete.")
                    continue
                progress = _run_to_the_end(job_id)
            except StoreError as problem:
                self.stderr.write(f"{label}: {problem}")
                refused.append(policy.pk)
                continue
            self.stdout.write(
                f"{label}: job #{job_id} {progress.state}, {progress.deleted} sessions and "
                f"{progress.deleted_messages} messages deleted, "
                f"{progress.skipped_text or '0 skipped'}."
            )
        if refused:
            raise CommandError(
                "Refused to run retention "
                + ", ".join(f"policy #{pk}" for pk in refused)
                + "; nothing of theirs was deleted."
            )

    def _dry_run(self, label: str, preview) -> None:
        self.stdout.write(
            f"{label}: would delete {preview.count} sessions, {preview.message_count} "
            f"messages ({preview.held_excluded} under legal hold left out)."
        )
        for row in preview.rows:
            title = row["title"] or "(no title)"
            self.stdout.write(f"  delete {row['id']}  {row['source']}  {title}")
        self._held([f"{skip.describe()}: {skip.hold}" for skip in preview.held])

    def _held(self, held: list[str]) -> None:
        for words in held:
            self.stdout.write(f"  kept {words}")


def _kept_for_holds(policy: RetentionPolicy) -> list[str]:
    """The sessions the run just started left to their holds, as its audit entry names them."""
    entry = (
        AuditEntry.objects.filter(action=AuditAction.RETENTION_RUN, before__policy=policy.pk)
        .order_by("-pk")
        .first()
    )
    return list((entry.before or {}).get("kept_for_holds") or []) if entry else []


def _run_to_the_end(job_id: int) -> jobs.JobProgress:
    """Run the job here until it ends. This process's own background worker may have claimed
    it first (a retention run wakes it): then wait for it, rather than exit and leave the job
    under a lease nobody renews."""
    progress = jobs.run_job(job_id=job_id)
    while progress.state in (DeleteJob.PENDING, DeleteJob.RUNNING):
        time.sleep(WAIT_SECONDS)
        progress = jobs.run_job(job_id=job_id)
    return progress
