"""The session list page over HTTP: access, fragments, URL round trips, bad input, escaping."""

from __future__ import annotations

import html
import re

import pytest
from django.core.cache import cache
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.routers import store_alias
from sessions_admin.store import listing

URL = "/sessions/"


@pytest.fixture(autouse=True)
def _no_cached_forks_or_choices():
    """The list caches fork ids and dropdown choices briefly; each test starts fresh."""
    cache.clear()


def _new(source: str = "cli", started_at: float = 1_700_000_000.0, **kwargs) -> str:
    return core.create_session(source=source, started_at=started_at, **kwargs).session_id


def _body(response) -> str:
    assert response.status_code == 200
    return response.content.decode()


def _row_ids(body: str) -> list[str]:
    """The sessions the table lists, in order (every role sees rows; only some see checkboxes)."""
    return [html.unescape(sid) for sid in re.findall(r'<tr [^>]*data-session-id="([^"]+)"', body)]


def _row_boxes(body: str) -> list[str]:
    return [html.unescape(sid) for sid in re.findall(r'name="ids" value="([^"]+)"', body)]


def _link(body: str, css_class: str) -> str | None:
    found = re.search(rf'<a href="([^"]+)"[^>]*class="{css_class}"', body)
    return html.unescape(found.group(1)) if found else None


def test_the_url_is_the_session_list():
    assert reverse("session_list") == URL


def test_anonymous_visitors_are_sent_to_sign_in(client):
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("role", ["viewer", "support", "admin"])
def test_every_role_can_read_the_list(signed_in, role):
    sid = _new()
    body = _body(signed_in(role).get(URL))
    assert _row_ids(body) == [sid]
    assert f'href="{reverse("session_detail", args=[sid])}"' in body


def test_an_operator_without_a_role_is_forbidden(signed_in):
    assert signed_in(None).get(URL).status_code == 403


def test_a_post_is_the_merge_button_and_goes_to_the_merge_preview(signed_in):
    response = signed_in("viewer").post(URL, {"ids": ["a", "b"], "filter": ""})
    assert response.status_code == 303
    assert response["Location"] == "/merge/preview/?ids=a&ids=b"


def test_the_full_page_has_the_filter_form_and_the_selection_form(signed_in):
    sid = _new(source="telegram")
    body = _body(signed_in("support").get(URL))
    assert "<html" in body
    assert 'class="filters" method="get"' in body
    assert 'hx-push-url="true"' in body
    assert '<button type="submit" class="primary">Apply</button>' in body
    assert 'id="selection" class="selection" method="post"' in body
    assert 'name="all_matching" value="1"' in body
    assert "data-select-all" in body
    assert 'js/selection.js"' in body
    assert '<option value="telegram">' in body  # source choices
    assert "<script>" not in body and "<script>\n" not in body  # no inline scripts
    assert re.search(r"<script(?![^>]*\bsrc=)", body) is None
    assert _row_ids(body) == [sid]
    assert _row_boxes(body) == [sid]


def test_htmx_gets_only_the_results_fragment(signed_in):
    sid = _new()
    client = signed_in("viewer")
    response = client.get(URL, headers={"HX-Request": "true"})
    body = _body(response)
    assert "<html" not in body
    assert 'class="filters"' not in body
    assert _row_ids(body) == [sid]
    assert "HX-Request" in response["Vary"]
    # A history restore (back button after a cache miss) needs the whole page.
    restore = client.get(URL, headers={"HX-Request": "true", "HX-History-Restore-Request": "true"})
    assert "<html" in _body(restore)


def test_filters_and_the_next_cursor_round_trip_through_the_url(signed_in):
    telegram = [_new("telegram", started_at=1_700_000_000.0 + n) for n in range(30)]
    _new("cli", started_at=1_800_000_000.0)
    client = signed_in("viewer")
    first = _body(client.get(URL, {"source": "telegram", "per": "25"}))
    assert _row_ids(first) == list(reversed(telegram))[:25]
    assert "30 conversations match these filters" in " ".join(first.split())
    next_url = _link(first, "next")
    assert next_url and "source=telegram" in next_url and "per=25" in next_url
    assert "after=" in next_url
    assert _link(first, "first") is None

    second = _body(client.get(next_url, headers={"HX-Request": "true"}))
    assert _row_ids(second) == list(reversed(telegram))[25:]
    assert _link(second, "next") is None
    back = _link(second, "first")
    assert back == f"{URL}?source=telegram&per=25"
    assert _row_ids(_body(client.get(back))) == list(reversed(telegram))[:25]


def test_the_selection_carries_the_current_filter(signed_in):
    _new("telegram")
    body = _body(signed_in("support").get(URL, {"source": "telegram", "sort": "cost", "q": ""}))
    assert '<input type="hidden" name="filter" value="source=telegram">' in body
    assert "Select all 1 conversations matching this filter" in " ".join(body.split())


def test_each_sort_and_search_render(signed_in):
    sid = _new("telegram", title="Needle haystack")
    core.append_message(
        session_id=sid, role="user", content="a needle in <img src=x onerror=alert(1)>"
    )
    client = signed_in("viewer")
    for sort in ("started", "activity", "messages", "tokens", "cost"):
        for direction in ("desc", "asc"):
            body = _body(client.get(URL, {"sort": sort, "dir": direction, "scope": "all"}))
            assert _row_ids(body) == [sid]
    body = _body(client.get(URL, {"q": "needle"}))
    assert "<mark>needle</mark>" in body
    assert "&lt;img src=x onerror=alert" in body
    assert "<img" not in body
    detail = reverse("session_detail", args=[sid])
    assert re.search(rf'href="{re.escape(detail)}\?around=(\d+)#m\1"', body)


@pytest.mark.parametrize(
    "query",
    [
        "sort=bogus",
        "from=2024-13-45",
        "to=not-a-date",
        "per=-5",
        "per=99999999999999999999999999",
        "source=a%00b",
        "health=nope",
        "after=%%%garbage",
        "after=WyJzdGFydGVkIiwiZGVzYyIsMWU5OTksIngiXQ",
        "q=%22%20AND%20*%20NEAR(",
        "q=%27%3B%20DROP%20TABLE%20sessions%3B%20--",
        "title=" + "x" * 3000,
    ],
)
def test_bad_parameters_give_a_message_not_an_error(signed_in, query):
    _new()
    client = signed_in("viewer")
    body = _body(client.get(f"{URL}?{query}"))
    assert (
        'class="problems" role="alert"' in body
        or "Type words to search for" in body
        or "No message matches" in body
    )
    assert len(_row_ids(_body(client.get(URL)))) == 1


def test_titles_and_fields_are_escaped(signed_in):
    sid = _new(title="<script>alert(1)</script>", user_id='"><img src=x>', model="<b>m</b>")
    body = _body(signed_in("viewer").get(URL))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<script>alert(1)</script>" not in body
    assert "<img src=x>" not in body
    assert "&lt;b&gt;m&lt;/b&gt;" in body
    assert _row_ids(body) == [sid]


def test_status_words_and_markers(signed_in):
    ended = _new(started_at=1.0)
    core.append_message(session_id=ended, role="user", content="hi")
    core.end_session(session_id=ended, end_reason="agent_close")
    branch = core.branch_session(session_id=ended).new_session_id
    body = " ".join(_body(signed_in("viewer").get(URL)).split())
    assert "closed by the agent (may be accidental)" in body
    assert ">branch<" in body and "1 branch<" in body
    assert ">live<" in body
    assert _row_ids(body) == [branch, ended]


# --- who gets a selection -------------------------------------------------------------


def test_a_viewer_gets_rows_without_checkboxes_or_selection_buttons(signed_in):
    sid = _new()
    body = _body(signed_in("viewer").get(URL))
    assert _row_ids(body) == [sid]
    assert _row_boxes(body) == []
    assert 'id="selection"' not in body
    assert "data-select-all" not in body
    assert 'name="all_matching"' not in body
    assert "Merge selected" not in body and "Delete selected" not in body
    # The table keeps its shape: one header cell per row cell.
    assert 'class="pick"' not in body
    assert body.count('<th scope="col"') == 10


@pytest.mark.parametrize(("role", "deletes"), [("support", False), ("admin", True)])
def test_operators_get_checkboxes_and_their_selection_buttons(signed_in, role, deletes):
    sid = _new()
    body = _body(signed_in(role).get(URL))
    assert _row_boxes(body) == [sid] == _row_ids(body)
    assert 'id="selection"' in body and "data-select-all" in body
    assert "Merge selected…" in body
    assert ("Delete selected…" in body) is deletes
    assert body.count('<th scope="col"') == 11


def test_an_empty_list_spans_the_table_for_each_role(signed_in):
    assert 'colspan="10"' in _body(signed_in("viewer").get(URL))
    assert 'colspan="11"' in _body(signed_in("support").get(URL))


# --- row labels -----------------------------------------------------------------------


def _label(body: str, sid: str) -> tuple[str, str]:
    """(kind, text) of the label on the row of ``sid``."""
    row = re.search(rf'<tr [^>]*data-session-id="{re.escape(sid)}".*?</tr>', body, re.S)
    assert row, sid
    found = re.search(r'<bdi class="label ([a-z-]+)"[^>]*>(.*?)</bdi>', row.group(0), re.S)
    assert found, row.group(0)
    return found.group(1), html.unescape(found.group(2))


def test_a_row_is_labelled_by_title_then_first_user_message_then_display_name(signed_in):
    titled = _new(title="Refund for order 8812", started_at=4.0)
    core.append_message(session_id=titled, role="user", content="not the label")
    asked = _new(started_at=3.0)
    core.append_message(session_id=asked, role="assistant", content="Hello, how can I help?")
    core.append_message(session_id=asked, role="user", content="My parcel never arrived")
    core.append_message(session_id=asked, role="user", content="second question")
    named = _new(started_at=2.0)
    db.execute("UPDATE sessions SET display_name = %s WHERE id = %s", ["Ada Lovelace", named])
    empty = _new(started_at=1.0)
    body = _body(signed_in("viewer").get(URL))
    assert _row_ids(body) == [titled, asked, named, empty]
    assert _label(body, titled) == ("title", "Refund for order 8812")
    assert _label(body, asked) == ("first-message", "My parcel never arrived")
    assert _label(body, named) == ("display-name", "Ada Lovelace")
    assert _label(body, empty) == ("none", "(no messages)")
    # The id stays on the row, secondary, and the label links to the session.
    assert f'<code class="sid">{asked}</code>' in body
    assert f'<a class="label-link" href="{reverse("session_detail", args=[asked])}">' in body


def test_an_undone_first_message_does_not_label_the_row(signed_in):
    sid = _new()
    core.append_message(session_id=sid, role="user", content="first try")
    core.append_message(session_id=sid, role="user", content="kept question")
    db.execute("UPDATE messages SET active = 0 WHERE content = 'first try'")
    assert _label(_body(signed_in("viewer").get(URL)), sid) == ("first-message", "kept question")


def test_the_label_looks_only_at_a_sessions_first_messages(signed_in):
    """A session of tool output is not read to its end for a user message (an index range)."""
    late = _new(started_at=2.0)
    within = _new(started_at=1.0)
    for sid, before in (
        (late, listing.FIRST_MESSAGE_SCAN),
        (within, listing.FIRST_MESSAGE_SCAN - 1),
    ):
        for n in range(before):
            core.append_message(session_id=sid, role="assistant", content=f"step {n}")
        core.append_message(session_id=sid, role="user", content="a late question")
    body = _body(signed_in("viewer").get(URL))
    assert _label(body, late) == ("none", "(no user message)")
    assert _label(body, within) == ("first-message", "a late question")


def test_a_hostile_first_message_is_one_clipped_inert_line(signed_in):
    rtl = _new(started_at=3.0)
    core.append_message(
        session_id=rtl, role="user", content="\u202egnp.exe\u202c\nline two\r\n\tthree\u2066x"
    )
    markup = _new(started_at=2.0)
    core.append_message(
        session_id=markup,
        role="user",
        content='<img src=x onerror=alert(1)>"><script>alert(2)</script>',
    )
    huge = _new(started_at=1.0)
    core.append_message(session_id=huge, role="user", content="word " * 200_000)  # 1 MB
    body = _body(signed_in("viewer").get(URL))
    assert _label(body, rtl) == ("first-message", "gnp.exe line two threex")
    assert "\u202e" not in body and "\u2066" not in body
    kind, text = _label(body, markup)
    assert text == '<img src=x onerror=alert(1)>"><script>alert(2)</script>'
    assert "<img src=x" not in body and "<script>alert(2)" not in body
    kind, text = _label(body, huge)
    assert kind == "first-message" and len(text) <= 121 and text.endswith("…")
    assert "\n" not in text
    assert len(body) < 200_000  # the megabyte stays in the store


def test_a_list_page_reads_labels_in_its_existing_queries(signed_in):
    """The first user messages come with the rows' own query: no query per row, none added."""
    for n in range(60):
        sid = _new(started_at=1_700_000_000.0 + n)
        core.append_message(session_id=sid, role="user", content=f"question {n}")
    client = signed_in("viewer")
    client.get(URL)  # warm the cached choices and fork ids
    with CaptureQueriesContext(connections[store_alias()]) as queries:
        body = _body(client.get(URL, headers={"HX-Request": "true"}))
    assert _label(body, _row_ids(body)[0]) == ("first-message", "question 59")
    reads = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip().upper().startswith(("SELECT", "WITH"))
    ]
    assert len(reads) <= LIST_PAGE_READS, reads


# The reads of a first list page of 50 rows before the row labels, on SQLite and PostgreSQL
# alike (PostgreSQL adds BEGIN, SET LOCAL jit = off and COMMIT around them: 9 round trips).
LIST_PAGE_READS = 6
