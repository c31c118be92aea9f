"""``manage.py seed_demo [--sessions N] [--if-empty] [--seed S]``: a realistic demo store.

The seed itself (its stories, content and bulk path) is ``sessions_admin.demo``:
``seeder`` plans and runs it through the core, ``catalogue`` holds what it says,
``bulk_writer`` writes the plain chats of a large seed in batches.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.core.errors import InvalidInput
from sessions_admin.demo import seeder


class Command(BaseCommand):
    help = (
        "Seed the session store with a realistic demo: gateway chats, resets, compression "
        "chains, branches, delegates, tool calls, undone/retried turns, API conversations "
        "with cold-start forks. Writes through the store core."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--sessions",
            type=int,
            default=seeder.DEFAULT_SESSIONS,
            help=f"How many sessions to create (default {seeder.DEFAULT_SESSIONS}).",
        )
        parser.add_argument(
            "--seed",
            type=int,
            default=seeder.DEFAULT_SEED,
            help=f"Random seed; the same seed gives the same store (default {seeder.DEFAULT_SEED}).",
        )
        parser.add_argument(
            "--if-empty",
            action="store_true",
            help="Do nothing if the store already has sessions.",
        )
        parser.add_argument(
            "--long-transcript",
            type=int,
            default=None,
            metavar="MESSAGES",
            help=(
                "Messages in the one long transcript (0: none). Default "
                f"{seeder.LONG_TRANSCRIPT_MESSAGES:,} when --sessions is at least "
                f"{seeder.LARGE_CASES_MIN_SESSIONS}, else 0. The "
                f"{seeder.LONG_CHAIN_SEGMENTS}-segment compression chain follows the same "
                "threshold."
            ),
        )
        parser.add_argument(
            "--bulk",
            choices=seeder.BULK_CHOICES,
            default="auto",
            help=(
                "Write plain single-session chats with bulk inserts instead of one core call "
                f"each: auto (default) uses them from {seeder.BULK_MIN_SESSIONS:,} sessions on."
            ),
        )

    def handle(self, *args, **options):
        try:
            asked = seeder.request(
                sessions=options["sessions"],
                seed=options["seed"],
                long_transcript=options["long_transcript"],
                bulk=options["bulk"],
            )
            before = seeder.store_counts()
        except InvalidInput as problem:
            raise CommandError(str(problem)) from problem
        if options["if_empty"] and before.sessions:
            self.stdout.write(
                f"The store already has {before.sessions:,} sessions: nothing seeded (--if-empty)."
            )
            return
        self.stdout.write(
            f"Seeding {asked.sessions:,} sessions (seed {asked.seed}) over the last "
            f"{seeder.WINDOW_DAYS} days" + (", plain chats in bulk" if asked.bulk else "") + "..."
        )
        self.stdout.flush()
        result = seeder.seed(asked, stdout=self.stdout)
        stats = result.stats
        written = result.after.sessions - before.sessions
        self.stdout.write(
            self.style.SUCCESS(
                f"Seeded {written:,} sessions and "
                f"{result.after.messages - before.messages:,} messages in {result.elapsed:,.1f}s "
                f"({written / max(result.elapsed, 1e-6):,.0f} sessions/s"
                + (f"; {stats.bulk_sessions:,} plain chats in bulk" if stats.bulk_sessions else "")
                + f"). Conversations: {stats.slugs:,} new slugs ({result.conversations:,} in the "
                f"store) with {stats.forks:,} cold-start fork sessions; {stats.responses:,} "
                f"responses recorded, {stats.evicted:,} evicted."
            )
        )
        self.stdout.write(
            f"Lineage: {stats.resets:,} resets, {stats.compressions:,} compression "
            f"continuations, {stats.branches:,} branches, {stats.delegates:,} delegates; "
            f"{stats.undone:,} undone and {stats.retried:,} retried turns."
        )
