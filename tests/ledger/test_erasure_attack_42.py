"""Attack round 42 (docs only): an erasure rewrote other people's audit entries.

- A subject whose user id is an ordinary word (``telegram``) had it replaced in every audit
  entry holding that word: other people's sources and session keys.
- A subject ``u-5821`` beside another person ``u-5821:7``: that person's hold subject and key
  were half redacted (``[erased:…]:7``), and their live session still shows ``u-5821:7``
  whole: a viewer put the two side by side and read the erased id back.
"""

from __future__ import annotations

import json

from sessions_admin import core
from sessions_admin.core.erasure import Subject
from sessions_admin.ledger import actions
from sessions_admin.ledger import erasure as erasure_ledger
from sessions_admin.ledger.models import AuditEntry
from tests.builders import erasures_run_inline  # noqa: F401 - an autouse fixture


def _chat(user_id: str, source: str, key: str | None = None) -> str:
    sid = core.create_session(source=source, user_id=user_id, session_key=key).session_id
    core.append_message(session_id=sid, role="user", content=f"words of {user_id}")
    return sid


def _erase(subject: Subject) -> None:
    plan = erasure_ledger.plan(subject)
    request = actions.request_erasure(
        actor=None, subject=subject, reference="DSR-42", expected_fingerprint=plan.fingerprint
    )
    actions.run_erasure(request_id=request.pk)


def _entries(action: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=action).order_by("pk"))


def test_erasing_a_user_named_like_a_source_leaves_other_peoples_entries_alone():
    _chat("telegram", "discord")
    bob_key = "agent:main:telegram:dm:bob"
    _chat("bob", "telegram", bob_key)
    actions.reset(actor=None, session_key=bob_key, reason="bob asked for a fresh start")
    actions.place_hold(actor=None, kind="user", subject="bob", reason="litigation")
    before = [(e.before, e.after, e.session_ids) for e in _entries("reset")]
    hold_entry = [(e.before, e.after) for e in _entries("place_hold")]

    _erase(Subject(user_id="telegram"))

    assert [(e.before, e.after, e.session_ids) for e in _entries("reset")] == before
    assert [(e.before, e.after) for e in _entries("place_hold")] == hold_entry
    assert core.live_session_for_key(bob_key) is not None


def test_another_persons_id_holding_the_subjects_as_a_part_is_not_half_redacted():
    _chat("u-5821", "telegram")
    other_key = "agent:main:telegram:dm:u-5821:7"
    _chat("u-5821:7", "telegram", other_key)
    actions.place_hold(
        actor=None, kind="user", subject="u-5821:7", reason="hold for u-5821:7 pending review"
    )
    actions.place_hold(actor=None, kind="user", subject="u-5821", reason="u-5821's claim")
    their_entry = _entries("place_hold")[0]
    kept = (their_entry.before, their_entry.after)
    actions.release_hold(
        actor=None, hold_id=core.holds.active_holds()[-1].id, reason="claim settled"
    )

    _erase(Subject(user_id="u-5821"))

    theirs, subjects = _entries("place_hold")
    assert (theirs.before, theirs.after) == kept  # the other person's record, untouched
    # The other person's hold reason loses the compound whole, never leaving ":7" beside a
    # hash; the subject's own hold entry names them by hash only.
    assert "[erased" not in json.dumps([theirs.before, theirs.after])
    assert ":7" not in (theirs.reason or "").replace("u-5821:7", "")
    assert "u-5821" not in json.dumps([subjects.before, subjects.after, subjects.reason]).replace(
        "u-5821:7", ""
    )
    assert subjects.before["subject"].startswith("[erased:")
