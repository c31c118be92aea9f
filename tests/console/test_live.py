"""A live session's transcript follows the runtime: the tail poll, "jump to latest" and the
segment navigator (views; the browser side is tests/browser/test_live.py)."""

from __future__ import annotations

import html
import json
import re

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from sessions_admin import core
from sessions_admin.console.html import RAW_TEXT
from sessions_admin.routers import store_alias
from tests.console.pages import detail
from tests.console.test_detail import HX, conversation_messages, link, message_ids


def tail_link(body: str) -> str | None:
    match = re.search(r'<div class="live-tail"[^>]*\shx-get="([^"]*)"', body)
    return html.unescape(match.group(1)) if match else None


def test_a_live_transcript_shown_to_its_end_polls_for_what_follows_its_last_message(signed_in):
    ref = core.create_session(source="cli").session_id
    ids = list(core.append_messages(session_id=ref, messages=conversation_messages(3)).message_ids)
    client = signed_in("viewer")
    page = client.get(detail(ref)).content.decode()
    assert tail_link(page) == f"{reverse('session_tail', args=[ref])}?after={ids[-1]}"
    assert 'hx-trigger="live-tick"' in page and "js/live.js" in page

    # Nothing new: 204, which htmx does not swap.
    nothing = client.get(tail_link(page), headers=HX)
    assert nothing.status_code == 204 and nothing.content == b""

    new = core.append_messages(session_id=ref, messages=conversation_messages(2, prefix="new"))
    answer = client.get(tail_link(page), headers=HX).content.decode()
    assert "<html" not in answer
    assert message_ids(answer) == list(new.message_ids)
    # The next poll asks after the last of them, so nothing comes twice.
    assert tail_link(answer).endswith(f"?after={new.message_ids[-1]}")
    assert client.get(tail_link(answer), headers=HX).status_code == 204


def test_nothing_new_costs_one_store_query(signed_in):
    ref = core.create_session(source="cli").session_id
    ids = list(core.append_messages(session_id=ref, messages=conversation_messages(2)).message_ids)
    client = signed_in("viewer")
    url = f"{reverse('session_tail', args=[ref])}?after={ids[-1]}"
    client.get(url, headers=HX)  # the signed-in session's own queries settle first
    with CaptureQueriesContext(connections[store_alias()]) as queries:
        assert client.get(url, headers=HX).status_code == 204
    assert len(queries.captured_queries) == 1, queries.captured_queries


def test_a_compression_meanwhile_appends_the_handoff_and_the_new_segment(signed_in):
    root = core.create_session(source="cli").session_id
    first = list(
        core.append_messages(session_id=root, messages=conversation_messages(2)).message_ids
    )
    client = signed_in("viewer")
    poll = tail_link(client.get(detail(root)).content.decode())
    assert poll.endswith(f"?after={first[-1]}")

    tip = core.rotate_for_compression(session_id=root, summary="the summary").new_session_id
    later = core.append_messages(session_id=tip, messages=conversation_messages(1, prefix="tip"))
    answer = client.get(poll, headers=HX).content.decode()
    assert 'class="handoff"' in answer and f"<code>{tip}</code>" in answer
    assert set(later.message_ids) <= set(message_ids(answer))
    assert first[-1] not in message_ids(answer)
    # The poll now follows the new segment.
    assert (
        tail_link(answer) == f"{reverse('session_tail', args=[tip])}?after={later.message_ids[-1]}"
    )


def test_polling_stops_when_the_session_ends(signed_in):
    ref = core.create_session(source="cli").session_id
    ids = list(core.append_messages(session_id=ref, messages=conversation_messages(1)).message_ids)
    client = signed_in("viewer")
    poll = tail_link(client.get(detail(ref)).content.decode())
    last = core.append_messages(session_id=ref, messages=conversation_messages(1, prefix="last"))
    core.end_session(session_id=ref, end_reason="user_exit")
    answer = client.get(poll, headers=HX).content.decode()
    assert message_ids(answer) == list(last.message_ids)
    assert tail_link(answer) is None and "live-tick" not in answer
    assert "The conversation ended" in answer
    # An ended session's page has no poller at all.
    assert tail_link(client.get(detail(ref)).content.decode()) is None
    assert ids


def test_the_tail_tells_the_page_when_the_runtime_moved_the_conversation_on(signed_in):
    """The answer of a poll that finds its segment ended carries the session-ended event, on
    which the page reloads its status line, details, lineage and actions panel; the
    transcript's end names where the conversation continues."""
    ref = core.create_session(source="telegram", session_key="tg:moved").session_id
    ids = list(core.append_messages(session_id=ref, messages=conversation_messages(2)).message_ids)
    client = signed_in("support")
    page = client.get(detail(ref)).content.decode()
    for part in ("status-line", "lineage", "meta", "session-actions"):
        tag = re.search(rf'<[a-z]+ [^>]*id="{part}"[^>]*>', page).group(0)
        assert "session-ended from:body" in tag, part
    url = tail_link(page)
    core.append_messages(session_id=ref, messages=conversation_messages(1, prefix="new"))
    grew = client.get(url, headers=HX)
    assert grew.status_code == 200 and "HX-Trigger" not in grew.headers  # still live

    fresh = core.reset_session_key(session_key="tg:moved", summary="go on").new_session_id
    ended = client.get(tail_link(grew.content.decode()), headers=HX)
    assert json.loads(ended.headers["HX-Trigger"]) == {"session-ended": {}}
    end = re.search(r'<p class="transcript-end".*?</p>', ended.content.decode(), re.S).group(0)
    assert f'href="{detail(fresh)}"' in end

    status = client.get(f"{detail(ref)}?part=status", headers=HX).content.decode()
    assert 'class="badge ended"' in status and f'href="{detail(fresh)}"' in status
    actions = client.get(f"{detail(ref)}?part=actions", headers=HX).content.decode()
    assert actions.lstrip().startswith('<section id="session-actions"')
    assert 'id="sa-undo"' not in actions and f'href="{detail(fresh)}#session-actions"' in actions
    # A viewer's page has no panel, so nothing to reload.
    viewer = signed_in("viewer")
    assert viewer.get(f"{detail(ref)}?part=actions", headers=HX).status_code == 204
    assert len(ids) == 2


@pytest.mark.parametrize(
    "query", ["", "?after=", "?after=x", "?after=1:2", "?after=-1", "?after=%00"]
)
def test_a_bad_tail_position_is_a_plain_400(signed_in, query):
    ref = core.create_session(source="cli").session_id
    response = signed_in("viewer").get(reverse("session_tail", args=[ref]) + query, headers=HX)
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")
    assert "after=1234" in response.content.decode()


def test_the_tail_of_an_unknown_session_is_404(signed_in):
    response = signed_in("viewer").get(
        reverse("session_tail", args=["nope"]) + "?after=0", headers=HX
    )
    assert response.status_code == 404


def test_the_tail_without_javascript_goes_to_the_latest_messages(signed_in):
    ref = core.create_session(source="cli").session_id
    response = signed_in("viewer").get(reverse("session_tail", args=[ref]) + "?after=0")
    assert response.status_code == 302
    assert response["Location"] == f"{detail(ref)}?at=end"


def test_jump_to_latest_shows_the_last_chunk_and_links_back(signed_in):
    ref = core.create_session(source="cli").session_id
    ids = list(
        core.append_messages(session_id=ref, messages=conversation_messages(250)).message_ids
    )
    client = signed_in("viewer")
    page = client.get(detail(ref)).content.decode()
    assert message_ids(page) == ids[:100]
    latest = link(page, "jump-latest", "href")
    assert latest == f"{detail(ref)}?at=end" and link(page, "jump-latest", "hx-get") == latest

    end = client.get(latest).content.decode()
    assert message_ids(end) == ids[150:]
    assert tail_link(end).endswith(f"?after={ids[-1]}")
    earlier = client.get(link(end, "load-earlier", "hx-get"), headers=HX).content.decode()
    assert message_ids(earlier) == ids[50:150]

    assert client.get(f"{detail(ref)}?at=start").status_code == 400


def test_the_segment_navigator_links_each_segment_start(signed_in):
    root = core.create_session(source="cli").session_id
    segments = [root]
    for n in range(14):
        core.append_messages(
            session_id=segments[-1], messages=conversation_messages(2, prefix=f"seg{n}")
        )
        segments.append(core.rotate_for_compression(session_id=segments[-1]).new_session_id)
    client = signed_in("viewer")
    page = client.get(detail(root)).content.decode()
    nav = page[
        page.index('class="segment-nav"') : page.index("</nav>", page.index('class="segment-nav"'))
    ]
    hrefs = [html.unescape(h) for h in re.findall(r'<a href="([^"]*)"', nav)]
    assert hrefs == [f"{detail(root)}?after={i}%3A0" for i in range(len(segments))]
    assert "<details>" in nav  # a long chain folds behind one control

    tenth = client.get(hrefs[9]).content.decode()
    assert "seg9 00000" in tenth and "seg8 00001" not in tenth
    assert (
        "seg8 00001"
        in client.get(link(tenth, "load-earlier", "hx-get"), headers=HX).content.decode()
    )

    single = core.create_session(source="cli").session_id
    assert 'class="segment-nav"' not in client.get(detail(single)).content.decode()


# --- the session list's activity banner ------------------------------------------------------


def activity_link(body: str) -> str:
    match = re.search(r'<div id="activity-banner"[^>]*\shx-get="([^"]*)"', body)
    return html.unescape(match.group(1))


def test_the_list_says_how_many_sessions_started_since_it_was_opened(signed_in):
    core.create_session(source="cli")
    client = signed_in("viewer")
    page = client.get(reverse("session_list") + "?source=telegram&bogus=1").content.decode()
    poll = activity_link(page)
    assert 'hx-trigger="live-tick"' in page and "js/live.js" in page
    assert client.get(poll, headers=HX).status_code == 204  # nothing started since

    for _ in range(2):
        core.create_session(source="telegram")
    with CaptureQueriesContext(connections[store_alias()]) as queries:
        answer = client.get(poll, headers=HX)
    assert len(queries.captured_queries) == 1  # bounded by time and a cap: no recount
    body = answer.content.decode()
    assert "2 sessions started since you opened this page" in body
    show = re.search(r'<a href="([^"]*)"', body).group(1)
    assert html.unescape(show) == reverse("session_list") + "?source=telegram"
    assert activity_link(body) == poll  # it keeps counting from the same moment


@pytest.mark.parametrize("since", ["", "x", "nan", "inf", "-1", "1e999"])
def test_a_bad_activity_moment_is_a_plain_400(signed_in, since):
    response = signed_in("viewer").get(reverse("session_activity"), {"since": since})
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")


def test_the_poll_and_the_navigator_keep_the_pages_view_choices(signed_in):
    root = core.create_session(source="cli").session_id
    core.append_messages(session_id=root, messages=conversation_messages(1))
    tip = core.rotate_for_compression(session_id=root).new_session_id
    client = signed_in("viewer")
    page = client.get(detail(root), {"inactive": "hide", "text": RAW_TEXT}).content.decode()
    assert tail_link(page) == (
        f"{reverse('session_tail', args=[tip])}?after=0&inactive=hide&text={RAW_TEXT}"
    )
    assert f"{detail(root)}?after=1%3A0&amp;inactive=hide&amp;text={RAW_TEXT}" in page
    new = core.append_messages(session_id=tip, messages=[{"role": "user", "content": "*hi*"}])
    answer = client.get(tail_link(page), headers=HX).content.decode()
    assert message_ids(answer) == list(new.message_ids)
    assert "<em>hi</em>" not in answer  # shown as written, like the rest of the page
