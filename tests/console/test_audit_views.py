"""The audit log page and one session's history fragment."""

from __future__ import annotations

import datetime as dt
import html
import re

from django.contrib.auth.models import User
from django.urls import reverse

from sessions_admin import core
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditEntry
from tests.builders import forked_conversation

HX = {"HX-Request": "true"}
SCRIPT = "<script>alert(1)</script>"


def entry_ids(body: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr class="audit-entry[^"]*" data-entry="(\d+)">', body)]


def audit(client, headers=None, **filters) -> str:
    response = client.get(reverse("audit_log"), filters, headers=headers or {})
    assert response.status_code == 200
    return response.content.decode()


def at(entry: AuditEntry, day: str) -> AuditEntry:
    AuditEntry.objects.filter(pk=entry.pk).update(
        created_at=dt.datetime.fromisoformat(day + "T12:00:00+00:00")
    )
    return entry


def seed_entries() -> dict[str, AuditEntry]:
    alice = User.objects.create_user("alice")
    bob = User.objects.create_user("bob-the-operator")
    return {
        "resume": at(
            actions.record(actor=alice, action="resume", session_ids=["s-1"], reason="asked"),
            "2025-01-10",
        ),
        "merge": at(
            actions.record(
                actor=bob,
                action="merge",
                session_ids=["s-1", "s-2"],
                before={"s-1": {"messages": 3}},
                after={"merge_id": 999, "target": "s-1"},
            ),
            "2025-02-10",
        ),
        "failed": at(
            actions.record(
                actor=alice,
                action="merge",
                session_ids=["s-3", "s-2"],
                outcome="failed",
                detail="The store changed since the merge was previewed.",
            ),
            "2025-03-10",
        ),
        "reset": at(
            actions.record(actor=None, action="reset", session_ids=["s-4"], reason=SCRIPT),
            "2025-04-10",
        ),
    }


def test_anonymous_and_roleless_operators_cannot_read_the_audit_log(client, signed_in):
    assert client.get(reverse("audit_log"))["Location"].startswith(reverse("login"))
    assert client.get(reverse("session_history", args=["s-1"]))["Location"].startswith(
        reverse("login")
    )
    roleless = signed_in(None)
    assert roleless.get(reverse("audit_log")).status_code == 403
    assert roleless.get(reverse("session_history", args=["s-1"]), headers=HX).status_code == 403


def test_entries_appear_newest_first_with_what_they_recorded(signed_in):
    seeded = seed_entries()
    body = audit(signed_in("viewer"))
    assert entry_ids(body) == [seeded[k].pk for k in ["reset", "failed", "merge", "resume"]]
    assert "bob-the-operator" in body and "system" in body
    assert f'href="{reverse("session_detail", args=["s-2"])}"' in body
    assert "The store changed since the merge was previewed." in body
    assert "&quot;merge_id&quot;: 999" in body  # after, compact JSON
    assert SCRIPT not in body and html.escape(SCRIPT) in body
    assert "4 entries" in body


def test_filters_narrow_the_log(signed_in):
    seeded = seed_entries()
    client = signed_in("viewer")
    pk = {name: e.pk for name, e in seeded.items()}
    assert entry_ids(audit(client, action="merge")) == [pk["failed"], pk["merge"]]
    assert entry_ids(audit(client, actor="BOB")) == [pk["merge"]]
    assert entry_ids(audit(client, session="s-2")) == [pk["failed"], pk["merge"]]
    assert entry_ids(audit(client, session="s-")) == []  # exact ids, not prefixes
    assert entry_ids(audit(client, outcome="failed")) == [pk["failed"]]
    assert entry_ids(audit(client, outcome="ok", action="merge")) == [pk["merge"]]
    assert entry_ids(audit(client, since="2025-02-10", until="2025-03-31")) == [
        pk["failed"],
        pk["merge"],
    ]
    assert entry_ids(audit(client, until="2025-01-10")) == [pk["resume"]]
    body = audit(client, action="reset", outcome="failed")
    assert entry_ids(body) == [] and "No audit entries match these filters" in body


def test_a_bad_filter_is_reported_and_ignored(signed_in):
    seed_entries()
    body = audit(signed_in("viewer"), since="not-a-date", actor="alice")
    assert "Some filters were ignored" in body and "since" in body
    assert len(entry_ids(body)) == 2  # the actor filter still applies


def test_filters_come_back_as_a_fragment_for_htmx(signed_in):
    seeded = seed_entries()
    body = audit(signed_in("viewer"), headers=HX, action="resume")
    assert body.lstrip().startswith('<div id="audit-results">') and "<html" not in body
    assert entry_ids(body) == [seeded["resume"].pk]


def test_pages_of_fifty(signed_in):
    for n in range(53):
        actions.record(actor=None, action="resume", session_ids=[f"p-{n}"])
    client = signed_in("viewer")
    first = audit(client, action="resume")
    assert len(entry_ids(first)) == 50
    assert "page 1 of 2" in first
    older = re.search(r'<a href="([^"]+)"[^>]*>Older', first).group(1)
    assert "action=resume" in html.unescape(older)
    second = client.get(html.unescape(older)).content.decode()
    assert len(entry_ids(second)) == 3
    assert set(entry_ids(first)).isdisjoint(entry_ids(second))


def test_a_session_filter_lists_its_merges_with_undo_for_operators(signed_in):
    ids = forked_conversation()
    merged = core.merge_sessions(session_ids=ids)
    undo = reverse("merge_undo", args=[merged.merge_id])
    viewer_body = audit(signed_in("viewer"), session=ids[1])
    assert f"merge #{merged.merge_id}" in viewer_body
    assert f'action="{undo}"' not in viewer_body
    support = signed_in("support")
    body = audit(support, session=ids[1])
    assert f'action="{undo}"' in body


def test_merge_entries_offer_undo_until_undone(signed_in):
    ids = forked_conversation()
    client = signed_in("support")
    user = User.objects.get(username="op-support")
    result = actions.merge(
        actor=user,
        session_ids=ids,
        target_id=None,
        expected_fingerprint=core.plan_merge(session_ids=ids).fingerprint,
    )
    undo = reverse("merge_undo", args=[result.merge_id])
    body = audit(client)
    assert f'action="{undo}"' in body
    response = client.post(undo, {"next": reverse("audit_log")})
    assert response["Location"] == reverse("audit_log")
    body = audit(client)
    assert f'action="{undo}"' not in body
    assert [e.action for e in AuditEntry.objects.all()] == ["unmerge", "merge"]


# --- one session's history ------------------------------------------------------------------


def test_the_session_history_fragment(signed_in):
    ids = forked_conversation()
    seeded = seed_entries()
    merged = core.merge_sessions(session_ids=ids)
    user = User.objects.create_user("carol")
    entry = actions.record(actor=user, action="resume", session_ids=[ids[0]], reason=SCRIPT)
    other = actions.record(actor=user, action="resume", session_ids=[ids[2]])
    url = reverse("session_history", args=[ids[0]])
    detail = reverse("session_detail", args=[ids[0]])

    client = signed_in("support")
    response = client.get(url, headers={**HX, "HX-Current-URL": "http://testserver" + detail})
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="session-history"') and "<html" not in body
    assert entry_ids(body) == [entry.pk]
    assert other.pk not in entry_ids(body) and seeded["merge"].pk not in entry_ids(body)
    assert SCRIPT not in body and html.escape(SCRIPT) in body
    assert f"merge #{merged.merge_id}" in body
    assert f'action="{reverse("merge_undo", args=[merged.merge_id])}"' in body
    assert f'name="next" value="{detail}"' in body  # undo comes back to the detail page

    viewer = signed_in("viewer")
    body = viewer.get(url, headers=HX).content.decode()
    assert f"merge #{merged.merge_id}" in body
    assert reverse("merge_undo", args=[merged.merge_id]) not in body

    # without htmx it is the audit log filtered to the session
    response = viewer.get(url)
    assert response.status_code == 302
    assert response["Location"] == reverse("audit_log") + f"?session={ids[0]}"


def test_a_session_without_history(signed_in):
    body = (
        signed_in("viewer")
        .get(reverse("session_history", args=["nobody"]), headers=HX)
        .content.decode()
    )
    assert "No operator has acted on this session." in body


def test_a_long_history_links_to_the_whole_log(signed_in):
    for _ in range(25):
        actions.record(actor=None, action="resume", session_ids=["busy"])
    body = (
        signed_in("viewer")
        .get(reverse("session_history", args=["busy"]), headers=HX)
        .content.decode()
    )
    assert len(entry_ids(body)) == 20
    assert f'href="{reverse("audit_log")}?session=busy"' in body
