""" "Export what these filters match" exports whole conversations (issue 25, item 14).

The session list shows one row per conversation; a runtime leaves the user id (and often
the source) of a conversation's compression continuations, delegates and untyped children
empty or different. The export of a filter takes the rows the list counts and every
segment of each, on the page and in ``manage.py export_sessions`` alike.
"""

from __future__ import annotations

import io
import json

from django.core.management import call_command
from django.urls import reverse

from sessions_admin.core import db
from sessions_admin.store import listing
from tests.builders import cascade_lineage


def lineage_of_a_user() -> dict[str, str]:
    """``cascade_lineage`` whose root and branch belong to user u-7 (every other segment left
    without a user id, as Hermes leaves them), beside sessions of other users."""
    root, delegate, grand, tip, branch, child, other = cascade_lineage()
    db.execute("UPDATE sessions SET user_id = NULL")
    db.execute("UPDATE sessions SET user_id = 'u-7' WHERE id IN (%s, %s)", [root, branch])
    db.execute("UPDATE sessions SET user_id = 'u-70' WHERE id = %s", [other])
    return {
        "root": root,
        "delegate": delegate,
        "grand_delegate": grand,
        "tip": tip,
        "branch": branch,
        "child": child,
        "other": other,
    }


def exported_ids(body: str) -> list[str]:
    records = [json.loads(line) for line in body.splitlines()]
    return [r["session"]["id"] for r in records if r["type"] == "session"]


def page_export(client, query: str) -> list[str]:
    response = client.get(reverse("export_sessions") + "?" + query)
    assert response.status_code == 200
    return exported_ids(b"".join(response.streaming_content).decode("utf-8"))


def list_count(query: dict) -> int:
    return listing.list_sessions(listing.parse(query).filters).count


def test_a_users_export_holds_every_segment_of_each_of_their_conversations(admin_client):
    ids = lineage_of_a_user()
    conversation = {k: v for k, v in ids.items() if k != "other"}

    exported = page_export(admin_client, "user=u-7")

    assert sorted(exported) == sorted(conversation.values())
    assert len(exported) == len(set(exported))
    # Each conversation from the row the list shows, then its segments.
    assert exported[0] == ids["root"]
    # The list counts two rows (the conversation and its branch): the export holds both whole.
    assert list_count({"user": "u-7"}) == 2
    # Every segment listed ("all" scope) exports the same conversations.
    assert sorted(page_export(admin_client, "user=u-7&scope=all")) == sorted(exported)


def test_a_sources_export_on_the_page_and_by_the_command_holds_whole_conversations(
    admin_client, tmp_path
):
    ids = lineage_of_a_user()  # root, tip, branch, child and other are cli; delegates are tool
    expected = set(ids.values())

    from_page = page_export(admin_client, "source=cli")
    path = tmp_path / "cli.jsonl"
    said = io.StringIO()
    call_command("export_sessions", "--source", "cli", "-o", str(path), stderr=said)
    from_command = exported_ids(path.read_text(encoding="utf-8"))

    assert set(from_page) == expected
    assert from_command == from_page
    conversations = list_count({"source": "cli"})
    assert conversations == 3  # the conversation, its branch, the other user's session
    assert f"Exported {len(expected)} session(s) of {conversations} conversation(s)" in (
        said.getvalue()
    )
