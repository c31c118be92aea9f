"""The bulk path for plain single-session chats: the rows the core would write, in batches.

From ``seeder.BULK_MIN_SESSIONS`` sessions on (or ``seed_demo --bulk on``) the
plain chats of a seed (``plans.is_plain``) go through ``BulkWriter``, which
hands them to ``core.bulk_insert.insert_sessions`` (``executemany``), one transaction
per batch, instead of one core call each. Every lineage case, rewrite and API
conversation still goes through the core.
"""

from __future__ import annotations

import random
import time
import uuid
from typing import Any, Protocol

from sessions_admin.core import bulk_insert, db
from sessions_admin.demo.catalogue import GATEWAY_SOURCES, ModelInfo
from sessions_admin.demo.plans import Plan, Stats, Thread, usage_figures


class ChatWriter(Protocol):
    """What the bulk writer needs of the seeder: its names, its draws and its counts.

    A protocol rather than the ``Seeder`` itself: the seeder creates bulk writers,
    so importing it here would be an import cycle.
    """

    stats: Stats

    def key_for(
        self, rng: random.Random, source: str, *, thread: bool, group: bool = False
    ) -> dict[str, Any]: ...

    def thread_for(self, plan: Plan, rng: random.Random, session_id: str, t: float) -> Thread: ...

    def model_config(self, model: ModelInfo, rng: random.Random) -> dict[str, Any]: ...

    def pause(self, th: Thread, *, fast: bool = False) -> None: ...

    def turn_messages(
        self, th: Thread, *, user_text: str | None = None, tools: bool | None = None
    ) -> tuple[list[dict[str, Any]], int]: ...

    def unique_title(self, base: str) -> str: ...

    def report_progress(self, *, force: bool = False) -> None: ...


USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cost_usd",
)


class BulkWriter:
    """Writes plain single-session chats with ``executemany``, one transaction per batch.

    The rows are the ones the core would write for create_session +
    append_messages + add_usage + end_session: message_count and
    tool_call_count equal the active rows written, FTS is maintained by the
    store (SQLite triggers, the PostgreSQL expression index), and each root
    session gets its ``new`` switch event.
    """

    def __init__(self, seeder: ChatWriter) -> None:
        self.seeder = seeder

    def write_batch(self, plans: list[Plan]) -> None:
        seeder = self.seeder
        sessions = [self._session_rows(plan) for plan in plans]
        bulk_insert.insert_sessions(sessions=sessions)
        seeder.stats.sessions += len(sessions)
        seeder.stats.bulk_sessions += len(sessions)
        seeder.stats.messages += sum(len(s["messages"]) for s in sessions)
        seeder.report_progress()

    def _session_rows(self, plan: Plan) -> dict[str, Any]:
        """The session row and message rows of a plain chat, drawing the random values in
        the order ``Seeder._chat_story`` does, so both paths write the same content."""
        seeder = self.seeder
        rng = random.Random(plan.seed)
        ep = plan.episodes[0]
        meta = (
            seeder.key_for(rng, plan.source, thread=False) if plan.source in GATEWAY_SOURCES else {}
        )
        th = seeder.thread_for(plan, rng, "", ep.start)
        model_config = db.dumps(seeder.model_config(th.model, rng))
        session_id = (
            f"{time.strftime('%Y%m%d_%H%M%S', time.gmtime(ep.start))}_{uuid.uuid4().hex[:8]}"
        )
        th.extras = list(ep.extras)
        usage = dict.fromkeys(USAGE_FIELDS, 0)
        rows: list[dict[str, Any]] = []
        title = None
        for i in range(ep.turns):
            if i:
                seeder.pause(th)
            turn, calls = seeder.turn_messages(th)
            rows.extend(turn)
            figures = usage_figures(
                th,
                calls=calls,
                output_chars=len(turn[-1]["content"] or ""),
                input_chars=sum(len(str(m.get("content") or "")) for m in turn[:-1]),
            )
            for name in USAGE_FIELDS:
                usage[name] += figures[name]
            if i == 0 and ep.title:
                title = seeder.unique_title(f"{th.topic.name}: {rng.choice(th.topic.details)}")
        ended_at = None
        if ep.end_reason:
            th.t += rng.uniform(30, 1800)
            ended_at = th.t
        return {
            "id": session_id,
            "source": plan.source,
            **{
                k: meta.get(k)
                for k in ("user_id", "session_key", "chat_id", "chat_type", "thread_id")
            },
            "model": th.model.name,
            "model_config": model_config,
            "started_at": ep.start,
            "title": title,
            "ended_at": ended_at,
            "end_reason": ep.end_reason if ended_at else None,
            "usage": {
                **{name: usage[name] for name in USAGE_FIELDS[:-1]},
                "estimated_cost_usd": round(usage["cost_usd"], 6),
            },
            "messages": rows,
        }
