"""Merging two customers must be hard to do by mistake (issue 15, "Safety first").

The preview and /forks/ show whose every session is (user, source, session key, first
user message); when they differ the page says so, the target is not silently the oldest,
and the POST needs the typed number of absorbed sessions and a reason, or it is refused,
audited and changes nothing.
"""

from __future__ import annotations

import html
import re

import pytest
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.ledger.models import AuditEntry
from tests.builders import forked_conversation, store_snapshot
from tests.console.pages import fingerprint_of, preview_url
from tests.helpers import messages, session

PARTS = ("sessions", "messages", "conversations", "merges")


def two_customers() -> tuple[str, str]:
    """(a CLI session of nobody, older; a Telegram chat of customer 4242, live)."""
    cli = core.create_session(source="cli", started_at=1000.0).session_id
    core.append_messages(
        session_id=cli,
        messages=[
            {"role": "user", "content": "deploy the staging branch"},
            {"role": "assistant", "content": "done"},
        ],
    )
    core.end_session(session_id=cli, end_reason="cli_close")
    chat = core.create_session(
        source="telegram",
        user_id="4242",
        session_key="agent:main:telegram:dm:4242",
        started_at=2000.0,
    ).session_id
    core.append_messages(
        session_id=chat,
        messages=[
            {"role": "user", "content": "Where is my refund for order #8812?"},
            {"role": "assistant", "content": "Let me check"},
        ],
    )
    return cli, chat


def confirm_post(client, ids, body: str, **extra):
    data = {"ids": ids, "fingerprint": fingerprint_of(body), **extra}
    target = re.search(r'<input type="hidden" name="target" value="([^"]*)">', body)
    if target:
        data["target"] = html.unescape(target.group(1))
    return client.post(reverse("merge_execute"), data)


# --- what the preview shows -------------------------------------------------------------------


def test_the_preview_names_whose_each_session_is_and_warns_that_they_differ(signed_in):
    cli, chat = two_customers()
    body = signed_in("support").get(preview_url([cli, chat])).content.decode()

    warning = re.search(r'<div class="act-alert error merge-differs".*?</div>', body, re.S)
    assert warning, "no warning block"
    text = html.unescape(warning.group(0))
    assert "users, sources and session keys differ" in text
    assert "<code>4242</code>" in text and "<code>telegram</code>" in text
    assert "<code>cli</code>" in text and "agent:main:telegram:dm:4242" in text
    # every session: user, source, key and first user message
    sources = re.search(r'<table class="act-table stack merge-sources">.*?</table>', body, re.S)
    rows = html.unescape(sources.group(0))
    assert "deploy the staging branch" in rows and "Where is my refund for order #8812?" in rows
    assert rows.count('<dl class="who">') == 2
    assert rows.count('class="differs"') == 6  # user, source and key of both rows
    # the typed confirmation and the required reason, with the rule said on the page
    assert 'name="typed_count"' in body and "Type <strong>1</strong> to confirm" in body
    assert re.search(r'<textarea id="merge-reason" name="reason"[^>]* required>', body)


def test_one_customers_forks_need_no_typed_confirmation(signed_in):
    ids = forked_conversation()
    body = signed_in("support").get(preview_url(ids)).content.decode()
    assert "merge-differs" not in body and 'name="typed_count"' not in body
    assert 'class="differs"' not in body
    assert "question 0" in body  # the first user message is shown
    assert "the oldest session, where the conversation began" in body


def test_the_default_target_of_different_customers_is_the_live_session_not_the_oldest(signed_in):
    cli, chat = two_customers()
    plan = core.plan_merge(session_ids=[cli, chat])
    assert (plan.target_id, plan.target_rule) == (chat, "live")
    assert [d.column for d in plan.differences] == ["user_id", "source", "session_key"]
    body = signed_in("support").get(preview_url([cli, chat])).content.decode()
    assert f'<input type="hidden" name="target" value="{chat}">' in body
    assert re.search(rf'value="{chat}" id="target-2" checked', body)
    assert "the live</strong> session, not the oldest" in body


def test_without_a_live_session_the_latest_active_one_is_the_default_target(signed_in):
    cli, chat = two_customers()
    core.end_session(session_id=chat, end_reason="session_reset")
    # the CLI session's messages are the latest activity (written after the chat ended)
    db.execute("UPDATE messages SET timestamp = 9e9 WHERE session_id = %s", [cli])
    plan = core.plan_merge(session_ids=[chat, cli])
    assert (plan.chosen_id, plan.target_rule) == (cli, "latest activity")
    body = signed_in("support").get(preview_url([chat, cli])).content.decode()
    assert "the latest activity</strong> session" in body


# --- the POST ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "reason", "problem"),
    [
        ("", "same person, two devices", "type 1 (the number of sessions merged"),
        ("2", "same person, two devices", "type 1 (the number of sessions merged"),
        ("1", "", "give a reason for merging them"),
        ("1", "   ", "give a reason for merging them"),
    ],
    ids=["no-count", "wrong-count", "no-reason", "blank-reason"],
)
def test_a_merge_of_different_customers_without_confirmation_is_refused_and_audited(
    signed_in, typed, reason, problem
):
    cli, chat = two_customers()
    client = signed_in("support")
    body = client.get(preview_url([cli, chat])).content.decode()
    before = store_snapshot(*PARTS)
    response = confirm_post(client, [cli, chat], body, typed_count=typed, reason=reason)
    page = html.unescape(response.content.decode())
    assert response.status_code == 200
    assert "Nothing was merged." in page and problem in page
    assert "merge-differs" in page and fingerprint_of(page)  # the preview again, warning and all
    assert store_snapshot(*PARTS) == before
    assert session(cli)["end_reason"] == "cli_close" and session(chat)["ended_at"] is None
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.outcome) == ("merge", "refused")
    assert problem in entry.detail
    assert set(entry.before["differences"]["user"]) == {None, "4242"}


def test_a_confirmed_merge_of_different_customers_goes_through_and_records_what_differed(
    signed_in,
):
    cli, chat = two_customers()
    client = signed_in("support")
    body = client.get(preview_url([cli, chat])).content.decode()
    response = confirm_post(
        client, [cli, chat], body, typed_count="1", reason="same person, CLI and Telegram"
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("session_detail", args=[chat])
    assert session(cli)["end_reason"] == "merged"
    assert [m["content"] for m in messages(chat)][0] == "deploy the staging branch"
    entry = AuditEntry.objects.get()
    assert (entry.outcome, entry.reason) == ("ok", "same person, CLI and Telegram")
    assert set(entry.before["confirmed_differences"]) == {"user", "source", "session key"}


def test_a_difference_that_appears_after_the_preview_needs_the_confirmation(signed_in):
    ids = forked_conversation()
    client = signed_in("support")
    body = client.get(preview_url(ids)).content.decode()
    assert 'name="typed_count"' not in body
    db.execute("UPDATE sessions SET user_id = 'someone-else' WHERE id = %s", [ids[2]])
    before = store_snapshot(*PARTS)
    response = client.post(
        reverse("merge_execute"), {"ids": ids, "fingerprint": fingerprint_of(body)}
    )
    page = html.unescape(response.content.decode())
    assert "Nothing was merged." in page and "users differ: type 2" in page
    assert store_snapshot(*PARTS) == before
    assert AuditEntry.objects.get().outcome == "refused"


# --- where a merge starts ---------------------------------------------------------------------


def test_the_forks_page_names_whose_each_session_is_and_flags_a_mixed_group(signed_in):
    a = core.create_session(source="api_server", user_id="alice", started_at=10.0).session_id
    b = core.create_session(source="api_server", user_id="bob", started_at=20.0).session_id
    for sid, text in ((a, "alice asks about invoices"), (b, "bob asks about shipping")):
        core.append_message(session_id=sid, role="user", content=text)
    core.record_turn(response_id="r-a", session_id=a, conversation="shared-slug")
    core.record_turn(response_id="r-b", session_id=b, conversation="shared-slug")
    core.end_session(session_id=a, end_reason="lru_evict")
    body = html.unescape(signed_in("viewer").get(reverse("fork_list")).content.decode())
    group = re.search(r'<article class="act-card fork-group".*?</article>', body, re.S).group(0)
    assert "Not one customer: their users differ." in group
    assert "alice asks about invoices" in group and "bob asks about shipping" in group
    assert "<code>alice</code>" in group and "<code>bob</code>" in group
    assert group.count('<dl class="who">') == 2
    assert group.count('class="differs"') == 2  # the user only: same source, no key


def test_the_merge_with_box_on_the_session_page_only_leads_to_the_preview(signed_in):
    cli, chat = two_customers()
    client = signed_in("support")
    before = store_snapshot(*PARTS)
    page = client.get(reverse("session_detail", args=[chat])).content.decode()
    box = re.search(r'<form[^>]*class="sa-merge"[^>]*>', page)
    assert box, "no merge box on the session page"
    assert 'method="get"' in box.group(0)
    assert f'action="{reverse("merge_preview")}"' in box.group(0)
    # what submitting it asks for: a preview that warns, never a merge
    preview = client.get(reverse("merge_preview"), {"ids": chat, "pick": cli}).content.decode()
    assert "merge-differs" in preview and 'name="typed_count"' in preview
    assert store_snapshot(*PARTS) == before
    assert not AuditEntry.objects.exists()
