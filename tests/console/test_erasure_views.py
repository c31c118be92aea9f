"""The erasure pages: preview by POST, confirm, follow, download the receipt; the subject
never lands in a URL or in the audit log."""

from __future__ import annotations

import json
import re

from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.ledger import actions, erasure
from sessions_admin.ledger.models import AuditEntry, ErasureRequest
from tests.builders import (
    erasures_run_inline,  # noqa: F401 - an autouse fixture
    store_snapshot,
)

USER = "u-views-5821"


def _their_sessions() -> list[str]:
    ids = []
    for n in range(2):
        sid = core.create_session(source="telegram", user_id=USER).session_id
        core.append_message(session_id=sid, role="user", content=f"hello {n}")
        ids.append(sid)
    core.create_session(source="telegram", user_id="someone-else")
    return ids


def test_preview_confirm_and_receipt(signed_in):
    client = signed_in("admin")
    ids = _their_sessions()
    page = client.post(
        reverse("erasure_preview"), {"user_id": USER, "reference": "DSR-7"}
    ).content.decode()
    assert re.search(r'data-count="sessions">2<', page)
    assert all(sid in page for sid in ids)
    fingerprint = re.search(r'name="fingerprint" value="([^"]+)"', page).group(1)

    refused = client.post(
        reverse("erasure_confirm"), {"user_id": USER, "fingerprint": fingerprint, "reference": ""}
    )
    assert refused.status_code == 400 and "reference" in refused.content.decode()
    assert not ErasureRequest.objects.exists()

    response = client.post(
        reverse("erasure_confirm"),
        {"user_id": USER, "fingerprint": fingerprint, "reference": "DSR-7"},
    )
    queued = ErasureRequest.objects.get()
    assert response.status_code == 302
    assert response.url == reverse("erasure_detail", args=[queued.pk])
    assert USER not in response.url
    actions.run_erasure(request_id=queued.pk)
    detail = client.get(response.url).content.decode()
    assert 'data-state="done"' in detail
    receipt = json.loads(client.get(reverse("erasure_receipt", args=[queued.pk])).content)
    queued.refresh_from_db()
    assert receipt["session_ids_sha256"] == sorted(erasure.hash_of(queued.salt, s) for s in ids)
    assert receipt["reference"] == "DSR-7" and receipt["erased"]["sessions"] == 2
    assert core.lineage.existing_session_ids(ids) == set()
    for entry in AuditEntry.objects.all():
        text = f"{entry.before} {entry.after} {entry.session_ids} {entry.reason} {entry.detail}"
        assert USER not in text, entry.action


def test_a_changed_store_since_the_preview_erases_nothing(signed_in):
    client = signed_in("admin")
    ids = _their_sessions()
    page = client.post(reverse("erasure_preview"), {"user_id": USER}).content.decode()
    fingerprint = re.search(r'name="fingerprint" value="([^"]+)"', page).group(1)
    core.create_session(source="telegram", user_id=USER)  # a new one since the preview
    response = client.post(
        reverse("erasure_confirm"),
        {"user_id": USER, "fingerprint": fingerprint, "reference": "DSR-8"},
    )
    assert response.status_code == 400
    assert "changed since the preview" in response.content.decode()
    assert not ErasureRequest.objects.exists()
    assert core.lineage.existing_session_ids(ids) == set(ids)
    refusals = AuditEntry.objects.filter(outcome="refused")
    assert refusals.exists() and not any(USER in f"{e.before} {e.detail}" for e in refusals)


def test_the_request_page_says_while_the_search_index_is_not_merged(signed_in, monkeypatch):
    from sessions_admin.core import erasure as erasure_core
    from sessions_admin.core.erasure import files as erasure_files

    client = signed_in("admin")
    _their_sessions()
    plan = erasure.plan(erasure_core.Subject(user_id=USER))
    queued = actions.request_erasure(
        actor=None,
        subject=plan.store.subject,
        reference="DSR-8",
        expected_fingerprint=plan.fingerprint,
    )
    cut_short = erasure_core.IndexMerge(False, ("messages_fts: merge stopped",))
    monkeypatch.setattr(erasure_files, "_search_index_merges", lambda seconds: cut_short)
    actions.run_erasure(request_id=queued.pk)
    page = client.get(reverse("erasure_detail", args=[queued.pk])).content.decode()
    assert 'id="index-merge-pending"' in page and 'id="index-merged"' not in page

    monkeypatch.undo()
    monkeypatch.setattr(actions, "start_erasures", lambda: None)
    monkeypatch.setattr(actions.erasure, "start_erasures", lambda: None)
    assert actions.finish_erasure_index_merges() == [queued.pk]
    page = client.get(reverse("erasure_detail", args=[queued.pk])).content.decode()
    assert 'id="index-merged"' in page and 'id="index-merge-pending"' not in page
    queued.refresh_from_db()
    assert queued.receipt["search_index"]["merged"] is True


def _their_session_with(text: str, user_id: str = USER) -> str:
    sid = core.create_session(source="telegram", user_id=user_id).session_id
    core.append_message(session_id=sid, role="user", content=text)
    core.end_session(session_id=sid, end_reason="user_exit")
    return sid


def test_a_padded_id_is_refused_and_a_key_prefix_finds_nothing(signed_in):
    client = signed_in("admin")
    core.create_session(source="telegram", user_id=USER, session_key="agent:main:telegram:dm:58")
    before = store_snapshot()
    padded = client.post(reverse("erasure_preview"), {"user_id": f"{USER} ", "reference": "D"})
    assert padded.status_code == 400 and "spaces" in padded.content.decode()
    page = client.post(
        reverse("erasure_preview"),
        {"user_id": "u-nobody-58", "session_keys": "agent:main:", "reference": "D"},
    ).content.decode()
    assert re.search(r'data-count="sessions">0<', page)
    assert store_snapshot() == before
    assert not ErasureRequest.objects.exists()


def test_the_preview_says_other_peoples_mentions_are_kept_and_they_are(signed_in):
    client = signed_in("admin")
    _their_sessions()
    colleague = _their_session_with(f"ticket about {USER}", user_id="u-colleague-58")
    page = client.post(
        reverse("erasure_preview"), {"user_id": USER, "reference": "DSR-7"}
    ).content.decode()
    assert "data-kept" in page and colleague in page
    fingerprint = re.search(r'name="fingerprint" value="([^"]+)"', page).group(1)
    client.post(
        reverse("erasure_confirm"),
        {"user_id": USER, "fingerprint": fingerprint, "reference": "DSR-7"},
    )
    actions.run_erasure(request_id=ErasureRequest.objects.get().pk)
    assert db.fetchall("SELECT content FROM messages WHERE session_id = %s", [colleague]) == [
        (f"ticket about {USER}",)
    ]
    assert not db.fetchall("SELECT id FROM sessions WHERE user_id = %s", [USER])


def test_a_merge_an_erasure_closed_says_so_and_its_undo_changes_nothing(signed_in):
    client = signed_in("admin")
    api = core.create_session(source="api_server").session_id
    core.append_message(session_id=api, role="user", content="api side")
    mine = _their_session_with("moved words")
    merged = core.merge_sessions(session_ids=[api, mine], target_id=api)
    plan = erasure.plan(core.erasure.Subject(user_id=USER))
    queued = actions.request_erasure(
        actor=None,
        subject=plan.store.subject,
        reference="DSR-9",
        expected_fingerprint=plan.fingerprint,
    )
    actions.run_erasure(request_id=queued.pk)
    before = store_snapshot("sessions", "messages", "merges")

    history = client.get(reverse("audit_log"), {"session": api}).content.decode()
    assert "data-merge-closed" in history
    assert f'action="{reverse("merge_undo", args=[merged.merge_id])}"' not in history
    client.post(reverse("merge_undo", args=[merged.merge_id]), {"reason": "try"})

    assert store_snapshot("sessions", "messages", "merges") == before
    assert db.fetchall("SELECT content FROM messages WHERE session_id = %s", [api]) == [
        ("api side",)
    ]


def test_the_request_page_names_the_receipts_counts_in_words(signed_in):
    from sessions_admin.core import erasure as erasure_core

    client = signed_in("admin")
    _their_sessions()
    plan = erasure.plan(erasure_core.Subject(user_id=USER))
    queued = actions.request_erasure(
        actor=None,
        subject=plan.store.subject,
        reference="DSR-words",
        expected_fingerprint=plan.fingerprint,
    )
    actions.run_erasure(request_id=queued.pk)
    queued.refresh_from_db()
    page = client.get(reverse("erasure_detail", args=[queued.pk])).content.decode()
    receipt = re.search(r'<dl class="meta-list receipt">(.*?)</dl>', page, re.S).group(1)
    names = re.findall(r"<dt>([^<]*)</dt>", receipt)
    assert len(names) == len(queued.receipt["erased"])
    assert all("_" not in name for name in names), names
    assert "Sessions" in names and "Audit entries redacted" in names
    counts = re.findall(r'<dd class="num">([^<]*)</dd>', receipt)
    assert counts[names.index("Sessions")] == "2"
