"""The audit log page and one session's history fragment."""

from __future__ import annotations

import csv
import datetime as dt
import html
import io
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


# --- entries in words, with links to what they made -------------------------------------------


def entry_row(body: str, pk: int) -> str:
    start = body.index(f'data-entry="{pk}">')
    return body[start : body.index("</tr>", start)]


def said(row: str) -> str:
    """What a row says in words: its text without tags, without the folded raw JSON."""
    if '<details class="audit-raw"' in row:
        head, tail = row.split('<details class="audit-raw"', 1)
        row = head + tail[tail.index("</details>") :]
    return html.unescape(re.sub(r"<[^>]+>", " ", row))


def session_cell(row: str, session_id: str) -> str:
    start = row.index(f'data-session="{session_id}"')
    return said(row[start : row.index("</div>", start)])


def test_a_reset_entry_names_each_session_once_with_what_happened_to_it(signed_in):
    client = signed_in("support")
    user = User.objects.get(username="op-support")
    live = core.create_session(source="cli", session_key="cli:77").session_id
    core.append_message(session_id=live, role="user", content="hello")
    result = actions.reset(actor=user, session_key="cli:77")
    new = result.new_session_id
    entry = AuditEntry.objects.get(action="reset")
    row = entry_row(audit(client), entry.pk)
    words = said(row)
    assert words.count(live) == 1 and words.count(new) == 1
    assert "ended" in session_cell(row, live)
    assert "started" in session_cell(row, new)
    assert "Chat (session key) cli:77" in " ".join(words.split())  # the colon is CSS
    assert "&quot;ended&quot;" in row  # the raw JSON is still there, folded


def test_a_resume_entry_names_each_session_once(signed_in):
    client = signed_in("support")
    user = User.objects.get(username="op-support")
    old = core.create_session(source="cli", session_key="cli:78").session_id
    core.append_message(session_id=old, role="user", content="hello")
    core.end_session(session_id=old, end_reason="idle_expiry")
    newer = core.create_session(source="cli", session_key="cli:78").session_id
    actions.resume(actor=user, ref=old)
    entry = AuditEntry.objects.get(action="resume")
    row = entry_row(audit(client), entry.pk)
    words = said(row)
    assert words.count(old) == 1 and words.count(newer) == 1
    assert "resumed" in session_cell(row, old)
    assert "before: 1 message, ended (idle_expiry)" in " ".join(session_cell(row, old).split())
    assert "switched away from" in session_cell(row, newer)


def test_an_undo_entry_says_which_messages_and_counts_changed(signed_in):
    client = signed_in("support")
    user = User.objects.get(username="op-support")
    ref = core.create_session(source="cli", session_key="cli:79").session_id
    ids = core.append_messages(
        session_id=ref,
        messages=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a"},
            {"role": "user", "content": "q2"},
            {"role": "assistant", "content": "a2"},
        ],
    ).message_ids
    actions.rewrite(actor=user, session_id=ref, action="undo")
    entry = AuditEntry.objects.get(action="undo")
    row = entry_row(audit(client), entry.pk)
    words = " ".join(said(row).split())
    assert f"Messages #{ids[2]}–#{ids[3]} (2 messages)" in words
    around = f"{reverse('session_detail', args=[ref])}?around={ids[2]}#m{ids[2]}"
    assert f'href="{around}"' in row
    assert "4 → 2 messages, live" in session_cell(row, ref)


def test_entries_link_to_the_merge_trash_entries_and_job_they_made(signed_in, no_worker):
    client = signed_in("admin")
    user = User.objects.get(username="op-admin")
    ids = forked_conversation()
    merged = actions.merge(
        actor=user,
        session_ids=ids,
        target_id=None,
        expected_fingerprint=core.plan_merge(session_ids=ids).fingerprint,
    )
    doomed = core.create_session(source="cli").session_id
    core.append_message(session_id=doomed, role="user", content="bye")
    core.end_session(session_id=doomed, end_reason="user_exit")
    deleted = actions.cascade_delete(
        actor=user,
        session_ids=[doomed],
        include_branches=False,
        expected_fingerprint=core.plan_cascade_delete(session_ids=[doomed]).fingerprint,
        reason="tidy",
    )
    queued = core.create_session(source="cli").session_id
    core.end_session(session_id=queued, end_reason="user_exit")
    job = actions.start_bulk_delete(
        actor=user, session_ids=[queued], include_live=False, reason="tidy"
    )
    body = audit(client)
    merge_row = entry_row(body, AuditEntry.objects.get(action="merge").pk)
    target = merged.target_id
    merge_link = f"{reverse('audit_log')}?session={target}#merge-{merged.merge_id}"
    assert f'href="{merge_link}"' in merge_row
    assert "kept (the target)" in session_cell(merge_row, target)
    assert all("merged in" in session_cell(merge_row, s) for s in ids if s != target)
    # The merge record the link leads to carries the anchor.
    assert f'id="merge-{merged.merge_id}"' in audit(client, session=target)

    delete_row = entry_row(body, AuditEntry.objects.get(action="cascade_delete").pk)
    trash_id = deleted.trash_entry_ids[0]
    assert f'href="{reverse("trash")}?q={doomed}#trash-{trash_id}"' in delete_row
    job_row = entry_row(body, AuditEntry.objects.get(action="bulk_delete").pk)
    assert f'href="{reverse("job_detail", args=[job])}"' in job_row

    # A viewer reads the same entries, without links to pages it may not open.
    viewer = audit(signed_in("viewer"))
    assert reverse("trash") not in viewer and reverse("job_detail", args=[job]) not in viewer
    assert f"#{trash_id}" in said(
        entry_row(viewer, AuditEntry.objects.get(action="cascade_delete").pk)
    )


# --- CSV export ---------------------------------------------------------------------------------


def export(client, **filters) -> tuple[object, list[list[str]]]:
    response = client.get(reverse("audit_export"), filters)
    assert response.status_code == 200
    assert response.streaming
    text = b"".join(response.streaming_content).decode()
    return response, list(csv.reader(io.StringIO(text)))


def test_the_csv_export_holds_what_the_filters_match_on_every_page(signed_in):
    seeded = seed_entries()
    for n in range(53):
        actions.record(actor=None, action="resume", session_ids=[f"p-{n}"])
    client = signed_in("viewer")
    response, rows = export(client, action="resume")
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="audit-')
    header, *entries = rows
    assert header[:8] == [
        "id",
        "created_at",
        "completed_at",
        "actor",
        "client_address",
        "action",
        "outcome",
        "sessions",
    ]
    assert len(entries) == 54  # every page: the seeded resume and the 53 new ones
    assert {r[header.index("action")] for r in entries} == {"resume"}

    _, rows = export(client, action="merge", actor="bob")
    header, *entries = rows
    assert [int(r[0]) for r in entries] == [seeded["merge"].pk]
    merge = dict(zip(header, entries[0], strict=True))
    assert merge["sessions"] == "s-1 s-2"
    assert "Merge: #999" in merge["changes"]
    assert '"merge_id": 999' in merge["after"]

    # The page links to the export of what it shows.
    body = audit(client, action="merge", actor="bob", page="1")
    link = re.search(r'<a class="audit-export" href="([^"]+)"', body).group(1)
    assert html.unescape(link) == reverse("audit_export") + "?action=merge&actor=bob"


def test_the_csv_export_cannot_carry_a_formula_into_a_spreadsheet(signed_in):
    hostile = User.objects.create_user("@SUM(1+1)")
    actions.record(
        actor=hostile,
        action="resume",
        session_ids=["-2+3"],
        reason='=HYPERLINK("http://evil.example","click")',
        detail="+cmd|' /C calc'!A0",
        outcome="failed",
    )
    _, rows = export(signed_in("viewer"))
    header, entry = rows
    row = dict(zip(header, entry, strict=True))
    assert row["actor"] == "'@SUM(1+1)"
    assert row["sessions"] == "'-2+3"
    assert row["reason"] == '\'=HYPERLINK("http://evil.example","click")'
    assert row["detail"] == "'+cmd|' /C calc'!A0"
    for cell in entry:
        assert not cell.startswith(("=", "+", "-", "@", "\t", "\r"))


def test_the_csv_export_names_every_change_whole(signed_in):
    long_reason = "r" * 500
    many = [f"s-{n}" for n in range(40)]
    actions.record(
        actor=None,
        action="resume",
        session_ids=["s-long"],
        before={"title": long_reason, "moved": many},
        after={"title": "short", "trash_entries": list(range(1, 31))},
    )
    _, rows = export(signed_in("viewer"))
    header, entry = rows
    changes = dict(zip(header, entry, strict=True))["changes"]
    assert "…" not in changes and " more" not in changes
    assert long_reason in changes
    assert all(sid in changes for sid in many)
    assert "#30" in changes


def test_the_csv_export_names_every_session_of_an_entry_and_each_trash_entry_once(signed_in):
    # A restore of 15 sessions: the changes column names all 15 (the page links 12 and says
    # "and 3 more"), and a trash entry recorded before and after is named once.
    sessions = [f"20261001_0000{n:02d}_abcdef{n:02d}" for n in range(15)]
    counts = {sid: {"messages": 2, "ended": True} for sid in sessions}
    actions.record(
        actor=None,
        action="restore",
        session_ids=sessions,
        before={"trash_entry": 6},
        after={"trash_entry": 6, **counts},
    )
    viewer = signed_in("viewer")
    _, rows = export(viewer)
    header, entry = rows
    changes = dict(zip(header, entry, strict=True))["changes"]
    assert all(sid in changes for sid in sessions), changes
    assert changes.count("Trash entry") == 1, changes
    assert "and 3 more" in audit(viewer)
