"""Seeding a realistic demo store: plans of stories, run in simulated time through the core.

Everything goes through ``sessions_admin.core`` as a runtime would (resets, compression,
branches, delegates, tool calls, rewrites, ``/v1/responses`` conversations and the cold-start
forks of hermes-agent #16517); ``catalogue`` says what they say, ``manage.py seed_demo`` runs
``seed``. Each story is a generator yielding the moment of its next action, run in time order
over the last ``WINDOW_DAYS``; the core's own stamps read a simulated clock
(``core.clock.use_clock``) so they agree with the times passed in.

The session count is exact (every story's sessions are fixed when planned, a showcase of each
case first) and the same seed gives the same plan, content and lineage (only generated ids and
times relative to now differ). From ``BULK_MIN_SESSIONS`` on (or ``bulk="on"``) plain
single-session chats go through ``core.bulk_insert`` in batches; every lineage case, rewrite
and API conversation still goes through the core's operations."""

from __future__ import annotations

import contextlib
import heapq
import json
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction

from sessions_admin import core
from sessions_admin.core import clock as core_clock
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.schema import existing_tables
from sessions_admin.demo.bulk_writer import BulkWriter
from sessions_admin.demo.catalogue import (
    DELEGATE_MODELS,
    FOLLOW_UPS,
    GATEWAY_SOURCES,
    HOSTILE_PROMPTS,
    HTML_TITLE,
    MODEL_CHOICES,
    MODELS,
    TOPICS,
    UNICODE_PROMPTS,
    ModelInfo,
    pick,
    random_hex,
    reasoning_text,
    reply_text,
    tool_payload,
    weighted,
)
from sessions_admin.demo.plans import (
    TURN_WORST_SECONDS,
    Episode,
    Plan,
    Stats,
    Thread,
    is_plain,
    usage_figures,
    worst_span,
)
from sessions_admin.routers import responses_alias, store_alias

HOUR = 3_600.0
DAY = 86_400.0
WINDOW_DAYS = 45
DEFAULT_SESSIONS = 300
DEFAULT_SEED = 7
# The 20,000-message transcript and the 50-segment chain only for full-size seeds.
LARGE_CASES_MIN_SESSIONS = 200
LONG_TRANSCRIPT_MESSAGES = 20_000
LONG_CHAIN_SEGMENTS = 50
APPEND_BATCH = 500
# Core calls of this many scheduler steps share one store transaction.
STEPS_PER_TRANSACTION = 200
# From this many sessions on, plain chats go through the bulk writer by default.
BULK_MIN_SESSIONS = 5_000
BULK_BATCH_SESSIONS = 500
# From this many sessions on, the seeder reports its progress as it goes.
PROGRESS_MIN_SESSIONS = 1_000
BULK_CHOICES = ("auto", "on", "off")


# ---------------------------------------------------------------------------
# Simulated clock


class SimulatedClock:
    """The moment the scheduler has reached; the core stamps it while seeding."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


@contextlib.contextmanager
def simulated_core_clock(clock: SimulatedClock) -> Iterator[SimulatedClock]:
    """Let the core stamp simulated times (ended_at, ids, event times) through its clock hook."""
    with core_clock.use_clock(clock.time):
        yield clock


# ---------------------------------------------------------------------------
# Plans: what each story will do, fixed up front so the session count is exact


ACTIVE_HOURS = (7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 0)

GATEWAY_WEIGHTS = weighted(("telegram", 40), ("discord", 25), ("slack", 20))
TURN_COUNTS = weighted(
    (1, 12), (2, 18), (3, 18), (4, 14), (5, 10), (6, 9), (8, 8), (12, 7), (16, 4)
)
CLI_END_REASONS = weighted(("user_exit", 70), ("agent_close", 12), (None, 18))
INTERESTING_KINDS = weighted(
    ("chat", 30), ("chat_days", 25), ("cli", 13), ("api", 24), ("api_plain", 8)
)
PLAIN_KINDS = weighted(("chat", 74), ("cli", 20), ("empty", 6))
FORK_COUNTS = weighted((0, 60), (1, 28), (2, 12))
TOOL_ROUNDS = weighted((1, 70), (2, 24), (3, 6))
PARALLEL_CALLS = weighted((1, 75), (2, 20), (3, 5))
END_REASONS = ("user_exit", "agent_close", "ws_orphan_reap", "lru_evict")


class Seeder:
    def __init__(
        self,
        *,
        sessions: int,
        seed: int,
        long_messages: int,
        long_chain: bool,
        bulk: bool,
        stdout,
        progress: bool,
    ) -> None:
        self.target = sessions
        self.seed = seed
        self.long_messages = long_messages
        self.long_chain = long_chain
        self.bulk = bulk
        self.stdout = stdout
        self.progress = progress
        self.now = time.time()
        self.window_start = self.now - WINDOW_DAYS * DAY
        self.clock = SimulatedClock(self.window_start)
        self.stats = Stats()
        self.used_titles: set[str] = set()
        self.title_suffixes: dict[str, int] = {}
        self.used_keys: set[str] = set()
        self.used_slugs: set[str] = set()
        self.started = time.monotonic()
        self.next_report = 0
        self.report_every = max(1, min(2_000, sessions // 20))
        # Stories with lineage, rewrites or API conversations: about 45% of a small
        # seed, a smaller share of a very large one (8% at 100,000 sessions).
        self.interesting_share = (
            0.45 if sessions <= 2_000 else max(0.08, 0.45 * (2_000 / sessions) ** 0.45)
        )

    # -- planning ----------------------------------------------------------

    def plan(self) -> list[Plan]:
        rng = random.Random(self.seed)
        plans = [p for p in self._showcase(rng) if p.sessions]
        budget = self.target
        kept: list[Plan] = []
        for plan in plans:
            if plan.sessions <= budget:
                kept.append(plan)
                budget -= plan.sessions
        kept.append(self._evictor(rng))
        while budget > 0:
            plan = self._random_plan(rng)
            if plan.sessions > budget:
                plan = self._chat_plan(rng, None, episodes=1)
            kept.append(plan)
            budget -= plan.sessions
        if self.bulk:
            # Plain chats are written in batches of neighbours in time, each batch one
            # scheduled step, so the switch-event log stays roughly in time order.
            plain = sorted((p for p in kept if is_plain(p)), key=lambda p: p.start)
            kept = [p for p in kept if not is_plain(p)]
            for first in range(0, len(plain), BULK_BATCH_SESSIONS):
                batch = plain[first : first + BULK_BATCH_SESSIONS]
                kept.append(
                    Plan(
                        kind="bulk",
                        start=batch[0].start,
                        seed=0,
                        sessions=len(batch),
                        options={"plans": batch},
                    )
                )
        return kept

    def _random_start(self, rng: random.Random, *, span: float) -> float:
        """A start in the window, leaving ``span`` before now; busier lately and on weekdays.

        It always draws the same number of values, so the rest of the plan does
        not depend on the day of the week the seed runs.
        """
        usable = WINDOW_DAYS * DAY - span - 600
        draws = [(rng.random(), rng.random()) for _ in range(3)]
        hour = rng.choice(ACTIVE_HOURS)
        minute = rng.random()
        for position, keep_weekend in draws:
            # Density grows linearly to twice as busy at the recent end (inverse CDF of 1 + u).
            start = self.window_start + usable * ((1 + 3 * position) ** 0.5 - 1)
            if time.gmtime(start).tm_wday < 5 or keep_weekend < 0.5:
                break
        candidate = start - start % DAY + hour * HOUR + minute * HOUR
        latest = self.now - span - 60
        while candidate > latest:
            candidate -= DAY  # the same hour a day earlier: no pile-up just before now
        return max(candidate, self.window_start + 60)

    def _turns(self, rng: random.Random) -> int:
        return pick(rng, TURN_COUNTS)

    def _episode(
        self, rng: random.Random, start: float, *, transition: str = "create", flags: str = "none"
    ) -> Episode:
        """An episode; ``flags``: none (plain), random (lineage and rewrites by chance), force
        (at least one of them)."""
        ep = Episode(start=start, turns=self._turns(rng), transition=transition)
        ep.reset_summary = transition == "reset" and rng.random() < 0.4
        ep.title = rng.random() < 0.18
        if rng.random() < 0.08:
            ep.extras = (rng.choice(UNICODE_PROMPTS),)
        elif rng.random() < 0.004:
            ep.extras = (rng.choice(HOSTILE_PROMPTS),)
        if flags == "none":
            return ep
        chosen = {
            name
            for name, chance in (
                ("compress", 0.12),
                ("branch", 0.08),
                ("delegate", 0.1),
                ("undo", 0.12),
                ("retry", 0.12),
            )
            if rng.random() < chance
        }
        if flags == "force" and not chosen:
            chosen = {rng.choice(("compress", "branch", "delegate", "undo", "retry"))}
        if "compress" in chosen:
            segments = rng.randint(2, 5)
            ep.turns = max(ep.turns, segments * rng.randint(2, 4) + 1)
            ep.compress_after = tuple(sorted(rng.sample(range(1, ep.turns - 1), segments - 1)))
        ep.turns = max(ep.turns, 3)
        if "branch" in chosen:
            ep.branch_after = rng.randint(1, ep.turns - 2)
        if "delegate" in chosen:
            ep.delegates = {rng.randint(0, ep.turns - 1): rng.choice((1, 1, 2))}
        if "undo" in chosen:
            ep.undo_after = rng.randint(0, ep.turns - 2)
        if "retry" in chosen:
            ep.retry_after = rng.choice([i for i in range(ep.turns) if i != ep.undo_after])
        return ep

    def _place(self, rng: random.Random, plan: Plan, start: float | None, span: float) -> None:
        """Shift a plan laid out from 0 to ``start``, or to a random start that leaves
        ``span`` (its worst-case length) before now, so nothing lands in the future."""
        if start is None:
            start = self._random_start(rng, span=span)
        start = min(start, self.now - span - 60)
        plan.start = start
        for ep in plan.episodes:
            ep.start += start
        if plan.kind == "api":
            plan.options["fork_starts"] = [t + start for t in plan.options["fork_starts"]]

    def _chat_plan(
        self,
        rng: random.Random,
        start: float | None,
        *,
        episodes: int,
        source: str | None = None,
        flags: str = "none",
    ) -> Plan:
        source = source or pick(rng, GATEWAY_WEIGHTS)
        plan = Plan(kind="chat", start=0.0, seed=rng.getrandbits(63), source=source)
        t = 0.0
        for k in range(episodes):
            transition = "create" if k == 0 or rng.random() < 0.3 else "reset"
            plan.episodes.append(self._episode(rng, t, transition=transition, flags=flags))
            t += rng.uniform(0.5, 2.2) * DAY if rng.random() < 0.8 else rng.uniform(3, 9) * HOUR
        last = len(plan.episodes) - 1
        for k, ep in enumerate(plan.episodes):
            if k < last:
                # Usually left live for the next day's reset or new session to end it.
                ep.end_reason = rng.choice(END_REASONS) if rng.random() < 0.2 else None
            else:
                ep.end_reason = rng.choice(END_REASONS) if rng.random() < 0.6 else None
        plan.sessions = sum(ep.sessions for ep in plan.episodes)
        self._place(rng, plan, start, worst_span(plan.episodes))
        return plan

    def _cli_plan(self, rng: random.Random, start: float | None, *, flags: str = "none") -> Plan:
        plan = Plan(kind="chat", start=0.0, seed=rng.getrandbits(63), source="cli")
        ep = self._episode(rng, 0.0, flags=flags)
        ep.title = rng.random() < 0.5
        ep.end_reason = pick(rng, CLI_END_REASONS)
        plan.episodes.append(ep)
        plan.sessions = ep.sessions
        self._place(rng, plan, start, worst_span(plan.episodes))
        return plan

    def _empty_plan(
        self, rng: random.Random, start: float | None, source: str | None = None
    ) -> Plan:
        source = source or rng.choice(("cli", "telegram", "discord", "api_server"))
        plan = Plan(kind="chat", start=0.0, seed=rng.getrandbits(63), source=source, sessions=1)
        end_reason = rng.choice(("ws_orphan_reap", "user_exit", None))
        plan.episodes.append(Episode(start=0.0, turns=0, end_reason=end_reason))
        self._place(rng, plan, start, worst_span(plan.episodes))
        return plan

    def _api_plan(
        self,
        rng: random.Random,
        start: float | None,
        *,
        forks: int,
        mode: str = "latest",
        turns: int | None = None,
    ) -> Plan:
        plan = Plan(kind="api", start=0.0, seed=rng.getrandbits(63), source="api_server")
        turns = turns or rng.randint(2, 6)
        fork_starts, fork_turns = [], []
        t = 0.0
        end = turns * TURN_WORST_SECONDS  # where the original's turns end at the latest
        for _ in range(forks):
            t += rng.uniform(0.3, 2.5) * DAY
            fork_starts.append(t)
            fork_turns.append(rng.randint(1, 4))
            end = max(t, end + 60) + fork_turns[-1] * TURN_WORST_SECONDS
        plan.options = {
            "turns": turns,
            "fork_starts": fork_starts,
            "fork_turns": fork_turns,
            "mode": mode,  # latest: the slug's row follows the forks; original: it stays put
            "end_original": rng.random() < 0.5,
        }
        plan.sessions = 1 + forks
        self._place(rng, plan, start, end)
        return plan

    def _random_plan(self, rng: random.Random) -> Plan:
        """A story beyond the showcase: an interesting one (lineage, rewrites, API) or a plain one.

        Interesting stories are ~45% of small seeds and fewer in very large ones,
        where the plain majority is what a benchmark needs (and can go in bulk).
        """
        if rng.random() < self.interesting_share:
            kind = pick(rng, INTERESTING_KINDS)
            if kind == "chat":
                return self._chat_plan(rng, None, episodes=1, flags="force")
            if kind == "chat_days":
                episodes = rng.randint(2, 5)
                return self._chat_plan(rng, None, episodes=episodes, flags="random")
            if kind == "cli":
                return self._cli_plan(rng, None, flags="force")
            if kind == "api":
                forks = pick(rng, FORK_COUNTS)
                mode = "latest" if rng.random() < 0.6 else "original"
                return self._api_plan(rng, None, forks=forks, mode=mode)
            plan = self._one_session_plan(rng, "api_plain", 0.0)
            plan.options = {"turns": rng.randint(1, 4)}
            plan.start = self._random_start(
                rng, span=plan.options["turns"] * TURN_WORST_SECONDS + 60
            )
            return plan
        kind = pick(rng, PLAIN_KINDS)
        if kind == "chat":
            return self._chat_plan(rng, None, episodes=1)
        if kind == "cli":
            return self._cli_plan(rng, None)
        return self._empty_plan(rng, None)

    @staticmethod
    def _one_session_plan(rng: random.Random, kind: str, start: float, **fields: Any) -> Plan:
        """A plan of one session of ``kind`` from ``start``, its seed the next of ``rng``."""
        return Plan(kind=kind, start=start, seed=rng.getrandbits(63), sessions=1, **fields)

    def _evictor(self, rng: random.Random) -> Plan:
        # The runtime's response LRU: evict at a few moments, keeping the newer half.
        times = [self.now - days * DAY for days in (31, 17, 4)]
        return Plan(
            kind="evictor", start=times[0], seed=rng.getrandbits(63), options={"times": times}
        )

    def _showcase(self, rng: random.Random) -> list[Plan]:
        """One of each case the console must show, in priority order (small seeds keep the first)."""
        day = DAY
        plans: list[Plan] = []

        # The long transcript first: asked for explicitly, or a full-size seed.
        if self.long_messages:
            plans.append(
                self._one_session_plan(
                    rng,
                    "long",
                    self.now - 11 * day,
                    source="telegram",
                    options={"messages": self.long_messages},
                )
            )

        # A compression chain of 3 segments, with an undone turn.
        p = self._chat_plan(rng, self.now - 9 * day, episodes=1, source="telegram")
        ep = p.episodes[0]
        ep.turns, ep.compress_after, ep.undo_after, ep.end_reason = 9, (2, 5), 6, None
        ep.title, ep.extras = True, (UNICODE_PROMPTS[0],)
        plans.append(p)

        # Daily resets of one discord group key (one with a summary), a retried turn.
        p = self._chat_plan(rng, self.now - 6 * day, episodes=3, source="discord")
        for k, ep in enumerate(p.episodes):
            ep.transition = "reset" if k else "create"
            ep.reset_summary = k == 1
            ep.end_reason = None
            ep.turns = max(ep.turns, 2)
        p.episodes[1].retry_after = p.episodes[1].turns - 1
        plans.append(p)

        # A CLI branch with hostile markup in messages and in the title.
        p = self._cli_plan(rng, self.now - 3.5 * day)
        ep = p.episodes[0]
        ep.turns, ep.compress_after, ep.branch_after = 5, (), 2
        ep.delegates, ep.undo_after, ep.retry_after = {}, None, None
        ep.title, ep.html_title, ep.end_reason = True, True, "user_exit"
        ep.extras = HOSTILE_PROMPTS[:2]
        plans.append(p)

        # A slack thread that delegates to a subagent; RTL and emoji.
        p = self._chat_plan(rng, self.now - 12 * day, episodes=1, source="slack")
        ep = p.episodes[0]
        ep.turns, ep.delegates, ep.end_reason = 4, {1: 1}, "agent_close"
        ep.extras = (UNICODE_PROMPTS[3], UNICODE_PROMPTS[6])
        p.options["thread"] = True
        plans.append(p)

        # /v1/responses slugs with cold-start forks: recent ones keep their responses.
        p = self._api_plan(rng, self.now - 3.6 * day, forks=2, mode="latest", turns=3)
        p.start, p.options["fork_starts"] = (
            self.now - 3.6 * day,
            [self.now - 2.5 * day, self.now - 1.2 * day],
        )
        plans.append(p)
        p = self._api_plan(rng, self.now - 3.2 * day, forks=1, mode="original", turns=3)
        p.start, p.options["fork_starts"] = self.now - 3.2 * day, [self.now - 1.5 * day]
        plans.append(p)
        # An early slug whose responses are all evicted by now.
        p = self._api_plan(rng, self.now - 44.5 * day, forks=1, mode="latest", turns=2)
        p.start, p.options["fork_starts"] = self.now - 44.5 * day, [self.now - 43 * day]
        plans.append(p)

        # Empty sessions: opened and reaped, and one never closed.
        plans.append(self._empty_plan(rng, self.now - 2 * day, source="telegram"))
        plans[-1].episodes[0].end_reason = "ws_orphan_reap"
        plans.append(self._empty_plan(rng, self.now - 20 * day, source="cli"))
        plans[-1].episodes[0].end_reason = None

        # A CLI session that crashed: never ended, no end reason.
        p = self._cli_plan(rng, self.now - 15 * day)
        p.episodes[0].end_reason = None
        p.episodes[0].compress_after, p.episodes[0].branch_after = (), None
        p.episodes[0].delegates = {}
        p.sessions = 1
        plans.append(p)

        # A key whose second session starts without a reset (ends the first with new_session).
        p = self._chat_plan(rng, self.now - 8 * day, episodes=2, source="telegram")
        p.episodes[1].transition = "create"
        p.episodes[0].end_reason = None
        plans.append(p)

        # A slug-less API client chaining previous_response_id.
        plans.append(
            self._one_session_plan(rng, "api_plain", self.now - 5 * day, options={"turns": 3})
        )

        if self.long_chain:
            p = self._cli_plan(rng, self.now - 6 * day)
            ep = p.episodes[0]
            ep.turns = LONG_CHAIN_SEGMENTS * 3
            ep.compress_after = tuple(range(2, LONG_CHAIN_SEGMENTS * 3 - 1, 3))
            ep.branch_after, ep.delegates, ep.end_reason = None, {}, None
            ep.title = True
            p.options["title"] = f"Benchmark: {LONG_CHAIN_SEGMENTS}-segment compression chain"
            p.options["fast_turns"] = True
            plans.append(p)
        for plan in plans:
            if plan.kind == "chat":
                plan.sessions = sum(ep.sessions for ep in plan.episodes)
        return plans

    # -- running -----------------------------------------------------------

    def run(self, plans: list[Plan]) -> None:
        self._load_used_names()
        with simulated_core_clock(self.clock):
            self._schedule(plans)

    def _load_used_names(self) -> None:
        with connections[store_alias()].cursor() as c:
            c.execute("SELECT title FROM sessions WHERE title IS NOT NULL")
            self.used_titles = {r[0] for r in c.fetchall()}
            c.execute("SELECT DISTINCT session_key FROM sessions WHERE session_key IS NOT NULL")
            self.used_keys = {r[0] for r in c.fetchall()}
        with connections[responses_alias()].cursor() as c:
            c.execute("SELECT name FROM conversations")
            self.used_slugs = {r[0] for r in c.fetchall()}

    def _schedule(self, plans: list[Plan]) -> None:
        """Run every story's steps in simulated-time order, committing every few hundred steps."""
        pending = sorted(enumerate(plans), key=lambda item: (item[1].start, item[0]))
        running: list[tuple[float, int, Iterator[float]]] = []
        position = 0
        while position < len(pending) or running:
            with transaction.atomic(using=store_alias()):
                for _ in range(STEPS_PER_TRANSACTION):
                    while position < len(pending) and (
                        not running or pending[position][1].start <= running[0][0]
                    ):
                        order, plan = pending[position]
                        position += 1
                        story = self._story(plan)
                        first = next(story, None)
                        if first is not None:
                            heapq.heappush(running, (first, order, story))
                    if not running:
                        break
                    at, order, story = heapq.heappop(running)
                    self.clock.now = max(self.clock.now, min(at, self.now))
                    following = next(story, None)
                    if following is not None:
                        heapq.heappush(running, (following, order, story))
                    self.report_progress()

    def report_progress(self, *, force: bool = False) -> None:
        if not self.progress:
            return
        if self.stats.sessions < self.next_report and not force:
            return
        self.next_report = self.stats.sessions + self.report_every
        elapsed = max(time.monotonic() - self.started, 1e-6)
        pct = 100.0 * self.stats.sessions / max(self.target, 1)
        self.stdout.write(
            f"  {self.stats.sessions:>8,} / {self.target:,} sessions ({pct:5.1f}%), "
            f"{self.stats.messages:,} messages, {self.stats.sessions / elapsed:,.0f} sessions/s, "
            f"{elapsed:,.1f}s"
        )
        self.stdout.flush()  # progress shows up live even when stdout is a pipe or a file

    def _story(self, plan: Plan) -> Iterator[float]:
        rng = random.Random(plan.seed)
        if plan.kind == "chat":
            return self._chat_story(plan, rng)
        if plan.kind == "api":
            return self._api_story(plan, rng)
        if plan.kind == "api_plain":
            return self._api_plain_story(plan, rng)
        if plan.kind == "long":
            return self._long_story(plan, rng)
        if plan.kind == "evictor":
            return self._evictor_story(plan)
        if plan.kind == "bulk":
            return self._bulk_story(plan)
        raise ValueError(plan.kind)

    # -- naming ------------------------------------------------------------

    def unique_title(self, base: str) -> str:
        """``base``, or ``base (n)`` with the first free n: titles are unique in the store."""
        title = base
        n = self.title_suffixes.get(base, 1)
        while title in self.used_titles:
            n += 1
            title = f"{base} ({n})"
        self.title_suffixes[base] = n
        self.used_titles.add(title)
        return title

    def key_for(
        self, rng: random.Random, source: str, *, thread: bool, group: bool = False
    ) -> dict[str, Any]:
        """Gateway metadata (user, chat, session_key) for a new chat of ``source``.

        ``group`` forces a group chat (the draw still happens, keeping the stream).
        """
        while True:
            if source == "telegram":
                user = str(rng.randint(10_000_000, 7_999_999_999))
                group = rng.random() < 0.3 or group
                chat_type = "group" if group else "dm"
                chat_id = f"-100{rng.randint(1_000_000_000, 9_999_999_999)}" if group else user
                thread_id = None
            elif source == "discord":
                user = str(rng.randint(10**17, 10**18 - 1))
                group = rng.random() < 0.6 or group
                chat_type = "group" if group else "dm"
                chat_id = str(rng.randint(10**17, 10**18 - 1)) if group else user
                thread_id = str(rng.randint(10**17, 10**18 - 1)) if group and thread else None
            else:  # slack
                user = "U0" + random_hex(rng, 32)[:8].upper()
                group = rng.random() < 0.7 or group
                chat_type = "group" if group else "dm"
                chat_id = ("C0" if group else "D0") + random_hex(rng, 32)[:8].upper()
                thread_id = (
                    f"{int(self.now) - rng.randint(0, 10**6)}.{rng.randint(0, 999_999):06d}"
                    if group and (thread or rng.random() < 0.4)
                    else None
                )
            key = f"agent:main:{source}:{chat_type}:{chat_id}"
            if thread_id:
                key += f":{thread_id}"
            if key not in self.used_keys:
                self.used_keys.add(key)
                return {
                    "user_id": user,
                    "session_key": key,
                    "chat_id": chat_id,
                    "chat_type": chat_type,
                    "thread_id": thread_id,
                }

    def _slug(self, rng: random.Random) -> str:
        adjectives = ("amber", "brisk", "calm", "daring", "eager", "fuzzy", "gentle", "hidden")
        nouns = ("falcon", "harbor", "lantern", "meadow", "nebula", "otter", "pine", "quartz")
        while True:
            style = rng.random()
            if style < 0.75:
                slug = (
                    f"sidekick-{rng.choice(adjectives)}-{rng.choice(nouns)}-{random_hex(rng, 16)}"
                )
            elif style < 0.9:
                slug = f"support-ticket-{rng.randint(10_000, 99_999)}"
            else:
                slug = f"openwebui-chat-{random_hex(rng, 32)}"
            if slug not in self.used_slugs:
                self.used_slugs.add(slug)
                return slug

    # -- writing through the core ------------------------------------------

    def _created(self, count: int = 1) -> None:
        self.stats.sessions += count

    def _append(self, th: Thread, messages: list[dict[str, Any]]) -> core.AppendResult:
        result = core.append_messages(session_id=th.session_id, messages=messages)
        self.stats.messages += len(messages)
        return result

    def _usage(self, th: Thread, *, calls: int, output_chars: int, input_chars: int) -> None:
        figures = usage_figures(th, calls=calls, output_chars=output_chars, input_chars=input_chars)
        core.add_usage(session_id=th.session_id, **figures)

    def turn_messages(
        self, th: Thread, *, user_text: str | None = None, tools: bool | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """One exchange: user, optional tool rounds, final reply. Returns messages and model calls."""
        rng, topic = th.rng, th.topic
        th.turn_no += 1
        hostile = None
        if user_text is None:
            if th.extras:
                user_text = th.extras.pop(0)
                if user_text in HOSTILE_PROMPTS:
                    hostile = user_text
            else:
                user_text = rng.choice(FOLLOW_UPS) + rng.choice(topic.prompts)
        messages: list[dict[str, Any]] = [{"role": "user", "content": user_text, "timestamp": th.t}]
        calls = 1
        use_tools = tools if tools is not None else bool(topic.tools) and rng.random() < 0.55
        if use_tools and topic.tools:
            for _ in range(pick(rng, TOOL_ROUNDS)):
                th.t += rng.uniform(1.5, 12)
                payloads = []
                for _ in range(pick(rng, PARALLEL_CALLS)):
                    name = rng.choice(topic.tools)
                    args, result = tool_payload(rng, name, topic)
                    call_id = f"call_{random_hex(rng, 96)}"
                    payloads.append((call_id, name, args, result))
                assistant: dict[str, Any] = {
                    "role": "assistant",
                    "content": rng.choice((None, None, "Let me check.", "Looking that up now.")),
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {
                                "name": name,
                                "arguments": json.dumps(args, ensure_ascii=False),
                            },
                        }
                        for call_id, name, args, _ in payloads
                    ],
                    "finish_reason": "tool_calls",
                    "timestamp": th.t,
                }
                if th.model.reasoning and rng.random() < 0.6:
                    assistant["reasoning"] = reasoning_text(rng, topic)
                messages.append(assistant)
                calls += 1
                for call_id, name, _, result in payloads:
                    th.t += rng.uniform(0.3, 9)
                    messages.append(
                        {
                            "role": "tool",
                            "content": result,
                            "tool_call_id": call_id,
                            "tool_name": name,
                            "timestamp": th.t,
                        }
                    )
        th.t += rng.uniform(2.5, 45)
        messages.append(self._reply(th, hostile=hostile))
        return messages, calls

    def _reply(self, th: Thread, *, hostile: str | None = None) -> dict[str, Any]:
        rng = th.rng
        content = reply_text(rng, th.topic, hostile)
        reply: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "finish_reason": "length" if rng.random() < 0.02 else "stop",
            "token_count": max(1, len(content) // 4),
            "timestamp": th.t,
        }
        if th.model.reasoning and rng.random() < 0.45:
            reply["reasoning"] = reasoning_text(rng, th.topic)
        return reply

    def _turn(self, th: Thread, **kwargs: Any) -> Iterator[float]:
        messages, calls = self.turn_messages(th, **kwargs)
        yield th.t
        result = self._append(th, messages)
        th.reply_ids.append(result.message_ids[-1])
        self._usage(
            th,
            calls=calls,
            output_chars=len(messages[-1]["content"] or ""),
            input_chars=sum(len(str(m.get("content") or "")) for m in messages[:-1]),
        )

    def pause(self, th: Thread, *, fast: bool = False) -> None:
        """The user's think time before the next message."""
        rng = th.rng
        if fast:
            th.t += rng.uniform(10, 90)
        else:
            th.t += rng.choices(
                (rng.uniform(8, 60), rng.uniform(60, 400), rng.uniform(400, 1500)), (45, 40, 15)
            )[0]

    def thread_for(self, plan: Plan, rng: random.Random, session_id: str, t: float) -> Thread:
        model = plan.options.get("model_info")
        if model is None:
            model = pick(rng, MODEL_CHOICES)
            plan.options["model_info"] = model
        topic = plan.options.get("topic")
        if topic is None:
            topic = rng.choice(TOPICS)
            plan.options["topic"] = topic
        return Thread(session_id=session_id, rng=rng, topic=topic, model=model, t=t)

    def model_config(self, model: ModelInfo, rng: random.Random) -> dict[str, Any]:
        config: dict[str, Any] = {
            "provider": model.provider,
            "temperature": rng.choice((0.2, 0.5, 0.7, 1.0)),
            "max_tokens": rng.choice((4096, 8192, 16384)),
        }
        if model.reasoning:
            config["reasoning_effort"] = rng.choice(("low", "medium", "high"))
        return config

    def _chat_story(self, plan: Plan, rng: random.Random) -> Iterator[float]:
        """A gateway chat (or CLI session): episodes of one session_key, with their lineage."""
        keyed = plan.source in GATEWAY_SOURCES
        meta = (
            self.key_for(rng, plan.source, thread=bool(plan.options.get("thread"))) if keyed else {}
        )
        th: Thread | None = None
        for k, ep in enumerate(plan.episodes):
            # A long day can run into the next planned start: never overlap the previous one.
            start = ep.start if th is None else max(ep.start, th.t + 60)
            yield start
            if th is None:
                th = self.thread_for(plan, rng, "", start)
                th.user_id = meta.get("user_id")
            th.t = start
            if k == 0 or ep.transition == "create":
                ref = core.create_session(
                    source=plan.source,
                    model=th.model.name,
                    model_config=self.model_config(th.model, rng),
                    started_at=start,
                    **meta,
                )
                session_id = ref.session_id
            else:
                summary = None
                if ep.reset_summary:
                    summary = (
                        f"Summary of the previous session: the user worked on "
                        f"{th.topic.name.lower()}; {rng.choice(th.topic.facts)}."
                    )
                    self.stats.messages += 1
                session_id = core.reset_session_key(
                    session_key=meta["session_key"], summary=summary
                ).new_session_id
                self.stats.resets += 1
            self._created()
            th.session_id = session_id
            th.reply_ids = []
            th.context = 0
            th.extras = list(ep.extras)
            yield from self._episode_turns(plan, th, ep, rng)

    def _take_back_reply(
        self, th: Thread, after: float, rewrite: Callable[..., object]
    ) -> Iterator[float]:
        """``after`` seconds on, undo or retry (``rewrite``) the thread's last turn: its last
        reply is no longer one a branch can start at."""
        th.t += after
        yield th.t
        rewrite(session_id=th.session_id)
        if th.reply_ids:
            th.reply_ids.pop()

    def _episode_turns(
        self, plan: Plan, th: Thread, ep: Episode, rng: random.Random
    ) -> Iterator[float]:
        fast = bool(plan.options.get("fast_turns"))
        for i in range(ep.turns):
            if i:
                self.pause(th, fast=fast)
            if i in ep.delegates:
                yield from self._delegate_turn(plan, th, ep.delegates[i])
            else:
                yield from self._turn(th)
            if i == 0 and ep.title:
                title = plan.options.get("title") or (
                    HTML_TITLE
                    if ep.html_title
                    else f"{th.topic.name}: {rng.choice(th.topic.details)}"
                )
                core.set_title(session_id=th.session_id, title=self.unique_title(title))
            if i == ep.undo_after:
                yield from self._take_back_reply(th, rng.uniform(5, 60), core.undo_last_turn)
                self.stats.undone += 1
            elif i == ep.retry_after:
                yield from self._take_back_reply(th, rng.uniform(3, 30), core.retry_last_turn)
                self.stats.retried += 1
                th.t += rng.uniform(3, 40)
                reply = self._reply(th)
                yield th.t
                result = self._append(th, [reply])
                th.reply_ids.append(result.message_ids[-1])
                self._usage(th, calls=1, output_chars=len(reply["content"]), input_chars=0)
            if i == ep.branch_after:
                th.t += rng.uniform(20, 600)
                yield th.t
                at = th.reply_ids[len(th.reply_ids) // 2] if th.reply_ids else None
                branch = core.branch_session(
                    session_id=th.session_id,
                    at_message_id=at,
                    title=self.unique_title(f"Branch: {th.topic.name}")
                    if rng.random() < 0.5
                    else None,
                )
                self._created()
                self.stats.branches += 1
                self.stats.messages += branch.copied_messages
                th.session_id = branch.new_session_id
                th.reply_ids = []
            if i in ep.compress_after:
                th.t += rng.uniform(1, 8)
                yield th.t
                self._compress(th)
        if ep.end_reason:
            th.t += rng.uniform(30, 1800)
            yield th.t
            core.end_session(session_id=th.session_id, end_reason=ep.end_reason)

    def _compress(self, th: Thread) -> None:
        rng = th.rng
        carried = [
            {
                "role": "user",
                "content": rng.choice(th.topic.prompts),
                "timestamp": th.t + 0.001,
            },
            {
                "role": "assistant",
                "content": reply_text(rng, th.topic),
                "finish_reason": "stop",
                "timestamp": th.t + 0.002,
            },
        ]
        summary = (
            f"[CONTEXT COMPACTION] Earlier turns were summarized to save context. "
            f"Topic: {th.topic.name}. Key points: {'; '.join(rng.sample(th.topic.facts, 2))}."
        )
        result = core.rotate_for_compression(
            session_id=th.session_id, summary=summary, carry_messages=carried
        )
        self._created()
        self.stats.compressions += 1
        self.stats.messages += 3
        th.session_id = result.new_session_id
        th.reply_ids = []
        th.context = (len(summary) + sum(len(m["content"]) for m in carried)) // 4

    def _delegate_turn(self, plan: Plan, th: Thread, count: int) -> Iterator[float]:
        """The agent hands sub-tasks to subagents (delegate child sessions), then answers."""
        rng, topic = th.rng, th.topic
        th.turn_no += 1
        user = {"role": "user", "content": rng.choice(topic.prompts), "timestamp": th.t}
        th.t += rng.uniform(2, 10)
        goals = [
            f"Research {topic.name.lower()}: {rng.choice(topic.details)}" for _ in range(count)
        ]
        calls = [
            {
                "id": f"call_{random_hex(rng, 96)}",
                "type": "function",
                "function": {
                    "name": "delegate_task",
                    "arguments": json.dumps(
                        {"goal": goal, "toolsets": list(topic.tools) or ["web"]}
                    ),
                },
            }
            for goal in goals
        ]
        ask = {
            "role": "assistant",
            "content": "I'll split this up and work on the parts in parallel.",
            "tool_calls": calls,
            "finish_reason": "tool_calls",
            "timestamp": th.t,
        }
        if th.model.reasoning:
            ask["reasoning"] = reasoning_text(rng, topic)
        yield th.t
        self._append(th, [user, ask])
        results = []
        parent_id = th.session_id
        for goal in goals:
            th.t += rng.uniform(0.5, 3)
            yield th.t
            model = rng.choice(DELEGATE_MODELS)
            # No session_key: a live delegate carrying its parent's key would be taken
            # for the key's live session by ``live_session_for_key`` (a core edge case).
            child = core.create_session(
                source=rng.choice(("tool", plan.source)),
                user_id=th.user_id,
                parent_session_id=parent_id,
                model=model.name,
                model_config={"_delegate_from": parent_id, "provider": model.provider},
                started_at=th.t,
            )
            self._created()
            self.stats.delegates += 1
            sub = Thread(session_id=child.session_id, rng=rng, topic=topic, model=model, t=th.t)
            yield from self._turn(sub, user_text=goal, tools=bool(topic.tools))
            sub_summary = f"Subagent finished: {rng.choice(topic.facts)}."
            sub.t += rng.uniform(1, 20)
            yield sub.t
            core.end_session(session_id=child.session_id, end_reason="agent_close")
            th.t = sub.t
            results.append(json.dumps({"status": "completed", "summary": sub_summary}))
        tool_rows = []
        for call, result in zip(calls, results, strict=True):
            th.t += 0.2
            tool_rows.append(
                {
                    "role": "tool",
                    "content": result,
                    "tool_call_id": call["id"],
                    "tool_name": "delegate_task",
                    "timestamp": th.t,
                }
            )
        th.t += rng.uniform(3, 30)
        reply = self._reply(th)
        yield th.t
        result = self._append(th, [*tool_rows, reply])
        th.reply_ids.append(result.message_ids[-1])
        self._usage(
            th, calls=2, output_chars=len(reply["content"]), input_chars=len(user["content"])
        )

    def _api_story(self, plan: Plan, rng: random.Random) -> Iterator[float]:
        """A /v1/responses conversation by slug, with cold-start forks (hermes-agent #16517)."""
        o = plan.options
        yield plan.start
        slug = self._slug(rng)
        user_id = f"apikey-{random_hex(rng, 32)[:6]}"
        th = self.thread_for(plan, rng, "", plan.start)
        self.stats.slugs += 1
        last_response = None
        for i in range(o["turns"]):
            if i:
                self.pause(th)
                yield th.t
            target = core.resolve_conversation(
                conversation=slug,
                previous_response_id=last_response if i else None,
                user_id=user_id,
                model=th.model.name,
            )
            if target.created:
                self._created()
            th.session_id = target.session_id
            yield from self._turn(th)
            last_response = self._record(th, slug=slug, previous=last_response)
        original = th.session_id
        for n, (fork_start, fork_turns) in enumerate(
            zip(o["fork_starts"], o["fork_turns"], strict=True)
        ):
            th.t = max(fork_start, th.t + 60)
            yield th.t
            if n == 0 and o["end_original"]:
                core.end_session(session_id=original, end_reason="lru_evict")
            # The bug being reproduced: the response the client continues from was
            # evicted, so the runtime minted a fresh, unlinked session for the slug.
            fork = core.create_session(
                source="api_server", user_id=user_id, model=th.model.name, started_at=th.t
            )
            self._created()
            self.stats.forks += 1
            th.session_id = fork.session_id
            th.context = 0
            for j in range(fork_turns):
                if j:
                    self.pause(th)
                prompt = ("As we discussed before, " if j == 0 else "") + rng.choice(
                    th.topic.prompts
                )
                yield from self._turn(th, user_text=prompt)
                last_response = self._record(
                    th, slug=slug, previous=last_response, link=o["mode"] == "latest"
                )

    def _record(
        self, th: Thread, *, slug: str | None, previous: str | None, link: bool = True
    ) -> str:
        response_id = f"resp_{uuid.uuid4().hex}"
        data = {
            "object": "response",
            "model": th.model.name,
            "status": "completed",
            "created_at": int(th.t),
            "previous_response_id": previous,
            "output_text": f"({th.topic.name})",
        }
        if slug:
            data["conversation"] = slug
        core.record_turn(
            response_id=response_id,
            session_id=th.session_id,
            conversation=slug if link else None,
            data=data,
        )
        self.stats.responses += 1
        return response_id

    def _api_plain_story(self, plan: Plan, rng: random.Random) -> Iterator[float]:
        yield plan.start
        th = self.thread_for(plan, rng, "", plan.start)
        ref = core.create_session(
            source="api_server",
            user_id=f"apikey-{random_hex(rng, 32)[:6]}",
            model=th.model.name,
            model_config=self.model_config(th.model, rng),
            started_at=plan.start,
        )
        self._created()
        th.session_id = ref.session_id
        previous = None
        for i in range(plan.options["turns"]):
            if i:
                self.pause(th)
            yield from self._turn(th)
            previous = self._record(th, slug=None, previous=previous)

    def _long_story(self, plan: Plan, rng: random.Random) -> Iterator[float]:
        """A long-running ops group chat: one live session of ``messages`` messages."""
        total = plan.options["messages"]
        yield plan.start
        meta = self.key_for(rng, "telegram", thread=False, group=True)
        topic = TOPICS[7]  # kubernetes: tool-heavy
        model = MODELS[1]  # a cheap model for a chatty channel
        ref = core.create_session(
            source="telegram",
            model=model.name,
            model_config=self.model_config(model, rng),
            started_at=plan.start,
            title=self.unique_title(f"Ops channel (long-running, {total:,} messages)"),
            **meta,
        )
        self._created()
        th = Thread(session_id=ref.session_id, rng=rng, topic=topic, model=model, t=plan.start)
        # Spread evenly (with jitter that never reorders) up to 6 hours ago: for
        # 20,000 messages over ~10 days, one every ~40 s.
        step = (self.now - 6 * HOUR - plan.start) / (total + 1)
        written = 0
        batch: list[dict[str, Any]] = []
        n = 0
        while written + len(batch) < total:
            n += 1
            kind = n % 4
            th.t = plan.start + (n + rng.uniform(-0.3, 0.3)) * step
            if kind == 1:
                batch.append(
                    {
                        "role": "user",
                        "content": f"#{n} {rng.choice(topic.prompts)}",
                        "timestamp": th.t,
                    }
                )
            elif kind == 2:
                call_id = f"call_{random_hex(rng, 96)}"
                args, result = tool_payload(rng, "terminal", topic)
                batch.append(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": "terminal", "arguments": json.dumps(args)},
                            }
                        ],
                        "finish_reason": "tool_calls",
                        "timestamp": th.t,
                    }
                )
                pending_result = (call_id, result)
            elif kind == 3:
                call_id, result = pending_result
                batch.append(
                    {
                        "role": "tool",
                        "content": result,
                        "tool_call_id": call_id,
                        "tool_name": "terminal",
                        "timestamp": th.t,
                    }
                )
            else:
                batch.append(self._reply(th))
            if len(batch) == APPEND_BATCH or written + len(batch) == total:
                yield th.t
                self._append(th, batch)
                th.context = 6_000  # the runtime keeps a bounded window
                self._usage(th, calls=len(batch) // 4, output_chars=8_000, input_chars=0)
                written += len(batch)
                batch = []

    def _bulk_story(self, plan: Plan) -> Iterator[float]:
        batch = plan.options["plans"]
        yield batch[-1].start
        BulkWriter(self).write_batch(batch)

    def _evictor_story(self, plan: Plan) -> Iterator[float]:
        for at in plan.options["times"]:
            yield at
            with connections[responses_alias()].cursor() as c:
                c.execute("SELECT COUNT(*) FROM responses")
                (count,) = c.fetchone()
            self.stats.evicted += core.evict_responses(keep_latest=max(3, int(count) // 2))


# ---------------------------------------------------------------------------
# A seed: what was asked, with the defaults its size implies, and what it wrote


@dataclass(frozen=True)
class SeedRequest:
    """A seed, validated: ``request`` builds it from what an operator asked for."""

    sessions: int
    seed: int
    long_messages: int  # messages of the one long transcript (0: none)
    long_chain: bool  # the LONG_CHAIN_SEGMENTS-segment compression chain
    bulk: bool  # plain chats through the bulk writer


@dataclass(frozen=True)
class StoreCounts:
    sessions: int
    messages: int


@dataclass(frozen=True)
class SeedResult:
    after: StoreCounts  # the store's counts once seeded
    conversations: int  # in the store after the seed
    elapsed: float  # seconds
    stats: Stats


def request(
    *,
    sessions: int,
    seed: int = DEFAULT_SEED,
    long_transcript: int | None = None,
    bulk: str = "auto",
) -> SeedRequest:
    """The seed asked for, or ``InvalidInput`` (named as the command's options).

    ``long_transcript`` None: the long transcript (and the long chain) only from
    ``LARGE_CASES_MIN_SESSIONS`` sessions on; ``bulk`` auto: from ``BULK_MIN_SESSIONS``.
    """
    if sessions < 1:
        raise InvalidInput("--sessions must be at least 1.")
    long_messages = long_transcript
    if long_messages is None:
        long_messages = LONG_TRANSCRIPT_MESSAGES if sessions >= LARGE_CASES_MIN_SESSIONS else 0
    if long_messages < 0:
        raise InvalidInput("--long-transcript must be zero or more.")
    if bulk not in BULK_CHOICES:
        raise InvalidInput(f"--bulk must be one of {', '.join(BULK_CHOICES)}.")
    return SeedRequest(
        sessions=sessions,
        seed=seed,
        long_messages=long_messages,
        long_chain=sessions >= LARGE_CASES_MIN_SESSIONS,
        bulk=bulk == "on" or (bulk == "auto" and sessions >= BULK_MIN_SESSIONS),
    )


def store_counts() -> StoreCounts:
    """Sessions and messages in the store; ``InvalidInput`` when it has no sessions table yet."""
    if "sessions" not in existing_tables(store_alias()):
        raise InvalidInput(
            "The store has no sessions table: run `python manage.py init_store` first."
        )
    with connections[store_alias()].cursor() as c:
        c.execute("SELECT COUNT(*) FROM sessions")
        (sessions,) = c.fetchone()
        c.execute("SELECT COUNT(*) FROM messages")
        (messages,) = c.fetchone()
    return StoreCounts(sessions=int(sessions), messages=int(messages))


def seed(asked: SeedRequest, *, stdout) -> SeedResult:
    """Write the seed through the core (progress lines to ``stdout`` for large seeds)."""
    seeder = Seeder(
        sessions=asked.sessions,
        seed=asked.seed,
        long_messages=asked.long_messages,
        long_chain=asked.long_chain,
        bulk=asked.bulk,
        stdout=stdout,
        progress=asked.sessions >= PROGRESS_MIN_SESSIONS,
    )
    seeder.run(seeder.plan())
    elapsed = time.monotonic() - seeder.started
    after = store_counts()
    with connections[responses_alias()].cursor() as c:
        c.execute("SELECT COUNT(*) FROM conversations")
        (conversations,) = c.fetchone()
    return SeedResult(
        after=after,
        conversations=int(conversations),
        elapsed=elapsed,
        stats=seeder.stats,
    )
