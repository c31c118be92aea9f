"""Every page that writes to the store, while the runtime holds the store's write lock.

Each action retries for a bounded time (shortened here), then says the store
is busy and nothing changed: never a 500, never a partial change, the refusal
audited. tests/console/test_session_actions.py covers undo, retry, reset and
resume the same way; here are merge, unmerge, redo, cascade delete and trash
restore, and the safety net for a StoreBusy a view does not catch itself.
"""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
from django.db import connections
from django.test import Client
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.ledger.models import AuditEntry, TrashEntry
from sessions_admin.routers import responses_alias
from tests.builders import forked_conversation
from tests.console.pages import flashed

BUSY = "The store is busy"


def hold_write_lock():
    """Another process (the runtime) holding the store's write lock; reads still go through."""
    store = connections["store"]
    params = store.get_connection_params()
    if store.vendor == "sqlite":
        other = sqlite3.connect(params["database"], isolation_level=None, timeout=1)
        other.execute("BEGIN IMMEDIATE")
        return other
    other = psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"})
    # EXCLUSIVE: plain reads proceed, every write and row lock on these tables waits.
    other.execute("LOCK TABLE sessions, messages IN EXCLUSIVE MODE")
    return other


def store_rows() -> dict:
    return {
        "sessions": db.fetchall("SELECT * FROM sessions ORDER BY id"),
        "messages": db.fetchall("SELECT * FROM messages ORDER BY id"),
        "conversations": db.fetchall(
            "SELECT * FROM conversations ORDER BY name", alias=responses_alias()
        ),
        "responses": db.fetchall(
            "SELECT * FROM responses ORDER BY response_id", alias=responses_alias()
        ),
        "merges": db.fetchall("SELECT id, undone_at FROM sessions_admin_merges ORDER BY id"),
    }


def dashboard_rows() -> dict:
    return {
        "trash": sorted(TrashEntry.objects.values_list("pk", "state")),
    }


def shown(response) -> str:
    """What the operator reads: the page itself, or the messages flashed for the next one."""
    return response.content.decode() + " ".join(flashed(response))


# Each case: (audited action, build the store and return a request to make).


def _merge(client: Client):
    ids = forked_conversation()
    plan = core.plan_merge(session_ids=ids)
    return "merge", lambda: client.post(
        reverse("merge_execute"), {"ids": ids, "fingerprint": plan.fingerprint, "reason": "r"}
    )


def _unmerge(client: Client):
    ids = forked_conversation()
    plan = core.plan_merge(session_ids=ids)
    merged = core.merge_sessions(session_ids=ids, expected_fingerprint=plan.fingerprint)
    return "unmerge", lambda: client.post(reverse("merge_undo", args=[merged.merge_id]))


def _redo(client: Client):
    sid = core.create_session(source="cli").session_id
    core.append_messages(
        session_id=sid,
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    )
    core.undo_last_turn(session_id=sid)
    return "redo", lambda: client.post(reverse("session_redo", args=[sid]))


def _cascade_delete(client: Client):
    root = core.create_session(source="cli").session_id
    core.append_message(session_id=root, role="user", content="q")
    core.create_session(
        source="tool", parent_session_id=root, model_config={"_delegate_from": root}
    )
    plan = core.plan_cascade_delete(session_ids=[root])
    return "cascade_delete", lambda: client.post(
        reverse("cascade_delete_confirm", args=[root]),
        {"fingerprint": plan.fingerprint, "reason": "cleanup"},
    )


def _trash_restore(client: Client):
    root = core.create_session(source="cli").session_id
    core.append_message(session_id=root, role="user", content="q")
    plan = core.plan_cascade_delete(session_ids=[root])
    deleted = core.execute_cascade_delete(
        session_ids=[root], expected_fingerprint=plan.fingerprint, actor="ada", reason="r"
    )
    (entry,) = deleted.trash_entry_ids
    return "restore", lambda: client.post(reverse("trash_restore", args=[entry]))


@pytest.mark.parametrize(
    "build", [_merge, _unmerge, _redo, _cascade_delete, _trash_restore], ids=lambda b: b.__name__
)
def test_a_write_while_the_store_is_locked_says_busy_and_changes_nothing(
    signed_in, short_waits, build
):
    client = signed_in("admin")
    action, post = build(client)
    before_store, before_dashboard = store_rows(), dashboard_rows()
    audited = AuditEntry.objects.count()
    other = hold_write_lock()
    try:
        response = post()
    finally:
        other.rollback()
        other.close()

    assert response.status_code in (200, 302)
    assert BUSY in shown(response) and "try again" in shown(response)
    assert store_rows() == before_store
    assert dashboard_rows() == before_dashboard  # no trash entry left behind either
    refusal = AuditEntry.objects.order_by("-pk").first()
    assert AuditEntry.objects.count() == audited + 1
    assert (refusal.action, refusal.outcome) == (action, "failed")

    # Once the runtime lets go, the same request goes through.
    post()
    assert store_rows() != before_store


# --- the safety net: a busy store no view caught ------------------------------------------------


def test_a_store_busy_a_view_lets_through_is_a_503_page_not_a_500(signed_in, monkeypatch):
    ids = forked_conversation()
    merged = core.merge_sessions(
        session_ids=ids, expected_fingerprint=core.plan_merge(session_ids=ids).fingerprint
    )
    before = store_rows()

    def busy(**_):
        raise core.StoreBusy("merge_record", 7)

    # merge_undo looks the merge up before its own try/except: nothing there turns this into words.
    monkeypatch.setattr(core, "merge_record", busy)
    client = signed_in("admin")
    for headers in ({}, {"HX-Request": "true"}):
        response = client.post(reverse("merge_undo", args=[merged.merge_id]), headers=headers)
        assert response.status_code == 503
        assert response["Retry-After"] == "5"
        body = response.content.decode()
        assert BUSY in body and "Nothing changed: try again" in body
    assert store_rows() == before


def test_a_locked_read_is_a_503_page_too(signed_in, monkeypatch):
    from django.db import OperationalError

    from sessions_admin.console.views import sessions as session_views

    def locked(*_args, **_kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr(session_views.listing, "list_sessions", locked)
    response = signed_in("viewer").get(reverse("session_list"))
    assert response.status_code == 503
    assert "could not finish" in response.content.decode()


def test_other_database_errors_are_not_dressed_up_as_busy(signed_in, monkeypatch):
    from django.db import OperationalError

    from sessions_admin.console.views import sessions as session_views

    def broken(*_args, **_kwargs):
        raise OperationalError("no such table: sessions")

    monkeypatch.setattr(session_views.listing, "list_sessions", broken)
    client = signed_in("viewer")
    client.raise_request_exception = False
    assert client.get(reverse("session_list")).status_code == 500
