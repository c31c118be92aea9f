"""The session list page over HTTP: access, fragments, URL round trips, bad input, escaping."""

from __future__ import annotations

import html
import re
import threading

import pytest
from django.core.cache import cache
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.routers import store_alias
from sessions_admin.store import cached, listing
from sessions_admin.store.listing import fulltext_postgresql
from tests.builders import fresh_cache  # noqa: F401 - an autouse fixture

URL = "/sessions/"


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
    assert re.search(rf'href="{re.escape(detail)}\?around=(\d+)&amp;q=needle#m\1"', body)


@pytest.mark.parametrize(
    "query",
    [
        "sort=bogus",
        "from=2024-13-45",
        "to=not-a-date",
        "per=-5",
        "per=99999999999999999999999999",
        "per=%C2%B3",  # "³": a digit to str.isdigit, not to int() (the schema fuzzer's 500)
        "per=%D9%A5",  # an Arabic-Indic five
        "source=a%00b",
        "health=nope",
        "after=%%%garbage",
        "after=WyJzdGFydGVkIiwiZGVzYyIsMWU5OTksIngiXQ",
        "q=%22%20AND%20*%20NEAR(",
        "q=%27%3B%20DROP%20TABLE%20sessions%3B%20--",
        "q=-needle",
        "q=-%22a%20phrase%22%20-word",
        "q=%22%22%22",
        "q=" + "NEAR(x%20*%20^y%20col:z)%20" * 30,
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
        or "Sessions of this user" in body
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
# alike (PostgreSQL sends them in three round trips: the round-trip test below).
LIST_PAGE_READS = 6


# ---------------------------------------------------------------------------
# Search results: grouped by session


def _say(session_id: str, *texts: str, role: str = "user", **fields) -> list[int]:
    return list(
        core.append_messages(
            session_id=session_id,
            messages=[{"role": role, "content": text, **fields} for text in texts],
        ).message_ids
    )


def test_search_shows_one_entry_per_session_with_its_count_and_best_snippets(signed_in):
    busy = _new("telegram", user_id="u-777")
    ids = _say(busy, "Where is my parcel?", *[f"parcel update {n}" for n in range(6)])
    quiet = _new("cli", title="Quiet one")
    _say(quiet, "one parcel here")
    body = _body(signed_in("viewer").get(URL, {"q": "parcel"}))
    entries = body.split('<li class="hit-session">')[1:]
    assert len(entries) == 2  # the quiet session's hit is the newest: it comes first
    assert "Quiet one" in entries[0] and "1 matching message<" in entries[0]
    assert entries[1].count('<li class="hit">') == 3
    assert "7 matching messages" in entries[1] and "4 more in this session" in entries[1]
    # Labelled by the first user message when the session has no title.
    assert "Where is my parcel?" in entries[1] and "u-777" in entries[1]
    detail = reverse("session_detail", args=[busy])
    more = f'href="{detail}?around={ids[-1]}&amp;q=parcel#m{ids[-1]}"'
    assert f'<a class="more-hits" {more}' in body


def test_a_tool_hit_shows_the_tool_and_words_not_json(signed_in):
    sid = _new()
    core.append_messages(
        session_id=sid,
        messages=[
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "web_search", "arguments": '{"query": "zebra facts"}'},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_name": "web_search",
                "tool_call_id": "call_9",
                "content": '{"results": [{"title": "Zebra", "url": "https://example.org"}]}',
            },
        ],
    )
    body = _body(signed_in("viewer").get(URL, {"q": "zebra"}))
    assert "calls web_search" in body and "result of web_search" in body
    snippets = re.findall(r'class="snippet"[^>]*>(.*?)</a>', body, re.S)
    assert len(snippets) == 2
    for snippet in snippets:
        assert "{" not in snippet and "&quot;" not in snippet and "call_9" not in snippet
    assert any("query: <mark>zebra</mark> facts" in s for s in snippets)
    assert any("title: <mark>Zebra</mark>" in s for s in snippets)


def test_phrase_and_exclusion_over_http(signed_in):
    sid = _new()
    _say(sid, "red apple pie")
    _say(_new(), "apple and red wine")
    client = signed_in("viewer")
    assert _body(client.get(URL, {"q": '"red apple"'})).count('class="hit-session"') == 1
    assert _body(client.get(URL, {"q": "apple -wine"})).count('class="hit-session"') == 1
    body = _body(client.get(URL, {"q": "-apple"}))
    assert "only excludes words" in body and 'class="hit-session"' not in body


def test_search_lists_sessions_of_a_user_or_chat_above_the_hits(signed_in):
    sid = _new("telegram", user_id="Customer_42", title="Refund talk")
    other = _new("telegram", chat_id="customer_42")
    _say(_new(), "customer_42 was mentioned here")
    body = _body(signed_in("viewer").get(URL, {"q": "customer_42"}))
    names = body.index("Sessions of this user, chat or name")
    assert names < body.index('class="hit-session"')
    for session_id in (sid, other):
        assert f'href="{reverse("session_detail", args=[session_id])}"' in body
    assert "user id matches" in body and "chat id matches" in body


def test_the_name_box_shows_a_person_once_with_their_sessions(signed_in):
    ids = [_new("telegram", user_id="u-harriet", started_at=1_700_000_000.0 + n) for n in range(4)]
    for sid in ids:
        db.execute("UPDATE sessions SET display_name = %s WHERE id = %s", ["Harriet Quill", sid])
    body = _body(signed_in("viewer").get(URL, {"q": "Harriet Quill"}))
    box = body[
        body.index('class="name-matches"') : body.index(
            "</section>", body.index('class="name-matches"')
        )
    ]
    assert box.count("<li") == 1
    assert 'data-sessions="4"' in box
    assert f'href="{reverse("session_detail", args=[ids[-1]])}"' in box
    link = html.unescape(re.search(r'class="person-sessions" href="([^"]+)"', box).group(1))
    assert link == reverse("session_list") + "?user=u-harriet&source=telegram"


# ---------------------------------------------------------------------------
# PostgreSQL round trips (issue 16)


class _RoundTrips:
    """Messages one alias sends the server and waits for: every statement Django runs
    (execute_wrapper), and the BEGIN and COMMIT/ROLLBACK psycopg sends around a transaction."""

    def __init__(self, alias: str, monkeypatch) -> None:
        self.connection = connections[alias]
        self.sent: list[str] = []
        connection = self.connection
        for name, label in (("_commit", "COMMIT"), ("_rollback", "ROLLBACK")):
            original = getattr(connection, name)
            monkeypatch.setattr(connection, name, self._counting(original, label))
        original_autocommit = connection._set_autocommit

        def set_autocommit(autocommit: bool) -> None:
            if not autocommit:
                self.sent.append("BEGIN")
            original_autocommit(autocommit)

        monkeypatch.setattr(connection, "_set_autocommit", set_autocommit)

    def _counting(self, original, label: str):
        def counted(*args, **kwargs):
            self.sent.append(label)
            return original(*args, **kwargs)

        return counted

    def __call__(self, execute, sql, params, many, context):
        self.sent.append(sql)
        return execute(sql, params, many, context)


@pytest.mark.skipif(
    connections[store_alias()].vendor != "postgresql", reason="round trips: SQLite is in process"
)
@pytest.mark.parametrize("htmx", [False, True], ids=["whole page", "results fragment"])
def test_a_list_page_on_postgresql_is_at_most_three_round_trips_to_the_store(
    signed_in, monkeypatch, htmx, settings
):
    # Rows with messages, and a compressed conversation (its tip's figures and its last
    # message over the chain): every kind of figure a first page reads.
    for n in range(60):
        sid = _new(started_at=1_700_000_000.0 + n)
        core.append_message(session_id=sid, role="user", content=f"question {n}")
    root = _new(started_at=1_800_000_000.0)
    core.append_message(session_id=root, role="user", content="before compression")
    tip = core.rotate_for_compression(session_id=root, summary="summary").new_session_id
    core.append_message(session_id=tip, role="user", content="after compression")
    client = signed_in("viewer")
    client.get(URL)  # a first request opens the connections and warms the fork ids
    # The choices gone from the cache, as a dashboard runs: they are computed in the
    # background (issue 16), never among the page's round trips.
    settings.SESSIONS_ADMIN_COLD_FIGURES_INLINE = False
    cache.delete(cached.store_key("listing:choices"))
    trips = _RoundTrips(store_alias(), monkeypatch)
    headers = {"HX-Request": "true"} if htmx else {}
    with connections[store_alias()].execute_wrapper(trips):
        body = _body(client.get(URL, headers=headers))
    rows = _row_ids(body)
    assert rows[0] == root and len(rows) == 50
    assert len(trips.sent) <= 3, trips.sent
    for thread in threading.enumerate():
        if thread.name.startswith("refresh "):
            thread.join(timeout=30)


@pytest.mark.skipif(
    connections[store_alias()].vendor != "postgresql", reason="PostgreSQL connection settings"
)
def test_postgresql_connections_start_in_utc_with_jit_off():
    """Set in the startup message: Django sends no SET TIME ZONE of its own on connecting."""
    connection = connections[store_alias()]
    raw = connection.get_new_connection(connection.get_connection_params())  # before Django's init
    try:
        assert raw.info.parameter_status("TimeZone") == "UTC"
        assert raw.execute("SHOW jit").fetchone()[0] == "off"
    finally:
        raw.close()


@pytest.mark.skipif(
    connections[store_alias()].vendor != "postgresql", reason="PostgreSQL's GIN reads"
)
def test_a_word_the_statistics_know_is_read_through_the_index_once(signed_in, monkeypatch):
    """Each read of a word through the GIN index costs its whole list of messages: a word in
    PostgreSQL's most-common list (not common enough to walk) gets a first window sized to
    hold the page and the count's matches, so one read gives both, with the same result."""
    for n in range(70):
        sid = _new(started_at=1_700_000_000.0 + n)
        _say(sid, f"parcel number {n}", "nothing here", f"another parcel {n}")
    client = signed_in("viewer")
    monkeypatch.setattr(
        fulltext_postgresql, "SEARCH_WINDOW", 16
    )  # the first window covers a few ids
    unknown = listing.search(listing.parse({"q": "parcel", "per": "25"}).filters)
    through_index = _body(client.get(URL, {"q": "parcel", "per": "25"}))
    monkeypatch.setattr(fulltext_postgresql, "word_shares", lambda: {"parcel": 0.05})
    with CaptureQueriesContext(connections[store_alias()]) as queries:
        known = listing.search(listing.parse({"q": "parcel", "per": "25"}).filters)
    reads = [q["sql"] for q in queries.captured_queries if "@@" in q["sql"] and "JOIN" in q["sql"]]
    assert len(reads) == 1, reads
    assert (
        (known.count, known.count_capped) == (unknown.count, unknown.count_capped) == (140, False)
    )
    assert [h.session_id for h in known.hits] == [h.session_id for h in unknown.hits]
    page = _body(client.get(URL, {"q": "parcel", "per": "25"}))
    hit = r'<li class="hit-session">.*?href="([^"?]+)'
    assert re.findall(hit, page, re.S) == re.findall(hit, through_index, re.S)
    assert len(re.findall(hit, page, re.S)) == 25


@pytest.mark.skipif(
    connections[store_alias()].vendor != "postgresql", reason="PostgreSQL's common-word walk"
)
def test_a_common_word_read_in_id_order_finds_the_same_page_and_count(signed_in, monkeypatch):
    """A word in a large share of messages skips the GIN index's list and takes the count
    from the page's own walk: the same sessions, hits and count as through the index."""
    for n in range(70):
        sid = _new(started_at=1_700_000_000.0 + n)
        _say(sid, f"parcel number {n}", "nothing here", f"another parcel {n}")
    client = signed_in("viewer")
    through_index = _body(client.get(URL, {"q": "parcel", "per": "25"}))
    monkeypatch.setattr(fulltext_postgresql, "word_shares", lambda: {"parcel": 0.6})
    page = listing.search(listing.parse({"q": "parcel", "per": "25"}).filters)
    assert (page.count, page.count_capped) == (140, False)
    walked = _body(client.get(URL, {"q": "parcel", "per": "25"}))

    def sessions(body: str) -> list[str]:
        return re.findall(r'<li class="hit-session">.*?href="([^"?]+)', body, re.S)

    assert len(sessions(through_index)) == 25
    assert sessions(walked) == sessions(through_index)
    assert walked.count('<li class="hit">') == through_index.count('<li class="hit">')


def _csv_rows(response) -> list[list[str]]:
    import csv
    import io

    assert response.status_code == 200 and response.streaming
    text = b"".join(response.streaming_content).decode()
    return list(csv.reader(io.StringIO(text)))


def test_a_search_exports_every_page_of_its_results_as_csv(signed_in, monkeypatch):
    from sessions_admin.console.views import list_export

    matching = []
    for n in range(7):
        sid = _new("telegram", user_id=f"u-{n}", started_at=1_700_000_000.0 + n)
        _say(sid, f"the parcel {n} was lost")
        matching.append(sid)
    other = _new("cli")
    _say(other, "the parcel arrived")  # excluded by the filter below
    _say(_new("telegram"), "nothing to see")
    monkeypatch.setattr(list_export.listing, "PAGE_SIZES", (3,))  # walked three at a time
    pages = []
    search = listing.search
    monkeypatch.setattr(listing, "search", lambda *a: pages.append(a) or search(*a))
    client = signed_in("viewer")
    body = _body(client.get(URL, {"q": "parcel", "source": "telegram"}))
    link = html.unescape(
        re.search(r'class="button secondary small search-export" href="([^"]+)"', body).group(1)
    )
    assert link.startswith(reverse("session_export") + "?")
    header, *rows = _csv_rows(client.get(link))
    assert header[:2] == ["session_id", "title"]
    assert sorted(r[0] for r in rows) == sorted(matching)  # every page, the filter kept
    assert len(pages) >= 3 + 1  # the page itself, then three pages of three at most
    first = dict(zip(header, rows[0], strict=True))
    assert "parcel" in first["snippet"] and "\ue000" not in first["snippet"]
    assert first["first_match_url"].startswith(
        reverse("session_detail", args=[first["session_id"]])
    )
