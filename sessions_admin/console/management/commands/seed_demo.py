"""``manage.py seed_demo [--sessions N] [--if-empty] [--seed S]``: a realistic demo store.

Everything is written through ``sessions_admin.core``, as a runtime would:
gateway chats with daily resets, compression chains, branches, delegates, tool
calls, undone and retried turns, ``/v1/responses`` conversations, and the
cold-start forks of hermes-agent #16517 that the dashboard must repair (extra
unlinked api_server sessions of one slug, with responses evicted).

Time is simulated. Each story (one chat, one conversation...) is a generator
that yields the moment of its next action; a scheduler runs the actions of all
stories in time order over the last ``WINDOW_DAYS`` days. The core reads the
wall clock for the times it stamps itself (ended_at, the started_at of resets,
branches and compression children, session ids, response access times, the
switch-event log); while seeding, it reads a simulated clock instead
(``core.clock.use_clock``), so those columns agree with the timestamps we pass.

The session count is exact: every story's sessions are fixed when it is
planned, a showcase of each case comes first (so small seeds have them all),
and random stories fill the rest. The same seed gives the same plan, content
and lineage; only generated ids (session ids, response ids) and times
relative to now differ.

Plain single-session chats (no lineage, no rewrites) are the bulk of a large
seed. From ``BULK_MIN_SESSIONS`` on (or with ``--bulk on``) they go through
``BulkWriter``, which hands them to ``core.bulk.insert_sessions`` (the rows the
core would write, with ``executemany``), one transaction per batch: counters equal the active rows,
each root session gets its ``new`` switch event, and full-text search follows
by the store's own means (SQLite triggers, the PostgreSQL expression index).
Every lineage case, rewrite and API conversation still goes through the core.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import connections, transaction

from sessions_admin import core
from sessions_admin.core import bulk as core_bulk
from sessions_admin.core import clock as core_clock
from sessions_admin.core import lifecycle as core_lifecycle
from sessions_admin.core.schema import existing_tables
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
# Content


@dataclass(frozen=True)
class ModelInfo:
    name: str
    provider: str
    input_price: float  # USD per million tokens
    output_price: float
    cache_read_price: float | None
    reasoning: bool


MODELS = (
    ModelInfo("anthropic/claude-sonnet-4.5", "openrouter", 3.0, 15.0, 0.30, True),
    ModelInfo("anthropic/claude-haiku-4.5", "openrouter", 1.0, 5.0, 0.10, False),
    ModelInfo("openai/gpt-5", "openai", 1.25, 10.0, 0.125, True),
    ModelInfo("openai/gpt-4.1-mini", "openai", 0.40, 1.60, 0.10, False),
    ModelInfo("google/gemini-2.5-flash", "openrouter", 0.30, 2.50, 0.075, True),
    ModelInfo("deepseek/deepseek-chat-v3.1", "openrouter", 0.27, 1.10, 0.07, False),
    ModelInfo("nousresearch/hermes-4-405b", "nous", 1.00, 3.00, None, True),
    ModelInfo("moonshotai/kimi-k2", "openrouter", 0.60, 2.50, 0.15, False),
    ModelInfo("qwen/qwen3-coder", "openrouter", 0.40, 1.60, None, False),
    ModelInfo("ollama/llama3.1:8b", "local", 0.0, 0.0, None, False),
)
MODEL_WEIGHTS = (22, 10, 12, 10, 12, 8, 10, 6, 6, 4)
MODEL_CHOICES = (MODELS, tuple(sum(MODEL_WEIGHTS[: i + 1]) for i in range(len(MODELS))))
DELEGATE_MODELS = (MODELS[1], MODELS[3], MODELS[4])


@dataclass(frozen=True)
class Topic:
    name: str
    details: tuple[str, ...]  # for titles
    prompts: tuple[str, ...]
    tools: tuple[str, ...]
    query: str
    files: tuple[str, ...]
    commands: tuple[str, ...]
    facts: tuple[str, ...]
    code: tuple[str, str] | None = None  # (language, snippet)


TOPICS = (
    Topic(
        "Kyoto trip in April",
        ("itinerary", "ryokan shortlist", "temple bookings", "rail passes"),
        (
            "I'm going to Kyoto for 5 days in April. Can you draft an itinerary?",
            "Which temples need advance booking?",
            "Find me a ryokan under ¥30,000 a night near Gion.",
            "What's the fastest way from Kansai airport to Kyoto station?",
            "Is the cherry blossom forecast out yet?",
        ),
        ("web_search", "browser_navigate"),
        "kyoto april itinerary temples booking",
        (),
        (),
        (
            "Kiyomizu-dera opens at 6:00; go before 8:00 to avoid the tour groups",
            "The Haruka express takes about 75 minutes from KIX to Kyoto",
            "Saihō-ji (the moss temple) needs a reservation by postcard or online weeks ahead",
            "Fushimi Inari is open 24 hours and quietest at dawn",
            "A ryokan in Gion with kaiseki dinner typically runs ¥25,000–¥45,000 per person",
        ),
    ),
    Topic(
        "Flaky pytest suite",
        ("payments fixtures", "CI retries", "database isolation", "timeouts"),
        (
            "Our CI fails randomly in test_payments.py, can you look?",
            "Run the tests again with -x and show me the first failure.",
            "Patch the fixture so it doesn't share the DB connection between tests.",
            "Can you add a retry only around the webhook test?",
        ),
        ("terminal", "read_file", "write_file"),
        "pytest flaky fixture shared connection",
        ("tests/test_payments.py", "tests/conftest.py", "app/payments/webhooks.py"),
        ("pytest -x -q tests/test_payments.py", "git log -3 --oneline", "pytest -q -p no:randomly"),
        (
            "the `stripe_client` fixture is session-scoped and caches a connection across tests",
            "test order matters: `test_refund` passes alone but fails after `test_capture`",
            "the webhook test sleeps 0.5s and races the background worker",
            "making the fixture function-scoped removes the cross-test state",
        ),
        (
            "python",
            "@pytest.fixture\ndef stripe_client(db):\n    client = StripeClient(api_key=TEST_KEY)\n"
            "    yield client\n    client.close()",
        ),
    ),
    Topic(
        "Weekly sales report",
        ("EMEA numbers", "chart", "CSV cleanup", "forecast"),
        (
            "Here's this week's sales CSV, summarize it by region.",
            "Make a bar chart of revenue per region.",
            "Which product line dropped the most week over week?",
            "Draft the email to the team with the highlights.",
        ),
        ("execute_code", "read_file"),
        "weekly sales by region",
        ("reports/sales_week.csv",),
        (),
        (
            "EMEA revenue was $412k, up 8% week over week",
            "APAC was flat at $198k",
            "the Pro plan dropped 12% after the price change",
            "3 rows had negative quantities and were excluded",
        ),
        (
            "python",
            "import pandas as pd\ndf = pd.read_csv('reports/sales_week.csv')\n"
            "print(df.groupby('region')['revenue'].sum().sort_values())",
        ),
    ),
    Topic(
        "Slow Postgres query",
        ("orders index", "EXPLAIN ANALYZE", "vacuum", "connection pool"),
        (
            "The orders page takes 9 seconds to load. Here's the query plan.",
            "Would a partial index help here?",
            "Run EXPLAIN ANALYZE again after the index.",
            "Why is autovacuum not keeping up on this table?",
        ),
        ("terminal", "read_file"),
        "postgres slow query partial index",
        ("db/queries/orders.sql", "ops/postgresql.conf"),
        ("psql -c 'EXPLAIN ANALYZE SELECT ...'", "psql -c '\\d orders'"),
        (
            "the planner does a sequential scan over 14M rows",
            "a partial index on `(customer_id, created_at) WHERE status = 'open'` fits this query",
            "after the index the query runs in 38 ms",
            "autovacuum_vacuum_scale_factor is still the default 0.2",
        ),
        (
            "sql",
            "CREATE INDEX CONCURRENTLY orders_open_customer_idx\n"
            "    ON orders (customer_id, created_at)\n    WHERE status = 'open';",
        ),
    ),
    Topic(
        "Cover letter",
        ("product designer role", "tone", "short version"),
        (
            "Help me write a cover letter for a product designer role at a fintech.",
            "Make it less formal and cut it to 200 words.",
            "Add a line about my accessibility work.",
        ),
        (),
        "",
        (),
        (),
        (
            "open with the problem you solved, not with your job title",
            "one concrete number beats three adjectives",
            "close with what you'd like to do in the first 90 days",
        ),
    ),
    Topic(
        "Home network",
        ("mesh Wi-Fi", "port forwarding", "DNS", "guest network"),
        (
            "My Wi-Fi drops every evening around 9pm. Ideas?",
            "How do I set up a separate guest network for IoT devices?",
            "Is it safe to forward port 22 to my Raspberry Pi?",
        ),
        ("web_search",),
        "wifi drops evening channel congestion",
        (),
        (),
        (
            "evening drops often mean channel congestion from neighbours",
            "put IoT devices on their own SSID and VLAN",
            "never expose SSH with password login; use keys and a non-default port, or a VPN",
        ),
    ),
    Topic(
        "Vegan ramen",
        ("broth", "shopping list", "meal prep"),
        (
            "Give me a recipe for a rich vegan ramen broth.",
            "I don't have kombu, what can I use instead?",
            "Scale it for 6 people and make a shopping list.",
        ),
        ("web_search",),
        "vegan ramen broth recipe",
        (),
        (),
        (
            "roast the shiitake and onions first for depth",
            "white miso and tahini make the broth creamy",
            "dried shiitake alone gives enough umami if kombu is missing",
        ),
    ),
    Topic(
        "Kubernetes OOMKilled pods",
        ("memory limits", "JVM flags", "HPA", "node pressure"),
        (
            "Our api pods keep getting OOMKilled after deploys.",
            "Show me the memory usage of the last restarted pod.",
            "Should we raise the limit or fix the JVM settings?",
        ),
        ("terminal",),
        "kubernetes oomkilled jvm container limits",
        ("deploy/api/deployment.yaml",),
        (
            "kubectl get pods -n api",
            "kubectl describe pod api-7c9f -n api",
            "kubectl top pod -n api",
        ),
        (
            "the container limit is 1Gi while -Xmx is also 1g, leaving no headroom",
            "use -XX:MaxRAMPercentage=75 instead of a fixed -Xmx",
            "the restarts line up with the nightly batch job",
        ),
        (
            "yaml",
            "resources:\n  requests:\n    memory: 768Mi\n  limits:\n    memory: 1536Mi",
        ),
    ),
    Topic(
        "Paper summary",
        ("attention variants", "key results", "limitations"),
        (
            "Summarize this paper for me: https://arxiv.org/abs/2407.01234",
            "What are the main limitations the authors admit?",
            "Compare it with FlashAttention in a table.",
        ),
        ("browser_navigate", "web_search"),
        "arxiv 2407.01234 efficient attention",
        (),
        (),
        (
            "the method trades exactness for a 2.1× speedup at 32k context",
            "the evaluation covers only English benchmarks",
            "memory use grows linearly instead of quadratically",
        ),
    ),
    Topic(
        "Reminders and scheduling",
        ("birthday reminder", "weekly digest", "dentist"),
        (
            "Remind me on Friday at 6pm to call mum, it's her birthday.",
            "Every Monday at 9, send me a digest of my open GitHub issues.",
            "What reminders do I have this week?",
        ),
        ("cronjob", "memory", "send_message"),
        "",
        (),
        (),
        (
            "reminder set for Friday 18:00",
            "the weekly digest will be delivered here every Monday at 09:00",
            "you have 3 reminders this week",
        ),
    ),
    Topic(
        "Household budget",
        ("groceries", "savings goal", "spreadsheet"),
        (
            "Help me build a monthly budget from these numbers.",
            "How much can I save per month if I cut takeout in half?",
            "Turn this into a spreadsheet formula.",
        ),
        ("execute_code",),
        "",
        ("budget.xlsx",),
        (),
        (
            "fixed costs are 58% of take-home pay",
            "halving takeout saves about €140 a month",
            "at this rate the emergency fund is full in 7 months",
        ),
    ),
    Topic(
        "React component refactor",
        ("hooks", "prop drilling", "tests"),
        (
            "This component is 600 lines. Help me split it up.",
            "Move the data fetching into a custom hook.",
            "Write tests for the new hook.",
        ),
        ("read_file", "write_file", "terminal"),
        "react custom hook data fetching",
        ("src/components/OrderTable.tsx", "src/hooks/useOrders.ts"),
        ("npm test -- useOrders", "npx tsc --noEmit"),
        (
            "the table, the filters and the fetching are three components waiting to happen",
            "`useOrders` can own loading, error and pagination state",
            "the type errors come from the old `any` props",
        ),
        (
            "tsx",
            "export function useOrders(filter: OrderFilter) {\n"
            "  const [state, setState] = useState<OrdersState>({ status: 'loading' });\n"
            "  // ...\n  return state;\n}",
        ),
    ),
    Topic(
        "Rust lifetimes",
        ("borrow checker", "structs holding references", "iterators"),
        (
            "Why does the borrow checker reject this function?",
            "When do I need explicit lifetimes on a struct?",
            "Rewrite it so it returns an iterator instead of a Vec.",
        ),
        (),
        "",
        (),
        (),
        (
            "the returned reference must not outlive the input it borrows from",
            "a struct that holds a `&str` needs a lifetime parameter",
            "`impl Iterator<Item = &'a str> + 'a` avoids the allocation",
        ),
        (
            "rust",
            "fn longest<'a>(a: &'a str, b: &'a str) -> &'a str {\n"
            "    if a.len() >= b.len() { a } else { b }\n}",
        ),
    ),
    Topic(
        "Incident postmortem",
        ("timeline", "root cause", "action items"),
        (
            "Draft a postmortem for yesterday's checkout outage.",
            "Pull the timeline from the incident channel log.",
            "What action items would you propose?",
        ),
        ("read_file", "web_search"),
        "blameless postmortem template",
        ("incidents/2024-checkout/log.txt",),
        (),
        (
            "impact: 41 minutes of failed checkouts for ~6% of users",
            "root cause: an expired intermediate certificate on the payment proxy",
            "action: alert 30 days before any certificate expires",
        ),
    ),
    Topic(
        "E-bike market research",
        ("competitors", "pricing", "regulation"),
        (
            "Research the e-bike market in Germany for a pitch deck.",
            "Who are the top 5 brands by sales?",
            "What are the legal limits for pedelecs in the EU?",
        ),
        ("web_search", "browser_navigate"),
        "e-bike market germany 2024 sales",
        (),
        (),
        (
            "pedelecs are limited to 25 km/h assistance and 250 W",
            "e-bikes were about half of all bikes sold in Germany last year",
            "the mid-price segment (€2,500–€4,000) grows fastest",
        ),
    ),
    Topic(
        "Translation help",
        ("product page", "email", "formal tone"),
        (
            "Translate our product page intro into Japanese and Chinese.",
            "Make the Japanese more formal (keigo).",
            "Can you also do Arabic? It's for a Dubai launch.",
        ),
        (),
        "",
        (),
        (),
        (
            "製品の紹介文を丁寧語で翻訳しました",
            "产品介绍已翻译成简体中文",
            "تمت ترجمة المقدمة إلى العربية",
        ),
    ),
)

UNICODE_PROMPTS = (
    "请帮我把这段话翻译成英文：今天天气很好，我们去公园散步吧。",
    "東京で一番おいしいラーメン屋はどこですか？🍜",
    "이 코드에서 버그를 찾아줄 수 있어요?",
    "مرحبا! هل يمكنك مساعدتي في كتابة رسالة إلى مديري؟",
    "שלום, תוכל לסכם לי את המאמר הזה בשלוש נקודות?",
    "Ça marche? Größe, naïve café, déjà vu — résumé ✅",
    "🚀🔥👍🏽 ship it! 🎉🧑‍💻👩🏾‍🔬 (zero-width joiner emoji test)",
    "Mixed direction: English, العربية and עברית in one line ↔ 中文 too",
    "Привет! Как настроить cron в Linux?",
    "Math: ∑ᵢ xᵢ² ≤ ∞, ≠ ≈, and a combining ñ vs ñ",
)

HOSTILE_PROMPTS = (
    "What does <script>alert(1)</script> do if I paste it in a comment box?",
    "My page shows <img src=x onerror=alert(document.cookie)> literally, is that bad?",
    "Template check: {{ request.user }} {% debug %} and [click](javascript:alert(1))",
)
HTML_TITLE = '<script>alert("title")</script> Q3 <b>roadmap</b> & "notes"'

OPENERS = (
    "Here's what I found:",
    "Sure, here's a plan.",
    "Done. Summary below.",
    "Good question.",
    "Short answer: yes, with a caveat.",
    "I looked into it.",
    "Okay!",
)
CLOSERS = (
    "Want me to go deeper on any of these?",
    "Let me know if you'd like changes.",
    "",
    "I can turn this into a checklist if that helps.",
    "Shall I save this to memory?",
)
FOLLOW_UPS = ("", "", "Thanks! ", "Hmm, ", "One more thing: ", "Also, ", "Follow-up: ")
REASONING_STEPS = (
    "I should check the details before answering rather than guess.",
    "The previous answer missed one constraint; account for it this time.",
    "A table will be easier to scan than prose here.",
    "Keep it short: the user is on mobile.",
    "Two tool calls can run in parallel since they are independent.",
)
SEARCH_SITES = (
    "en.wikipedia.org",
    "docs.python.org",
    "stackoverflow.com",
    "github.com",
    "news.ycombinator.com",
    "japan-guide.com",
)


def _hex(rng: random.Random, bits: int = 64) -> str:
    return f"{rng.getrandbits(bits):0{bits // 4}x}"


def _tool_payload(rng: random.Random, name: str, topic: Topic) -> tuple[dict, str]:
    """Arguments and a result text for one call of tool ``name``."""
    fact = rng.choice(topic.facts)
    if name == "web_search":
        query = topic.query or topic.name.lower()
        hits = [
            {
                "title": f"{topic.name}: {rng.choice(topic.details)}",
                "url": f"https://{rng.choice(SEARCH_SITES)}/{'-'.join(query.split()[:3])}-{rng.randint(10, 999)}",
                "snippet": rng.choice(topic.facts),
            }
            for _ in range(rng.randint(2, 4))
        ]
        return {"query": query}, json.dumps({"results": hits}, ensure_ascii=False)
    if name == "browser_navigate":
        url = f"https://{rng.choice(SEARCH_SITES)}/{topic.name.lower().replace(' ', '-')}"
        text = f"# {topic.name}\n\n{fact}.\n\n{rng.choice(topic.facts)}."
        if rng.random() < 0.05:
            text += "\n\n<img src=x onerror=alert('page')> <iframe src=javascript:alert(1)>"
        return {"url": url}, text
    if name == "read_file":
        path = rng.choice(topic.files or ("notes.md",))
        body = topic.code[1] if topic.code and rng.random() < 0.6 else f"# {topic.name}\n{fact}\n"
        return {"path": path}, body
    if name == "write_file":
        path = rng.choice(topic.files or ("notes.md",))
        lines = rng.randint(4, 80)
        return (
            {"path": path, "content": topic.code[1] if topic.code else fact},
            f"Wrote {lines} lines to {path}",
        )
    if name == "terminal":
        command = rng.choice(topic.commands or ("ls -la",))
        outputs = (
            f"$ {command}\n{fact}\nexit code 0",
            f"$ {command}\nFAILED tests/test_payments.py::test_refund - AssertionError\n1 failed, 41 passed in 3.20s",
            f"$ {command}\nNAME        READY   STATUS      RESTARTS   AGE\napi-7c9f    1/1     Running     3          2d",
        )
        return {"command": command}, rng.choice(outputs)
    if name == "execute_code":
        code = topic.code[1] if topic.code else "print(sum(range(10)))"
        return {"code": code}, f"stdout:\n{fact}\n"
    if name == "memory":
        return {"action": "add", "content": fact}, "Saved to memory."
    if name == "cronjob":
        return (
            {"action": "create", "schedule": "0 9 * * 1", "prompt": fact},
            json.dumps({"job_id": f"job_{_hex(rng, 32)}", "next_run": "Monday 09:00"}),
        )
    if name == "send_message":
        return {"target": "telegram:home", "text": fact}, "Message sent."
    return {"input": fact}, fact


def _reply_text(rng: random.Random, topic: Topic, hostile: str | None = None) -> str:
    facts = rng.sample(topic.facts, k=min(len(topic.facts), rng.randint(1, 3)))
    parts = [rng.choice(OPENERS)]
    style = rng.random()
    if hostile:
        parts.append(
            "That text is markup. Shown literally it is harmless; rendered as HTML it would run:\n\n"
            f"```html\n{hostile}\n```\n\nUnescaped, inline, it looks like this: {hostile}"
        )
    elif style < 0.4:
        parts.append("\n".join(f"- {f[0].upper()}{f[1:]}." for f in facts))
    elif style < 0.6:
        parts.append("\n".join(f"{i}. {f[0].upper()}{f[1:]}." for i, f in enumerate(facts, 1)))
    elif style < 0.75:
        rows = "\n".join(f"| {i} | {f} |" for i, f in enumerate(facts, 1))
        parts.append(f"| # | Finding |\n|---|---|\n{rows}")
    else:
        parts.append(" ".join(f"{f[0].upper()}{f[1:]}." for f in facts))
    if topic.code and rng.random() < 0.35:
        language, snippet = topic.code
        parts.append(f"```{language}\n{snippet}\n```")
    closer = rng.choice(CLOSERS)
    if closer:
        parts.append(closer)
    return "\n\n".join(parts)


def _reasoning_text(rng: random.Random, topic: Topic) -> str:
    return (
        f"The user is asking about {topic.name.lower()}. "
        f"{rng.choice(REASONING_STEPS)} {rng.choice(REASONING_STEPS)}"
    )


# ---------------------------------------------------------------------------
# Plans: what each story will do, fixed up front so the session count is exact


GATEWAY_SOURCES = ("telegram", "discord", "slack")
ACTIVE_HOURS = (7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 0)


def _weighted(*pairs: tuple[Any, float]) -> tuple[tuple[Any, ...], tuple[float, ...]]:
    """Values and cumulative weights, for ``_pick``."""
    values = tuple(v for v, _ in pairs)
    total, cumulative = 0.0, []
    for _, weight in pairs:
        total += weight
        cumulative.append(total)
    return values, tuple(cumulative)


def _pick(rng: random.Random, table: tuple[tuple[Any, ...], tuple[float, ...]]) -> Any:
    return rng.choices(table[0], cum_weights=table[1])[0]


GATEWAY_WEIGHTS = _weighted(("telegram", 40), ("discord", 25), ("slack", 20))
TURN_COUNTS = _weighted(
    (1, 12), (2, 18), (3, 18), (4, 14), (5, 10), (6, 9), (8, 8), (12, 7), (16, 4)
)
CLI_END_REASONS = _weighted(("user_exit", 70), ("agent_close", 12), (None, 18))
INTERESTING_KINDS = _weighted(
    ("chat", 30), ("chat_days", 25), ("cli", 13), ("api", 24), ("api_plain", 8)
)
PLAIN_KINDS = _weighted(("chat", 74), ("cli", 20), ("empty", 6))
FORK_COUNTS = _weighted((0, 60), (1, 28), (2, 12))
TOOL_ROUNDS = _weighted((1, 70), (2, 24), (3, 6))
PARALLEL_CALLS = _weighted((1, 75), (2, 20), (3, 5))
END_REASONS = ("user_exit", "agent_close", "ws_orphan_reap", "lru_evict")


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


# ---------------------------------------------------------------------------
# The seeder


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
            plain = sorted((p for p in kept if _is_plain(p)), key=lambda p: p.start)
            kept = [p for p in kept if not _is_plain(p)]
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
        return _pick(rng, TURN_COUNTS)

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
        source = source or _pick(rng, GATEWAY_WEIGHTS)
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
        self._place(rng, plan, start, _worst_span(plan.episodes))
        return plan

    def _cli_plan(self, rng: random.Random, start: float | None, *, flags: str = "none") -> Plan:
        plan = Plan(kind="chat", start=0.0, seed=rng.getrandbits(63), source="cli")
        ep = self._episode(rng, 0.0, flags=flags)
        ep.title = rng.random() < 0.5
        ep.end_reason = _pick(rng, CLI_END_REASONS)
        plan.episodes.append(ep)
        plan.sessions = ep.sessions
        self._place(rng, plan, start, _worst_span(plan.episodes))
        return plan

    def _empty_plan(
        self, rng: random.Random, start: float | None, source: str | None = None
    ) -> Plan:
        source = source or rng.choice(("cli", "telegram", "discord", "api_server"))
        plan = Plan(kind="chat", start=0.0, seed=rng.getrandbits(63), source=source, sessions=1)
        end_reason = rng.choice(("ws_orphan_reap", "user_exit", None))
        plan.episodes.append(Episode(start=0.0, turns=0, end_reason=end_reason))
        self._place(rng, plan, start, _worst_span(plan.episodes))
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
            kind = _pick(rng, INTERESTING_KINDS)
            if kind == "chat":
                return self._chat_plan(rng, None, episodes=1, flags="force")
            if kind == "chat_days":
                episodes = rng.randint(2, 5)
                return self._chat_plan(rng, None, episodes=episodes, flags="random")
            if kind == "cli":
                return self._cli_plan(rng, None, flags="force")
            if kind == "api":
                forks = _pick(rng, FORK_COUNTS)
                mode = "latest" if rng.random() < 0.6 else "original"
                return self._api_plan(rng, None, forks=forks, mode=mode)
            plan = Plan(kind="api_plain", start=0.0, seed=rng.getrandbits(63), sessions=1)
            plan.options = {"turns": rng.randint(1, 4)}
            plan.start = self._random_start(
                rng, span=plan.options["turns"] * TURN_WORST_SECONDS + 60
            )
            return plan
        kind = _pick(rng, PLAIN_KINDS)
        if kind == "chat":
            return self._chat_plan(rng, None, episodes=1)
        if kind == "cli":
            return self._cli_plan(rng, None)
        return self._empty_plan(rng, None)

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
                Plan(
                    kind="long",
                    start=self.now - 11 * day,
                    seed=rng.getrandbits(63),
                    sessions=1,
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
            Plan(
                kind="api_plain",
                start=self.now - 5 * day,
                seed=rng.getrandbits(63),
                sessions=1,
                options={"turns": 3},
            )
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
                    self._report_progress()

    def _report_progress(self, *, force: bool = False) -> None:
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

    def _unique_title(self, base: str) -> str:
        """``base``, or ``base (n)`` with the first free n: titles are unique in the store."""
        title = base
        n = self.title_suffixes.get(base, 1)
        while title in self.used_titles:
            n += 1
            title = f"{base} ({n})"
        self.title_suffixes[base] = n
        self.used_titles.add(title)
        return title

    def _key_for(
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
                user = "U0" + _hex(rng, 32)[:8].upper()
                group = rng.random() < 0.7 or group
                chat_type = "group" if group else "dm"
                chat_id = ("C0" if group else "D0") + _hex(rng, 32)[:8].upper()
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
                slug = f"sidekick-{rng.choice(adjectives)}-{rng.choice(nouns)}-{_hex(rng, 16)}"
            elif style < 0.9:
                slug = f"support-ticket-{rng.randint(10_000, 99_999)}"
            else:
                slug = f"openwebui-chat-{_hex(rng, 32)}"
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
        figures = _usage_figures(
            th, calls=calls, output_chars=output_chars, input_chars=input_chars
        )
        core.add_usage(session_id=th.session_id, **figures)

    def _turn_messages(
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
            for _ in range(_pick(rng, TOOL_ROUNDS)):
                th.t += rng.uniform(1.5, 12)
                payloads = []
                for _ in range(_pick(rng, PARALLEL_CALLS)):
                    name = rng.choice(topic.tools)
                    args, result = _tool_payload(rng, name, topic)
                    call_id = f"call_{_hex(rng, 96)}"
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
                    assistant["reasoning"] = _reasoning_text(rng, topic)
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
        content = _reply_text(rng, th.topic, hostile)
        reply: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "finish_reason": "length" if rng.random() < 0.02 else "stop",
            "token_count": max(1, len(content) // 4),
            "timestamp": th.t,
        }
        if th.model.reasoning and rng.random() < 0.45:
            reply["reasoning"] = _reasoning_text(rng, th.topic)
        return reply

    def _turn(self, th: Thread, **kwargs: Any) -> Iterator[float]:
        messages, calls = self._turn_messages(th, **kwargs)
        yield th.t
        result = self._append(th, messages)
        th.reply_ids.append(result.message_ids[-1])
        self._usage(
            th,
            calls=calls,
            output_chars=len(messages[-1]["content"] or ""),
            input_chars=sum(len(str(m.get("content") or "")) for m in messages[:-1]),
        )

    def _pause(self, th: Thread, *, fast: bool = False) -> None:
        """The user's think time before the next message."""
        rng = th.rng
        if fast:
            th.t += rng.uniform(10, 90)
        else:
            th.t += rng.choices(
                (rng.uniform(8, 60), rng.uniform(60, 400), rng.uniform(400, 1500)), (45, 40, 15)
            )[0]

    def _thread_for(self, plan: Plan, rng: random.Random, session_id: str, t: float) -> Thread:
        model = plan.options.get("model_info")
        if model is None:
            model = _pick(rng, MODEL_CHOICES)
            plan.options["model_info"] = model
        topic = plan.options.get("topic")
        if topic is None:
            topic = rng.choice(TOPICS)
            plan.options["topic"] = topic
        return Thread(session_id=session_id, rng=rng, topic=topic, model=model, t=t)

    def _model_config(self, model: ModelInfo, rng: random.Random) -> dict[str, Any]:
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
            self._key_for(rng, plan.source, thread=bool(plan.options.get("thread")))
            if keyed
            else {}
        )
        th: Thread | None = None
        for k, ep in enumerate(plan.episodes):
            # A long day can run into the next planned start: never overlap the previous one.
            start = ep.start if th is None else max(ep.start, th.t + 60)
            yield start
            if th is None:
                th = self._thread_for(plan, rng, "", start)
                th.user_id = meta.get("user_id")
            th.t = start
            if k == 0 or ep.transition == "create":
                ref = core.create_session(
                    source=plan.source,
                    model=th.model.name,
                    model_config=self._model_config(th.model, rng),
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

    def _episode_turns(
        self, plan: Plan, th: Thread, ep: Episode, rng: random.Random
    ) -> Iterator[float]:
        fast = bool(plan.options.get("fast_turns"))
        for i in range(ep.turns):
            if i:
                self._pause(th, fast=fast)
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
                core.set_title(session_id=th.session_id, title=self._unique_title(title))
            if i == ep.undo_after:
                th.t += rng.uniform(5, 60)
                yield th.t
                core.undo_last_turn(session_id=th.session_id)
                self.stats.undone += 1
                if th.reply_ids:
                    th.reply_ids.pop()
            elif i == ep.retry_after:
                th.t += rng.uniform(3, 30)
                yield th.t
                core.retry_last_turn(session_id=th.session_id)
                self.stats.retried += 1
                if th.reply_ids:
                    th.reply_ids.pop()
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
                    title=self._unique_title(f"Branch: {th.topic.name}")
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
                "content": _reply_text(rng, th.topic),
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
                "id": f"call_{_hex(rng, 96)}",
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
            ask["reasoning"] = _reasoning_text(rng, topic)
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
        user_id = f"apikey-{_hex(rng, 32)[:6]}"
        th = self._thread_for(plan, rng, "", plan.start)
        self.stats.slugs += 1
        last_response = None
        for i in range(o["turns"]):
            if i:
                self._pause(th)
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
                    self._pause(th)
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
        th = self._thread_for(plan, rng, "", plan.start)
        ref = core.create_session(
            source="api_server",
            user_id=f"apikey-{_hex(rng, 32)[:6]}",
            model=th.model.name,
            model_config=self._model_config(th.model, rng),
            started_at=plan.start,
        )
        self._created()
        th.session_id = ref.session_id
        previous = None
        for i in range(plan.options["turns"]):
            if i:
                self._pause(th)
            yield from self._turn(th)
            previous = self._record(th, slug=None, previous=previous)

    def _long_story(self, plan: Plan, rng: random.Random) -> Iterator[float]:
        """A long-running ops group chat: one live session of ``messages`` messages."""
        total = plan.options["messages"]
        yield plan.start
        meta = self._key_for(rng, "telegram", thread=False, group=True)
        topic = TOPICS[7]  # kubernetes: tool-heavy
        model = MODELS[1]  # a cheap model for a chatty channel
        ref = core.create_session(
            source="telegram",
            model=model.name,
            model_config=self._model_config(model, rng),
            started_at=plan.start,
            title=self._unique_title(f"Ops channel (long-running, {total:,} messages)"),
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
                call_id = f"call_{_hex(rng, 96)}"
                args, result = _tool_payload(rng, "terminal", topic)
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


# Worst cases, for fitting stories before now: a turn is at most a 1,500 s pause,
# three tool rounds and a reply; a delegate runs one such turn.
TURN_WORST_SECONDS = 1_700.0
DELEGATE_WORST_SECONDS = 1_800.0


def _episode_worst(ep: Episode) -> float:
    return (
        ep.turns * TURN_WORST_SECONDS
        + sum(ep.delegates.values()) * DELEGATE_WORST_SECONDS
        + 3_000.0  # undo, retry, branch, compressions and the end
    )


def _worst_span(episodes: list[Episode]) -> float:
    """The latest a story of these episodes (laid out from 0) can end, as it runs them."""
    end = 0.0
    for k, ep in enumerate(episodes):
        start = ep.start if k == 0 else max(ep.start, end + 60)
        end = start + _episode_worst(ep)
    return end


def _usage_figures(
    th: Thread, *, calls: int, output_chars: int, input_chars: int
) -> dict[str, Any]:
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


def _is_plain(plan: Plan) -> bool:
    """One session with nothing for the core to do beyond create, append, title and end."""
    if plan.kind != "chat" or len(plan.episodes) != 1 or plan.options:
        return False
    ep = plan.episodes[0]
    return (
        ep.sessions == 1 and ep.undo_after is None and ep.retry_after is None and not ep.html_title
    )


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

    def __init__(self, seeder: Seeder) -> None:
        self.seeder = seeder

    def write_batch(self, plans: list[Plan]) -> None:
        seeder = self.seeder
        sessions = [self._session_rows(plan) for plan in plans]
        core_bulk.insert_sessions(sessions=sessions)
        seeder.stats.sessions += len(sessions)
        seeder.stats.bulk_sessions += len(sessions)
        seeder.stats.messages += sum(len(s["messages"]) for s in sessions)
        seeder._report_progress()

    def _session_rows(self, plan: Plan) -> dict[str, Any]:
        """The session row and message rows of a plain chat, drawing the random values in
        the order ``Seeder._chat_story`` does, so both paths write the same content."""
        seeder = self.seeder
        rng = random.Random(plan.seed)
        ep = plan.episodes[0]
        meta = (
            seeder._key_for(rng, plan.source, thread=False)
            if plan.source in GATEWAY_SOURCES
            else {}
        )
        th = seeder._thread_for(plan, rng, "", ep.start)
        model_config = core_lifecycle.db.dumps(seeder._model_config(th.model, rng))
        session_id = (
            f"{time.strftime('%Y%m%d_%H%M%S', time.gmtime(ep.start))}_{uuid.uuid4().hex[:8]}"
        )
        th.extras = list(ep.extras)
        usage = dict.fromkeys(USAGE_FIELDS, 0)
        rows: list[dict[str, Any]] = []
        title = None
        for i in range(ep.turns):
            if i:
                seeder._pause(th)
            turn, calls = seeder._turn_messages(th)
            rows.extend(turn)
            figures = _usage_figures(
                th,
                calls=calls,
                output_chars=len(turn[-1]["content"] or ""),
                input_chars=sum(len(str(m.get("content") or "")) for m in turn[:-1]),
            )
            for name in USAGE_FIELDS:
                usage[name] += figures[name]
            if i == 0 and ep.title:
                title = seeder._unique_title(f"{th.topic.name}: {rng.choice(th.topic.details)}")
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


# ---------------------------------------------------------------------------
# The command


def _store_counts() -> tuple[int, int]:
    with connections[store_alias()].cursor() as c:
        c.execute("SELECT COUNT(*) FROM sessions")
        (sessions,) = c.fetchone()
        c.execute("SELECT COUNT(*) FROM messages")
        (messages,) = c.fetchone()
    return int(sessions), int(messages)


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
            default=DEFAULT_SESSIONS,
            help=f"How many sessions to create (default {DEFAULT_SESSIONS}).",
        )
        parser.add_argument(
            "--seed",
            type=int,
            default=DEFAULT_SEED,
            help=f"Random seed; the same seed gives the same store (default {DEFAULT_SEED}).",
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
                f"Messages in the one long transcript (0: none). Default {LONG_TRANSCRIPT_MESSAGES:,} "
                f"when --sessions is at least {LARGE_CASES_MIN_SESSIONS}, else 0. "
                f"The {LONG_CHAIN_SEGMENTS}-segment compression chain follows the same threshold."
            ),
        )
        parser.add_argument(
            "--bulk",
            choices=("auto", "on", "off"),
            default="auto",
            help=(
                "Write plain single-session chats with bulk inserts instead of one core call "
                f"each: auto (default) uses them from {BULK_MIN_SESSIONS:,} sessions on."
            ),
        )

    def handle(self, *args, **options):
        sessions = options["sessions"]
        if sessions < 1:
            raise CommandError("--sessions must be at least 1.")
        long_messages = options["long_transcript"]
        if long_messages is None:
            long_messages = LONG_TRANSCRIPT_MESSAGES if sessions >= LARGE_CASES_MIN_SESSIONS else 0
        if long_messages < 0:
            raise CommandError("--long-transcript must be zero or more.")
        if "sessions" not in existing_tables(store_alias()):
            raise CommandError(
                "The store has no sessions table: run `python manage.py init_store` first."
            )
        existing, existing_messages = _store_counts()
        if options["if_empty"] and existing:
            self.stdout.write(
                f"The store already has {existing:,} sessions: nothing seeded (--if-empty)."
            )
            return
        bulk = options["bulk"] == "on" or (
            options["bulk"] == "auto" and sessions >= BULK_MIN_SESSIONS
        )
        seeder = Seeder(
            sessions=sessions,
            seed=options["seed"],
            long_messages=long_messages,
            long_chain=sessions >= LARGE_CASES_MIN_SESSIONS,
            bulk=bulk,
            stdout=self.stdout,
            progress=sessions >= 1_000,
        )
        self.stdout.write(
            f"Seeding {sessions:,} sessions (seed {options['seed']}) over the last "
            f"{WINDOW_DAYS} days" + (", plain chats in bulk" if bulk else "") + "..."
        )
        self.stdout.flush()
        seeder.run(seeder.plan())
        elapsed = time.monotonic() - seeder.started
        stats = seeder.stats
        total_sessions, total_messages = _store_counts()
        with connections[responses_alias()].cursor() as c:
            c.execute("SELECT COUNT(*) FROM conversations")
            (conversations,) = c.fetchone()
        self.stdout.write(
            self.style.SUCCESS(
                f"Seeded {total_sessions - existing:,} sessions and "
                f"{total_messages - existing_messages:,} messages in {elapsed:,.1f}s "
                f"({(total_sessions - existing) / max(elapsed, 1e-6):,.0f} sessions/s"
                + (f"; {stats.bulk_sessions:,} plain chats in bulk" if stats.bulk_sessions else "")
                + f"). Conversations: {stats.slugs:,} new slugs ({conversations:,} in the store) "
                f"with {stats.forks:,} cold-start fork sessions; {stats.responses:,} responses "
                f"recorded, {stats.evicted:,} evicted."
            )
        )
        self.stdout.write(
            f"Lineage: {stats.resets:,} resets, {stats.compressions:,} compression "
            f"continuations, {stats.branches:,} branches, {stats.delegates:,} delegates; "
            f"{stats.undone:,} undone and {stats.retried:,} retried turns."
        )
