"""Hostile store content for the browser tests: payloads in every field a page shows."""

from __future__ import annotations

import json

from django.core.cache import cache

from sessions_admin import core
from sessions_admin.ledger import actions

# Breaks out of text, of double- and single-quoted attributes, of <textarea>/<title>, tries
# htmx attributes (hx-on runs code, hx-get with hx-trigger=load fetches), template syntax and a
# javascript: URL. Everything it could create carries class "xss" or sets window.__xss.
PAYLOAD = (
    "<script>window.__xss=1</script>"
    '"><img class=xss src=x onerror=window.__xss=1>'
    "<svg class=xss onload=window.__xss=1></svg>"
    "</textarea></title><b class=xss hx-get=/logout/ hx-trigger=load>b</b>"
    '" class="xss" hx-on:click="window.__xss=1" x="'
    "' class='xss' onmouseover='window.__xss=1' x='"
    "{{ 7|add:7 }}{% now 'Y' %} javascript:window.__xss=1"
)
# What must show, verbatim, wherever a payload is displayed (even when truncated).
VISIBLE = "<script>window.__xss=1</script>"
# For columns with a length limit (end_reason: 100 characters).
SHORT_PAYLOAD = '"><img class=xss src=x onerror=window.__xss=1>'
INJECTED = (
    ".xss, script:not([src]), [onerror], [onload], [onmouseover], [hx-on\\:click],"
    ' a[href^="javascript:"], iframe, object, embed'
)


def marked(field: str) -> str:
    return f"{field}:{PAYLOAD}"


def shown(field: str) -> str:
    return f"{field}:{VISIBLE}"


def hostile_store(user) -> dict[str, str]:
    """Sessions, messages, a conversation, audit entries, a job and a trash entry full of payloads."""
    main = core.create_session(
        source=marked("source")[:200],
        session_id='xss-"><img class=xss src=x onerror=window.__xss=1>',
        user_id=marked("user"),
        session_key=marked("key"),
        chat_id=marked("chat"),
        chat_type=marked("chattype"),
        thread_id=marked("thread"),
        model=marked("model"),
        model_config={"note": marked("config")},
        title=marked("title"),
        started_at=1_700_000_000.0,
    ).session_id
    call = {
        "id": "call-1",
        "type": "function",
        "function": {"name": marked("fn"), "arguments": json.dumps({"q": marked("args")})},
    }
    core.append_messages(
        session_id=main,
        messages=[
            {"role": "user", "content": marked("user-msg")},
            {"role": "assistant", "content": marked("assistant-msg"), "reasoning": marked("why")},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "content": marked("tool-msg"), "tool_name": marked("tool")},
            {"role": "assistant", "content": "[x](javascript:window.__xss=1) **bold**"},
        ],
    )
    core.record_turn(response_id=marked("response"), session_id=main, conversation=marked("slug"))
    other = core.create_session(
        source="cli",
        user_id=marked("user"),
        title=marked("other-title"),
        started_at=1_700_000_100.0,
    ).session_id
    core.append_message(session_id=other, role="user", content=marked("other-msg"))
    # The slug's turns in two unlinked sessions: a fork group on the forks page.
    core.record_turn(response_id="response-2", session_id=other, conversation=marked("slug"))
    core.end_session(session_id=other, end_reason=SHORT_PAYLOAD)

    doomed = core.create_session(
        source="cli", title=marked("trashed-title"), started_at=1_600_000_000.0
    ).session_id
    core.append_message(session_id=doomed, role="user", content=marked("trashed-msg"))
    core.end_session(session_id=doomed, end_reason="user_exit")
    plan = core.plan_cascade_delete(session_ids=[doomed])
    actions.cascade_delete(
        actor=user,
        session_ids=[doomed],
        include_branches=False,
        expected_fingerprint=plan.fingerprint,
        reason=marked("delete-reason"),
    )
    queued = core.create_session(source="cli", title="queued for deletion").session_id
    core.end_session(session_id=queued, end_reason="user_exit")
    job = actions.start_bulk_delete(
        actor=user,
        session_ids=[queued],
        include_live=False,
        reason=marked("job-reason"),
        description=marked("job-description"),
    )
    actions.record(
        actor=user,
        action="resume",
        session_ids=[main],
        before={"note": marked("audit-before")},
        after={"note": marked("audit-after")},
        reason=marked("audit-reason"),
        outcome="failed",
        detail=marked("audit-detail"),
    )
    cache.clear()  # the overview's counts were cached when the operator signed in
    return {"main": main, "other": other, "doomed": doomed, "job": str(job)}
