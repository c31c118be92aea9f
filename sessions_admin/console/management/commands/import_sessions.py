"""``manage.py import_sessions FILE``: Hermes's session exports (or ours) into the store.

Every refusal (an unreadable file, a bad value, a duplicate) is a one-paragraph
message and an audit entry with outcome ``failed``; nothing is written then. The
import and its audit entry are ``ledger.actions.import_sessions`` (the dry run
``preview_import``), as every operator action is.

Links to sessions the store already holds are grafts: ``--dry-run`` lists them,
``--graft`` makes them (portability's module docstring says why).
"""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.core import portability
from sessions_admin.core.errors import StoreError
from sessions_admin.ledger import actions

ACTOR = "manage.py import_sessions"
SHOWN_GRAFTS = 20


class Command(BaseCommand):
    help = (
        "Import sessions from Hermes Agent's session export (JSON or JSONL, as written by "
        "`hermes sessions export` or the dashboard) or from export_sessions' JSONL. Refused "
        "whole when a session id already exists, a title is taken or any value is invalid. "
        "Imported sessions are never live; links to sessions already in the store are made "
        "only with --graft (see them first with --dry-run)."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="the export file ('-' reads standard input)")
        parser.add_argument(
            "--skip-existing",
            action="store_true",
            help="import the sessions the store does not have yet, skip the others",
        )
        parser.add_argument(
            "--graft",
            action="store_true",
            help=(
                "also link imported sessions to parents already in the store (the dry run "
                "lists these links and what each would do)"
            ),
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="check the file and say what would happen"
        )
        parser.add_argument("--reason", default="", help="recorded in the audit log")

    def handle(self, *args, **options):
        path = options["file"]
        chosen = {
            "actor": ACTOR,
            "file": path,
            # Standard input is read as the action runs, so reading it is audited too.
            "stream": sys.stdin.buffer if path == "-" else None,
            "skip_existing": options["skip_existing"],
            "graft": options["graft"],
            "reason": options["reason"],
        }
        try:
            if options["dry_run"]:
                self._dry_run(actions.preview_import(**chosen), options)
                return
            result = actions.import_sessions(**chosen)
        except StoreError as problem:
            raise CommandError(str(problem)) from problem
        text = f"Imported {len(result.imported)} session(s) with {result.messages} message(s)"
        if result.skipped:
            text += f"; skipped {len(result.skipped)} already in the store"
        if result.ended_on_import:
            text += (
                f"; {len(result.ended_on_import)} live in the file, imported ended "
                f"({portability.IMPORTED_END_REASON!r})"
            )
        if result.grafted:
            text += f"; {len(result.grafted)} linked to sessions already in the store (--graft)"
        if result.ungrafted:
            text += (
                f"; {len(result.ungrafted)} kept without their link to a session already in "
                f"the store (--graft links them): {', '.join(result.ungrafted[:10])}"
            )
        if result.detached:
            text += (
                f"; {len(result.detached)} kept without their parent link "
                f"(parent not in the store or the file): {', '.join(result.detached[:10])}"
            )
        self.stdout.write(text + ".")

    def _dry_run(self, plan: portability.ImportPlan, options) -> None:
        new = len(plan.sessions) - len(plan.existing)
        self.stdout.write(
            f"Would import {new} session(s) with {plan.message_count} message(s)"
            + (
                f"; {len(plan.existing)} already exist"
                + (" (skipped)" if options["skip_existing"] else " (refused)")
                if plan.existing
                else ""
            )
            + (
                f"; {len(plan.ended_on_import)} live in the file would be imported ended "
                f"({portability.IMPORTED_END_REASON!r})"
                if plan.ended_on_import
                else ""
            )
            + (
                f"; {len(plan.detached)} would be kept without their parent link (parent not "
                f"in the store or the file): {', '.join(plan.detached[:10])}"
                if plan.detached
                else ""
            )
            + "."
        )
        if not plan.grafts:
            return
        verb = "Would link" if options["graft"] else "Would NOT link (add --graft to link)"
        self.stdout.write(f"{verb} {len(plan.grafts)} session(s) to sessions already in the store:")
        for graft in plan.grafts[:SHOWN_GRAFTS]:
            self.stdout.write(f"  {graft.session_id} -> {graft.parent_id}: {graft.effect}")
        if len(plan.grafts) > SHOWN_GRAFTS:
            self.stdout.write(f"  ... and {len(plan.grafts) - SHOWN_GRAFTS} more")
