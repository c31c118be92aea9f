"""The overview page (``/``) and its health panel (``/health/``)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.core.cache import cache
from django.urls import reverse

from sessions_admin import core
from sessions_admin.console.views.home import computed_ago
from tests.builders import (
    dangling_compression,
    forked_conversation,
    fresh_cache,  # noqa: F401 - an autouse fixture
)
from tests.console.conftest import PASSWORD
from tests.console.test_merge_views import merge_via_views
from tests.helpers import session


def test_it_redirects_anonymous_visitors_to_login(client):
    for name in ("home", "health_panel"):
        response = client.get(reverse(name))
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


def test_it_signs_in_with_a_password_and_shows_the_overview(client, operator_factory):
    operator_factory("viewer", "vera")
    ref = core.create_session(source="telegram", title="<script>alert(1)</script>").session_id
    response = client.post(reverse("login"), {"username": "vera", "password": PASSWORD})
    assert response.status_code == 302
    page = client.get(reverse("home"))
    body = page.content.decode()
    assert "signed in as <strong>vera</strong> (viewer)" in body
    assert ref in body  # among the recently started sessions
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<script>alert(1)</script>" not in body


def test_a_wrong_password_is_refused(client, operator_factory):
    operator_factory("viewer", "vera")
    response = client.post(reverse("login"), {"username": "vera", "password": "nope"})
    assert response.status_code == 200
    assert "didn't match" in response.content.decode()
    assert client.get(reverse("home")).status_code == 302


@pytest.mark.parametrize("role", ["viewer", "support", "admin"])
@pytest.mark.parametrize("name", ["home", "health_panel"])
def test_every_role_can_read(signed_in, role, name):
    assert signed_in(role).get(reverse(name)).status_code == 200


@pytest.mark.parametrize("name", ["home", "health_panel"])
def test_an_operator_without_a_role_is_forbidden(signed_in, name):
    assert signed_in(None).get(reverse(name)).status_code == 403


@pytest.mark.parametrize("name", ["home", "health_panel"])
def test_post_is_not_allowed(signed_in, name):
    assert signed_in("admin").post(reverse(name)).status_code == 405


def test_sign_out_needs_post(signed_in):
    client = signed_in("viewer")
    client.post(reverse("logout"))
    assert client.get(reverse("home")).status_code == 302


def test_it_counts_sessions_by_source_and_status_and_the_totals(signed_in):
    for _ in range(3):
        core.create_session(source="telegram")
    ended = core.create_session(source="discord").session_id
    core.append_messages(session_id=ended, messages=[{"role": "user", "content": "x"}] * 2)
    core.end_session(session_id=ended, end_reason="idle_expiry")

    body = signed_in("viewer").get(reverse("home")).content.decode()

    by_source = _section(body, "by-source-heading")
    assert _row_count(by_source, "telegram") == "3"
    assert _row_count(by_source, "discord") == "1"
    by_status = _section(body, "by-status-heading")
    assert _row_count(by_status, "live") == "3"
    assert _row_count(by_status, "expired after being idle") == "1"
    stats = _section(body, 'aria-label="Store totals"')
    assert re.search(r'stat-value">4</span> <span class="stat-label">sessions', stats)
    assert re.search(r'stat-value">2</span> <span class="stat-label">messages', stats)
    assert re.search(r"Counts computed <time[^>]*>just now</time>, at \d\d:\d\d:\d\d UTC", body)


def test_the_chart_has_one_bar_per_day_and_a_table_alternative(signed_in):
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    core.create_session(source="cli", started_at=today.timestamp() + 1)
    core.create_session(source="cli", started_at=today.timestamp() + 2)
    core.create_session(source="cli", started_at=(today - dt.timedelta(days=45)).timestamp())

    body = signed_in("viewer").get(reverse("home")).content.decode()

    svg = re.search(r"<svg class=\"day-chart\".*?</svg>", body, re.S).group(0)
    assert len(re.findall(r'<rect class="bar"', svg)) == 30
    assert len(re.findall(r"<title>", svg)) == 30
    assert f"<title>{today:%a} {today.day} {today:%b %Y}: 2 sessions started</title>" in svg
    assert 'role="img"' in svg
    hidden = re.search(r'<table class="visually-hidden">.*?</table>', body, re.S).group(0)
    assert len(re.findall(r"<tr><td>", hidden)) == 30
    assert f"<tr><td>{today:%Y-%m-%d}</td><td>2</td></tr>" in hidden


def test_the_health_panel_loads_after_the_page(signed_in):
    dangling_compression()
    body = signed_in("viewer").get(reverse("home")).content.decode()
    loader = re.search(r'<div id="health-panel"[^>]*>.*?</div>', body, re.S).group(0)
    assert f'hx-get="{reverse("health_panel")}"' in loader
    assert 'hx-trigger="load"' in loader
    assert f'href="{reverse("health_panel")}"' in loader  # for browsers without JS
    assert "?health=dangling_compression" not in body  # not computed with the page


def test_the_health_panel_counts_and_links_each_check(signed_in):
    dangling = dangling_compression()
    for n in range(2):  # a cold-start fork: one slug, two unlinked sessions
        sid = core.create_session(source="api_server", started_at=1000.0 + n).session_id
        core.append_message(session_id=sid, role="user", content="hi")
        core.record_turn(response_id=f"r{n}", session_id=sid, conversation="sidekick")

    response = signed_in("viewer").get(reverse("health_panel"), headers={"HX-Request": "true"})

    body = response.content.decode()
    assert "<html" not in body and "<h1>" not in body
    assert body.strip().startswith('<section id="health-panel"')
    link = f"{reverse('session_list')}?health=dangling_compression"
    dangling_item = _check(body, "dangling_compression")
    assert f'href="{link}"' in dangling_item
    assert '<span class="check-count">1</span>' in dangling_item
    forks_item = _check(body, "forks")
    assert '<span class="check-count">2</span>' in forks_item
    assert "in 1 fork group<" in forks_item
    for kind in ("missing_parent", "empty", "counter_mismatch"):
        assert f'href="{reverse("session_list")}?health={kind}"' in body
    assert '<span class="check-count">0</span>' in _check(body, "missing_parent")
    assert re.search(r"Computed <time[^>]*>just now</time>, at \d\d:\d\d:\d\d UTC", body)
    assert dangling not in body  # counts, not lists


def test_without_htmx_the_health_url_is_the_whole_overview_with_the_panel(signed_in):
    dangling_compression()
    body = signed_in("viewer").get(reverse("health_panel")).content.decode()
    assert "<html" in body and "<h1>Overview</h1>" in body
    assert '<section id="health-panel"' in body
    assert 'hx-trigger="load"' not in body
    assert "?health=dangling_compression" in body


def test_htmx_requests_for_the_overview_get_only_the_counts(signed_in):
    core.create_session(source="cli")
    response = signed_in("viewer").get(reverse("home"), headers={"HX-Request": "true"})
    body = response.content.decode()
    assert "<html" not in body
    assert body.strip().startswith('<div id="overview"')
    assert '<svg class="day-chart"' in body
    assert "HX-Request" in response["Vary"]


def test_untrusted_sources_and_end_reasons_are_escaped(signed_in):
    sid = core.create_session(source="<script>alert('src')</script>", user_id="<b>u</b>").session_id
    core.end_session(session_id=sid, end_reason="<script>alert('why')</script>")

    body = signed_in("viewer").get(reverse("home")).content.decode()

    assert "<script>alert" not in body
    assert "&lt;script&gt;alert(&#x27;src&#x27;)&lt;/script&gt;" in body
    assert "&lt;script&gt;alert(&#x27;why&#x27;)&lt;/script&gt;" in body
    assert "&lt;b&gt;u&lt;/b&gt;" in body


def test_counts_are_cached_briefly(signed_in):
    client = signed_in("viewer")
    core.create_session(source="telegram")
    assert (
        _row_count(
            _section(client.get(reverse("home")).content.decode(), "by-source-heading"), "telegram"
        )
        == "1"
    )
    core.create_session(source="telegram")
    body = client.get(reverse("home")).content.decode()
    assert _row_count(_section(body, "by-source-heading"), "telegram") == "1"
    cache.clear()
    body = client.get(reverse("home")).content.decode()
    assert _row_count(_section(body, "by-source-heading"), "telegram") == "2"


# --- helpers --------------------------------------------------------------------------------


def _section(body: str, marker: str) -> str:
    start = body.index(marker)
    return body[start : body.index("</section>", start)]


def _row_count(table: str, label: str) -> str | None:
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        if len(cells) == 2 and re.sub(r"<[^>]+>", "", cells[0]).strip().startswith(label):
            return cells[1].strip()
    return None


def _check(body: str, kind: str) -> str:
    match = re.search(rf'<li class="check[^"]*">\s*<a [^>]*data-check="{kind}".*?</li>', body, re.S)
    assert match, kind
    return match.group(0)


def test_a_read_only_store_says_so_on_every_page(rf, settings):
    from django.contrib.auth.models import AnonymousUser
    from django.template.loader import render_to_string

    from sessions_admin.console.context_processors import operator

    request = rf.get("/")
    request.user = AnonymousUser()
    assert operator(request)["store_read_only"] is False
    settings.SESSIONS_ADMIN_READ_ONLY = True
    assert operator(request)["store_read_only"] is True
    page = render_to_string("base.html", {"store_read_only": True}, request=request)
    assert "attached read-only" in page


def test_a_writable_store_shows_no_read_only_banner(signed_in):
    assert "attached read-only" not in signed_in("viewer").get(reverse("home")).content.decode()


def test_the_health_panel_counts_the_stale_writer_checks_and_lists_their_sessions(signed_in):
    from sessions_admin.core import clock, db

    # Two live sessions for one chat, as two runtime processes starting it at once.
    live = core.create_session(source="telegram", session_key="chat:7").session_id
    db.execute(
        "INSERT INTO sessions (id, source, session_key, started_at, message_count, "
        "tool_call_count) VALUES ('racer', 'telegram', 'chat:7', %s, 0, 0)",
        [clock.now()],
    )
    # A message written after its session ended (a stale id).
    stale = core.create_session(source="cli").session_id
    core.end_session(session_id=stale, end_reason="user_exit")
    db.execute(
        "INSERT INTO messages (session_id, role, content, timestamp, active, compacted) "
        "VALUES (%s, 'user', 'late', %s, 1, 0)",
        [stale, clock.now() + 3600],
    )
    db.execute("UPDATE sessions SET message_count = 1 WHERE id = %s", [stale])
    # A slug left on a session a reset ended, with nothing live after it.
    stranded = core.create_session(source="api_server").session_id
    core.record_turn(response_id="r-stranded", session_id=stranded, conversation="helpdesk")
    db.execute(
        "UPDATE sessions SET ended_at = %s, end_reason = 'session_reset' WHERE id = %s",
        [clock.now(), stranded],
    )
    client = signed_in("viewer")

    body = client.get(reverse("health_panel"), headers={"HX-Request": "true"}).content.decode()

    expected = {
        "several_live": {live, "racer"},
        "written_after_end": {stale},
        "stranded_conversation": {stranded},
    }
    for kind, ids in expected.items():
        item = _check(body, kind)
        assert f'<span class="check-count">{len(ids)}</span>' in item, kind
        assert f'href="{reverse("session_list")}?health={kind}"' in item
        listed = client.get(reverse("session_list"), {"health": kind, "scope": "all"})
        assert listed.status_code == 200
        page = listed.content.decode()
        everyone = {live, "racer", stale, stranded}
        assert {sid for sid in everyone if f'data-session-id="{sid}"' in page} == ids, kind


# --- how old the figures are, and refreshed after an operator's action -------------------------

HX = {"HX-Request": "true"}


def _computed_at(body: str, marker: str) -> dt.datetime:
    """The <time datetime> of the figures block that starts at ``marker``."""
    block = body[body.index(marker) :]
    match = re.search(r'computed <time datetime="([^"]+)" data-ago>([^<]+)</time>', block, re.I)
    assert match, f"no computed time after {marker}"
    return dt.datetime.fromisoformat(match.group(1))


def test_each_cached_figure_block_says_how_long_ago_it_was_computed(signed_in, monkeypatch):
    from sessions_admin.console.views import home

    client = signed_in("viewer")
    core.create_session(source="cli")
    client.get(reverse("home"))
    client.get(reverse("health_panel"), headers=HX)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=20)
    monkeypatch.setattr(home, "_now", lambda: later)
    body = client.get(reverse("health_panel")).content.decode()  # the overview with the panel

    overview = body[body.index('<div id="overview"') :]
    assert re.search(
        r"Counts computed <time datetime=\"[^\"]+\" data-ago>(19|20|21) s ago<", overview
    )
    panel = body[body.index('<section id="health-panel"') :]
    assert re.search(r"Computed <time datetime=\"[^\"]+\" data-ago>(19|20|21) s ago<", panel)
    assert 'src="/static/js/computed_ago.js"' in body


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0, "just now"),
        (1, "just now"),
        (40, "40 s ago"),
        (119, "119 s ago"),
        (120, "2 min ago"),
        (7199, "119 min ago"),
        (7200, "2 h ago"),
        (-5, "just now"),
    ],
)
def test_the_age_in_words(seconds, words):
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert computed_ago(at, at + dt.timedelta(seconds=seconds)) == words


def test_after_a_merge_the_overview_and_health_panel_show_new_figures_at_once(signed_in):
    ids = forked_conversation()
    client = signed_in("support")
    # The figures are cached: the overview and the panel show three forks of one slug.
    home_before = client.get(reverse("home")).content.decode()
    panel_before = client.get(reverse("health_panel"), headers=HX).content.decode()
    assert '<span class="check-count">3</span>' in _check(panel_before, "forks")
    assert _row_count(_section(home_before, "by-status-heading"), "merged") is None
    assert client.get(reverse("health_panel"), headers=HX).content.decode() == panel_before

    response = merge_via_views(client, ids, reason="one customer, three cold starts")

    assert response.status_code == 302
    assert [session(sid)["end_reason"] for sid in ids[1:]] == ["merged", "merged"]
    assert core.find_fork_groups() == []  # what /forks/ shows
    panel_after = client.get(reverse("health_panel"), headers=HX).content.decode()
    assert '<span class="check-count">0</span>' in _check(panel_after, "forks")
    assert _computed_at(panel_after, "health-panel") > _computed_at(panel_before, "health-panel")
    home_after = client.get(reverse("home")).content.decode()
    assert _row_count(_section(home_after, "by-status-heading"), "merged") == "2"
    assert _computed_at(home_after, 'id="overview"') > _computed_at(home_before, 'id="overview"')


def test_the_figures_reload_on_an_event_and_when_the_page_is_back_in_view(signed_in):
    client = signed_in("viewer")
    body = client.get(reverse("health_panel")).content.decode()
    overview = re.search(r'<div id="overview"[^>]*>', body).group(0)
    panel = re.search(r'<section id="health-panel"[^>]*>', body).group(0)
    for element, url in ((overview, reverse("home")), (panel, reverse("health_panel"))):
        assert f'hx-get="{url}"' in element
        assert 'hx-swap="outerHTML"' in element
        trigger = re.search(r'hx-trigger="([^"]+)"', element).group(1)
        assert "figures-stale from:body" in trigger  # static/js/computed_ago.js
        assert "session-changed from:body" in trigger and "jobFinished from:body" in trigger
    # What those requests get back is the element itself, so it keeps listening.
    fragment = client.get(reverse("home"), headers=HX).content.decode().strip()
    assert fragment.startswith(overview)
    fragment = client.get(reverse("health_panel"), headers=HX).content.decode().strip()
    assert fragment.startswith(panel)
