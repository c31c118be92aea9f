"""``manage.py apply_retention [--dry-run] [--policy ID]``: one pass of the retention policies.

For cron: each enabled policy (or the one named) runs now, through the same audited
door as the schedule and the page (``ledger.actions.run_retention_policy``); its job
is run here to the end, so the pass is done when the command returns. ``--dry-run``
prints what each would delete and changes nothing.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.core.errors import StoreError
from sessions_admin.ledger import actions, jobs, retention
from sessions_admin.ledger.models import RetentionPolicy


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
        for policy in policies:
            label = f"#{policy.pk} {policy.name} ({retention.describe(policy)})"
            try:
                if options["dry_run"]:
                    preview = retention.dry_run(policy)
                    self.stdout.write(
                        f"{label}: would delete {len(preview.session_ids)} sessions, "
                        f"{preview.message_count} messages "
                        f"({preview.held_excluded} under legal hold left out)."
                    )
                    continue
                job_id = actions.run_retention_policy(
                    actor=None, policy_id=policy.pk, reason="manage.py apply_retention"
                )
                if job_id is None:
                    self.stdout.write(f"{label}: nothing to delete.")
                    continue
                progress = jobs.run_job(job_id=job_id)
            except StoreError as problem:
                raise CommandError(f"{label}: {problem}") from problem
            self.stdout.write(
                f"{label}: job #{job_id} {progress.state}, {progress.deleted} sessions and "
                f"{progress.deleted_messages} messages deleted, {progress.skipped} skipped."
            )
