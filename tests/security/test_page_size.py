"""No page grows with what the store holds: long messages and titles are shown cut, whole elsewhere.

Before, a 100 MB message made a 105 MB session page and a 1 MB title a 2 MB list
page. Every value here is escaped six times over in HTML (``"`` is ``&quot;``), so
the pages are as large as stored text can make them.
"""

from __future__ import annotations

import random
import re
import string

import pytest
from django.contrib.auth.models import User
from django.test import Client

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.signin.roles import assign_role
from sessions_admin.store import transcripts

MB = 1_000_000
PAGE_LIMIT = 4 * MB


@pytest.fixture
def viewer() -> Client:
    client = Client()
    user = User.objects.create_user("size-viewer")
    assign_role(user, "viewer")
    client.force_login(user)
    return client


def _body(response) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def test_a_huge_message_is_shown_cut_with_a_link_to_the_whole_of_it(viewer):
    huge = '"' * (3 * MB) + "the end"
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '"' * MB}}
    sid = core.create_session(source="cli").session_id
    core.append_messages(
        session_id=sid,
        messages=[
            {"role": "user", "content": huge},
            {"role": "assistant", "content": "ok", "reasoning": "'" * MB, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "tool_name": "f", "content": "<" * MB},
        ],
    )
    page = _body(viewer.get(f"/sessions/{sid}/"))
    assert len(page.encode()) < PAGE_LIMIT / 2
    links = re.findall(r'href="([^"]*/raw/\?message=\d+&amp;field=[a-z_]+)"', page)
    assert len(links) == 4, links  # content, reasoning, tool calls, the tool's result
    wholes = set()
    for link in links:
        response = viewer.get(link.replace("&amp;", "&"))
        assert response["Content-Type"] == "text/plain; charset=utf-8"
        assert response["Content-Disposition"].startswith("inline; filename*=UTF-8''")
        wholes.add(response.content.decode())
    stored = db.fetchall(
        "SELECT content, reasoning, tool_calls FROM messages WHERE session_id = %s", [sid]
    )
    assert wholes == {
        value for row in stored for value in row if value and len(value) > transcripts.SHOWN_CHARS
    }
    assert huge in wholes


def test_a_transcript_of_long_messages_comes_in_bounded_chunks_missing_none(viewer):
    sid = core.create_session(source="cli").session_id
    core.append_messages(
        session_id=sid,
        messages=[{"role": "user", "content": f"{n} " + '"' * 60_000} for n in range(30)],
    )
    ids = [
        row[0]
        for row in db.fetchall("SELECT id FROM messages WHERE session_id = %s ORDER BY id", [sid])
    ]
    page = _body(viewer.get(f"/sessions/{sid}/"))
    assert len(page.encode()) < PAGE_LIMIT
    seen = [int(m) for m in re.findall(r'<article class="msg[^"]*" id="m(\d+)"', page)]
    assert 0 < len(seen) < len(ids)
    more = re.search(r'class="load-more" href="[^"]*" hx-get="([^"]+)"', page)
    while more:
        chunk = _body(viewer.get(more.group(1).replace("&amp;", "&"), HTTP_HX_REQUEST="true"))
        assert len(chunk.encode()) < PAGE_LIMIT
        seen += [int(m) for m in re.findall(r'<article class="msg[^"]*" id="m(\d+)"', chunk)]
        more = re.search(r'class="load-more" href="[^"]*" hx-get="([^"]+)"', chunk)
    assert seen == ids


def test_a_huge_title_is_cut_on_every_page_and_whole_in_the_raw_view(viewer):
    title = "&" * MB
    if db.vendor() == "postgresql":
        # Its unique btree index on titles holds at most 2704 bytes: as long as it gets.
        title = "&" + "".join(random.Random(1).choices(string.ascii_letters + "&", k=2600))
    sid = core.create_session(source="cli").session_id
    # The core refuses such a title; a runtime writing its own rows does not.
    db.execute("UPDATE sessions SET title = %s WHERE id = %s", [title, sid])
    core.append_message(session_id=sid, role="user", content="a word to find")
    for url in (
        "/sessions/?scope=all",
        "/sessions/?q=word",
        f"/sessions/{sid}/",
        f"/sessions/{sid}/?part=lineage",
    ):
        assert len(_body(viewer.get(url)).encode()) < 50_000, url
    page = _body(viewer.get(f"/sessions/{sid}/"))
    assert f'href="/sessions/{sid}/raw/?field=title"' in page
    assert viewer.get(f"/sessions/{sid}/raw/?field=title").content.decode() == title


def test_the_raw_view_refuses_what_it_cannot_serve(viewer):
    sid = core.create_session(source="cli").session_id
    other = core.create_session(source="cli").session_id
    core.append_message(session_id=other, role="user", content="someone else's")
    message_id = db.fetchone("SELECT id FROM messages WHERE session_id = %s", [other])[0]
    assert viewer.get(f"/sessions/{sid}/raw/?message={message_id}").status_code == 404
    assert viewer.get(f"/sessions/{sid}/raw/?message={message_id}&field=role").status_code == 400
    assert viewer.get(f"/sessions/{sid}/raw/").status_code == 400
    assert viewer.get("/sessions/nope/raw/?field=title").status_code == 404
    assert Client().get(f"/sessions/{other}/raw/?message={message_id}").status_code == 302
