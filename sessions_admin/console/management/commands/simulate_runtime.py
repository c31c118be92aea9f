"""``manage.py simulate_runtime --chats N --duration S``: drive the store as an agent gateway does.

A thin edge over ``sessions_admin.demo.simulator`` (which see). Runs until the
duration is over (``--duration 0``: until interrupted; SIGTERM and Ctrl-C stop
it cleanly), then prints a summary. Exits 1 if an unexpected (non-domain)
error happened, so tests and scripts notice.
"""

from __future__ import annotations

import signal
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from sessions_admin.demo.simulator import RuntimeSimulator, SimulatorOptions


class Command(BaseCommand):
    help = (
        "Simulate an agent runtime writing to the store through the core (chats, turns, resets...)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--chats", type=int, default=10, help="concurrent chats (default 10)")
        parser.add_argument(
            "--duration", type=float, default=10.0, help="seconds to run; 0 runs until stopped"
        )
        parser.add_argument("--seed", type=int, default=None, help="random seed (repeatable runs)")
        parser.add_argument(
            "--think-time",
            type=float,
            default=0.2,
            help="mean seconds between two actions of one chat (default 0.2)",
        )
        parser.add_argument(
            "--rate",
            type=float,
            default=None,
            help="target actions per second over all chats (sets the think time)",
        )
        parser.add_argument(
            "--acks",
            "--ledger",  # its older name
            dest="acks",
            type=Path,
            default=None,
            help="append-only JSONL log of every acknowledged or refused append",
        )
        parser.add_argument(
            "--label", default="", help="tag for keys and slugs (default: the process id)"
        )
        parser.add_argument(
            "--cold-start-rate",
            type=float,
            default=0.05,
            help="share of API turns that mint an unlinked session (default 0.05)",
        )
        parser.add_argument(
            "--evict-keep",
            type=int,
            default=500,
            help="responses kept when the simulated LRU evicts; 0 never evicts (default 500)",
        )
        parser.add_argument("--max-actions", type=int, default=None, help="stop after N actions")
        parser.add_argument(
            "--stale-rate",
            type=float,
            default=0.1,
            help="share of chances to play a stale runtime: keep a rotated session id, "
            "save a stale history (default 0.1; 0 never)",
        )
        parser.add_argument(
            "--slow-listener",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="register a listener that hangs this long on every 5th switch (default 0: none)",
        )

    def handle(self, *args, **options):
        if options["chats"] < 1:
            raise CommandError("--chats must be at least 1.")
        if options["duration"] < 0:
            raise CommandError("--duration must be zero or more.")
        think = options["think_time"]
        if options["rate"] is not None:
            if options["rate"] <= 0:
                raise CommandError("--rate must be more than 0.")
            think = options["chats"] / options["rate"]
        if think < 0:
            raise CommandError("--think-time must be zero or more.")
        if not 0 <= options["cold_start_rate"] <= 1:
            raise CommandError("--cold-start-rate must be between 0 and 1.")
        if options["evict_keep"] < 0:
            raise CommandError("--evict-keep must be zero or more.")
        if not 0 <= options["stale_rate"] <= 1:
            raise CommandError("--stale-rate must be between 0 and 1.")
        if not 0 <= options["slow_listener"] <= 3600:
            raise CommandError("--slow-listener must be between 0 and 3600 seconds.")
        simulator = RuntimeSimulator(
            SimulatorOptions(
                chats=options["chats"],
                duration=options["duration"],
                seed=options["seed"],
                think_time=think,
                acks_path=options["acks"],
                label=options["label"],
                cold_start_rate=options["cold_start_rate"],
                evict_keep=options["evict_keep"],
                max_actions=options["max_actions"],
                stale_rate=options["stale_rate"],
                slow_listener=options["slow_listener"],
            ),
            log=lambda text: self.stderr.write(text),
        )
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: simulator.stop())
        simulator.run()
        self.stdout.write(simulator.summary())
        if simulator.counts["unexpected_errors"]:
            raise CommandError(
                f"{simulator.counts['unexpected_errors']} unexpected errors (see above)."
            )
