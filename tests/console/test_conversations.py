"""The conversations page (``/conversations/``)."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlparse

import pytest
from django.core.cache import cache
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.routers import responses_alias
from tests.builders import cold_start_fork

URL = "/conversations/"


@pytest.fixture(autouse=True)
def _fresh_fork_search():
    # Fork groups are cached for 30 s; every test starts from its own store.
    cache.clear()
    yield
    cache.clear()


def _rows(body: str) -> dict[str, str]:
    """slug -> its table row's HTML."""
    found = {}
    for row in re.findall(r'<tr class="conversation[^"]*">.*?</tr>', body, re.S):
        slug = re.search(r'<code class="slug">(.*?)</code>', row, re.S).group(1)
        found[slug] = row
    return found


def _next_href(body: str) -> str | None:
    match = re.search(r'<a rel="next" href="([^"]+)"', body)
    return match.group(1).replace("&amp;", "&") if match else None


def test_the_url_is_named():
    assert reverse("conversation_list") == URL


def test_it_redirects_anonymous_visitors_to_login(client):
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("role", ["viewer", "support", "admin"])
def test_every_role_can_read(signed_in, role):
    assert signed_in(role).get(URL).status_code == 200


def test_an_operator_without_a_role_is_forbidden(signed_in):
    assert signed_in(None).get(URL).status_code == 403


def test_post_is_not_allowed(signed_in):
    assert signed_in("admin").post(URL).status_code == 405


def test_a_slug_links_to_the_session_it_continues(signed_in):
    sid = core.create_session(source="api_server", title="Trip planning").session_id
    core.record_turn(response_id="resp_1", session_id=sid, conversation="trip")

    body = signed_in("viewer").get(URL).content.decode()

    row = _rows(body)["trip"]
    assert f'href="{reverse("session_detail", args=[sid])}"' in row
    assert "<code>resp_1</code>" in row
    assert "Trip planning" in row
    assert "from the latest response" not in row  # the usual case needs no note
    assert "live" in row
    assert "no forks" in row


def test_a_hermes_slug_continues_the_session_in_its_response_data(signed_in):
    sid = core.create_session(source="api_server").session_id
    alias = responses_alias()
    for name, rid, session_id in [("hermes", "r1", sid), ("lost", "r2", "sess_not_here")]:
        db.execute(
            "INSERT INTO responses (response_id, data, accessed_at) VALUES (%s, %s, 1)",
            [rid, json.dumps({"session_id": session_id})],
            alias=alias,
        )
        db.execute(
            "INSERT INTO conversations (name, response_id) VALUES (%s, %s)",
            [name, rid],
            alias=alias,
        )

    rows = _rows(signed_in("viewer").get(URL).content.decode())

    assert f'href="{reverse("session_detail", args=[sid])}"' in rows["hermes"]
    assert "from the latest response's data" in rows["hermes"]
    assert "missing from the store" not in rows["hermes"]
    assert "sess_not_here" in rows["lost"]
    assert "missing from the store" in rows["lost"]


def test_a_cold_start_fork_is_flagged_with_its_sessions(signed_in):
    forked = cold_start_fork("sidekick", 2)
    solo = core.create_session(source="api_server").session_id
    core.record_turn(response_id="solo-1", session_id=solo, conversation="solo")

    rows = _rows(signed_in("viewer").get(URL).content.decode())

    assert "forked into 2 sessions" in rows["sidekick"]
    for sid in forked:
        assert f'href="{reverse("session_detail", args=[sid])}"' in rows["sidekick"]
    assert "no forks" in rows["solo"]
    assert "forked into" not in rows["solo"]


def test_forks_only_and_the_slug_filter(signed_in):
    cold_start_fork("sidekick")
    cold_start_fork("side%car")
    sid = core.create_session(source="api_server").session_id
    for name in ("sidebar", "main"):
        core.record_turn(response_id=f"{name}-1", session_id=sid, conversation=name)
    client = signed_in("viewer")

    assert set(_rows(client.get(URL, {"forks": "1"}).content.decode())) == {"sidekick", "side%car"}
    assert set(_rows(client.get(URL, {"q": "side"}).content.decode())) == {
        "sidekick",
        "side%car",
        "sidebar",
    }
    assert set(_rows(client.get(URL, {"q": "e%c"}).content.decode())) == {"side%car"}
    assert set(_rows(client.get(URL, {"q": "bar", "forks": "1"}).content.decode())) == set()
    body = client.get(URL, {"q": "side", "forks": "1"}).content.decode()
    assert 'value="side"' in body and " checked" in body


def test_keyset_pages_follow_the_next_link(signed_in):
    sid = core.create_session(source="api_server").session_id
    names = [f"chat-{n:03d}" for n in range(120)]
    for n, name in enumerate(names):
        core.record_turn(response_id=f"r{n}", session_id=sid, conversation=name)
    client = signed_in("viewer")

    seen: list[str] = []
    url = f"{URL}?q=chat"
    while url:
        body = client.get(url).content.decode()
        seen.extend(_rows(body))
        url = _next_href(body)
        if url:
            query = parse_qs(urlparse(url).query)
            assert query["q"] == ["chat"]
            assert query["after"] == [seen[-1]]

    assert seen == names


def test_htmx_requests_get_only_the_rows(signed_in):
    sid = core.create_session(source="api_server").session_id
    core.record_turn(response_id="r1", session_id=sid, conversation="only-rows")

    response = signed_in("viewer").get(URL, headers={"HX-Request": "true"})

    body = response.content.decode()
    assert "<html" not in body and "<form" not in body
    assert body.strip().startswith('<div id="conversation-results">')
    assert "only-rows" in _rows(body)
    assert re.search(r"Fork flags as of <time[^>]*>\d\d:\d\d:\d\d</time> UTC", body)
    assert "HX-Request" in response["Vary"]


def test_htmx_history_restores_get_the_whole_page(signed_in):
    response = signed_in("viewer").get(
        URL, headers={"HX-Request": "true", "HX-History-Restore-Request": "true"}
    )
    assert "<html" in response.content.decode()


def test_the_filter_form_and_pager_work_without_javascript(signed_in):
    sid = core.create_session(source="api_server").session_id
    for n in range(60):
        core.record_turn(response_id=f"r{n}", session_id=sid, conversation=f"c{n:02d}")

    body = signed_in("viewer").get(URL).content.decode()

    assert re.search(r'<form class="filters" method="get" action="/conversations/"', body)
    assert 'hx-get="/conversations/"' in body and 'hx-push-url="true"' in body
    next_link = re.search(r'<a rel="next"[^>]*>', body).group(0)
    assert 'href="/conversations/?after=c49"' in next_link
    assert 'hx-get="/conversations/?after=c49"' in next_link


def test_untrusted_slugs_titles_sources_and_user_ids_are_escaped(signed_in):
    sid = core.create_session(
        source="<script>alert('source')</script>",
        user_id="<script>alert('user')</script>",
        title="<script>alert('title')</script>",
    ).session_id
    core.record_turn(
        response_id="<script>alert('rid')</script>",
        session_id=sid,
        conversation="<script>alert('slug')</script>",
    )

    body = signed_in("viewer").get(URL).content.decode()

    assert "<script>alert" not in body
    for what in ("source", "user", "title", "rid", "slug"):
        assert f"&lt;script&gt;alert(&#x27;{what}&#x27;)&lt;/script&gt;" in body
    body = signed_in("admin").get(URL, {"q": "<script>"}).content.decode()
    assert "<script>alert" not in body
    assert 'value="&lt;script&gt;"' in body
