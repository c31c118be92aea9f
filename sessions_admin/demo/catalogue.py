"""The demo's content: models, topics, what people ask and how the agent answers.

What a seeded store *says*, apart from how its stories run (``seeder``): the
models with their prices, the topics (prompts, tools, files, commands, facts,
code), unicode and hostile-markup prompts, and the text of tool results,
replies and reasoning drawn from them. Every function draws from the ``rng``
it is given, so the same seed gives the same words.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

# Gateways whose chats carry a session_key (user, chat, thread); the others do not.
GATEWAY_SOURCES = ("telegram", "discord", "slack")


def weighted(*pairs: tuple[Any, float]) -> tuple[tuple[Any, ...], tuple[float, ...]]:
    """Values and cumulative weights, for ``pick``."""
    values = tuple(v for v, _ in pairs)
    total, cumulative = 0.0, []
    for _, weight in pairs:
        total += weight
        cumulative.append(total)
    return values, tuple(cumulative)


def pick(rng: random.Random, table: tuple[tuple[Any, ...], tuple[float, ...]]) -> Any:
    return rng.choices(table[0], cum_weights=table[1])[0]


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


def random_hex(rng: random.Random, bits: int = 64) -> str:
    return f"{rng.getrandbits(bits):0{bits // 4}x}"


def tool_payload(rng: random.Random, name: str, topic: Topic) -> tuple[dict, str]:
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
            json.dumps({"job_id": f"job_{random_hex(rng, 32)}", "next_run": "Monday 09:00"}),
        )
    if name == "send_message":
        return {"target": "telegram:home", "text": fact}, "Message sent."
    return {"input": fact}, fact


def reply_text(rng: random.Random, topic: Topic, hostile: str | None = None) -> str:
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


def reasoning_text(rng: random.Random, topic: Topic) -> str:
    return (
        f"The user is asking about {topic.name.lower()}. "
        f"{rng.choice(REASONING_STEPS)} {rng.choice(REASONING_STEPS)}"
    )
