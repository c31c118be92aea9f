"""Support actions on the session detail page: resume (with its preflight), reset, undo, redo, retry."""

from __future__ import annotations

import html
import json
import re
import sqlite3

import psycopg
import pytest
from django.db import connections
from django.test import Client
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core.transcript import plan_rewrite
from sessions_admin.ledger.models import AuditEntry, AuditSession
from tests.builders import store_snapshot
from tests.console.pages import detail, flashed, hidden
from tests.helpers import messages, session

HX = {"HX-Request": "true"}
SCRIPT = "<script>alert(1)</script>"
ACTIONS = ["session_reset", "session_undo", "session_redo", "session_retry", "session_resume"]
REWRITES = ["session_undo", "session_redo", "session_retry"]
CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


# --- builders and readers ---------------------------------------------------------------------


def chat(key: str | None = "tg:dm:1", *, title: str | None = None, **fields) -> str:
    """A live session with two turns; the second one uses a tool (6 messages, 1 tool call)."""
    ref = core.create_session(source="telegram", session_key=key, title=title, **fields)
    core.append_messages(
        session_id=ref.session_id,
        messages=[
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "second question"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "tool result"},
            {"role": "assistant", "content": "second answer"},
        ],
    )
    return ref.session_id


def url(name: str, session_id: str) -> str:
    return reverse(name, args=[session_id])


def nul_url(name: str) -> str:
    """The action's URL for the id ``bad<NUL>id``, which reverse() refuses to build."""
    return url(name, "marker").replace("marker", "bad%00id")


def active_flags(session_id: str) -> list[tuple[str, int]]:
    return [(m["content"] or m["role"], int(m["active"])) for m in messages(session_id)]


def counters(session_id: str) -> tuple[int, int, int]:
    row = session(session_id)
    return row["message_count"], row["tool_call_count"], row["rewind_count"]


def audit(action: str) -> list[AuditEntry]:
    # Refused attempts are recorded too (tests/security/test_refusals.py): not actions.
    return list(AuditEntry.objects.filter(action=action).exclude(outcome="refused").order_by("id"))


def linked(entry: AuditEntry) -> set[str]:
    return set(AuditSession.objects.filter(entry=entry).values_list("session_id", flat=True))


# --- who may do what --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["session_reset", *REWRITES])
def test_get_is_refused_for_every_action(signed_in, name):
    ref = chat()
    before = store_snapshot()
    assert signed_in("admin").get(url(name, ref)).status_code == 405
    assert store_snapshot() == before


def test_get_of_the_resume_url_is_the_preflight_and_changes_nothing(signed_in):
    ref = chat()
    core.end_session(session_id=ref, end_reason="lru_evict")
    before = store_snapshot()
    response = signed_in("viewer").get(url("session_resume", ref))
    assert response.status_code == 200
    assert store_snapshot() == before
    assert not audit("resume")


@pytest.mark.parametrize("name", ACTIONS)
@pytest.mark.parametrize("role", ["viewer", None])
def test_viewers_and_roleless_operators_are_forbidden(signed_in, name, role):
    ref = chat()
    core.end_session(session_id=ref, end_reason="lru_evict")
    before = store_snapshot()
    client = signed_in(role)
    assert client.post(url(name, ref), {"summary": "x"}).status_code == 403
    assert client.post(url(name, "no-such-session")).status_code == 403
    assert store_snapshot() == before
    assert not AuditEntry.objects.exclude(outcome="refused").exists()


def test_roleless_operators_cannot_see_the_preflight(signed_in):
    ref = chat()
    assert signed_in(None).get(url("session_resume", ref)).status_code == 403


@pytest.mark.parametrize("name", ACTIONS)
def test_anonymous_visitors_are_sent_to_login(client, name):
    ref = chat()
    before = store_snapshot()
    response = client.post(url(name, ref))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert store_snapshot() == before


@pytest.mark.parametrize("name", ACTIONS)
@pytest.mark.parametrize("role", ["support", "admin"])
def test_an_unknown_session_is_not_found(signed_in, name, role):
    chat()
    before = store_snapshot()
    client = signed_in(role)
    assert client.post(url(name, "no-such-session")).status_code == 404
    assert client.post(nul_url(name)).status_code == 404
    assert store_snapshot() == before
    assert not AuditEntry.objects.exclude(outcome="refused").exists()


def test_the_preflight_of_an_unknown_session_is_not_found(signed_in):
    client = signed_in("viewer")
    assert client.get(url("session_resume", "no-such-session")).status_code == 404
    assert client.get(nul_url("session_resume")).status_code == 404


@pytest.mark.parametrize("name", ACTIONS)
def test_a_post_without_the_csrf_token_is_refused(operator_factory, name):
    ref = chat()
    core.end_session(session_id=ref, end_reason="lru_evict")
    before = store_snapshot()
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator_factory("admin"))
    response = client.post(url(name, ref), {"summary": "x"})
    assert response.status_code == 403
    assert b"CSRF" in response.content
    assert store_snapshot() == before
    assert not AuditEntry.objects.exclude(outcome="refused").exists()


def test_a_post_with_the_csrf_token_goes_through(operator_factory):
    ref = chat()
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator_factory("support"))
    page = client.get(detail(ref)).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    response = client.post(url("session_undo", ref), {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert counters(ref)[0] == 2


# --- the panel on the detail page ---------------------------------------------------------------


def test_viewers_see_no_actions_panel_but_the_history(signed_in):
    ref = chat()
    body = signed_in("viewer").get(detail(ref)).content.decode()
    assert 'id="session-actions"' not in body
    for name in ACTIONS:
        assert url(name, ref) not in body
    assert f'hx-get="{reverse("session_history", args=[ref])}" hx-trigger="load"' in body
    assert f'href="{reverse("audit_log")}?session={ref}"' in body


def test_support_sees_the_panel_without_delete(signed_in):
    ref = chat()
    body = signed_in("support").get(detail(ref)).content.decode()
    panel = body[
        body.index('id="session-actions"') : body.index(
            "</section>", body.index('id="session-actions"')
        )
    ]
    for name in ["session_undo", "session_retry", "session_reset"]:
        assert f'action="{url(name, ref)}"' in panel
    # Nothing was undone yet: Redo says so instead of offering a form.
    assert url("session_redo", ref) not in panel
    assert "nothing to redo" in panel
    assert f'href="{url("session_resume", ref)}"' in panel
    assert f'action="{reverse("merge_preview")}"' in panel
    assert f'name="ids" value="{ref}"' in panel
    assert reverse("fork_list") in panel
    assert reverse("cascade_delete", args=[ref]) not in body
    assert "css/actions.css" in body
    assert "Undo last turn" in panel and "Redo" in panel and "Retry" in panel


def test_admins_also_get_the_cascade_delete_link(signed_in):
    ref = chat()
    body = signed_in("admin").get(detail(ref)).content.decode()
    assert 'id="session-actions"' in body
    assert f'href="{reverse("cascade_delete", args=[ref])}"' in body


def test_a_session_without_a_key_offers_no_reset(signed_in):
    ref = chat(key=None)
    body = signed_in("support").get(detail(ref)).content.decode()
    assert 'id="session-actions"' in body
    assert url("session_reset", ref) not in body
    assert "nothing to reset" in body


def test_the_reset_form_names_the_live_session_it_ends(signed_in):
    old = chat("tg:dm:5")
    core.end_session(session_id=old, end_reason="idle_expiry")
    live = chat("tg:dm:5")
    body = signed_in("support").get(detail(old)).content.decode()
    form = body[body.index(f'action="{url("session_reset", old)}"') :]
    form = form[: form.index("</form>")]
    assert hidden(form, "live") == live
    assert f"<code>{live}</code>" in form


# --- undo, redo, retry ------------------------------------------------------------------------


def test_undo_redo_and_retry_change_active_rows_and_counters_exactly(signed_in):
    ref = chat()
    other = chat("tg:dm:2")
    other_before = (messages(other), session(other))
    client = signed_in("support")
    everything = [
        ("first question", 1),
        ("first answer", 1),
        ("second question", 1),
        ("assistant", 1),
        ("tool result", 1),
        ("second answer", 1),
    ]
    assert active_flags(ref) == everything
    assert counters(ref) == (6, 1, 0)

    response = client.post(url("session_undo", ref))
    assert response.status_code == 302
    assert active_flags(ref) == [*everything[:2], *[(c, 0) for c, _ in everything[2:]]]
    assert counters(ref) == (2, 0, 1)
    undone = [m["id"] for m in messages(ref)][2:]
    assert response["Location"] == f"{detail(ref)}?around={undone[0]}#m{undone[0]}"
    assert any("Undid the last turn: 4 messages" in m for m in flashed(response))

    response = client.post(url("session_redo", ref))
    assert response.status_code == 302
    assert active_flags(ref) == everything
    assert counters(ref) == (6, 1, 1)
    assert any("Redid" in m for m in flashed(response))

    response = client.post(url("session_retry", ref))
    assert response.status_code == 302
    assert active_flags(ref) == [*everything[:3], *[(c, 0) for c, _ in everything[3:]]]
    assert counters(ref) == (3, 0, 2)
    assert any("Dropped the last reply" in m for m in flashed(response))

    client.post(url("session_redo", ref))
    assert active_flags(ref) == everything
    assert counters(ref) == (6, 1, 2)
    assert (messages(other), session(other)) == other_before

    entries = [(e.action, e.outcome) for e in AuditEntry.objects.order_by("id")]
    assert entries == [("undo", "ok"), ("redo", "ok"), ("retry", "ok"), ("redo", "ok")]
    undo = audit("undo")[0]
    assert undo.actor_name == "op-support"
    assert undo.after["message_ids"] == undone
    assert undo.after["message_count"] == 2
    assert linked(undo) == {ref}


def test_undo_with_htmx_returns_the_panel_and_a_change_event(signed_in):
    ref = chat()
    client = signed_in("support")
    response = client.post(url("session_undo", ref), headers=HX)
    assert response.status_code == 200
    trigger = json.loads(response["HX-Trigger"])
    undone = [m["id"] for m in messages(ref)][2:]
    assert trigger["session-changed"] == {"session": ref, "action": "undo", "messages": undone}
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="session-actions"')
    assert "Undid the last turn" in body
    assert f'href="{detail(ref)}?around={undone[0]}#m{undone[0]}"' in body
    assert counters(ref) == (2, 0, 1)
    assert not flashed(response)  # shown in the panel, not left for the next page

    # What listens to the event: the transcript and the counters reload with the change.
    page = client.get(detail(ref)).content.decode()
    assert 'hx-trigger="session-changed from:body"' in page
    transcript = client.get(detail(ref), headers=HX).content.decode()
    assert transcript.lstrip().startswith('<section id="transcript"')
    marked = re.findall(r'class="[^"]*\binactive\b[^"]*" id="m(\d+)"', transcript)
    assert [int(m) for m in marked] == undone
    meta = client.get(detail(ref) + "?part=meta", headers=HX).content.decode()
    assert meta.lstrip().startswith('<section id="meta"')
    assert re.search(r'<dd class="num">2 <span class="hint">active</span> · 1 rewind<', meta)
    lineage = client.get(detail(ref) + "?part=lineage", headers=HX).content.decode()
    assert lineage.lstrip().startswith('<section id="lineage"')
    assert "2 messages" in lineage


def test_nothing_to_undo_is_a_message_and_changes_nothing(signed_in):
    ref = core.create_session(source="cli", session_key="k:empty").session_id
    core.append_message(session_id=ref, role="system", content="you are helpful")
    before = store_snapshot()
    client = signed_in("support")
    for name, words in [
        ("session_undo", "no turn to undo"),
        ("session_redo", "nothing to redo"),
        ("session_retry", "no reply to retry"),
    ]:
        response = client.post(url(name, ref))
        assert response.status_code == 302
        assert response["Location"] == detail(ref)
        assert any(words in m and "Nothing changed" in m for m in flashed(response))
        response = client.post(url(name, ref), headers=HX)
        assert response.status_code == 200
        assert "HX-Trigger" not in response
        assert words in response.content.decode()
    assert store_snapshot() == before
    # Refusals are audited too.
    assert {(e.action, e.outcome) for e in AuditEntry.objects.all()} == {
        ("undo", "failed"),
        ("redo", "failed"),
        ("retry", "failed"),
    }


def test_redo_after_everything_was_redone_is_nothing_to_redo(signed_in):
    ref = chat()
    client = signed_in("support")
    client.post(url("session_undo", ref))
    client.post(url("session_redo", ref))
    before = store_snapshot()
    response = client.post(url("session_redo", ref), headers=HX)
    assert "nothing to redo" in response.content.decode()
    assert store_snapshot() == before


def test_an_older_compression_segment_says_where_the_conversation_continues(signed_in):
    root = chat("tg:dm:3")
    tip = core.rotate_for_compression(session_id=root, summary="summary").new_session_id
    body = signed_in("support").get(detail(root)).content.decode()
    panel = body[body.index('id="session-actions"') :]
    panel = panel[: panel.index("</section>")]
    assert f'href="{detail(tip)}#session-actions"' in panel
    assert "undo, redo or retry its latest turn there" in panel
    for name in REWRITES:
        assert f'action="{url(name, tip)}"' not in panel
        assert f'action="{url(name, root)}"' not in panel


# --- reset ------------------------------------------------------------------------------------


def test_reset_ends_the_live_session_and_starts_a_linked_one(signed_in):
    ref = chat("tg:dm:9", user_id="u9", chat_id="c9", model="m1")
    client = signed_in("support")
    response = client.post(
        url("session_reset", ref), {"summary": "We were talking about refunds.", "live": ref}
    )
    assert response.status_code == 302
    new = core.live_session_for_key("tg:dm:9")
    assert new and new != ref
    assert response["Location"] == detail(new)
    old_row, new_row = session(ref), session(new)
    assert old_row["ended_at"] is not None and old_row["end_reason"] == "session_reset"
    assert new_row["ended_at"] is None
    assert json.loads(new_row["model_config"])["_reset_from"] == ref
    assert (new_row["user_id"], new_row["chat_id"], new_row["model"]) == ("u9", "c9", "m1")
    assert [(m["role"], m["content"]) for m in messages(new)] == [
        ("system", "We were talking about refunds.")
    ]
    assert new_row["message_count"] == 1
    assert counters(ref)[0] == 6  # the old transcript is untouched
    assert f"Reset: ended {ref} (session_reset), started {new}" in " ".join(flashed(response))
    (entry,) = audit("reset")
    assert entry.outcome == "ok"
    assert entry.after == {"ended": ref, "new": new}
    assert ref in linked(entry)

    page = client.get(response["Location"]).content.decode()
    assert f"Reset: ended {ref} (session_reset), started {new}" in page


def test_reset_without_a_summary_starts_an_empty_session(signed_in):
    ref = chat("tg:dm:10")
    response = signed_in("admin").post(url("session_reset", ref), {"summary": "  "})
    new = core.live_session_for_key("tg:dm:10")
    assert response["Location"] == detail(new)
    assert messages(new) == []


def test_a_summary_the_store_cannot_hold_is_a_message(signed_in):
    ref = chat("tg:dm:12")
    before = store_snapshot()
    client = signed_in("support")
    for summary in ["a\x00b", "x" * 20_001]:
        response = client.post(url("session_reset", ref), {"summary": summary})
        assert response["Location"] == detail(ref)
        assert any("Nothing changed" in m for m in flashed(response))
    assert store_snapshot() == before
    # A NUL in the reason is refused like everywhere else (issue 14: one rule for every POST;
    # this box used to drop it silently and audit "ab"): nothing changes, then "ab" goes through.
    response = client.post(url("session_reset", ref), {"summary": "ok", "reason": "a\x00b"})
    assert response.status_code == 302
    assert any("NUL" in m for m in flashed(response))
    assert store_snapshot() == before and not audit("reset")
    response = client.post(url("session_reset", ref), {"summary": "ok", "reason": "ab"})
    assert response.status_code == 302
    assert audit("reset")[0].reason == "ab"


def test_reset_of_a_session_without_a_key_is_a_message(signed_in):
    ref = chat(key=None)
    before = store_snapshot()
    response = signed_in("support").post(url("session_reset", ref), {"summary": "s"})
    assert response.status_code == 302
    assert response["Location"] == detail(ref)
    assert any("has no session key" in m for m in flashed(response))
    assert store_snapshot() == before
    assert not audit("reset")


def test_reset_refuses_when_the_live_session_changed_since_the_page(signed_in):
    old = chat("tg:dm:11")
    client = signed_in("support")
    page = client.get(detail(old)).content.decode()
    assert hidden(page, "live") == old
    newer = chat("tg:dm:11")  # the runtime started a new session meanwhile
    before = store_snapshot()
    response = client.post(url("session_reset", old), {"live": old, "summary": "s"})
    assert response["Location"] == detail(old)
    assert any(f"changed since the page was shown (now {newer})" in m for m in flashed(response))
    assert store_snapshot() == before


# --- resume -----------------------------------------------------------------------------------


def compressed_and_replaced(key: str = "tg:dm:20") -> tuple[str, str, str]:
    """A compressed conversation (root -> tip) that was evicted, then a new live session."""
    root = chat(key, title="Refund for order 8812")
    tip = core.rotate_for_compression(session_id=root, summary="summary").new_session_id
    core.append_messages(
        session_id=tip,
        messages=[
            {"role": "user", "content": "third question"},
            {"role": "assistant", "content": "third answer"},
        ],
    )
    core.end_session(session_id=tip, end_reason="lru_evict")
    newer = chat(key)
    return root, tip, newer


def test_the_preflight_names_the_compression_tip_then_resume_reopens_it(signed_in):
    root, tip, newer = compressed_and_replaced()
    client = signed_in("support")
    page = client.get(url("session_resume", root)).content.decode()
    assert re.search(rf'class="sa-target-id">{tip}<', page)
    assert "older compression segment" in page
    assert re.search(r'class="sa-size">3 messages', page)  # summary + one turn
    assert "evicted from the runtime&#x27;s cache" in page
    assert re.search(rf'class="sa-switch-id">{newer}<', page)
    assert hidden(page, "target") == tip
    assert hidden(page, "switch_from") == newer

    response = client.post(
        url("session_resume", root),
        {"target": hidden(page, "target"), "switch_from": hidden(page, "switch_from")},
    )
    assert response.status_code == 302
    assert response["Location"] == detail(tip)
    tip_row, root_row, newer_row = session(tip), session(root), session(newer)
    assert tip_row["ended_at"] is None and tip_row["end_reason"] is None
    assert newer_row["ended_at"] is not None and newer_row["end_reason"] == "session_switch"
    assert root_row["end_reason"] == "compression"  # the old segment stays closed
    assert core.live_session_for_key("tg:dm:20") == tip
    text = " ".join(flashed(response))
    assert f"Resumed {tip}" in text and f"{newer} was switched away from" in text
    (entry,) = audit("resume")
    assert entry.outcome == "ok"
    assert entry.after == {"resumed": tip, "switched_from": newer}
    assert root in linked(entry)


def test_the_preflight_of_a_merged_session_names_the_merge_target(signed_in):
    target = chat("tg:dm:30")
    core.end_session(session_id=target, end_reason="lru_evict")
    absorbed = chat("tg:dm:31")
    core.end_session(session_id=absorbed, end_reason="lru_evict")
    plan = core.plan_merge(session_ids=[target, absorbed], target_id=target)
    core.merge_sessions(
        session_ids=[target, absorbed], target_id=target, expected_fingerprint=plan.fingerprint
    )
    assert session(absorbed)["end_reason"] == "merged"
    client = signed_in("support")
    page = client.get(url("session_resume", absorbed)).content.decode()
    assert re.search(rf'class="sa-target-id">{target}<', page)
    assert "was merged into another session" in page
    response = client.post(url("session_resume", absorbed), {"target": hidden(page, "target")})
    assert response["Location"] == detail(target)
    assert session(target)["ended_at"] is None
    assert session(absorbed)["end_reason"] == "merged"


def test_other_methods_on_the_resume_url_are_refused(signed_in):
    ref = chat()
    assert signed_in("admin").put(url("session_resume", ref)).status_code == 405


def test_resume_of_a_session_of_its_own(signed_in):
    ref = chat(key=None)
    core.end_session(session_id=ref, end_reason="agent_close")
    client = signed_in("admin")
    page = client.get(url("session_resume", ref)).content.decode()
    assert "closed by the agent" in page
    assert "no session key" in page
    response = client.post(url("session_resume", ref))
    assert response["Location"] == detail(ref)
    assert session(ref)["ended_at"] is None


def test_the_preflight_of_a_live_session_offers_nothing_to_resume(signed_in):
    ref = chat()
    page = signed_in("support").get(url("session_resume", ref)).content.decode()
    assert "there is nothing to resume" in page
    assert 'name="target"' not in page


def test_viewers_see_the_preflight_without_the_confirm_form(signed_in):
    root, tip, _ = compressed_and_replaced()
    page = signed_in("viewer").get(url("session_resume", root)).content.decode()
    assert re.search(rf'class="sa-target-id">{tip}<', page)
    assert 'name="target"' not in page
    assert "not resume sessions" in page


def test_a_preflight_gone_stale_resumes_nothing(signed_in):
    root, tip, newer = compressed_and_replaced()
    client = signed_in("support")
    page = client.get(url("session_resume", root)).content.decode()
    newest = chat("tg:dm:20")  # the runtime switched again before the confirm
    before = store_snapshot()
    response = client.post(
        url("session_resume", root),
        {"target": hidden(page, "target"), "switch_from": hidden(page, "switch_from")},
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert "Nothing was resumed" in body and f"now {newest}" in body
    assert hidden(body, "switch_from") == newest  # the new preflight, to confirm again
    assert store_snapshot() == before
    assert not audit("resume")


def test_resume_by_title_or_id_prefix(signed_in):
    root, tip, newer = compressed_and_replaced()
    client = signed_in("support")
    response = client.get(url("session_resume", newer) + "?ref=Refund for order 8812")
    assert response.status_code == 302
    assert response["Location"] == url("session_resume", root)
    response = client.get(url("session_resume", newer), {"ref": tip[:-2]})
    assert response["Location"] == url("session_resume", tip)


def test_an_ambiguous_or_unknown_reference_is_explained(signed_in):
    ids = [core.create_session(source="cli", session_id=f"abcd-{n}").session_id for n in range(3)]
    client = signed_in("support")
    body = client.get(url("session_resume", ids[0]), {"ref": "abcd"}).content.decode()
    assert "more than one session id" in body
    for sid in ids:
        assert f'href="{url("session_resume", sid)}"' in body
    body = client.get(url("session_resume", ids[0]), {"ref": "zzzz-nothing"}).content.decode()
    assert "No session has the id or title &#x27;zzzz-nothing&#x27;" in body
    body = client.get(url("session_resume", ids[0]), {"ref": "ab"}).content.decode()
    assert "at least 4 characters" in body
    body = client.get(url("session_resume", ids[0]), {"ref": SCRIPT}).content.decode()
    assert SCRIPT not in body
    body = client.get(url("session_resume", ids[0]), {"ref": "a\x00b"}).content.decode()
    assert "not a session id" in body


def test_titles_are_escaped_on_the_preflight_and_panel(signed_in):
    ref = chat(title=SCRIPT)
    core.end_session(session_id=ref, end_reason="user_exit")
    client = signed_in("admin")
    assert SCRIPT not in client.get(url("session_resume", ref)).content.decode()
    assert SCRIPT not in client.get(detail(ref)).content.decode()


# --- a busy store -----------------------------------------------------------------------------


def hold_write_lock(session_ids: list[str]):
    """The runtime, in another process, holding the lock an action needs."""
    store = connections["store"]
    params = store.get_connection_params()
    if store.vendor == "sqlite":
        other = sqlite3.connect(params["database"], isolation_level=None, timeout=1)
        other.execute("BEGIN IMMEDIATE")
        return other
    other = psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"})
    for session_id in session_ids:
        other.execute("SELECT id FROM sessions WHERE id = %s FOR UPDATE", [session_id])
    return other


def test_a_busy_store_is_a_message_never_a_500(signed_in, short_waits):
    root, tip, newer = compressed_and_replaced()
    client = signed_in("support")
    before = store_snapshot()
    other = hold_write_lock([root, tip, newer])
    try:
        response = client.post(url("session_undo", newer), headers=HX)
        assert response.status_code == 200
        assert "HX-Trigger" not in response
        assert "The store is busy" in response.content.decode()

        response = client.post(url("session_retry", newer))
        assert response.status_code == 302
        assert any("The store is busy" in m for m in flashed(response))

        response = client.post(url("session_reset", newer), {"summary": "s"})
        assert response.status_code == 302
        assert any("Reset failed" in m and "busy" in m for m in flashed(response))

        response = client.post(url("session_resume", tip))
        assert response.status_code == 200
        assert "Nothing was resumed" in response.content.decode()
        assert "The store is busy" in response.content.decode()
    finally:
        other.rollback()
        other.close()
    assert store_snapshot() == before
    assert {(e.action, e.outcome) for e in AuditEntry.objects.all()} == {
        ("undo", "failed"),
        ("retry", "failed"),
        ("reset", "failed"),
        ("resume", "failed"),
    }
    # Once the runtime lets go, the same action goes through.
    assert client.post(url("session_undo", newer)).status_code == 302
    assert counters(newer) == (2, 0, 1)


def test_an_ended_segment_links_to_the_live_session_instead_of_rewinding(signed_in):
    old = chat("tg:dm:40")
    live = core.reset_session_key(session_key="tg:dm:40").new_session_id
    core.append_message(session_id=live, role="user", content="new question")
    core.append_message(session_id=live, role="assistant", content="its answer")
    client = signed_in("support")
    body = client.get(detail(old)).content.decode()
    panel = body[body.index('id="session-actions"') :]
    panel = panel[: panel.index("</section>")]
    # No undo, redo or retry acts from the old segment's page, on it or on the live one.
    for name in REWRITES:
        assert url(name, old) not in panel
        assert url(name, live) not in panel
    assert 'class="sa-live-link"' in panel
    assert f'href="{detail(live)}#session-actions"' in panel
    # The live session's page is where the undo is, previewed.
    live_panel = client.get(detail(live)).content.decode()
    assert f'action="{url("session_undo", live)}"' in live_panel


def test_undo_posted_for_an_ended_segment_is_refused_and_names_the_live_session(signed_in):
    old = chat("tg:dm:41")
    live = core.reset_session_key(session_key="tg:dm:41").new_session_id
    before = store_snapshot()
    client = signed_in("support")
    response = client.post(url("session_undo", old), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    text = html.unescape(response.content.decode())
    assert "refused, nothing changed" in text and f'href="{detail(live)}"' in text
    assert store_snapshot() == before
    failed = AuditEntry.objects.get(action="undo")
    assert failed.outcome == "failed" and live in failed.detail


def test_a_session_ended_with_nothing_live_offers_no_rewind(signed_in):
    ref = chat(None)
    core.end_session(session_id=ref, end_reason="user_exit")
    body = signed_in("support").get(detail(ref)).content.decode()
    panel = body[body.index('id="session-actions"') :]
    panel = panel[: panel.index("</section>")]
    assert url("session_undo", ref) not in panel
    assert "cannot be undone or retried" in panel


# --- the previewed rewinds ---------------------------------------------------------------------


def panel_of(body: str) -> str:
    start = body.index('<section id="session-actions"')
    return body[start : body.index("</section>", start)]


def rewind_box(panel: str, action: str) -> str:
    """The rewind's <details>, whole (its preview nests a <details> per tool call)."""
    start = panel.index(f'<details class="sa-rewind" id="sa-{action}">')
    depth = 0
    for tag in re.finditer(r"<(/?)details\b", panel[start:]):
        depth += -1 if tag.group(1) else 1
        if depth == 0:
            return panel[start : start + tag.start()]
    raise AssertionError(f"the {action} box is not closed")


def test_undo_is_a_secondary_action_that_previews_the_messages_it_marks_undone(signed_in):
    ref = chat(title="Order 4411")
    ids = [m["id"] for m in messages(ref)]
    body = signed_in("support").get(detail(ref)).content.decode()
    undo = rewind_box(panel_of(body), "undo")
    # A secondary button that opens the preview, not a filled button that acts at once.
    assert '<summary class="sa-btn secondary">Undo last turn…</summary>' in undo
    assert [int(i) for i in re.findall(r'data-message="(\d+)"', undo)] == ids[2:]
    assert "second question" in undo and "tool result" in undo
    # The tool-call turn shows its call (name, arguments collapsed), paired with its result.
    assert "(no text)" not in undo
    call_turn, result = ids[3], ids[4]
    item = re.search(rf'<li data-message="{call_turn}">.*?</li>', undo, re.S).group(0)
    line = item[item.index('<details class="call-line">') :]
    assert '<span class="tool-name">lookup</span>' in line
    assert '<pre class="code">{}</pre>' in line
    assert f'<a class="call-result" href="{detail(ref)}?around={result}#m{result}">' in line
    answer = re.search(rf'<li data-message="{result}">.*?</li>', undo, re.S).group(0)
    assert f'result of <a href="{detail(ref)}?around={call_turn}#m{call_turn}">lookup</a>' in answer
    assert "first question" not in undo
    assert "Undo these 4 messages" in undo
    plan = plan_rewrite(session_id=ref, action="undo")
    assert plan.message_ids == tuple(ids[2:])
    assert hidden(undo, "fingerprint") == plan.fingerprint

    retry = rewind_box(panel_of(body), "retry")
    assert [int(i) for i in re.findall(r'data-message="(\d+)"', retry)] == ids[3:]
    assert "second question" not in retry
    assert hidden(retry, "fingerprint") == plan_rewrite(session_id=ref, action="retry").fingerprint
    assert counters(ref) == (6, 1, 0)  # looking changes nothing


def test_the_previewed_undo_marks_exactly_the_previewed_messages(signed_in):
    ref = chat()
    client = signed_in("support")
    undo = rewind_box(panel_of(client.get(detail(ref)).content.decode()), "undo")
    response = client.post(url("session_undo", ref), {"fingerprint": hidden(undo, "fingerprint")})
    assert response.status_code == 302
    assert [m["id"] for m in messages(ref) if not m["active"]] == [
        int(i) for i in re.findall(r'data-message="(\d+)"', undo)
    ]
    # Redo now previews what the undo took.
    redo = rewind_box(panel_of(client.get(detail(ref)).content.decode()), "redo")
    assert "Bring back 4 messages" in redo
    response = client.post(
        url("session_redo", ref), {"fingerprint": hidden(redo, "fingerprint")}, headers=HX
    )
    assert response.status_code == 200
    assert all(m["active"] for m in messages(ref))


def test_an_undo_previewed_before_the_runtime_wrote_again_changes_nothing(signed_in):
    ref = chat()
    client = signed_in("support")
    undo = rewind_box(panel_of(client.get(detail(ref)).content.decode()), "undo")
    shown = hidden(undo, "fingerprint")
    # The runtime answers a new question after the page was shown: the last turn is another.
    new = core.append_messages(
        session_id=ref,
        messages=[
            {"role": "user", "content": "third question"},
            {"role": "assistant", "content": "third answer"},
        ],
    ).message_ids
    before = store_snapshot()
    response = client.post(url("session_undo", ref), {"fingerprint": shown}, headers=HX)
    assert response.status_code == 200
    assert "HX-Trigger" not in response
    body = response.content.decode()
    assert "Undo last turn refused, nothing changed" in body
    assert store_snapshot() == before
    entry = AuditEntry.objects.get(action="undo")
    assert entry.outcome == "failed" and "changed since" in entry.detail
    # The panel now previews the new last turn; confirming it undoes just that.
    undo = rewind_box(panel_of(body), "undo")
    assert [int(i) for i in re.findall(r'data-message="(\d+)"', undo)] == list(new)
    response = client.post(url("session_undo", ref), {"fingerprint": hidden(undo, "fingerprint")})
    assert response.status_code == 302
    assert [m["id"] for m in messages(ref) if not m["active"]] == list(new)
    assert counters(ref) == (6, 1, 1)


def test_a_redo_or_retry_previewed_stale_changes_nothing(signed_in):
    ref = chat()
    client = signed_in("support")
    retry = rewind_box(panel_of(client.get(detail(ref)).content.decode()), "retry")
    core.append_message(session_id=ref, role="assistant", content="a late addendum")
    before = store_snapshot()
    response = client.post(url("session_retry", ref), {"fingerprint": hidden(retry, "fingerprint")})
    assert response.status_code == 302
    assert any("Retry refused, nothing changed" in m for m in flashed(response))
    assert store_snapshot() == before


def test_the_preview_cuts_long_turns_and_long_texts(signed_in):
    ref = core.create_session(source="cli", session_key="k:long").session_id
    core.append_messages(
        session_id=ref,
        messages=[
            {"role": "user", "content": "x" * 5000 + SCRIPT},
            *({"role": "assistant", "content": f"part {n}"} for n in range(11)),
        ],
    )
    undo = rewind_box(panel_of(signed_in("support").get(detail(ref)).content.decode()), "undo")
    assert len(re.findall(r'data-message="', undo)) == 8
    assert "and 4 more messages" in undo and "Undo these 12 messages" in undo
    assert "x" * 160 + "…" in undo and "x" * 161 not in undo
    assert SCRIPT not in undo


def test_an_undo_while_the_runtime_is_still_answering_is_refused_and_said(signed_in):
    """Attack 42 (G): the operator's undo waits for the runtime's reply (TurnInProgress)."""
    sid = core.create_session(source="telegram", session_key="tg:dm:mid").session_id
    core.append_message(session_id=sid, role="user", content="q1")
    core.append_message(session_id=sid, role="assistant", content="a1")
    core.append_message(session_id=sid, role="user", content="q2")  # being answered now
    client = signed_in("support")
    page = client.post(url("session_undo", sid), HTTP_HX_REQUEST="true").content.decode()
    assert "refused, nothing changed" in page and "still answering" in page
    assert counters(sid) == (3, 0, 0)
