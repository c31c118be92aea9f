from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.core import portability
from sessions_admin.core.errors import StoreError
from sessions_admin.ledger import actions


class Command(BaseCommand):
    help = (
        "Import sessions from Hermes Agent's session export (JSON or JSONL, as written by "
        "`hermes sessions export` or the dashboard) or from export_sessions' JSONL. Refused "
        "whole when a session id already exists or a title is taken."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="the export file ('-' reads standard input)")
        parser.add_argument(
            "--skip-existing",
            action="store_true",
            help="import the sessions the store does not have yet, skip the others",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="check the file and say what would happen"
        )
        parser.add_argument("--reason", default="", help="recorded in the audit log")

    def handle(self, *args, **options):
        path = options["file"]
        try:
            if path == "-":
                raw = portability.read_export(sys.stdin.buffer)
            else:
                with open(path, "rb") as handle:
                    raw = portability.read_export(handle)
        except OSError as error:
            raise CommandError(f"Cannot read {path}: {error}") from error
        except StoreError as problem:
            raise CommandError(str(problem)) from problem
        try:
            if options["dry_run"]:
                plan = portability.plan_import(raw)
                new = len(plan.sessions) - len(plan.existing)
                self.stdout.write(
                    f"Would import {new} session(s) with {plan.message_count} message(s)"
                    + (
                        f"; {len(plan.existing)} already exist"
                        + (" (skipped)" if options["skip_existing"] else " (refused)")
                        if plan.existing
                        else ""
                    )
                    + "."
                )
                return
            result = portability.import_sessions(
                sessions=raw, skip_existing=options["skip_existing"]
            )
        except StoreError as problem:
            actions.record(
                actor="manage.py import_sessions",
                action="import_sessions",
                # An interrupted import keeps the batches written before the failure.
                session_ids=list(getattr(problem, "imported", ())),
                before={"file": path},
                reason=options["reason"],
                outcome="failed",
                detail=str(problem),
            )
            raise CommandError(str(problem)) from problem
        actions.record(
            actor="manage.py import_sessions",
            action="import_sessions",
            session_ids=list(result.imported),
            before={"file": path},
            after={
                "imported": len(result.imported),
                "skipped": list(result.skipped)[:100],
                "detached": list(result.detached)[:100],
                "messages": result.messages,
            },
            reason=options["reason"],
        )
        text = f"Imported {len(result.imported)} session(s) with {result.messages} message(s)"
        if result.skipped:
            text += f"; skipped {len(result.skipped)} already in the store"
        if result.detached:
            text += (
                f"; {len(result.detached)} kept without their parent link "
                f"(parent not in the store or the file): {', '.join(result.detached[:10])}"
            )
        self.stdout.write(text + ".")
