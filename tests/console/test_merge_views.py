"""Fork groups, merge preview, merge, and unmerge through the console's views."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from sessions_admin import core
from sessions_admin.console.views import merge as merge_views
from sessions_admin.core import db
from sessions_admin.ledger.models import AuditEntry, AuditSession
from tests.builders import forked_conversation, store_snapshot
from tests.console.pages import fingerprint_of, preview_url
from tests.helpers import messages, session

HX = {"HX-Request": "true"}
SCRIPT = "<script>alert(1)</script>"


# --- builders ---------------------------------------------------------------------------------


def confirm_form(body: str) -> bool:
    return 'action="/merge/"' in body


def flash(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def merge_via_views(client, ids, *, target: str | None = None, reason: str = "", headers=None):
    body = client.get(preview_url(ids, target)).content.decode()
    fingerprint = fingerprint_of(body)
    assert fingerprint, "the preview offers no confirm form"
    data = {"ids": ids, "fingerprint": fingerprint, "reason": reason}
    if target:
        data["target"] = target
    return client.post(reverse("merge_execute"), data, headers=headers or {})


# --- access -----------------------------------------------------------------------------------


def page_urls(session_id: str = "s") -> list[str]:
    return [
        reverse("fork_list"),
        preview_url(["a", "b"]),
        reverse("audit_log"),
        reverse("session_history", args=[session_id]),
    ]


def action_urls() -> list[str]:
    return [reverse("merge_execute"), reverse("merge_undo", args=[1])]


def test_anonymous_visitors_are_sent_to_login(client):
    ids = forked_conversation()
    before = store_snapshot("sessions", "messages", "conversations", "merges")
    for url in page_urls(ids[0]):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login"))
    for url in action_urls():
        response = client.post(url, {"ids": ids, "fingerprint": "x"})
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login"))
    assert store_snapshot("sessions", "messages", "conversations", "merges") == before


def test_an_operator_without_a_role_is_forbidden_everywhere(signed_in):
    ids = forked_conversation()
    merged = core.merge_sessions(session_ids=ids[:2])  # something to try to undo
    before = store_snapshot("sessions", "messages", "conversations", "merges")
    client = signed_in(None)
    for url in page_urls(ids[0]):
        assert client.get(url).status_code == 403, url
        assert client.get(url, headers=HX).status_code == 403, url
    plan = core.plan_merge(session_ids=[ids[0], ids[2]])
    response = client.post(
        reverse("merge_execute"), {"ids": [ids[0], ids[2]], "fingerprint": plan.fingerprint}
    )
    assert response.status_code == 403
    assert client.post(reverse("merge_undo", args=[merged.merge_id])).status_code == 403
    assert store_snapshot("sessions", "messages", "conversations", "merges") == before
    assert not AuditEntry.objects.exclude(outcome="refused").exists()


def test_a_viewer_reads_forks_previews_and_audit_but_cannot_act(signed_in):
    ids = forked_conversation()
    merged = core.merge_sessions(session_ids=ids[:2])
    others = forked_conversation("sidekick-w")
    before = store_snapshot("sessions", "messages", "conversations", "merges")
    client = signed_in("viewer")
    assert client.get(reverse("fork_list")).status_code == 200
    assert client.get(reverse("audit_log")).status_code == 200
    preview = client.get(preview_url(others))
    assert preview.status_code == 200
    body = preview.content.decode()
    assert "question 0" in body and "answer 2" in body
    assert not confirm_form(body)
    assert "not run them" in body

    plan = core.plan_merge(session_ids=others)
    response = client.post(
        reverse("merge_execute"), {"ids": others, "fingerprint": plan.fingerprint}
    )
    assert response.status_code == 403
    assert client.post(reverse("merge_undo", args=[merged.merge_id])).status_code == 403
    assert store_snapshot("sessions", "messages", "conversations", "merges") == before
    assert not AuditEntry.objects.exclude(outcome="refused").exists()


@pytest.mark.parametrize("role", ["support", "admin"])
def test_support_and_admin_can_merge(signed_in, role):
    ids = forked_conversation()
    client = signed_in(role)
    response = merge_via_views(client, ids)
    assert response.status_code == 302
    assert response["Location"] == reverse("session_detail", args=[ids[0]])
    assert [m["session_id"] for m in db.fetchdicts("SELECT session_id FROM messages")] == [
        ids[0]
    ] * 6
    assert session(ids[1])["end_reason"] == "merged"


def test_post_only_urls_refuse_get(signed_in):
    ids = forked_conversation()
    merged = core.merge_sessions(session_ids=ids)
    before = store_snapshot("sessions", "messages", "conversations", "merges")
    client = signed_in("support")
    assert client.get(reverse("merge_execute")).status_code == 405
    assert client.get(reverse("merge_undo", args=[merged.merge_id])).status_code == 405
    assert store_snapshot("sessions", "messages", "conversations", "merges") == before


def test_an_unknown_merge_is_not_found(signed_in):
    forked_conversation()
    client = signed_in("support")
    before = store_snapshot("sessions", "messages", "conversations", "merges")
    assert client.post(reverse("merge_undo", args=[999999])).status_code == 404
    assert store_snapshot("sessions", "messages", "conversations", "merges") == before


# --- forks ------------------------------------------------------------------------------------


def test_the_forks_page_lists_each_group_with_evidence_and_a_preview_link(signed_in):
    ids = forked_conversation(SCRIPT, title=SCRIPT)
    keyed_a = core.create_session(
        source="telegram", session_key="agent:main:telegram:dm:7", started_at=50.0
    ).session_id
    core.end_session(session_id=keyed_a, end_reason="ws_orphan_reap")  # accidental
    keyed_b = core.create_session(
        source="telegram", session_key="agent:main:telegram:dm:7", started_at=60.0
    ).session_id
    client = signed_in("viewer")
    body = client.get(reverse("fork_list")).content.decode()

    assert body.count('class="act-card fork-group"') == 2
    assert "conversation slug" in body and "session key" in body
    assert "agent:main:telegram:dm:7" in body
    assert SCRIPT not in body and html.escape(SCRIPT) in body  # slug and title shown as text
    for sid in [*ids, keyed_a, keyed_b]:
        assert f'href="{reverse("session_detail", args=[sid])}"' in body
    assert "the conversation row records it" in body  # evidence lines
    links = [
        html.unescape(u) for u in re.findall(r'class="button preview-merge" href="([^"]+)"', body)
    ]
    assert len(links) == 2
    conversation_link = next(u for u in links if ids[0] in u)
    assert conversation_link == preview_url(ids)
    # the link leads to a preview of exactly that group
    preview = client.get(conversation_link).content.decode()
    assert all(f"from <code>{sid}</code>" in preview for sid in ids)


def test_the_forks_page_shows_each_group_collapsed_to_its_summary(signed_in):
    ids = forked_conversation()
    other = forked_conversation("second-slug", started_at=5000.0)
    body = signed_in("viewer").get(reverse("fork_list")).content.decode()
    groups = re.findall(r'<article class="act-card fork-group".*?</article>', body, re.S)
    assert len(groups) == 2
    for group in groups:
        head, _, rest = group.partition('<details class="fork-detail">')
        assert rest, "the group's sessions are not in a collapsible section"
        assert "Preview merge" in head and "sessions" in head  # the summary line stays shown
        assert 'class="act-table stack fork-members"' in rest and "Evidence" in rest
    for sid in [*ids, *other]:
        assert f'href="{reverse("session_detail", args=[sid])}"' in body


def test_the_forks_page_says_when_there_are_none(signed_in):
    core.create_session(source="cli")
    body = signed_in("viewer").get(reverse("fork_list")).content.decode()
    assert "No forks found" in body


def test_the_forks_fragment_for_htmx(signed_in):
    forked_conversation()
    client = signed_in("viewer")
    response = client.get(reverse("fork_list"), headers=HX)
    body = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in body and body.lstrip().startswith('<section id="fork-groups"')
    assert "Preview merge" in body


# --- preview ----------------------------------------------------------------------------------


def test_the_preview_shows_the_merged_transcript_in_order_with_its_sources(signed_in):
    ids = forked_conversation()
    core.append_message(session_id=ids[2], role="assistant", content=SCRIPT)
    client = signed_in("support")
    before = store_snapshot("sessions", "messages", "conversations", "merges")
    body = client.get(preview_url(ids)).content.decode()
    assert (
        store_snapshot("sessions", "messages", "conversations", "merges") == before
    )  # previewing writes nothing

    items = re.findall(
        r'<li class="pm-msg role-(\w+)[^"]*" id="pm(\d+)" data-session="([^"]+)">.*?'
        r'<div class="pm-content">(.*?)</div>',
        body,
        re.S,
    )
    assert [int(i[1]) for i in items] == sorted(int(i[1]) for i in items)
    assert [(i[2], html.unescape(re.sub(r"<[^>]+>", "", i[3])).strip()) for i in items] == [
        (ids[0], "question 0"),
        (ids[0], "answer 0"),
        (ids[1], "question 1"),
        (ids[1], "answer 1"),
        (ids[2], "question 2"),
        (ids[2], "answer 2"),
        (ids[2], SCRIPT),
    ]
    assert SCRIPT not in body
    assert "undone" in body  # the undone turn of the middle fork is labelled
    assert "sidekick-v" in body  # the slug moves
    assert "reopened" in body  # the last fork is live, the target ended
    child = db.fetchone("SELECT id FROM sessions WHERE source = 'tool'")[0]
    assert f"<code>{child}</code>" in body  # the delegate child gets a new parent
    assert fingerprint_of(body) == core.plan_merge(session_ids=ids).fingerprint
    hidden = re.findall(r'<input type="hidden" name="ids" value="([^"]+)">', body)
    assert hidden[: len(ids)] == ids


def test_the_preview_renders_message_markdown_as_the_transcript_does(signed_in):
    a = core.create_session(source="cli", started_at=1.0).session_id
    b = core.create_session(source="cli", started_at=2.0).session_id
    core.append_message(
        session_id=a, role="assistant", content="**Refund** due:\n\n- item one\n- `code`"
    )
    core.append_message(session_id=b, role="assistant", content=f"# Title\n\n{SCRIPT}")
    core.append_message(session_id=b, role="tool", content="**as written**")
    body = signed_in("viewer").get(preview_url([a, b])).content.decode()
    contents = re.findall(r'<div class="pm-content">(.*?)</div>\s*</li>', body, re.S)
    assert "<strong>Refund</strong>" in contents[0]
    assert "<li>item one</li>" in contents[0] and "<code>code</code>" in contents[0]
    assert "<h4>Title</h4>" in contents[1]  # headings demoted, below the page's own
    assert SCRIPT not in body and html.escape(SCRIPT) in contents[1]
    assert "**as written**" in contents[2]  # a tool's output is data: shown as written
    assert "**Refund**" not in body


def test_tool_call_turns_show_their_calls_paired_with_their_results(signed_in):
    a = core.create_session(source="cli", started_at=1.0).session_id
    b = core.create_session(source="cli", started_at=2.0).session_id

    def call(call_id: str, name: str, arguments: str) -> dict:
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }

    _question, turn, result = core.append_messages(
        session_id=a,
        messages=[
            {"role": "user", "content": "where is order 8812?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call("c1", "lookup_order", '{"order": "8812"}')],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
        ],
    ).message_ids
    _, unanswered = core.append_messages(
        session_id=b,
        messages=[
            {"role": "user", "content": "and mine?"},
            {"role": "assistant", "content": "", "tool_calls": [call("c2", SCRIPT, "{}")]},
        ],
    ).message_ids
    core.append_message(session_id=b, role="tool", tool_call_id="elsewhere", content="stray")
    body = signed_in("viewer").get(preview_url([a, b])).content.decode()
    assert "(no text)" not in body

    def item(message_id: int) -> str:
        return re.search(
            rf'<li class="pm-msg [^"]*" id="pm{message_id}".*?</li>', body, re.S
        ).group(0)

    line = item(turn)
    assert '<details class="call-line"><summary><span class="tool-name">lookup_order</span>' in line
    assert (
        '<pre class="code">{\n  &quot;order&quot;: &quot;8812&quot;\n}</pre>' in line
    )  # collapsed
    assert f'<a class="call-result" href="#pm{result}">result #{result}</a>' in line
    assert f'result of <a href="#pm{turn}">lookup_order</a>' in item(result)
    other = item(unanswered)
    assert '<span class="tool-name">&lt;script&gt;alert(1)&lt;/script&gt;</span>' in other
    assert "no result here" in other and SCRIPT not in body
    assert "result of <code>elsewhere</code>" in body  # a result whose call is not listed


def test_the_preview_says_when_the_transcript_is_longer_than_shown(signed_in):
    a = core.create_session(source="cli", started_at=1.0).session_id
    b = core.create_session(source="cli", started_at=2.0).session_id
    core.append_messages(
        session_id=a, messages=[{"role": "user", "content": f"m{n}"} for n in range(150)]
    )
    core.append_messages(
        session_id=b, messages=[{"role": "user", "content": f"n{n}"} for n in range(80)]
    )
    body = signed_in("support").get(preview_url([a, b])).content.decode()
    assert body.count('<li class="pm-msg ') == 200
    assert "and 30 more messages not shown" in body


def test_choosing_another_target_re_previews(signed_in):
    ids = forked_conversation()
    client = signed_in("support")
    response = client.get(preview_url(ids, ids[2]), headers=HX)
    body = response.content.decode()
    assert "<html" not in body and body.lstrip().startswith('<div id="merge-preview"')
    assert re.search(rf'value="{ids[2]}" id="target-3" checked', body)
    assert fingerprint_of(body) == core.plan_merge(session_ids=ids, target_id=ids[2]).fingerprint
    assert 'name="target" value="' + ids[2] + '"' in body


def test_ids_typed_by_hand_are_split(signed_in):
    ids = forked_conversation()
    client = signed_in("support")
    response = client.get(reverse("merge_preview"), {"pick": f"{ids[0]}\n{ids[1]}, {ids[2]}"})
    body = response.content.decode()
    assert response.status_code == 200
    assert re.findall(r'<input type="hidden" name="ids" value="([^"]+)">', body)[:3] == ids
    assert confirm_form(body)


@pytest.mark.parametrize(
    "case", ["none", "one", "unknown", "already-merged", "target-merged", "descendant"]
)
def test_bad_picks_re_render_with_a_message_and_no_merge_button(signed_in, case):
    ids = forked_conversation()
    target = None
    if case == "none":
        query, message = [], "Pick at least two sessions"
    elif case == "one":
        query, message = [ids[0]], "Pick at least two sessions"
    elif case == "unknown":
        query, message = [ids[0], "ghost-session"], "No session matches &#x27;ghost-session&#x27;"
    elif case == "already-merged":
        core.merge_sessions(session_ids=ids[:2])
        query, target = [ids[2], ids[1]], ids[2]
        message = "already merged into another session"
    elif case == "target-merged":
        core.merge_sessions(session_ids=ids[:2])
        query, message = [ids[2], ids[1]], "was itself merged into another"  # ids[1] is older
    else:
        branch = core.branch_session(session_id=ids[2]).new_session_id
        query, target = [ids[2], branch], branch
        message = "The target descends from a session being absorbed"
    before = store_snapshot("sessions", "messages", "conversations", "merges")
    client = signed_in("support")
    response = client.get(preview_url(query, target))
    body = response.content.decode()
    assert response.status_code == 200
    assert message in body
    assert not confirm_form(body)
    assert store_snapshot("sessions", "messages", "conversations", "merges") == before


# --- execute ----------------------------------------------------------------------------------


def test_a_merge_through_the_views_moves_the_rows_and_is_audited(signed_in):
    ids = forked_conversation()
    before_ids = [r[0] for r in db.fetchall("SELECT id FROM messages ORDER BY id")]
    client = signed_in("support")
    response = merge_via_views(client, ids, reason="one conversation, three cold starts")
    assert response.status_code == 302
    assert response["Location"] == reverse("session_detail", args=[ids[0]])

    assert [m["id"] for m in messages(ids[0])] == before_ids
    assert [m["content"] for m in messages(ids[0], active_only=True)] == [
        "question 0",
        "answer 0",
        "question 2",
        "answer 2",
    ]
    target = session(ids[0])
    assert (target["ended_at"], target["message_count"]) == (None, 4)
    for sid in ids[1:]:
        assert session(sid)["end_reason"] == "merged"
        assert messages(sid) == []
    child = db.fetchone("SELECT parent_session_id FROM sessions WHERE source = 'tool'")
    assert child[0] == ids[0]
    assert core.resolve_conversation(conversation="sidekick-v").session_id == ids[0]

    merge_row = db.fetchone("SELECT id, target_session_id FROM sessions_admin_merges")
    assert merge_row[1] == ids[0]
    notes = flash(response)
    assert notes == [
        f"Merged 2 sessions into {ids[0]} (merge #{merge_row[0]}; undo available): "
        "4 messages moved."
    ]
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.outcome, entry.actor_name) == ("merge", "ok", "op-support")
    assert entry.reason == "one conversation, three cold starts"
    assert entry.after["merge_id"] == merge_row[0]
    assert set(AuditSession.objects.values_list("session_id", flat=True)) == set(ids)


def test_a_merge_into_a_held_target_says_its_undo_waits_for_the_hold(signed_in):
    """The undo would move the merged messages out of the held target, which the hold
    refuses: the note says so instead of "undo available"."""
    ids = forked_conversation()
    hold = core.holds.place_hold(kind="session", subject=ids[0], reason="litigation", actor="t")
    response = merge_via_views(signed_in("support"), ids, reason="one conversation")
    merge_id = db.fetchone("SELECT id FROM sessions_admin_merges")[0]
    assert flash(response) == [
        f"Merged 2 sessions into {ids[0]} (merge #{merge_id}; no undo while hold #{hold.id} "
        f"on {ids[0]} stands: release it to undo the merge): 4 messages moved."
    ]
    with pytest.raises(core.holds.HeldMessagesWouldLeave):
        core.unmerge(merge_id=merge_id)
    assert db.fetchone("SELECT undone_at FROM sessions_admin_merges")[0] is None
    assert len(messages(ids[0])) == 6


def test_a_merge_into_a_chosen_target(signed_in):
    ids = forked_conversation()
    client = signed_in("admin")
    response = merge_via_views(client, ids, target=ids[2])
    assert response["Location"] == reverse("session_detail", args=[ids[2]])
    assert {m["session_id"] for m in db.fetchdicts("SELECT session_id FROM messages")} == {ids[2]}
    assert session(ids[0])["end_reason"] == "merged"


def test_an_htmx_merge_redirects_the_browser(signed_in):
    ids = forked_conversation()
    client = signed_in("support")
    response = merge_via_views(client, ids, headers=HX)
    assert response.status_code == 200
    assert response["HX-Redirect"] == reverse("session_detail", args=[ids[0]])
    assert session(ids[2])["end_reason"] == "merged"


def test_a_missing_fingerprint_re_renders_and_changes_nothing(signed_in):
    ids = forked_conversation()
    before = store_snapshot("sessions", "messages", "conversations", "merges")
    client = signed_in("support")
    response = client.post(reverse("merge_execute"), {"ids": ids, "fingerprint": ""})
    body = response.content.decode()
    assert response.status_code == 200
    assert "Nothing was merged" in body and "fingerprint" in body
    assert fingerprint_of(body) == core.plan_merge(session_ids=ids).fingerprint  # a new preview
    assert store_snapshot("sessions", "messages", "conversations", "merges") == before
    assert not AuditEntry.objects.exclude(outcome="refused").exists()


def test_one_id_posted_re_renders_and_changes_nothing(signed_in):
    ids = forked_conversation()
    before = store_snapshot("sessions", "messages", "conversations", "merges")
    client = signed_in("support")
    response = client.post(reverse("merge_execute"), {"ids": [ids[0]], "fingerprint": "abc"})
    body = response.content.decode()
    assert response.status_code == 200
    assert "Pick at least two sessions" in body
    assert not confirm_form(body)
    assert store_snapshot("sessions", "messages", "conversations", "merges") == before


def test_an_unknown_id_posted_re_renders_and_changes_nothing(signed_in):
    ids = forked_conversation()
    before = store_snapshot("sessions", "messages", "conversations", "merges")
    client = signed_in("support")
    response = client.post(
        reverse("merge_execute"), {"ids": [ids[0], "ghost-session"], "fingerprint": "abc"}
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert "No session matches" in body and "ghost-session" in body
    assert not confirm_form(body)
    assert store_snapshot("sessions", "messages", "conversations", "merges") == before
    assert AuditEntry.objects.get().outcome == "failed"  # the refusal is audited by the ledger


@pytest.mark.parametrize("htmx", [False, True], ids=["page", "htmx"])
def test_a_stale_preview_is_refused_with_the_new_plan(signed_in, htmx):
    ids = forked_conversation()
    client = signed_in("support")
    stale = fingerprint_of(client.get(preview_url(ids)).content.decode())
    core.append_message(session_id=ids[2], role="user", content="the runtime wrote meanwhile")
    before = store_snapshot("sessions", "messages", "conversations", "merges")
    response = client.post(
        reverse("merge_execute"),
        {"ids": ids, "fingerprint": stale, "reason": "kept <b>"},
        headers=HX if htmx else {},
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert "HX-Redirect" not in response
    assert ("<html" in body) is not htmx
    assert (
        "Nothing was merged" in body and "The store changed since the merge was previewed" in body
    )
    fresh = fingerprint_of(body)
    assert fresh and fresh != stale
    assert fresh == core.plan_merge(session_ids=ids).fingerprint
    assert "the runtime wrote meanwhile" in body  # the new plan's transcript
    assert "kept &lt;b&gt;</textarea>" in body  # the reason survives the re-render
    assert store_snapshot("sessions", "messages", "conversations", "merges") == before
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.outcome) == ("merge", "failed")
    # confirming the new preview works
    response = client.post(reverse("merge_execute"), {"ids": ids, "fingerprint": fresh})
    assert response.status_code == 302
    assert [m["content"] for m in messages(ids[0])][-1] == "the runtime wrote meanwhile"


# --- unmerge ----------------------------------------------------------------------------------


def test_unmerge_through_the_view_restores_the_exact_rows(signed_in):
    ids = forked_conversation()
    before = store_snapshot("sessions", "messages", "conversations", "merges")
    client = signed_in("support")
    merge_via_views(client, ids)
    merge_id = db.fetchone("SELECT id FROM sessions_admin_merges")[0]
    assert store_snapshot("sessions", "messages", "conversations", "merges") != before

    response = client.post(reverse("merge_undo", args=[merge_id]), {"reason": "wrong call"})
    assert response.status_code == 302
    assert response["Location"] == reverse("session_detail", args=[ids[0]])
    assert flash(response)[-1] == f"Undid merge #{merge_id}: 4 messages went back to 2 sessions."
    after = store_snapshot("sessions", "messages", "conversations", "merges")
    assert {k: v for k, v in after.items() if k != "merges"} == {
        k: v for k, v in before.items() if k != "merges"
    }
    assert db.fetchone("SELECT undone_at FROM sessions_admin_merges")[0] is not None
    entry = AuditEntry.objects.filter(action="unmerge").get()
    assert (entry.outcome, entry.reason) == ("ok", "wrong call")
    assert entry.after["returned_messages"] == 4

    # a second undo says so and changes nothing
    again = store_snapshot("sessions", "messages", "conversations", "merges")
    response = client.post(reverse("merge_undo", args=[merge_id]))
    assert response.status_code == 302
    assert flash(response)[-1] == f"Merge #{merge_id} was already undone; nothing changed."
    assert store_snapshot("sessions", "messages", "conversations", "merges") == again
    assert AuditEntry.objects.filter(action="unmerge").count() == 1


def test_unmerge_goes_back_to_a_safe_next_page_and_htmx_is_redirected(signed_in):
    ids = forked_conversation()
    merged = core.merge_sessions(session_ids=ids)
    client = signed_in("support")
    response = client.post(
        reverse("merge_undo", args=[merged.merge_id]),
        {"next": "https://evil.example/"},
        headers=HX,
    )
    assert response["HX-Redirect"] == reverse("session_detail", args=[ids[0]])
    assert session(ids[1])["end_reason"] == "lru_evict"

    merged = core.merge_sessions(session_ids=ids)
    audit = reverse("audit_log") + "?action=merge"
    response = client.post(reverse("merge_undo", args=[merged.merge_id]), {"next": audit})
    assert response["Location"] == audit
    assert session(ids[2])["end_reason"] is None


def test_values_that_cannot_be_session_ids_are_refused_without_touching_the_store(signed_in):
    ids = forked_conversation()
    before = store_snapshot("sessions", "messages", "conversations", "merges")
    client = signed_in("support")
    for bad in ["bad\x00id", "x" * 300]:
        body = client.get(reverse("merge_preview"), {"ids": [ids[0], bad]}).content.decode()
        assert "is not a session id" in body and not confirm_form(body)
        response = client.post(
            reverse("merge_execute"), {"ids": [ids[0], bad], "fingerprint": "abc"}
        )
        assert response.status_code == 200
        assert "not a session id" in response.content.decode()
    nul_id = reverse("session_history", args=["marker"]).replace("marker", "a%00b")
    assert client.get(nul_id, headers=HX).status_code == 404
    assert store_snapshot("sessions", "messages", "conversations", "merges") == before
    assert not AuditEntry.objects.exclude(outcome="refused").exists()


def test_the_forks_page_shows_its_groups_a_page_at_a_time(signed_in, monkeypatch):
    monkeypatch.setattr(merge_views, "FORK_GROUPS_PER_PAGE", 2)
    groups = [
        forked_conversation(f"slug-{n}", started_at=1000.0 * (n + 1), response_id=f"r{n}-{{n}}")
        for n in range(3)
    ]
    client = signed_in("viewer")

    def shown(body: str) -> set[str]:
        return {
            ids[0] for ids in groups if f'href="{reverse("session_detail", args=[ids[0]])}"' in body
        }

    first = client.get(reverse("fork_list")).content.decode()
    assert "3 fork groups" in first and "Groups 1–2 of 3" in first
    assert first.count('class="act-card fork-group"') == 2
    assert 'rel="next" href="/forks/?page=2"' in first and 'rel="prev"' not in first
    second = client.get(reverse("fork_list") + "?page=2").content.decode()
    assert second.count('class="act-card fork-group"') == 1
    assert "Groups 3–3 of 3" in second and 'rel="prev" href="/forks/"' in second
    assert 'rel="next"' not in second
    # Every group is on exactly one page.
    assert shown(first) | shown(second) == {ids[0] for ids in groups}
    assert not shown(first) & shown(second)
    # A page past the end shows the last; a page that is not a number, the first.
    assert shown(client.get(reverse("fork_list") + "?page=99").content.decode()) == shown(second)
    for bad in ("abc", "-1", "0", "1e3", "９"):
        body = client.get(reverse("fork_list"), {"page": bad}).content.decode()
        assert shown(body) == shown(first), bad
