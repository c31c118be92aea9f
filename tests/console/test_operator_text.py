"""Every POST that takes operator text refuses text neither database can hold, the same way.

For each action, the test opens the page that offers it, fills the form exactly as the page
does (hidden plan fingerprints and digests included), so the text typed is the only thing
that can be wrong, and posts it with a NUL, a lone surrogate (as the invalid UTF-8 bytes a
browser or script would send), 100 KB of text, and nothing but whitespace. The answer is a
message naming the problem with the store, the responses and the ledger unchanged; when a
value is acceptable (Django decodes invalid UTF-8 to U+FFFD, whitespace is an empty optional
reason), whatever changed is an action that succeeded and was audited.
"""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import urlencode, urlsplit

import pytest
from django.urls import Resolver404, resolve, reverse

from sessions_admin import core
from sessions_admin.ledger.models import AuditEntry
from tests.console import urlmap
from tests.console.test_fuzz import POST_FIELDS
from tests.ledger.test_retention import old_session

pytestmark = pytest.mark.usefixtures("no_worker")

# The text fields each action reads, and the page (built from the seeded store) offering it.
TEXT_FIELDS = ("reason", "summary")
REFUSED_WORDS = {
    "nul": "NUL",
    "huge": "characters long",
    "blank": "Give a",
}


class _Forms(HTMLParser):
    """The forms of a page: action path, and the values the browser would submit."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.forms: list[dict] = []
        self._form: dict | None = None
        self._textarea: str | None = None
        self._select: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self._form = {"action": a.get("action") or "", "fields": []}
            self.forms.append(self._form)
        if self._form is None:
            return
        if tag == "input" and a.get("name"):
            kind = (a.get("type") or "text").lower()
            if kind in ("checkbox", "radio") and "checked" not in a:
                return
            if kind in ("submit", "button", "image", "reset"):
                return
            self._form["fields"].append([a["name"], a.get("value") or ""])
        elif tag == "textarea" and a.get("name"):
            self._textarea = a["name"]
            self._form["fields"].append([a["name"], ""])
        elif tag == "select" and a.get("name"):
            self._select = a["name"]
        elif tag == "option" and self._select and "selected" in a:
            self._form["fields"].append([self._select, a.get("value") or ""])

    def handle_data(self, data):
        if self._form is not None and self._textarea:
            self._form["fields"][-1][1] += data

    def handle_endtag(self, tag):
        if tag == "form":
            self._form = None
        elif tag == "textarea":
            self._textarea = None
        elif tag == "select":
            self._select = None


def _form_for(body: str, name: str) -> tuple[str, list[list[str]]] | None:
    """The first form on the page posting to the URL named ``name``: its action and fields."""
    parser = _Forms()
    parser.feed(body)
    for form in parser.forms:
        path = urlsplit(form["action"]).path
        try:
            match = resolve(path)
        except Resolver404:
            continue
        if match.url_name == name:
            return path, form["fields"]
    return None


def _pages(seeded: urlmap.Seeded, name: str) -> list[tuple[str, str, dict | None]]:
    """(method, url, data) of the page(s) that may offer the action ``name``."""
    detail = reverse("session_detail", args=[seeded.tip])
    live = reverse("session_detail", args=[seeded.branch])  # rewinds: on the live session only
    return {
        "session_undo": [("get", live, None)],
        "session_retry": [("get", live, None)],
        "session_redo": [("get", live, None)],
        "session_reset": [("get", detail, None)],
        "session_resume": [("get", reverse("session_resume", args=[seeded.root]), None)],
        "merge_execute": [
            (
                "get",
                reverse("merge_preview")
                + "?"
                + urlencode([("ids", seeded.fork_b), ("ids", seeded.branch)]),
                None,
            )
        ],
        "merge_undo": [
            ("get", reverse("audit_log"), None),
            ("get", reverse("session_history", args=[seeded.fork_a]), None),
            ("get", reverse("session_detail", args=[seeded.fork_a]), None),
        ],
        "cascade_delete_confirm": [("get", reverse("cascade_delete", args=[seeded.branch]), None)],
        "bulk_delete_start": [("post", reverse("bulk_delete_preview"), {"ids": [seeded.root]})],
        "job_cancel": [("get", reverse("job_detail", args=[seeded.job_id]), None)],
        "trash_purge": [("get", reverse("trash"), None)],
        "hold_place": [("get", reverse("holds") + "?" + urlencode({"subject": seeded.root}), None)],
        "hold_release": [("get", reverse("holds"), None)],
        "retention_create": [("get", reverse("retention"), None)],
        "retention_switch": [("get", reverse("retention"), None)],
        "retention_run": [("get", reverse("retention_preview", args=[seeded.policy_id]), None)],
        "retention_delete": [("get", reverse("retention"), None)],
    }[name]


ACTIONS = [
    "session_undo",
    "session_retry",
    "session_redo",
    "session_reset",
    "session_resume",
    "merge_execute",
    "merge_undo",
    "cascade_delete_confirm",
    "bulk_delete_start",
    "job_cancel",
    "trash_purge",
    "hold_place",
    "hold_release",
    "retention_create",
    "retention_switch",
    "retention_run",
    "retention_delete",
]


def _prepare(seeded: urlmap.Seeded, name: str) -> None:
    """Store state in which the page offers the action."""
    if name in ("session_undo", "session_retry", "session_redo"):
        # The branch is the live session the page's panel acts on: give it a turn.
        core.append_messages(
            session_id=seeded.branch,
            messages=[
                {"role": "user", "content": "a question"},
                {"role": "assistant", "content": "an answer"},
            ],
        )
    if name == "session_redo":
        core.undo_last_turn(session_id=seeded.branch)
    if name == "retention_run":
        # Something for the seeded policy (3650 quiet days) to delete: its preview offers a run.
        old_session(days=4000)


def _open_form(client, seeded, name: str) -> tuple[str, list[list[str]]]:
    for method, url, data in _pages(seeded, name):
        response = getattr(client, method)(url, data or {}, follow=True)
        assert response.status_code == 200, (url, response.status_code)
        found = _form_for(response.content.decode(), name)
        if found is not None:
            return found
    pytest.fail(f"no page offers the {name} form")


def _encoded(fields: list[list[str]], field: str, raw_value: bytes) -> bytes:
    parts = []
    for key, value in fields:
        if key == field:
            continue
        parts.append(urlencode({key: value}).encode())
    parts.append(field.encode() + b"=" + raw_value)
    return b"&".join(parts)


HOSTILE = {
    "nul": b"before%00after",
    "surrogate": b"%ED%A0%80%ED%B0%80",
    "huge": b"x" * 100_000,
    "blank": b"+++%0D%0A%09+",
}


@pytest.mark.parametrize("kind", list(HOSTILE))
@pytest.mark.parametrize("name", ACTIONS)
def test_hostile_operator_text_is_refused_or_audited(seeded, admin_client, name, kind):
    _prepare(seeded, name)
    action, fields = _open_form(admin_client, seeded, name)
    # What the view reads (the fuzz test's table), whether or not the page shows a box for it.
    text_fields = [key for key in POST_FIELDS[name][0] if key in TEXT_FIELDS]
    assert text_fields, f"{name}: reads no operator text"
    for field in text_fields:
        before = urlmap.state()
        audited = set(AuditEntry.objects.values_list("pk", flat=True))
        response = admin_client.post(
            action,
            _encoded(fields, field, HOSTILE[kind]),
            content_type="application/x-www-form-urlencoded",
            follow=True,
        )
        assert response.status_code < 500, (name, field, kind, response.status_code)
        after = urlmap.state()
        new = AuditEntry.objects.exclude(pk__in=audited)
        assert not new.filter(outcome=AuditEntry.PENDING).exists(), (name, field, kind)
        required = field == "reason" and _reason_required(name)
        must_refuse = kind in ("nul", "huge") or (kind == "blank" and required)
        if must_refuse:
            assert after == before, f"{name}: {field}={kind} changed the store or the ledger"
            page = response.content.decode()
            assert REFUSED_WORDS[kind] in page, f"{name}: {field}={kind} gave no clear message"
        elif after != before:
            # Accepted text: the change is an audited, successful action.
            assert new.filter(outcome=AuditEntry.OK).exists(), (name, field, kind)
        # The next field starts from the page as it is now.
        if after != before:
            break


def _reason_required(name: str) -> bool:
    """Destructive actions need a reason (core.text's ``required``); support actions do not."""
    return name in {
        "cascade_delete_confirm",
        "bulk_delete_start",
        "trash_purge",
        "hold_place",
        "hold_release",
        "retention_run",
    }
