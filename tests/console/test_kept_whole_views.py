"""The console never splits a conversation in a bulk delete (issue 25, items 10 and 12): the
dry run lists what it leaves out so that a conversation stays whole, and the job's page
names each session a job kept because its conversation went on, with where."""

from __future__ import annotations

import html

from django.urls import reverse

from sessions_admin import core
from sessions_admin.ledger import jobs
from tests.helpers import session_ids


def ended(source: str = "cli") -> str:
    sid = core.create_session(source=source).session_id
    core.append_message(session_id=sid, role="user", content="hello")
    core.end_session(session_id=sid, end_reason="user_exit")
    return sid


def test_the_dry_run_lists_a_conversation_that_goes_on_in_a_live_session(admin_client):
    old = ended()
    # An API continuation of the old session, live (the core's continuation of a slug).
    tip = core.create_session(
        source="api_server", parent_session_id=old, model_config={"_continued_from": old}
    ).session_id
    other = ended()

    page = admin_client.get(reverse("bulk_delete"), {"preset": "by_source", "source": "cli"})

    dry_run = page.context["dry_run"]
    assert dry_run.count == 1 and dry_run.session_ids == (other,)
    assert dict(dry_run.conversation_kept) == {old: f"its conversation continued in {tip}"}
    shown = html.unescape(page.content.decode())
    assert f"<code>{old}</code></a>, its conversation continued in {tip}" in shown


def test_the_job_page_names_a_conversation_kept_whole(admin_client, no_worker):
    parent, other = ended(), ended()
    job = jobs.create_bulk_delete_job(
        session_ids=[parent, other], include_live=False, actor="ada", reason="cleanup"
    )
    delegate = core.create_session(
        source="tool", parent_session_id=parent, model_config={"_delegate_from": parent}
    ).session_id
    jobs.run_job(job_id=job)

    assert {parent, delegate} <= session_ids() and other not in session_ids()
    page = html.unescape(admin_client.get(reverse("job_detail", args=[job])).content.decode())
    assert f"{parent}</code>, its conversation continued in {delegate}" in page
    assert f"1 skipped: kept: {parent}, its conversation continued in {delegate}" in page
