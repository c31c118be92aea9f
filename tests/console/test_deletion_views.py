"""Cascade delete, bulk delete jobs and the trash through the console (admin only)."""

from __future__ import annotations

import re
from datetime import timedelta
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlparse

import pytest
from django.urls import reverse
from django.utils import timezone

from sessions_admin import core
from sessions_admin.console.forms import (
    BulkStartForm,
    CascadeConfirmForm,
    JobCancelForm,
    TrashPurgeForm,
)
from sessions_admin.core import db, deletion
from sessions_admin.ledger import jobs, worker
from sessions_admin.ledger.models import AuditEntry, DeleteJob, TrashEntry
from sessions_admin.routers import responses_alias
from tests.builders import store_snapshot
from tests.console.pages import messages_shown

HX = {"HX-Request": "true"}
SCRIPT = "<script>alert(1)</script>"


# ---------------------------------------------------------------------------
# Helpers


def session_ids() -> set[str]:
    return {r[0] for r in db.fetchall("SELECT id FROM sessions")}


class _Forms(HTMLParser):
    """The fields a browser would submit for each form, by the form's action."""

    def __init__(self):
        super().__init__()
        self.forms: dict[str, list[tuple[str, str]]] = {}
        self._action: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self._action = a.get("action", "")
            self.forms.setdefault(self._action, [])
        elif self._action is not None and tag == "input" and a.get("name"):
            kind = a.get("type", "text")
            if kind in {"checkbox", "radio"} and "checked" not in a:
                return
            self.forms[self._action].append((a["name"], a.get("value", "")))
        elif self._action is not None and tag == "textarea":
            self._textarea = a.get("name")
            self.forms[self._action].append((self._textarea, ""))

    def handle_data(self, data):
        if self._textarea is not None:
            name, value = self.forms[self._action][-1]
            self.forms[self._action][-1] = (name, value + data)

    def handle_endtag(self, tag):
        if tag == "form":
            self._action = None
        elif tag == "textarea":
            self._textarea = None


def form(body: str, action: str) -> dict[str, str | list[str]]:
    parser = _Forms()
    parser.feed(body)
    assert action in parser.forms, f"no form posting to {action}"
    fields: dict[str, list[str]] = {}
    for name, value in parser.forms[action]:
        fields.setdefault(name, []).append(value)
    fields.pop("csrfmiddlewaretoken", None)
    return {k: v[0] if len(v) == 1 else v for k, v in fields.items()}


def problems(body: str) -> str:
    match = re.search(r'<ul class="problems"[^>]*>(.*?)</ul>', body, re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", match.group(1))) if match else ""


def lineage() -> dict[str, str]:
    """A conversation: root -> compression tip, delegates, a branch, an untyped child; and another."""
    root = core.create_session(
        source="cli", session_key="cli:d", started_at=1.0, title=SCRIPT
    ).session_id
    core.append_messages(
        session_id=root,
        messages=[{"role": "user", "content": "alpha"}, {"role": "assistant", "content": "beta"}],
    )
    delegate = core.create_session(
        source="tool", parent_session_id=root, model_config={"_delegate_from": root}
    ).session_id
    core.append_message(session_id=delegate, role="assistant", content="sub-agent work")
    grand = core.create_session(
        source="tool", parent_session_id=delegate, model_config={"_delegate_from": delegate}
    ).session_id
    core.end_session(session_id=grand, end_reason="agent_close")
    core.end_session(session_id=delegate, end_reason="agent_close")
    tip = core.rotate_for_compression(session_id=root, summary="summary").new_session_id
    core.record_turn(response_id="resp-d", session_id=tip, conversation="slug-<b>d</b>")
    branch = core.branch_session(session_id=tip).new_session_id
    child = core.create_session(source="cli", parent_session_id=tip).session_id
    other = core.create_session(source="cli", session_key="cli:other").session_id
    core.append_message(session_id=other, role="user", content="unrelated")
    return {
        "root": root,
        "delegate": delegate,
        "grand": grand,
        "tip": tip,
        "branch": branch,
        "child": child,
        "other": other,
    }


def ended_sessions(n: int, *, source: str = "cli", messages: int = 2) -> list[str]:
    ids = []
    for i in range(n):
        sid = core.create_session(source=source, started_at=1000.0 + i).session_id
        if messages:
            core.append_messages(
                session_id=sid,
                messages=[{"role": "user", "content": f"m{i}-{k}"} for k in range(messages)],
            )
        core.end_session(session_id=sid, end_reason="user_exit")
        ids.append(sid)
    db.execute(
        f"UPDATE sessions SET ended_at = 5000 WHERE id IN ({db.placeholders(ids)})", ids
    )  # ended long ago
    return ids


@pytest.fixture(autouse=True)
def worker_calls(monkeypatch):
    """No background thread in these tests: record the calls, run jobs with jobs.run_job."""
    calls: list[int] = []
    monkeypatch.setattr(worker, "ensure_worker_running", lambda: calls.append(1))
    return calls


def cascade_url(sid: str) -> str:
    return reverse("cascade_delete", args=[sid])


def confirm_url(sid: str) -> str:
    return reverse("cascade_delete_confirm", args=[sid])


def trash_entry(reason: str = "cleanup") -> tuple[int, list[str]]:
    sid = ended_sessions(1)[0]
    plan = core.plan_cascade_delete(session_ids=[sid])
    result = core.execute_cascade_delete(
        session_ids=[sid], expected_fingerprint=plan.fingerprint, actor="ada", reason=reason
    )
    return result.trash_entry_ids[0], [sid]


# ---------------------------------------------------------------------------
# Access


@pytest.fixture
def targets():
    sid = core.create_session(source="cli").session_id
    old = ended_sessions(1)[0]
    job = jobs.create_bulk_delete_job(session_ids=[old], include_live=False, actor="a", reason="r")
    entry, _ = trash_entry()
    pages = [
        reverse("cascade_delete", args=[sid]),
        reverse("bulk_delete"),
        reverse("bulk_delete") + "?preset=empty",
        reverse("job_list"),
        reverse("job_detail", args=[job]),
        reverse("trash"),
    ]
    actions = [
        reverse("cascade_delete_confirm", args=[sid]),
        reverse("bulk_delete_preview"),
        reverse("bulk_delete_start"),
        reverse("job_cancel", args=[job]),
        reverse("trash_restore", args=[entry]),
        reverse("trash_purge"),
    ]
    return {"session": sid, "job": job, "entry": entry, "pages": pages, "actions": actions}


def _state() -> tuple:
    return (
        store_snapshot("sessions", "messages", "conversations", "responses"),
        list(DeleteJob.objects.values_list("pk", "state")),
        list(TrashEntry.objects.values_list("pk", "state")),
    )


def test_anonymous_visitors_are_sent_to_sign_in(client, targets):
    before = _state()
    for url in targets["pages"]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url
    for url in targets["actions"]:
        response = client.post(url, {"reason": "x", "scope": "all", "ids": [targets["session"]]})
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url
    assert _state() == before


@pytest.mark.parametrize("role", ["viewer", "support", None])
def test_viewers_and_support_get_403_everywhere(signed_in, targets, role):
    client = signed_in(role)
    before = _state()
    for url in targets["pages"]:
        assert client.get(url).status_code == 403, url
        assert client.get(url, headers=HX).status_code == 403, url
    for url in targets["actions"]:
        response = client.post(url, {"reason": "x", "scope": "all", "ids": [targets["session"]]})
        assert response.status_code == 403, url
    assert _state() == before
    assert not AuditEntry.objects.exclude(outcome="refused").exists()


def test_admins_see_every_page(admin, targets):
    for url in targets["pages"]:
        response = admin.get(url)
        assert response.status_code == 200, url
        assert b"<html" in response.content


def test_actions_refuse_get_and_pages_refuse_post(admin, targets):
    before = _state()
    for url in targets["actions"]:
        assert admin.get(url).status_code == 405, url
    for url in targets["pages"]:
        assert admin.post(url, {"reason": "x"}).status_code == 405, url
    assert _state() == before


def test_unknown_ids_are_404(admin, targets):
    assert admin.get(cascade_url("no-such-session")).status_code == 404
    assert admin.post(confirm_url("no-such-session"), {"reason": "x"}).status_code == 404
    assert admin.get(reverse("job_detail", args=[999999])).status_code == 404
    assert admin.post(reverse("job_cancel", args=[999999])).status_code == 404
    assert admin.post(reverse("trash_restore", args=[999999])).status_code == 404


# ---------------------------------------------------------------------------
# Cascade delete


def test_the_plan_shows_what_goes_and_what_stays(admin):
    ids = lineage()
    runner = core.create_session(
        source="tool", parent_session_id=ids["tip"], model_config={"_delegate_from": ids["tip"]}
    ).session_id
    response = admin.get(cascade_url(ids["tip"]))
    body = response.content.decode()
    assert response.status_code == 200
    for relation in ("picked", "compression", "delegate"):
        assert f'class="group relation-{relation}"' in body
    assert 'class="group relation-branch"' not in body
    picked = body[body.index("relation-picked") : body.index("relation-compression")]
    assert ids["root"] in picked
    delegates = body[body.index("relation-delegate") : body.index('id="group-responses"')]
    assert ids["delegate"] in delegates and ids["grand"] in delegates
    kept = body[body.index('class="group kept"') :]
    assert ids["branch"] in kept and ids["child"] in kept
    assert ids["other"] not in body
    assert "slug-&lt;b&gt;d&lt;/b&gt;" in body and "slug-<b>" not in body
    assert SCRIPT not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    # The running delegate is live: the warning names the live sessions in the set only.
    warning = body[body.index("live-warning") : body.index("What goes")]
    assert "1 session in this set is live" in warning
    assert runner in warning and ids["branch"] not in warning and ids["child"] not in warning
    assert 'name="typed_count"' not in body  # small plan: no typed confirmation

    with_branches = admin.get(cascade_url(ids["tip"]), {"include_branches": "1"})
    body = with_branches.content.decode()
    assert 'class="group relation-branch"' in body
    assert form(body, confirm_url(ids["tip"]))["include_branches"] == "1"

    fragment = admin.get(cascade_url(ids["tip"]), {"include_branches": "1"}, headers=HX)
    assert b"<html" not in fragment.content and b"relation-branch" in fragment.content
    assert "HX-Request" in fragment["Vary"]


def test_cascade_delete_removes_exactly_the_plan(admin):
    ids = lineage()
    page = admin.get(cascade_url(ids["root"])).content.decode()
    fields = form(page, confirm_url(ids["root"]))
    plan = core.plan_cascade_delete(session_ids=[ids["root"]])
    assert fields["fingerprint"] == plan.fingerprint
    fields["reason"] = "GDPR request 42"
    response = admin.post(confirm_url(ids["root"]), fields, follow=True)
    assert response.redirect_chain[-1][0] == reverse("trash")
    assert "Deleted 4 sessions and 4 messages; restorable from the trash." in messages_shown(
        response
    )
    assert session_ids() == {ids["branch"], ids["child"], ids["other"]}
    assert set(plan.session_ids) == {ids["root"], ids["tip"], ids["delegate"], ids["grand"]}
    assert db.fetchall("SELECT name FROM conversations", alias=responses_alias()) == []
    for kept in (ids["branch"], ids["child"]):
        assert db.fetchone("SELECT parent_session_id FROM sessions WHERE id = %s", [kept]) == (
            None,
        )
    entry = TrashEntry.objects.get()
    assert set(entry.session_ids) == set(plan.session_ids)
    assert entry.reason == "GDPR request 42" and entry.actor_name == "op-admin"
    audit = AuditEntry.objects.get(action="cascade_delete")
    assert audit.outcome == "ok" and audit.reason == "GDPR request 42"
    assert audit.after["deleted_sessions"] == 4
    # The trash page that follows lists the entry.
    assert ids["root"] in response.content.decode()


def test_deleting_branches_too_when_asked(admin):
    ids = lineage()
    page = admin.get(cascade_url(ids["root"]), {"include_branches": "1"}).content.decode()
    fields = form(page, confirm_url(ids["root"])) | {"reason": "whole tree"}
    assert admin.post(confirm_url(ids["root"]), fields).status_code == 302
    assert session_ids() == {ids["child"], ids["other"]}


@pytest.mark.parametrize(
    "change",
    [
        {"reason": ""},
        {"reason": "   "},
        {"fingerprint": "0" * 32},
        {"fingerprint": ""},
        {"reason": "x" * 2001},
    ],
)
def test_bad_confirmations_change_nothing(admin, change):
    ids = lineage()
    page = admin.get(cascade_url(ids["root"])).content.decode()
    fields = form(page, confirm_url(ids["root"])) | {"reason": "ok"} | change
    before = store_snapshot("sessions", "messages", "conversations", "responses")
    response = admin.post(confirm_url(ids["root"]), fields)
    assert response.status_code == 200
    assert "Nothing was deleted" in problems(response.content.decode()) or "reason" in problems(
        response.content.decode()
    )
    assert store_snapshot("sessions", "messages", "conversations", "responses") == before
    assert TrashEntry.objects.count() == 0
    # The page shows the plan again, with a fresh fingerprint to confirm.
    again = form(response.content.decode(), confirm_url(ids["root"]))
    assert again["fingerprint"] == core.plan_cascade_delete(session_ids=[ids["root"]]).fingerprint


def test_a_plan_that_changed_is_shown_again_and_nothing_is_deleted(admin):
    ids = lineage()
    page = admin.get(cascade_url(ids["root"])).content.decode()
    fields = form(page, confirm_url(ids["root"])) | {"reason": "stale"}
    newcomer = core.create_session(
        source="tool", parent_session_id=ids["root"], model_config={"_delegate_from": ids["root"]}
    ).session_id
    before = store_snapshot("sessions", "messages", "conversations", "responses")
    response = admin.post(confirm_url(ids["root"]), fields)
    body = response.content.decode()
    assert response.status_code == 200
    assert "The store changed since the plan was shown" in problems(body)
    assert newcomer in body  # the new plan includes the new delegate
    assert (
        store_snapshot("sessions", "messages", "conversations", "responses") == before
        and TrashEntry.objects.count() == 0
    )
    assert form(body, confirm_url(ids["root"]))["reason"] == "stale"  # kept for the retry


def _big_conversation(delegates: int = 21) -> str:
    root = core.create_session(source="cli").session_id
    for _ in range(delegates):
        core.create_session(
            source="tool", parent_session_id=root, model_config={"_delegate_from": root}
        )
    return root


@pytest.mark.parametrize("typed", [None, "", "21", "abc", "220"])
def test_large_plans_need_the_number_typed(admin, typed):
    root = _big_conversation()
    page = admin.get(cascade_url(root)).content.decode()
    assert 'name="typed_count"' in page
    fields = form(page, confirm_url(root)) | {"reason": "big"}
    fields.pop("typed_count", None)
    if typed is not None:
        fields["typed_count"] = typed
    before = store_snapshot("sessions", "messages", "conversations", "responses")
    response = admin.post(confirm_url(root), fields)
    assert response.status_code == 200
    assert "type the number of sessions this deletes (22)" in problems(response.content.decode())
    assert (
        store_snapshot("sessions", "messages", "conversations", "responses") == before
        and TrashEntry.objects.count() == 0
    )
    fields["typed_count"] = "22"
    assert admin.post(confirm_url(root), fields).status_code == 302
    assert session_ids() == set()


def typed_prompt(body: str) -> str | None:
    """The typed-confirmation prompt of a confirm form, as text (None: not asked)."""
    match = re.search(r'<label class="field typed"><span>(.*?)</span>\s*<input', body, re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", match.group(1))) if match else None


@pytest.mark.parametrize(
    "sessions, messages, asked",
    [(19, 0, False), (20, 0, True), (48, 0, True), (1, 999, False), (1, 1000, True)],
)
def test_one_typed_confirmation_rule_for_cascade_and_bulk_delete(admin, sessions, messages, asked):
    """The same set asks for the same confirmation, in the same words, on both pages."""
    root = _big_conversation(delegates=sessions - 1)
    if messages:
        core.append_messages(
            session_id=root, messages=[{"role": "user", "content": "m"}] * messages
        )
    core.end_session(session_id=root, end_reason="user_exit")
    for sid in session_ids():
        if sid != root:
            core.end_session(session_id=sid, end_reason="agent_close")
    cascade = admin.get(cascade_url(root)).content.decode()
    bulk = admin.get(reverse("bulk_delete"), {"preset": "by_source", "source": "cli"})
    bulk = bulk.content.decode()
    assert re.search(rf"data-count>{sessions}<", bulk)  # the root and its delegates
    expected = (
        f"This deletes {sessions} session{'s' if sessions != 1 else ''} and "
        f"{messages:,} message{'s' if messages != 1 else ''}. Type {sessions} to confirm."
        if asked
        else None
    )
    assert typed_prompt(cascade) == expected
    assert typed_prompt(bulk) == expected


@pytest.mark.parametrize(
    "typed", [None, "", "20", "abc", "210", "2,1", "2 1", "21.0", "+21", "２１"]
)
def test_large_bulk_deletes_need_the_number_typed(admin, typed):
    ended_sessions(21)
    page = admin.get(reverse("bulk_delete"), {"preset": "ended_older_than", "days": "30"})
    page = page.content.decode()
    assert typed_prompt(page) == "This deletes 21 sessions and 42 messages. Type 21 to confirm."
    fields = form(page, reverse("bulk_delete_start")) | {"reason": "retention"}
    fields.pop("typed_count", None)
    if typed is not None:
        fields["typed_count"] = typed
    before = _state()
    response = admin.post(reverse("bulk_delete_start"), fields)
    assert response.status_code == 200
    assert "type the number of sessions this deletes (21)" in problems(response.content.decode())
    assert _state() == before and DeleteJob.objects.count() == 0
    assert AuditEntry.objects.filter(action="bulk_delete", outcome="refused").count() == 1
    fields["typed_count"] = "21"
    assert admin.post(reverse("bulk_delete_start"), fields).status_code == 302
    assert DeleteJob.objects.get().total == 21


def test_a_small_bulk_delete_needs_only_a_reason(admin):
    ended_sessions(3)
    fields = _dry_run_fields(admin, {"preset": "ended_older_than", "days": "30"})
    assert "typed_count" not in fields
    response = admin.post(reverse("bulk_delete_start"), fields | {"reason": "r"})
    assert response.status_code == 302 and DeleteJob.objects.get().total == 3


# ---------------------------------------------------------------------------
# Bulk delete


def test_the_presets_page_offers_sources(admin):
    ended_sessions(1, source="telegram")
    core.create_session(source=SCRIPT)
    body = admin.get(reverse("bulk_delete")).content.decode()
    assert '<option value="telegram"' in body
    assert SCRIPT not in body and "&lt;script&gt;" in body
    assert "bulk-delete/start" not in body  # no dry run, no confirm form yet


def test_the_dry_run_counts_exactly_and_leaves_live_sessions_out(admin):
    old = ended_sessions(12, source="cli")
    recent = core.create_session(source="cli").session_id
    core.end_session(session_id=recent, end_reason="user_exit")
    live = core.create_session(source="cli").session_id
    response = admin.get(reverse("bulk_delete"), {"preset": "ended_older_than", "days": "1"})
    body = response.content.decode()
    assert response.status_code == 200
    assert re.search(r"data-count>12<", body)
    assert '24</span> <span class="stat-label">messages' in body
    assert body.count('<tr>\n          <td><a href="/sessions/') == 10  # a sample of 10
    fields = form(body, reverse("bulk_delete_start"))
    assert fields["preset"] == "ended_older_than" and fields["include_live"] == ""

    by_source = admin.get(reverse("bulk_delete"), {"preset": "by_source", "source": "cli"})
    body = by_source.content.decode()
    assert re.search(r"data-count>13<", body)
    assert '1</span> <span class="stat-label">live session left out' in body
    with_live = admin.get(
        reverse("bulk_delete"), {"preset": "by_source", "source": "cli", "include_live": "1"}
    )
    body = with_live.content.decode()
    assert re.search(r"data-count>14<", body)
    assert '1</span> <span class="stat-label">live session included' in body
    assert 'name="confirm_live"' in body
    assert set(old) | {recent, live} == session_ids()

    fragment = admin.get(reverse("bulk_delete"), {"preset": "empty"}, headers=HX)
    assert b"<html" not in fragment.content and b"Dry run" in fragment.content


def test_the_empty_preset_never_offers_or_counts_live_sessions(admin):
    # "empty" never takes a live session (docs/attach.md): the page must not offer to include
    # them nor say it did, whatever the URL says.
    ended = ended_sessions(1, messages=0)
    live = core.create_session(source="cli").session_id
    for params in ({"preset": "empty"}, {"preset": "empty", "include_live": "1"}):
        body = admin.get(reverse("bulk_delete"), params).content.decode()
        assert re.search(r"data-count>1<", body), body
        assert 'name="include_live" value="1"' not in body  # no checkbox to tick
        assert "live session included" not in body and 'name="confirm_live"' not in body
        assert "Live sessions are never part of this preset" in body
        assert "live ones only if you include them" not in body
    assert {*ended, live} <= session_ids()


@pytest.mark.parametrize(
    "params",
    [
        {"preset": "ended_older_than", "days": "-1"},
        {"preset": "ended_older_than", "days": "abc"},
        {"preset": "ended_older_than", "days": str(10**20)},
        {"preset": "ended_older_than", "days": "nan"},
        {"preset": "ended_older_than", "days": "inf"},
        {"preset": "ended_older_than", "days": ""},
        {"preset": "ended_older_than"},
        {"preset": "by_source", "source": ""},
        {"preset": "everything"},
        {"selection": "made-up-token"},
    ],
)
def test_bad_presets_are_explained(admin, params):
    ended_sessions(2)
    before = store_snapshot("sessions", "messages", "conversations", "responses")
    response = admin.get(reverse("bulk_delete"), params)
    body = response.content.decode()
    assert response.status_code == 200
    assert problems(body)
    assert "bulk-delete/start" not in body
    # Posting the same parameters to start does nothing either.
    response = admin.post(reverse("bulk_delete_start"), {**params, "reason": "r", "digest": "x"})
    assert response.status_code == 200 and problems(response.content.decode())
    assert store_snapshot("sessions", "messages", "conversations", "responses") == before
    assert DeleteJob.objects.count() == 0


def _dry_run_fields(client, params) -> dict:
    body = client.get(reverse("bulk_delete"), params).content.decode()
    return form(body, reverse("bulk_delete_start"))


def test_bulk_delete_runs_as_a_job(admin, worker_calls):
    old = ended_sessions(30)
    keep = core.create_session(source="cli").session_id
    fields = _dry_run_fields(admin, {"preset": "ended_older_than", "days": "30"})
    fields["reason"] = "retention"
    fields["typed_count"] = "30"  # 30 sessions: typed, as for a cascade of 30
    response = admin.post(reverse("bulk_delete_start"), fields)
    job = DeleteJob.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("job_detail", args=[job.pk])
    assert (job.total, job.reason, job.created_by, job.include_live) == (
        30,
        "retention",
        "op-admin",
        False,
    )
    assert "ended more than 30 days ago" in job.description
    assert AuditEntry.objects.filter(action="bulk_delete", outcome="ok").count() == 1
    assert worker_calls  # the action started the worker

    # Before the worker runs: the page polls itself, and looking at it wakes the worker.
    worker_calls.clear()
    page = admin.get(reverse("job_detail", args=[job.pk]))
    body = page.content.decode()
    assert 'hx-trigger="every 1s"' in body and 'http-equiv="refresh"' in body
    assert 'value="0"' in body and "0 %" in body
    assert worker_calls == [1]
    polled = admin.get(reverse("job_detail", args=[job.pk]), headers=HX)
    assert polled.status_code == 200 and b"<html" not in polled.content
    assert b'hx-trigger="every 1s"' in polled.content

    # Half way: progress shows, polling goes on.
    jobs.run_job(job_id=job.pk, batch_sessions=5, max_batches=3)
    polled = admin.get(reverse("job_detail", args=[job.pk]), headers=HX)
    body = polled.content.decode()
    assert polled.status_code == 200
    assert '<progress id="job-bar" max="30" value="15"' in body and "50 %" in body
    assert 'hx-trigger="every 1s"' in body

    jobs.run_job(job_id=job.pk)
    polled = admin.get(reverse("job_detail", args=[job.pk]), headers=HX)
    body = polled.content.decode()
    assert polled.status_code == 286  # htmx stops polling
    assert "hx-trigger" not in body
    assert '<progress id="job-bar" max="30" value="30"' in body and "100 %" in body
    assert "jobFinished" in polled["HX-Trigger-After-Settle"]
    assert session_ids() == {keep}
    assert set(old).isdisjoint(session_ids())
    actions_part = admin.get(reverse("job_detail", args=[job.pk]) + "?part=actions", headers=HX)
    assert (
        b"Open the trash" in actions_part.content and b"Cancel the job" not in actions_part.content
    )
    full = admin.get(reverse("job_detail", args=[job.pk])).content.decode()
    assert "http-equiv" not in full and "hx-trigger" not in full.split('id="job-progress"')[1]
    assert "<dt>Messages deleted</dt><dd>60</dd>" in full
    listing = admin.get(reverse("job_list")).content.decode()
    assert f'href="{reverse("job_detail", args=[job.pk])}"' in listing
    assert "every 2s" not in listing


def test_starting_needs_a_reason_and_the_set_that_was_shown(admin):
    ended_sessions(5)
    core.create_session(source="cli")  # live: left out unless asked for
    fields = _dry_run_fields(admin, {"preset": "by_source", "source": "cli"})
    before = store_snapshot("sessions", "messages", "conversations", "responses")
    for change, expected in [
        ({"reason": ""}, "Give a reason"),
        ({"reason": "r", "digest": "0" * 32}, "changed since the dry run"),
        ({"reason": "r", "include_live": "1"}, "changed since the dry run"),
    ]:
        response = admin.post(reverse("bulk_delete_start"), fields | change)
        assert response.status_code == 200
        assert expected in problems(response.content.decode())
    # A new matching session after the dry run: refused, the new count shown.
    ended_sessions(1)
    response = admin.post(reverse("bulk_delete_start"), fields | {"reason": "r"})
    body = response.content.decode()
    assert "it now finds 6 sessions" in problems(body)
    assert (
        store_snapshot("sessions", "messages", "conversations", "responses") != before
    )  # (the new session only)
    assert DeleteJob.objects.count() == 0
    # Confirming the new dry run works.
    again = form(body, reverse("bulk_delete_start")) | {"reason": "r"}
    assert admin.post(reverse("bulk_delete_start"), again).status_code == 302
    assert DeleteJob.objects.get().total == 6


def test_the_old_enough_preset_keeps_its_cutoff_until_confirmed(admin):
    ids = ended_sessions(3)
    fields = _dry_run_fields(admin, {"preset": "ended_older_than", "days": "1"})
    assert float(fields["cutoff"]) > 0
    # A session that crosses the cutoff after the dry run is not part of what was shown.
    db.execute(
        "UPDATE sessions SET ended_at = %s WHERE id = %s", [float(fields["cutoff"]) + 5, ids[0]]
    )
    response = admin.post(reverse("bulk_delete_start"), fields | {"reason": "r"})
    assert "changed since the dry run" in problems(response.content.decode())
    # A forged or ancient cutoff is refused.
    fresh = _dry_run_fields(admin, {"preset": "ended_older_than", "days": "1"})
    for cutoff in ["abc", "0", "1e300", str(float(fresh["cutoff"]) + 86400 * 3)]:
        response = admin.post(
            reverse("bulk_delete_start"), fresh | {"reason": "r", "cutoff": cutoff}
        )
        assert "too old or incomplete" in problems(response.content.decode())
    assert DeleteJob.objects.count() == 0


def test_fractional_days_survive_the_confirm_step(admin):
    ended_sessions(2)
    fields = _dry_run_fields(admin, {"preset": "ended_older_than", "days": "0.30000000000000004"})
    assert fields["days"] == "0.30000000000000004"
    response = admin.post(reverse("bulk_delete_start"), fields | {"reason": "r"})
    assert response.status_code == 302
    assert DeleteJob.objects.get().description.startswith(
        "Sessions that ended more than 0.30000000000000004 days ago"
    )


def test_live_sessions_need_an_explicit_tick(admin):
    ended_sessions(2)
    live = core.create_session(source="cli").session_id
    fields = _dry_run_fields(admin, {"preset": "by_source", "source": "cli", "include_live": "1"})
    assert fields["include_live"] == "1" and "confirm_live" not in fields  # unticked
    fields["reason"] = "wipe cli"
    response = admin.post(reverse("bulk_delete_start"), fields)
    assert "Tick the box" in problems(response.content.decode())
    assert DeleteJob.objects.count() == 0
    response = admin.post(reverse("bulk_delete_start"), fields | {"confirm_live": "1"})
    job = DeleteJob.objects.get()
    assert job.include_live and job.total == 3
    jobs.run_job(job_id=job.pk)
    assert live not in session_ids() and session_ids() == set()


def test_a_selection_from_the_session_list(admin):
    picked = ended_sessions(4)
    other = ended_sessions(1)[0]
    live = core.create_session(source="cli").session_id
    response = admin.post(reverse("bulk_delete_preview"), {"ids": [*picked, live, "nope"]})
    assert response.status_code == 302
    query = parse_qs(urlparse(response["Location"]).query)
    assert list(query) == ["selection"]
    body = admin.get(response["Location"]).content.decode()
    assert re.search(r"data-count>4<", body)
    assert '1</span> <span class="stat-label">live session left out' in body
    fields = form(body, reverse("bulk_delete_start"))
    assert set(fields) >= {"selection", "digest", "include_live", "reason"}
    assert not any(sid in str(fields) for sid in picked)  # a token, not the ids
    admin.post(reverse("bulk_delete_start"), fields | {"reason": "picked by hand"})
    job = DeleteJob.objects.get()
    jobs.run_job(job_id=job.pk)
    assert session_ids() == {other, live}
    # The selection is used up.
    again = admin.post(reverse("bulk_delete_start"), fields | {"reason": "twice"})
    assert "expired" in problems(again.content.decode())
    assert DeleteJob.objects.count() == 1

    htmx = admin.post(reverse("bulk_delete_preview"), {"ids": [other]}, headers=HX)
    assert htmx.status_code == 200 and htmx["HX-Redirect"].startswith(reverse("bulk_delete"))
    empty = admin.post(reverse("bulk_delete_preview"), {}, follow=True)
    assert "Select at least one session to delete." in messages_shown(empty)


def test_another_operators_selection_is_not_usable(admin, client, operator_factory):
    picked = ended_sessions(2)
    location = admin.post(reverse("bulk_delete_preview"), {"ids": picked})["Location"]
    client.force_login(operator_factory("admin", "other-admin"))
    body = client.get(location).content.decode()
    assert "expired" in problems(body) and "bulk-delete/start" not in body


def test_cancelling_a_job(admin):
    ids = ended_sessions(6)
    job = jobs.create_bulk_delete_job(session_ids=ids, include_live=False, actor="a", reason="r")
    jobs.run_job(job_id=job, batch_sessions=2, max_batches=1)
    page = admin.get(reverse("job_detail", args=[job])).content.decode()
    assert reverse("job_cancel", args=[job]) in page
    response = admin.post(reverse("job_cancel", args=[job]), follow=True)
    assert any("cancelled after 2 of 6" in m for m in messages_shown(response))
    assert DeleteJob.objects.get(pk=job).state == DeleteJob.CANCELLED
    jobs.run_job(job_id=job)
    assert len(session_ids()) == 4
    audit = AuditEntry.objects.get(action="cancel_bulk_delete")
    assert audit.after["state"] == "cancelled" and audit.actor_name == "op-admin"
    again = admin.post(reverse("job_cancel", args=[job]), follow=True)
    assert any("already cancelled" in m for m in messages_shown(again))
    assert AuditEntry.objects.filter(action="cancel_bulk_delete").count() == 1


# ---------------------------------------------------------------------------
# Trash


def test_the_trash_lists_entries_with_their_sessions_and_expiry(admin, settings):
    settings.SESSIONS_ADMIN_TRASH_DAYS = 7
    ids = lineage()
    db.execute("UPDATE sessions SET title = %s WHERE id = %s", [SCRIPT + "!", ids["other"]])
    plan = core.plan_cascade_delete(session_ids=[ids["other"]])
    first = core.execute_cascade_delete(
        session_ids=[ids["other"]],
        expected_fingerprint=plan.fingerprint,
        actor="ada",
        reason=SCRIPT,
    ).trash_entry_ids[0]
    plan = core.plan_cascade_delete(session_ids=[ids["root"]])
    second = core.execute_cascade_delete(
        session_ids=[ids["root"]], expected_fingerprint=plan.fingerprint, actor="bob", reason="r2"
    ).trash_entry_ids[0]
    TrashEntry.objects.filter(pk=first).update(created_at=timezone.now() - timedelta(days=8))
    body = admin.get(reverse("trash")).content.decode()
    assert body.index(f'id="trash-{second}"') < body.index(f'id="trash-{first}"')
    old = body[body.index(f'id="trash-{first}"') :]
    assert '<span class="badge expired">expired' in old
    new = body[body.index(f'id="trash-{second}"') : body.index(f'id="trash-{first}"')]
    assert "badge expired" not in new
    assert ids["root"] in new and ids["tip"] in new and "bob" in new and "4 messages" in new
    expires = (TrashEntry.objects.get(pk=second).created_at + timedelta(days=7)).strftime(
        "%Y-%m-%d"
    )
    assert "expires <time" in new and expires in new
    assert SCRIPT not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "older than 7 days (1 entry)" in body and "Everything (2 entries)" in body

    found = admin.get(reverse("trash"), {"q": ids["tip"][:-3]}).content.decode()
    assert f'id="trash-{second}"' in found and f'id="trash-{first}"' not in found
    assert f'<li class="match"><code>{ids["tip"]}</code>' in found
    fragment = admin.get(reverse("trash"), {"q": "zzz-nothing"}, headers=HX)
    assert b"<html" not in fragment.content and b"No trash entry holds" in fragment.content


def test_restoring_from_the_trash_gives_back_the_exact_rows(admin):
    ids = lineage()
    before = store_snapshot("sessions", "messages", "conversations", "responses")
    page = admin.get(cascade_url(ids["tip"]), {"include_branches": "1"}).content.decode()
    fields = form(page, confirm_url(ids["tip"])) | {"reason": "oops"}
    admin.post(confirm_url(ids["tip"]), fields)
    assert store_snapshot("sessions", "messages", "conversations", "responses") != before
    entry = TrashEntry.objects.get()
    trash_page = admin.get(reverse("trash")).content.decode()
    assert form(trash_page, reverse("trash_restore", args=[entry.pk])) == {"q": ""}
    response = admin.post(reverse("trash_restore", args=[entry.pk]), follow=True)
    assert response.redirect_chain[-1][0] == reverse("trash")
    assert (entry.session_count, entry.message_count) == (5, 5)  # the branch has a copy
    assert f"Restored 5 sessions and 5 messages from trash entry #{entry.pk}." in messages_shown(
        response
    )
    assert store_snapshot("sessions", "messages", "conversations", "responses") == before
    assert TrashEntry.objects.get().state == TrashEntry.RESTORED
    assert AuditEntry.objects.filter(action="restore", outcome="ok").count() == 1
    body = response.content.decode()
    assert "restored" in body and reverse("trash_restore", args=[entry.pk]) not in body
    again = admin.post(reverse("trash_restore", args=[entry.pk]), follow=True)
    assert any("already restored" in m for m in messages_shown(again))
    assert store_snapshot("sessions", "messages", "conversations", "responses") == before


def test_a_cascade_in_many_batches_is_one_trash_row_restored_whole(admin, monkeypatch):
    monkeypatch.setattr(deletion.batches, "BATCH_SESSIONS", 3)
    root = core.create_session(source="cli", session_key="cli:long").session_id
    current = root
    for n in range(9):
        core.append_message(session_id=current, role="user", content=f"turn {n}")
        current = core.rotate_for_compression(session_id=current).new_session_id
    before = store_snapshot("sessions", "messages", "conversations", "responses")
    page = admin.get(cascade_url(root)).content.decode()
    fields = form(page, confirm_url(root)) | {"reason": "customer asked"}
    assert admin.post(confirm_url(root), fields).status_code == 302
    entries = list(TrashEntry.objects.order_by("pk"))
    assert len(entries) == 4 and len({e.operation for e in entries}) == 1
    audit = AuditEntry.objects.get(action="cascade_delete")
    assert audit.after["trash_operation"] == entries[0].operation
    assert audit.after["trash_entries"] == [e.pk for e in entries]

    body = admin.get(reverse("trash")).content.decode()
    assert body.count('<li class="entry ') == 1  # one operator action, one row
    row = body[body.index(f'id="trash-{entries[0].pk}"') :]
    assert "10 sessions, 9 messages" in row and "one operation, 4 batches" in row
    assert "Everything (1 entry)" in body
    assert form(body, reverse("trash_restore", args=[entries[0].pk])) == {"q": ""}
    for entry in entries[1:]:
        assert reverse("trash_restore", args=[entry.pk]) not in body

    # Any batch's entry restores the whole operation; the page shows it restored.
    response = admin.post(reverse("trash_restore", args=[entries[2].pk]), follow=True)
    assert (
        f"Restored 10 sessions and 9 messages from trash entry #{entries[0].pk} "
        "(the whole operation: 4 batches)." in messages_shown(response)
    )
    assert store_snapshot("sessions", "messages", "conversations", "responses") == before
    assert set(TrashEntry.objects.values_list("state", flat=True)) == {TrashEntry.RESTORED}
    assert AuditEntry.objects.filter(action="restore", outcome="ok").count() == 1
    body = response.content.decode()
    assert '<span class="badge restored">restored' in body
    assert not re.search(r"/trash/\d+/restore/", body)


def test_a_running_jobs_entry_is_restored_only_once_the_job_stops(admin):
    ids = ended_sessions(6)
    job = jobs.create_bulk_delete_job(session_ids=ids, include_live=False, actor="a", reason="r")
    jobs.run_job(job_id=job, batch_sessions=2, max_batches=2)
    first, second = TrashEntry.objects.order_by("pk")
    body = admin.get(reverse("trash")).content.decode()
    assert body.count('<li class="entry ') == 1
    assert f"Job #{job} is still deleting" in body
    assert not re.search(r"/trash/\d+/restore/", body)
    before = _state()
    response = admin.post(reverse("trash_restore", args=[second.pk]), follow=True)
    assert any("still running" in m for m in messages_shown(response))
    assert _state() == before
    assert AuditEntry.objects.filter(action="restore", outcome="refused").count() == 1

    admin.post(reverse("job_cancel", args=[job]))
    body = admin.get(reverse("trash")).content.decode()
    assert form(body, reverse("trash_restore", args=[first.pk])) == {"q": ""}
    response = admin.post(reverse("trash_restore", args=[first.pk]), follow=True)
    assert "(the whole operation: 2 batches)" in " ".join(messages_shown(response))
    assert session_ids() == set(ids)


def test_a_restore_conflict_is_explained_and_changes_nothing(admin):
    entry, (sid,) = trash_entry()
    core.create_session(source="cli", session_id=sid)
    before = store_snapshot("sessions", "messages", "conversations", "responses")
    response = admin.post(reverse("trash_restore", args=[entry]), {"q": sid}, follow=True)
    assert response.redirect_chain[-1][0] == f"{reverse('trash')}?q={sid}"
    assert any(
        m.startswith("Nothing was restored: Cannot restore") for m in messages_shown(response)
    )
    assert store_snapshot("sessions", "messages", "conversations", "responses") == before
    assert TrashEntry.objects.get(pk=entry).state == TrashEntry.COMPLETE
    assert AuditEntry.objects.filter(action="restore", outcome="failed").count() == 1


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"scope": "all", "reason": ""}, "Give a reason"),
        ({"scope": "sometimes", "reason": "r"}, "Choose what to purge"),
        ({"reason": "r"}, "Choose what to purge"),
    ],
)
def test_bad_purges_change_nothing(admin, data, expected):
    trash_entry()
    response = admin.post(reverse("trash_purge"), data)
    body = response.content.decode()
    assert response.status_code == 200
    assert expected in problems(body)
    assert '<details class="purge danger-zone" open>' in body
    assert TrashEntry.objects.count() == 1
    assert not AuditEntry.objects.filter(action="purge_trash").exclude(outcome="refused").exists()


def test_purging_expired_entries_or_everything(admin, settings):
    settings.SESSIONS_ADMIN_TRASH_DAYS = 10
    old, _ = trash_entry("old")
    new, _ = trash_entry("new")
    TrashEntry.objects.filter(pk=old).update(created_at=timezone.now() - timedelta(days=11))
    response = admin.post(
        reverse("trash_purge"), {"scope": "expired", "reason": "retention"}, follow=True
    )
    assert (
        "Purged 1 trash entry older than 10 days; they can no longer be restored."
        in messages_shown(response)
    )
    assert list(TrashEntry.objects.values_list("pk", flat=True)) == [new]
    response = admin.post(
        reverse("trash_purge"), {"scope": "all", "reason": "all", "confirm_purge": "1"}, follow=True
    )
    assert "Purged 1 trash entry; they can no longer be restored." in messages_shown(response)
    assert TrashEntry.objects.count() == 0
    audits = AuditEntry.objects.filter(action="purge_trash").order_by("id")
    assert [a.before["older_than_days"] for a in audits] == [10, None]


@pytest.mark.parametrize("scope", ["all", "expired"])
def test_a_large_purge_needs_its_number_typed_and_everything_the_permanently_tick(
    admin, settings, scope
):
    """One POST with only a reason never purges 25 sessions for good: the delete's rule (the
    number typed from 20 sessions or 1,000 messages) holds, and purging everything needs
    the "permanently" tick."""
    settings.SESSIONS_ADMIN_TRASH_DAYS = 10
    sids = ended_sessions(25)
    plan = core.plan_cascade_delete(session_ids=sids)
    core.execute_cascade_delete(
        session_ids=sids, expected_fingerprint=plan.fingerprint, actor="ada", reason="bulk"
    )
    TrashEntry.objects.update(created_at=timezone.now() - timedelta(days=11))
    entries = TrashEntry.objects.count()
    tick = {"confirm_purge": "1"} if scope == "all" else {}
    for data in (
        {"scope": scope, "reason": "x"},
        {"scope": scope, "reason": "x", "typed_count": "24", **tick},
        {"scope": scope, "reason": "x", "typed_count": "2,5", **tick},
        *([{"scope": scope, "reason": "x", "typed_count": "25"}] if scope == "all" else []),
    ):
        response = admin.post(reverse("trash_purge"), data)
        assert response.status_code == 200 and problems(response.content.decode())
        assert TrashEntry.objects.count() == entries
    assert not AuditEntry.objects.filter(action="purge_trash").exclude(outcome="refused").exists()

    admin.post(reverse("trash_purge"), {"scope": scope, "reason": "x", "typed_count": "25", **tick})
    assert TrashEntry.objects.count() == 0


# ---------------------------------------------------------------------------
# Operator text: every POST of these screens refuses what no database could keep


HOSTILE_REASONS = [
    pytest.param("a NUL\x00here", "cannot contain a NUL character", id="nul"),
    pytest.param("x" * 100_000, "characters long", id="100kb"),
    pytest.param(" \n\t  ", "Give a reason", id="whitespace"),
]


def _only_refusals(action: str) -> None:
    """The action was refused and recorded as such, and nothing else was audited."""
    assert AuditEntry.objects.filter(action=action, outcome="refused").count() == 1
    assert not AuditEntry.objects.exclude(outcome="refused").exists()


@pytest.mark.parametrize("reason, expected", HOSTILE_REASONS)
def test_a_hostile_cascade_reason_is_refused_and_recorded(admin, reason, expected):
    ids = lineage()
    page = admin.get(cascade_url(ids["root"])).content.decode()
    fields = form(page, confirm_url(ids["root"])) | {"reason": reason}
    before = _state()
    response = admin.post(confirm_url(ids["root"]), fields)
    assert response.status_code == 200
    assert expected in problems(response.content.decode())
    assert _state() == before
    _only_refusals("cascade_delete")


@pytest.mark.parametrize("reason, expected", HOSTILE_REASONS)
def test_a_hostile_bulk_reason_is_refused_and_recorded(admin, reason, expected):
    ended_sessions(3)
    fields = _dry_run_fields(admin, {"preset": "by_source", "source": "cli"}) | {"reason": reason}
    before = _state()
    response = admin.post(reverse("bulk_delete_start"), fields)
    assert response.status_code == 200
    assert expected in problems(response.content.decode())
    assert _state() == before
    _only_refusals("bulk_delete")


@pytest.mark.parametrize("reason, expected", HOSTILE_REASONS)
def test_a_hostile_purge_reason_is_refused_and_recorded(admin, reason, expected):
    trash_entry()
    before = _state()
    response = admin.post(reverse("trash_purge"), {"scope": "all", "reason": reason})
    assert response.status_code == 200
    assert expected in problems(response.content.decode())
    assert _state() == before
    _only_refusals("purge_trash")


@pytest.mark.parametrize("reason, expected", HOSTILE_REASONS[:2])
def test_a_hostile_cancel_reason_is_refused_and_recorded(admin, reason, expected):
    ids = ended_sessions(2)
    job = jobs.create_bulk_delete_job(session_ids=ids, include_live=False, actor="a", reason="r")
    before = _state()
    response = admin.post(reverse("job_cancel", args=[job]), {"reason": reason}, follow=True)
    assert any(
        m.startswith(f"Job #{job} was not cancelled: ") and expected in m
        for m in messages_shown(response)
    )
    assert _state() == before
    _only_refusals("cancel_bulk_delete")


def test_a_blank_cancel_reason_is_no_reason():
    assert JobCancelForm({"reason": " \n\t  "}).is_valid()


@pytest.mark.parametrize(
    "form_class, data",
    [
        (CascadeConfirmForm, {}),
        (BulkStartForm, {"preset": "empty"}),
        (TrashPurgeForm, {"scope": "all"}),
        (JobCancelForm, {}),
    ],
)
def test_a_lone_surrogate_in_a_reason_is_refused(form_class, data):
    """A browser cannot post one (Django decodes with replacement); a caller's form can."""
    bound = form_class(data | {"reason": "half a pair \ud800"})
    assert not bound.is_valid()
    assert "lone surrogate" in bound.errors["reason"][0]


def test_picked_ids_no_database_can_hold_are_refused(admin):
    picked = ended_sessions(1)
    for bad in ("a\x00b", "x" * 5000):
        response = admin.post(reverse("bulk_delete_preview"), {"ids": [*picked, bad]}, follow=True)
        assert response.redirect_chain[-1][0] == reverse("bulk_delete")
        assert any("session id" in m for m in messages_shown(response))
        assert admin.session.get("sessions_admin.bulk_delete.selections") is None


def _trash_page_queries(admin, **query) -> int:
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    admin.get(reverse("trash"), query)  # what a first read settles is settled
    with CaptureQueriesContext(connections["default"]) as read:
        assert admin.get(reverse("trash"), query).status_code == 200
    return len(read.captured_queries)


@pytest.mark.parametrize("query", [{}, {"q": "2"}])
def test_the_trash_page_reads_a_page_in_queries_that_do_not_grow_with_its_rows(admin, query):
    for _ in range(2):
        trash_entry()
    few = _trash_page_queries(admin, **query)
    for _ in range(10):
        trash_entry()
    assert TrashEntry.objects.values("operation").distinct().count() == 12
    assert _trash_page_queries(admin, **query) == few
