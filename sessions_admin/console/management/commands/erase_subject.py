"""``manage.py erase_subject --user ID [--chat ID ...] [--key SESSION_KEY ...] --reference REF``

Shows what the erasure removes and keeps; with ``--yes`` runs it through the page's audited
doors (``ledger.actions.request_erasure``, ``run_erasure``) and prints the receipt (JSON).
Values are checked by the form's rule (``core.text.exact_id_problem``) and compared whole:
``--key`` is a full key, never a prefix. An unfinished request for the same subject is
finished from its recorded plan instead of starting another. A subject with nothing left is
still erased with ``--yes`` (a receipt of 0 and the file rewrite: freed space may hold their
bytes). An unwritable database stops it with a message and exit status 1; running it again
finishes."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.core import holds
from sessions_admin.core.erasure import ErasureStopped, Subject
from sessions_admin.core.errors import StoreError
from sessions_admin.ledger import actions, erasure

# Refused (nothing changed), or stopped by a database that could not be written (what was
# erased stays so; running the command again finishes it): said in words, exit status 1.
STOPPED = (StoreError, holds.SessionsHeld, ErasureStopped, actions.AuditIncomplete)


class Command(BaseCommand):
    help = "Erase everything about one person (a user id, chat ids, whole session keys)."

    def add_arguments(self, parser):
        parser.add_argument("--user", required=True, help="the person's user id (exact)")
        parser.add_argument(
            "--chat", action="append", default=[], help="a chat id, exact (repeatable)"
        )
        parser.add_argument(
            "--key",
            action="append",
            default=[],
            help="a whole session key, exact; a part of a key matches nothing (repeatable)",
        )
        parser.add_argument("--reference", default="", help="the request's reference (a ticket)")
        parser.add_argument("--yes", action="store_true", help="erase (otherwise: preview only)")

    def handle(self, *args, **options):
        if options["yes"] and (problem := erasure.key_problem()):
            raise CommandError(problem)  # before anything is erased
        subject = Subject(
            user_id=options["user"],
            chat_ids=tuple(options["chat"]),
            session_keys=tuple(options["key"]),
        )
        try:
            subject.check()
        except StoreError as problem:
            raise CommandError(str(problem)) from problem
        unfinished = erasure.unfinished_request_for(subject)
        if unfinished is not None:
            self._finish(unfinished, yes=options["yes"])
            return
        try:
            full = erasure.plan(subject)
        except StoreError as problem:
            raise CommandError(str(problem)) from problem
        plan = full.store
        self.stdout.write(
            f"{len(plan.session_ids)} sessions ({plan.message_count} messages), "
            f"{len(plan.other_messages)} of their messages a merge moved into other sessions, "
            f"{len(plan.conversation_names)} slugs, {len(plan.response_ids)} stored responses, "
            f"{len(full.trash.operations)} trash entries (holding "
            f"{len(full.trash.session_ids)} of their sessions)."
        )
        if plan.mentions:
            self.stdout.write(
                f"Kept: {len(plan.mentions)} other people's sessions mention them: "
                + ", ".join(plan.mentions)
            )
        for _operation, words in full.trash.kept:
            self.stdout.write(f"Kept: other people's held rows in a shared trash entry ({words}).")
        if full.held:
            raise CommandError(
                "Under legal hold, nothing erased: " + "; ".join(sorted({w for _, w in full.held}))
            )
        if not options["yes"]:
            self.stdout.write("Nothing was erased (preview). Add --yes and --reference to erase.")
            return
        if full.empty:
            # Still a request, a receipt and the file rewrite: space freed before (the
            # runtime's own deletes, merges) may keep their bytes until the files are rewritten.
            self.stdout.write(
                "Nothing in the store or the trash names this subject now; the database files "
                "are still rewritten, so no byte freed before is left."
            )
        try:
            queued = actions.request_erasure(
                actor=None,
                subject=subject,
                reference=options["reference"],
                expected_fingerprint=full.fingerprint,
                start=False,
            )
            receipt = actions.run_erasure(request_id=queued.pk)
        except STOPPED as problem:
            raise CommandError(str(problem)) from problem
        self._print_receipt(receipt)

    def _finish(self, request, *, yes: bool) -> None:
        if not yes:
            self.stdout.write(
                f"Erasure request #{request.pk} for this subject began and did not finish "
                f"({request.state}). Nothing was erased (preview). Add --yes to finish it."
            )
            return
        try:
            receipt = actions.run_erasure(request_id=request.pk)
        except STOPPED as problem:
            raise CommandError(str(problem)) from problem
        if receipt is None:
            raise CommandError(
                f"Erasure request #{request.pk} for this subject is being run by a worker that "
                "is alive; its page follows it. Nothing was done here."
            )
        self._print_receipt(receipt)

    def _print_receipt(self, receipt: dict) -> None:
        # Byte for byte the receipt as issued: ``verify_receipt`` checks a saved copy.
        self.stdout.write(erasure.receipt_text(receipt), ending="")
        if (receipt.get("file_rewrite") or {}).get("state") != erasure.REWRITE_DONE:
            self.stderr.write(
                "The database files are not rewritten yet: freed space may still hold the "
                "person's bytes. Run manage.py erasure_rewrite at a quiet hour (the receipt "
                "then says file_rewrite: done)."
            )
