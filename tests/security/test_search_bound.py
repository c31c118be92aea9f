"""A search with filters checks a bounded number of matches per page, and says so.

Before, a common word under a selective filter read every message holding the word
(300 ms at 20,000 sessions, growing with the store) for the page and again for its
count. Here the bound is lowered so a small store shows it.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from sessions_admin import core
from sessions_admin.signin.roles import assign_role
from sessions_admin.store import listing
from sessions_admin.store.listing import fulltext

CAP = 40


@pytest.fixture
def common_word_store(monkeypatch):
    monkeypatch.setattr(fulltext, "SEARCH_CANDIDATES", CAP)
    rare = core.create_session(source="rare", started_at=1000.0).session_id
    core.append_message(session_id=rare, role="user", content="the common word, rare source")
    busy = core.create_session(source="busy", started_at=2000.0).session_id
    core.append_messages(
        session_id=busy,
        messages=[{"role": "user", "content": f"common chatter {n}"} for n in range(3 * CAP)],
    )
    return rare, busy


def test_a_page_checks_at_most_the_cap_and_the_next_pages_reach_the_hit(common_word_store):
    rare, _busy = common_word_store
    filters = listing.parse({"q": "common", "source": "rare"}).filters
    pages = [listing.search(filters)]
    while pages[-1].next_cursor and len(pages) < 10:
        cursor = listing.decode_cursor(pages[-1].next_cursor, filters)
        pages.append(listing.search(filters, cursor))
    # 3 x CAP newer matches of the busy session come first: three capped pages without a hit.
    assert [page.scan_capped for page in pages] == [True, True, True, False]
    assert [len(page.hits) for page in pages] == [0, 0, 0, 1]
    assert pages[-1].hits[0].session_id == rare
    # The count covers the first CAP matches only, and says so.
    assert pages[0].count == 0 and pages[0].count_within == CAP


def test_the_page_says_where_it_stopped_and_links_on(common_word_store):
    client = Client()
    user = User.objects.create_user("search-viewer")
    assign_role(user, "viewer")
    client.force_login(user)
    body = client.get("/sessions/", {"q": "common", "source": "rare"}).content.decode()
    assert f"stopped after checking {CAP} messages containing these words" in body
    assert f"among the newest {CAP} messages containing these words" in body
    link = re.search(r'<a href="([^"]+)">Search older messages', body)
    assert link and "after=" in link.group(1)


def test_without_filters_the_scan_is_capped_too_and_each_session_shows_once(common_word_store):
    """Grouping by session needs the matches of a page's sessions: a page reads at most
    the cap of them, filters or not, and the next page goes on without repeating one."""
    rare, busy = common_word_store
    filters = listing.parse({"q": "common"}).filters
    page = listing.search(filters)
    assert page.scan_capped and page.count == 3 * CAP + 1 and page.count_within is None
    [group] = page.sessions
    assert (group.session_id, group.count, group.count_more) == (busy, CAP, True)
    seen = [busy]
    while page.next_cursor:
        page = listing.search(filters, listing.decode_cursor(page.next_cursor, filters))
        seen += [g.session_id for g in page.sessions]
    assert seen == [busy, rare]


def test_a_filter_most_matches_pass_counts_within_the_cap(common_word_store):
    filters = listing.parse({"q": "common", "source": "busy", "per": "25"}).filters
    page = listing.search(filters)
    assert [g.source for g in page.sessions] == ["busy"] and page.scan_capped
    # Counted among the first CAP matches (all of which pass), and said to be.
    assert page.count == CAP and page.count_within == CAP
