"""The trash page's keyset pages (issue 29): each operation once, in order, while deletes add
operations and purges drop some between page loads; a cut or changed cursor is a 400 with a
clear message; a page costs the same queries however large the trash."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from sessions_admin import core
from sessions_admin.console.views import trash as trash_view
from sessions_admin.core import db
from sessions_admin.ledger.models import TrashEntry
from sessions_admin.store.listing import encode_cursor

HX = {"HX-Request": "true"}
PAGE = 4


@pytest.fixture(autouse=True)
def small_pages(monkeypatch, settings):
    monkeypatch.setattr(trash_view, "TRASH_PAGE_SIZE", PAGE)
    settings.SESSIONS_ADMIN_TRASH_DAYS = 7


def deleted(session_id: str | None = None) -> int:
    """A cascade delete of one ended session: a new trash operation; its first entry's id."""
    sid = core.create_session(source="cli", session_id=session_id).session_id
    core.append_messages(session_id=sid, messages=[{"role": "user", "content": "hello"}])
    core.end_session(session_id=sid, end_reason="user_exit")
    plan = core.plan_cascade_delete(session_ids=[sid])
    result = core.execute_cascade_delete(
        session_ids=[sid], expected_fingerprint=plan.fingerprint, actor="ada", reason="cleanup"
    )
    return result.trash_entry_ids[0]


def shown(body: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<li class="entry[^"]*" id="trash-(\d+)"', body)]


def next_link(body: str) -> str | None:
    found = re.search(r'<a href="([^"]+)"[^>]*rel="next"', body)
    return html.unescape(found.group(1)) if found else None


def purge(admin, entry_ids: list[int]) -> None:
    """Purge exactly these operations: made older than the trash keeps, then the expired go."""
    TrashEntry.objects.filter(pk__in=entry_ids).update(created_at=timezone.now() - timedelta(30))
    response = admin.post(reverse("trash_purge"), {"scope": "expired", "reason": "tidy"})
    assert response.status_code == 302
    assert not TrashEntry.objects.filter(pk__in=entry_ids).exists()


def test_paging_on_while_entries_are_added_and_purged_shows_each_once_in_order(admin):
    before = [deleted() for _ in range(3 * PAGE + 2)]
    newest_first = sorted(before, reverse=True)
    seen: list[int] = []
    url: str | None = reverse("trash")
    loads = 0
    purged: list[int] = []
    while url is not None:
        response = admin.get(url)
        assert response.status_code == 200
        body = response.content.decode()
        seen += shown(body)
        url = next_link(body)
        loads += 1
        if loads == 1:
            deleted(), deleted()  # newer than every page still to come
            unseen = newest_first[PAGE + 1]
            purge(admin, [newest_first[0], unseen])  # one already shown, one not yet
            purged.append(unseen)
        elif loads == 2:
            deleted()
    assert loads == 4
    assert seen == [pk for pk in newest_first if pk not in purged]


def test_the_search_is_kept_from_page_to_page(admin):
    matching = [deleted(f"keep-{i:02d}") for i in range(PAGE + 2)]
    others = [deleted(f"other-{i:02d}") for i in range(PAGE)]
    first = admin.get(reverse("trash"), {"q": "keep-"}).content.decode()
    second_url = next_link(first)
    assert second_url is not None and "q=keep-" in second_url
    second = admin.get(second_url).content.decode()
    assert shown(first) + shown(second) == sorted(matching, reverse=True)
    assert next_link(second) is None
    assert not set(others) & set(shown(first) + shown(second))
    # The htmx fragment pages the same way.
    fragment = admin.get(second_url, headers=HX)
    assert b"<html" not in fragment.content and shown(fragment.content.decode()) == shown(second)


@pytest.mark.parametrize(
    "after",
    [
        "garbage",
        "!!!",
        "W10",  # base64 of []
        encode_cursor("started", "desc", [1000.0, "a-session"]),  # the session list's
        encode_cursor("trash", "asc", [10]),
        encode_cursor("trash", "desc", ["10"]),
        encode_cursor("trash", "desc", [0]),
        encode_cursor("trash", "desc", [True]),
        encode_cursor("trash", "desc", [2**70]),
        encode_cursor("trash", "desc", [1.5]),
        encode_cursor("trash", "desc", [3, 4]),
        pytest.param("x" * 5000, id="oversized"),
    ],
)
def test_a_cut_or_changed_cursor_is_a_400_showing_the_newest_entries(admin, after):
    ids = [deleted() for _ in range(PAGE + 1)]
    response = admin.get(reverse("trash"), {"after": after})
    assert response.status_code == 400
    body = response.content.decode()
    assert "That page link is not valid" in body
    assert shown(body) == sorted(ids, reverse=True)[:PAGE]
    assert admin.get(reverse("trash"), {"after": after}, headers=HX).status_code == 400


def test_a_cut_real_cursor_is_refused_and_old_numbered_links_show_the_newest(admin):
    ids = sorted((deleted() for _ in range(2 * PAGE + 1)), reverse=True)
    real = next_link(admin.get(reverse("trash")).content.decode())
    token = re.search(r"after=([^&]+)", real).group(1)
    assert admin.get(reverse("trash"), {"after": token[:-3]}).status_code == 400
    old = admin.get(reverse("trash"), {"page": "2"})
    assert old.status_code == 200 and shown(old.content.decode()) == ids[:PAGE]
    assert admin.get(reverse("trash"), {"page": "2", "after": token}).status_code == 200


def _page_queries(admin, url: str) -> list[str]:
    with (
        CaptureQueriesContext(connections["default"]) as ledger,
        CaptureQueriesContext(connections[db.store_alias()]) as store,
    ):
        response = admin.get(url)
    assert response.status_code == 200
    return [q["sql"] for q in ledger.captured_queries + store.captured_queries]


def test_a_page_costs_the_same_queries_however_large_the_trash(admin):
    for _ in range(2 * PAGE + 1):
        deleted()
    second = next_link(admin.get(reverse("trash")).content.decode())
    small_first = _page_queries(admin, reverse("trash"))
    small_second = _page_queries(admin, second)
    for _ in range(6 * PAGE):
        deleted()
    # Each new entry's lineage is read once per process (ledger.trash.trashed_lineage), by
    # whichever page comes first: then every page costs what it did.
    admin.get(reverse("trash"))
    large_first = _page_queries(admin, reverse("trash"))
    large_second = _page_queries(admin, second)
    assert len(large_first) == len(small_first)
    assert len(large_second) == len(small_second)
    # Keyset pages: never OFFSET (which reads and drops every row before the page).
    assert not [sql for sql in large_second if "OFFSET" in sql.upper()]
