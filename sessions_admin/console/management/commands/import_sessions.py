"""``manage.py import_sessions FILE``: Hermes's session exports (or ours) into the store.

Every refusal (an unreadable file, a bad value, a duplicate) is a one-paragraph
message and an audit entry with outcome ``failed``; nothing is written then.
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
        asked = {
            "file": path,
            "skip_existing": options["skip_existing"],
            "graft": options["graft"],
            **({"dry_run": True} if options["dry_run"] else {}),
        }

        def refused(problem: Exception, imported=()) -> CommandError:
            actions.record(
                actor=ACTOR,
                action="import_sessions",
                # An interrupted import keeps the batches written before the failure.
                session_ids=list(imported),
                before=asked,
                reason=options["reason"],
                outcome="failed",
                detail=str(problem),
            )
            return CommandError(str(problem))

        try:
            if path == "-":
                raw = portability.read_export(sys.stdin.buffer)
            else:
                with open(path, "rb") as handle:
                    raw = portability.read_export(handle)
            if options["dry_run"]:
                self._dry_run(portability.plan_import(raw), options)
                return
            result = portability.import_sessions(
                sessions=raw, skip_existing=options["skip_existing"], graft=options["graft"]
            )
        except OSError as error:
            raise refused(f"Cannot read {path}: {error}") from error
        except StoreError as problem:
            raise refused(problem, getattr(problem, "imported", ())) from problem
        except Exception as error:
            # A bug, not a refusal: audited all the same, and its traceback kept.
            refused(f"Unexpected error ({type(error).__name__}): {error}")
            raise
        actions.record(
            actor=ACTOR,
            action="import_sessions",
            session_ids=list(result.imported),
            before=asked,
            after={
                "imported": len(result.imported),
                "skipped": list(result.skipped)[:100],
                "detached": list(result.detached)[:100],
                "not_grafted": list(result.ungrafted)[:100],
                "grafted": list(result.grafted)[:100],
                "ended_on_import": len(result.ended_on_import),
                "messages": result.messages,
            },
            reason=options["reason"],
        )
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
