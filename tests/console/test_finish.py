"""What makes the console look finished (issue 15): the brand in words, a favicon, plain 400
messages, and the export links on the session page and the session list."""

from __future__ import annotations

import html
import json
import re

from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db
from tests.builders import refund_lineage


def _hrefs(body: str, css_class: str) -> list[str]:
    """The hrefs of the ``<a>`` elements whose class list holds ``css_class``."""
    found = []
    for tag in re.findall(r"<a\s[^>]*>", body):
        classes = re.search(r'class="([^"]*)"', tag)
        href = re.search(r'href="([^"]*)"', tag)
        if classes and href and css_class in classes.group(1).split():
            found.append(html.unescape(href.group(1)))
    return found


def _streamed(response) -> str:
    return b"".join(response.streaming_content).decode("utf-8")


def test_the_brand_is_in_words_on_every_page_title_and_the_header(signed_in, client):
    page = client.get(reverse("login")).content.decode()
    assert "<title>Sign in · Sessions Admin</title>" in page
    assert "sessions_admin" not in page
    ids = refund_lineage()
    signed_in("admin")
    for url in (
        reverse("home"),
        reverse("session_list"),
        reverse("session_detail", args=[ids["tip"]]),
        reverse("trash"),
        reverse("audit_log"),
        reverse("job_list"),
        "/no-such-page/",
    ):
        body = client.get(url).content.decode()
        assert re.search(r"<title>[^<]*Sessions Admin</title>", body), url
        assert re.search(r'<a class="brand"[^>]*>.*Sessions Admin</a>', body), url
        assert "sessions_admin" not in body, url


def test_the_favicon_answers_at_the_root_and_where_pages_link_it(client):
    page = client.get(reverse("login")).content.decode()
    icon = re.search(r'<link rel="icon" href="([^"]+)" type="image/svg\+xml">', page)
    assert icon, "the base template links an icon"
    linked = client.get(icon.group(1))
    assert linked.status_code == 200
    assert b"<svg" in b"".join(linked.streaming_content)
    root = client.get("/favicon.ico")  # what browsers ask for on their own, before sign-in
    assert root.status_code == 200
    assert root["Content-Type"] in {"image/x-icon", "image/vnd.microsoft.icon"}
    assert b"".join(root.streaming_content)[:4] == b"\x00\x00\x01\x00"  # an ICO file


def test_a_transcript_request_without_a_position_says_so_in_plain_text(signed_in):
    client = signed_in("viewer")
    session_id = core.create_session(source="cli").session_id
    response = client.get(reverse("session_transcript", args=[session_id]))
    assert response.status_code == 400
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    text = response.content.decode()
    assert "after=0:1234" in text  # an example the reader can follow, shown as written
    assert reverse("session_detail", args=[session_id]) in text
    bad = client.get(reverse("session_transcript", args=[session_id]) + "?after=nonsense")
    assert bad.status_code == 400 and bad["Content-Type"].startswith("text/plain")
    assert "after=0:1234" in bad.content.decode()
    raw = client.get(reverse("session_raw", args=[session_id]) + "?field=content")
    assert raw.status_code == 400 and raw["Content-Type"].startswith("text/plain")


def test_an_export_request_without_a_selection_says_so_in_plain_text(signed_in):
    client = signed_in("viewer")
    response = client.get(reverse("export_sessions"))
    assert response.status_code == 400
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert "session=ID" in response.content.decode()


def test_the_session_page_links_its_exports_and_they_download(signed_in):
    ids = refund_lineage()
    client = signed_in("viewer")
    body = client.get(reverse("session_detail", args=[ids["tip"]])).content.decode()
    links = _hrefs(body, "button")
    export = reverse("export_session", args=[ids["tip"]])
    expected = [
        f"{export}?format=jsonl",
        f"{export}?format=markdown",
        f"{export}?scope=lineage&format=jsonl",
        f"{export}?scope=lineage&format=markdown",
    ]
    assert all(link in links for link in expected), links

    one = client.get(expected[0])
    assert one.status_code == 200
    sessions = [
        json.loads(line)["session"]["id"]
        for line in _streamed(one).splitlines()
        if json.loads(line)["type"] == "session"
    ]
    assert sessions == [ids["tip"]]
    lineage = client.get(expected[3])
    assert lineage.status_code == 200
    assert lineage["Content-Type"].startswith("text/markdown")
    text = _streamed(lineage)
    assert all(session_id in text for session_id in (ids["root"], ids["tip"], ids["branch"]))


def _delegate_of(session_id: str) -> str:
    return db.fetchone(
        "SELECT id FROM sessions WHERE parent_session_id = %s AND source = 'tool'", [session_id]
    )[0]


def test_the_session_list_exports_what_its_filters_match(signed_in):
    ids = refund_lineage()
    other = core.create_session(source="cli", title="Someone else").session_id
    client = signed_in("viewer")

    unfiltered = client.get(reverse("session_list")).content.decode()
    assert _hrefs(unfiltered, "button") == []  # the whole store: filter first
    assert "Filter the list to export" in unfiltered

    body = client.get(reverse("session_list") + "?source=telegram&scope=all").content.decode()
    links = [link for link in _hrefs(body, "button") if "format=" in link]
    assert len(links) == 2, links
    response = client.get(next(link for link in links if "format=jsonl" in link))
    assert response.status_code == 200
    exported = {
        record["session"]["id"]
        for record in map(json.loads, _streamed(response).splitlines())
        if record["type"] == "session"
    }
    # Every segment of each conversation the list shows (issue 25, item 14): the telegram
    # sessions and the root's delegate (source tool) with them; never the cli one.
    listed = set(re.findall(r'href="/sessions/([^/"]+)/"', body))
    delegate = _delegate_of(ids["root"])
    assert exported == {ids["root"], ids["tip"], ids["branch"], delegate}
    assert exported - {delegate} <= listed
    assert other not in exported
