"""A session a delete left in parts: the page says so, and the actions are refused in words."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import being_deleted, deletion
from sessions_admin.ledger.models import TrashEntry
from tests.builders import store_snapshot


class Stop(Exception):
    pass


def half_deleted(messages: int = 250) -> str:
    """A live session whose delete stopped after its first part (as a killed process leaves it)."""
    sid = core.create_session(source="telegram", session_key="tg:dm:parts").session_id
    core.append_messages(
        session_id=sid,
        messages=[
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}
            for i in range(messages)
        ],
    )

    def stop() -> None:
        raise Stop

    with pytest.raises(Stop):
        deletion.delete_batch(
            [sid], actor="ada", reason="r", job_id=None, part_messages=100, between_parts=stop
        )
    assert sid in being_deleted.marks_on([sid])
    return sid


def test_the_page_says_the_session_is_being_deleted(signed_in):
    sid = half_deleted()
    client = signed_in("support")
    body = client.get(reverse("session_detail", args=[sid])).content.decode()
    assert "being deleted" in body
    assert "A delete by ada is removing this session in parts" in body
    plain = core.create_session(source="cli").session_id
    body = client.get(reverse("session_detail", args=[plain])).content.decode()
    assert "being deleted" not in body


@pytest.mark.parametrize("name", ["session_undo", "session_retry"])
def test_actions_on_it_are_refused_and_change_nothing(signed_in, name):
    sid = half_deleted()
    before = store_snapshot()
    response = signed_in("support").post(reverse(name, args=[sid]))
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("is being deleted" in m and "Nothing was changed" in m for m in shown), shown
    assert store_snapshot() == before


def test_resuming_it_is_refused_and_changes_nothing(signed_in):
    sid = half_deleted()
    core.end_session(session_id=sid, end_reason="user_exit")
    before = store_snapshot()
    client = signed_in("support")
    page = client.get(reverse("session_resume", args=[sid])).content.decode()
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page))
    response = client.post(reverse("session_resume", args=[sid]), fields, follow=True)
    text = html.unescape(response.content.decode())
    assert "is being deleted" in text and "Nothing was changed" in text
    assert store_snapshot() == before


def test_restoring_from_the_trash_page_gives_the_messages_back(signed_in):
    sid = half_deleted()
    entry = TrashEntry.objects.get(operation=being_deleted.marks_on([sid])[sid].operation)
    client = signed_in("admin")
    for query in ("", f"?q={sid}"):  # listed, and found by the session's id
        page = client.get(reverse("trash") + query).content.decode()
        assert f'<code>{sid}</code></a> <span class="hint">some of its messages' in page
        assert "Restore 100 messages" in page
    response = client.post(reverse("trash_restore", args=[entry.pk]))
    assert response.status_code in (200, 302)
    assert being_deleted.marks_on([sid]) == {}
    core.append_message(session_id=sid, role="user", content="writable again")
