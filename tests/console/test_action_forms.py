"""The forms of the merge, support-action, stray-move and selection POSTs refuse operator
text the rule refuses (a NUL, a lone surrogate, an over-long text): a message that says
why, nothing changed in the store, and no action recorded as done."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from sessions_admin import core
from sessions_admin.console.forms import (
    MergeForm,
    ResetForm,
    ResumeForm,
    RewriteForm,
    SelectionForm,
    StrayMoveForm,
    UnmergeForm,
)
from sessions_admin.core import db, stray
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditEntry

NUL = "a\x00b"
LONG = "x" * 100_000
# What the rule says about each (core.text.operator_text).
SAYS = {NUL: "cannot contain a NUL character", LONG: "keep it under"}


def store() -> list[tuple]:
    return db.fetchall("SELECT * FROM sessions ORDER BY id") + db.fetchall(
        "SELECT id, session_id, active FROM messages ORDER BY id"
    )


def nothing_done() -> bool:
    return not AuditEntry.objects.exclude(outcome=AuditEntry.REFUSED).exists()


def flashed(response) -> str:
    return " ".join(str(m) for m in get_messages(response.wsgi_request))


def chat(key: str) -> str:
    sid = core.create_session(source="telegram", session_key=key).session_id
    core.append_messages(
        session_id=sid,
        messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    )
    return sid


def two_ended() -> list[str]:
    ids = [chat(f"tg:dm:{n}") for n in range(2)]
    for sid in ids:
        core.end_session(session_id=sid, end_reason="lru_evict")
    return ids


@pytest.mark.parametrize("bad", [NUL, LONG], ids=["NUL", "100 KB"])
def test_support_actions_refuse_the_reason(signed_in, bad):
    ref = chat("tg:dm:9")
    core.end_session(session_id=ref, end_reason="lru_evict")
    client = signed_in("support")
    before = store()
    page = client.get(reverse("session_resume", args=[ref])).content.decode()
    assert 'name="fingerprint"' in page
    response = client.post(reverse("session_resume", args=[ref]), {"reason": bad})
    body = response.content.decode()
    assert response.status_code == 200 and "Nothing was resumed" in body and SAYS[bad] in body
    response = client.post(reverse("session_reset", args=[ref]), {"reason": bad})
    assert "Nothing changed" in flashed(response) and SAYS[bad] in flashed(response)
    for name in ("session_undo", "session_redo", "session_retry"):
        response = client.post(reverse(name, args=[ref]), {"reason": bad})
        assert "nothing changed" in flashed(response) and SAYS[bad] in flashed(response)
    assert store() == before
    assert nothing_done()
    assert AuditEntry.objects.filter(outcome=AuditEntry.REFUSED, action="resume").exists()


@pytest.mark.parametrize("bad", [NUL, LONG], ids=["NUL", "100 KB"])
def test_merge_and_unmerge_refuse_the_reason(signed_in, bad):
    ids = two_ended()
    plan = core.plan_merge(session_ids=ids)
    client = signed_in("support")
    before = store()
    form = {"ids": ids, "target": ids[0], "fingerprint": plan.fingerprint, "reason": bad}
    response = client.post(reverse("merge_execute"), form)
    body = response.content.decode()
    assert "Nothing was merged" in body and SAYS[bad] in body
    assert store() == before and nothing_done()

    merged = core.merge_sessions(session_ids=ids, expected_fingerprint=plan.fingerprint)
    before = store()
    response = client.post(reverse("merge_undo", args=[merged.merge_id]), {"reason": bad})
    assert "was not undone" in flashed(response) and SAYS[bad] in flashed(response)
    assert store() == before and nothing_done()


@pytest.mark.parametrize("bad", [NUL, LONG], ids=["NUL", "100 KB"])
def test_stray_moves_refuse_the_reason(signed_in, bad):
    ids = two_ended()
    fingerprint = stray.plan_stray_move(session_id=ids[0]).fingerprint
    client = signed_in("support")
    before = store()
    response = client.post(
        reverse("stray_move_execute", args=[ids[0]]), {"fingerprint": fingerprint, "reason": bad}
    )
    assert response.status_code == 409
    assert "Nothing was moved" in response.content.decode()
    assert SAYS[bad] in response.content.decode()
    move = actions.record(
        actor=None,
        action=actions.STRAY_MOVE,
        session_ids=ids,
        after={"from": ids[0], "to": ids[1], "message_ids": [1]},
    )
    response = client.post(reverse("stray_move_undo", args=[move.pk]), {"reason": bad})
    assert "was not undone" in flashed(response) and SAYS[bad] in flashed(response)
    assert store() == before
    assert not AuditEntry.objects.exclude(pk=move.pk).exclude(outcome="refused").exists()


def test_a_selection_holding_a_nul_goes_back_to_the_list(signed_in):
    response = signed_in("support").post(
        reverse("session_list"), {"ids": ["fine", NUL], "filter": "source=cli"}
    )
    assert response.status_code == 303
    assert response["Location"] == reverse("session_list") + "?source=cli"
    assert SAYS[NUL] in flashed(response) and "Nothing was selected" in flashed(response)


@pytest.mark.parametrize(
    "form",
    [MergeForm, UnmergeForm, ResumeForm, ResetForm, RewriteForm, StrayMoveForm],
)
@pytest.mark.parametrize("bad", [NUL, "a\ud800b", LONG], ids=["NUL", "surrogate", "100 KB"])
def test_every_reason_field_refuses_what_the_rule_refuses(form, bad):
    # A lone surrogate cannot come through HTTP (it is not UTF-8): the form is its door.
    bound = form({"reason": bad})
    assert not bound.is_valid()
    assert bound.problem().startswith("The reason ")


def test_a_whitespace_only_reason_is_no_reason():
    bound = ResumeForm({"reason": "  \n "})
    assert bound.is_valid() and bound.cleaned_data["reason"] == ""


def test_selection_ids_are_checked_like_session_ids():
    assert not SelectionForm({"ids": ["a\ud800b"]}).is_valid()
    assert SelectionForm({"ids": [" a ", "a", ""]}).is_valid()
