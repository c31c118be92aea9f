"""The resume preflight posts the core's plan fingerprint; a plan changed since is refused."""

from __future__ import annotations

from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.ledger.models import AuditEntry
from tests.console.pages import hidden


def ended_chat(key: str, end_reason: str) -> str:
    sid = core.create_session(source="telegram", session_key=key).session_id
    core.append_message(session_id=sid, role="user", content="hi")
    core.end_session(session_id=sid, end_reason=end_reason)
    return sid


def test_a_change_only_the_fingerprint_sees_resumes_nothing(signed_in):
    ref = ended_chat("tg:dm:7", "lru_evict")
    client = signed_in("support")
    page = client.get(reverse("session_resume", args=[ref])).content.decode()
    shown = {name: hidden(page, name) for name in ("target", "switch_from", "fingerprint")}
    assert shown["target"] == ref and shown["switch_from"] == "" and shown["fingerprint"]
    # A later session of the chat the gateway could reopen: same target, nothing live.
    ended_chat("tg:dm:7", "agent_close")
    before = db.fetchall("SELECT id, ended_at, end_reason FROM sessions ORDER BY id")
    response = client.post(reverse("session_resume", args=[ref]), shown)
    body = response.content.decode()
    assert response.status_code == 200
    assert "Nothing was resumed" in body and "changed since the preflight" in body
    assert hidden(body, "fingerprint") not in (None, shown["fingerprint"])
    assert db.fetchall("SELECT id, ended_at, end_reason FROM sessions ORDER BY id") == before
    assert list(AuditEntry.objects.values_list("action", "outcome")) == [("resume", "refused")]

    response = client.post(
        reverse("session_resume", args=[ref]), {**shown, "fingerprint": hidden(body, "fingerprint")}
    )
    assert response["Location"] == reverse("session_detail", args=[ref])
    assert core.live_session_for_key("tg:dm:7") == ref
