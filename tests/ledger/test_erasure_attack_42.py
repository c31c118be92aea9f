"""Attack round 42 (docs only): an erasure rewrote other people's audit entries.

- A subject whose user id is an ordinary word (``telegram``) had it replaced in every audit
  entry holding that word: other people's sources and session keys.
- A subject ``u-5821`` beside another person ``u-5821:7``: that person's hold subject and key
  were half redacted (``[erased:…]:7``), and their live session still shows ``u-5821:7``
  whole: a viewer put the two side by side and read the erased id back.
"""

from __future__ import annotations

import json
import re

from sessions_admin import core
from sessions_admin.core import db
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


def recorded(slug: str, session_id: str) -> None:
    """What the slug history poller records of a Hermes turn on ``slug``."""
    db.execute(
        "INSERT INTO sessions_admin_slug_history (slug, event, response_id, session_id, "
        "response_created_at, observed_at) VALUES (%s, 'recorded', NULL, %s, NULL, 1.0)",
        [slug, session_id],
    )


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
    # Whole, or as one token: never "[erased...]:7" (the token's own hex may hold ":7").
    assert re.fullmatch(
        r"hold for (u-5821:7|\[erased(:[0-9a-f]+)?\]) pending review", theirs.reason or ""
    ), theirs.reason
    assert "u-5821" not in json.dumps([subjects.before, subjects.after, subjects.reason]).replace(
        "u-5821:7", ""
    )
    assert subjects.before["subject"].startswith("[erased:")


def test_a_key_a_merge_copied_and_a_branch_inherited_is_taken_back_with_its_events():
    """erin's session merged into a user-less API session (the merge copies her key onto it),
    that session branched (the branch inherits the key), then erin erased: no session and no
    switch event may still carry her key."""
    key = "agent:main:api:erin-77"
    target = core.create_session(source="api_server").session_id
    core.append_message(session_id=target, role="user", content="api side")
    core.end_session(session_id=target, end_reason="user_exit")
    erin = _chat("erin-77", "api_server", key)
    plan = core.plan_merge(session_ids=[target, erin], target_id=target)
    core.merge_sessions(
        session_ids=[target, erin], target_id=target, expected_fingerprint=plan.fingerprint
    )
    branch = core.branch_session(session_id=target).new_session_id
    assert core.lineage.session_row(branch)["session_key"] == key

    _erase(Subject(user_id="erin-77"))

    assert db.fetchall("SELECT id FROM sessions WHERE session_key = %s", [key]) == []
    assert (
        db.fetchall("SELECT seq FROM sessions_admin_switch_events WHERE session_key = %s", [key])
        == []
    )
    assert core.lineage.session_row(branch) is not None  # the branch stays, keyless
    assert core.lineage.session_row(target)["session_key"] is None


def test_a_person_found_only_in_a_shared_trash_entry_is_counted_and_the_job_says_so(
    admin_client,
):
    """carol's sessions were deleted by a bulk job with other people's: the erasure's receipt
    counts what the trash lost of hers, and the job's page no longer promises its entry
    restores everything it deleted."""
    from sessions_admin.ledger import jobs

    carol = []
    for n in range(2):
        sid = core.create_session(source="telegram", user_id="carol-991").session_id
        core.append_message(session_id=sid, role="user", content=f"carol {n}")
        core.append_message(session_id=sid, role="assistant", content=f"reply {n}")
        core.end_session(session_id=sid, end_reason="user_exit")
        carol.append(sid)
    dave = []
    for n in range(3):
        sid = core.create_session(source="telegram", user_id="dave-12").session_id
        core.append_message(session_id=sid, role="user", content=f"dave {n}")
        core.end_session(session_id=sid, end_reason="user_exit")
        dave.append(sid)
    job = jobs.create_bulk_delete_job(
        session_ids=[*carol, *dave], include_live=False, actor="ada", reason="cleanup"
    )
    jobs.run_job(job_id=job)

    plan = erasure_ledger.plan(Subject(user_id="carol-991"))
    request = actions.request_erasure(
        actor=None,
        subject=Subject(user_id="carol-991"),
        reference="DSR-9",
        expected_fingerprint=plan.fingerprint,
    )
    actions.run_erasure(request_id=request.pk)
    request.refresh_from_db()

    erased = request.receipt["erased"]
    assert (erased["sessions_in_trash"], erased["messages_in_trash"]) == (2, 4)
    progress = jobs.job_progress(job_id=job)
    assert progress.deleted == 5
    assert [(e.request_id, e.count) for e in progress.erased_from_trash] == [(request.pk, 2)]
    page = admin_client.get(f"/jobs/{job}/").content.decode()
    assert "data-erased-from-trash" in page and f"erasure request #{request.pk}" in page
    assert "everything this job deleted is one entry there" not in page


def test_parts_of_their_conversation_no_parent_link_reaches_are_erased_too():
    """A user-less API continuation naming the subject's session only by ``_continued_from``,
    and a user-less session a cold start minted for the subject's slug (the slug history
    records both): erased with the subject, another person's session of the slug kept."""

    first = core.create_session(source="api_server", user_id="hanna-5").session_id
    core.append_message(session_id=first, role="user", content="HANNA words")
    core.end_session(session_id=first, end_reason="compression")
    continued = core.create_session(source="api_server").session_id
    core.append_message(session_id=continued, role="user", content="HANNA continued")
    db.execute(
        "UPDATE sessions SET model_config = %s WHERE id = %s",
        [json.dumps({"_continued_from": first}), continued],
    )
    recorded("hanna-chat", first)
    cold = core.create_session(source="api_server").session_id
    core.append_message(session_id=cold, role="user", content="HANNA after cold start")
    recorded("hanna-chat", cold)
    other = core.create_session(source="api_server", user_id="otto-1").session_id
    core.append_message(session_id=other, role="user", content="otto's own")
    recorded("hanna-chat", other)

    _erase(Subject(user_id="hanna-5"))

    left = [r[0] for r in db.fetchall("SELECT content FROM messages ORDER BY id")]
    assert left == ["otto's own"]
    assert core.lineage.session_row(other) is not None


def test_a_user_less_child_of_another_persons_session_on_the_subjects_slug_is_kept():
    """Attack 42 (V): bob's client also used alice's slug, answered by a user-less child of
    bob's session; that child then answered another slug, continued by a third party. Erasing
    alice takes none of them."""

    alice = _chat("alice-1", "api_server")
    recorded("shared", alice)
    bob = _chat("bob-2", "api_server")
    child = core.create_session(source="api_server", parent_session_id=bob).session_id
    core.append_message(session_id=child, role="user", content="BOBSECRET child of bob")
    recorded("shared", child)
    recorded("other", child)
    third = core.create_session(source="api_server").session_id
    core.append_message(session_id=third, role="user", content="third party")
    recorded("other", third)

    plan = erasure_ledger.plan(Subject(user_id="alice-1"))
    assert set(plan.store.session_ids) == {alice}
    _erase(Subject(user_id="alice-1"))

    for kept in (bob, child, third):
        assert core.lineage.session_row(kept) is not None
    assert core.lineage.session_row(child)["parent_session_id"] == bob


def test_a_compound_joined_by_a_slash_or_hash_goes_whole():
    """Attack 42 (V): ``zoë-9/7`` and ``zoë-9#7`` were left ``[erased:…]/7``."""
    from sessions_admin.core.erasure.subject import redact_text

    words = redact_text("see zoë-9/7, zoë-9#7 and users/zoë-9; not zoë-9.bak", {"zoë-9": "[Z]"})
    assert words == "see [Z], [Z] and [Z]; not zoë-9.bak"
