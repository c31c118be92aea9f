"""What a seed will do, fixed up front so its session count is exact, and a story's running state.

A ``Plan`` is one story (a chat, an API conversation, the long transcript...)
with its ``Episode``s (root sessions and what happens in each); a ``Thread`` is
the conversation a running story is writing; ``Stats`` count what the seed
wrote. The worst-case spans fit stories before now; ``usage_figures`` is the
token usage and cost of a turn, the same for the core path and the bulk writer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from sessions_admin.demo.catalogue import ModelInfo, Topic


@dataclass
class Episode:
    """One root session of a story and what happens in it."""

    start: float
    turns: int
    transition: str = "create"  # how it starts: create | reset
    reset_summary: bool = False
    compress_after: tuple[int, ...] = ()  # turn indexes after which to rotate
    branch_after: int | None = None
    delegates: dict[int, int] = field(default_factory=dict)  # turn index -> delegate count
    undo_after: int | None = None
    retry_after: int | None = None
    end_reason: str | None = None  # None: left live (a later transition may end it)
    title: bool = False
    html_title: bool = False
    extras: tuple[str, ...] = ()  # user prompts to use first (unicode, hostile markup)

    @property
    def sessions(self) -> int:
        return (
            1
            + len(self.compress_after)
            + (self.branch_after is not None)
            + sum(self.delegates.values())
        )


@dataclass
class Plan:
    kind: str  # chat (gateway, CLI or empty), api, api_plain, long, evictor, bulk
    start: float
    seed: int
    sessions: int = 0
    source: str = "telegram"
    episodes: list[Episode] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Stats:
    sessions: int = 0
    messages: int = 0
    forks: int = 0
    slugs: int = 0
    responses: int = 0
    evicted: int = 0
    bulk_sessions: int = 0
    resets: int = 0
    compressions: int = 0
    branches: int = 0
    delegates: int = 0
    undone: int = 0
    retried: int = 0


class Thread:
    """The conversation a story is writing: its current session and running state."""

    def __init__(
        self, *, session_id: str, rng: random.Random, topic: Topic, model: ModelInfo, t: float
    ) -> None:
        self.session_id = session_id
        self.rng = rng
        self.topic = topic
        self.model = model
        self.t = t
        self.context = 0  # tokens of history the next call sends
        self.reply_ids: list[int] = []  # active final replies of this session
        self.extras: list[str] = []
        self.turn_no = 0
        self.user_id: str | None = None


# Worst cases, for fitting stories before now: a turn is at most a 1,500 s pause,
# three tool rounds and a reply; a delegate runs one such turn.
TURN_WORST_SECONDS = 1_700.0
DELEGATE_WORST_SECONDS = 1_800.0


def episode_worst(ep: Episode) -> float:
    return (
        ep.turns * TURN_WORST_SECONDS
        + sum(ep.delegates.values()) * DELEGATE_WORST_SECONDS
        + 3_000.0  # undo, retry, branch, compressions and the end
    )


def worst_span(episodes: list[Episode]) -> float:
    """The latest a story of these episodes (laid out from 0) can end, as it runs them."""
    end = 0.0
    for k, ep in enumerate(episodes):
        start = ep.start if k == 0 else max(ep.start, end + 60)
        end = start + episode_worst(ep)
    return end


def usage_figures(th: Thread, *, calls: int, output_chars: int, input_chars: int) -> dict[str, Any]:
    """Token usage and cost of one turn of ``th`` (``calls`` model calls); grows its context."""
    rng, model = th.rng, th.model
    th.context += input_chars // 4
    input_tokens = (1_800 + th.context) * calls
    output_tokens = max(12, output_chars // 4) + rng.randint(0, 60)
    cache_read = 0
    if model.cache_read_price is not None and th.turn_no > 1:
        cache_read = int(input_tokens * rng.uniform(0.45, 0.9))
    cache_write = 0
    if model.provider == "openrouter" and rng.random() < 0.3:
        cache_write = int(input_tokens * 0.1)
    reasoning = int(output_tokens * rng.uniform(0.4, 2.5)) if model.reasoning else 0
    cost = (
        (input_tokens - cache_read) * model.input_price
        + cache_read * (model.cache_read_price or 0.0)
        + (output_tokens + reasoning) * model.output_price
    ) / 1_000_000
    th.context += output_chars // 4
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_tokens": cache_read,
        "cache_write_tokens": cache_write,
        "reasoning_tokens": reasoning,
        "cost_usd": round(cost, 6),
    }


def is_plain(plan: Plan) -> bool:
    """One session with nothing for the core to do beyond create, append, title and end."""
    if plan.kind != "chat" or len(plan.episodes) != 1 or plan.options:
        return False
    ep = plan.episodes[0]
    return (
        ep.sessions == 1 and ep.undo_after is None and ep.retry_after is None and not ep.html_title
    )
