"""Issue 25 item 17: a Hermes-written multimodal row is the same message.

hermes-agent 0.19 stores list content (``[{"type": "text"...}, {"type":
"image_url"...}]``) as ``"\\x00json:" + json.dumps(content)``
(``hermes_state.SessionDB._encode_content``: spaced, ASCII-escaped). On PostgreSQL
text cannot hold that NUL, so there such content is the JSON text alone. A save
offering the same content as a list keeps that row; a plain string that merely
looks like JSON is still compared as the string it is, in both directions.
tests/hermes/test_multimodal_transcript.py has Hermes write the row itself.
"""

from __future__ import annotations

import json

import pytest

from sessions_admin import core
from sessions_admin.core import db
from tests.helpers import messages

PARTS = [
    {"type": "text", "text": "Is this the café's receipt?"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
]


def _sqlite() -> bool:
    return db.vendor() == "sqlite"


def _hermes_content(content) -> str:
    """What Hermes's ``_encode_content`` writes for ``content``; PostgreSQL: the JSON alone."""
    if isinstance(content, str):
        return content
    text = json.dumps(content)
    return "\x00json:" + text if _sqlite() else text


def _hermes_session(*contents) -> str:
    """A session whose rows Hermes wrote (raw SQL, as ``SessionDB.append_message`` does)."""
    session_id = core.create_session(source="api_server").session_id
    for n, (role, content) in enumerate(contents):
        db.execute(
            "INSERT INTO messages (session_id, role, content, timestamp, active, compacted) "
            "VALUES (%s, %s, %s, %s, 1, 0)",
            [session_id, role, _hermes_content(content), 1_700_000_000.0 + n],
        )
    db.execute("UPDATE sessions SET message_count = %s WHERE id = %s", [len(contents), session_id])
    return session_id


def _active(session_id: str) -> list:
    return [(m["role"], m["content"]) for m in messages(session_id, active_only=True)]


def test_a_save_offering_hermes_multimodal_content_as_a_list_keeps_the_row():
    ref = _hermes_session(("user", PARTS), ("assistant", "Yes, from Tuesday."))
    before = _active(ref)
    result = core.save_transcript(
        session_id=ref,
        messages=[
            {"role": "user", "content": PARTS},
            {"role": "assistant", "content": "Yes, from Tuesday."},
            {"role": "user", "content": "thanks"},
        ],
    )
    assert (result.kept, result.appended, result.deactivated) == (2, 1, 0)
    assert _active(ref) == [*before, ("user", "thanks")]
    assert len(messages(ref)) == 3  # nothing made inactive, nothing written twice


def test_the_same_parts_in_another_key_order_or_escaping_are_the_same_message():
    ref = _hermes_session(("user", PARTS))
    reordered = [dict(reversed(list(part.items()))) for part in PARTS]
    assert core.save_transcript(session_id=ref, messages=[{"role": "user", "content": reordered}])
    raw_prefixed = "\x00json:" + json.dumps(PARTS)  # a runtime handing back the raw row
    result = core.save_transcript(
        session_id=ref, messages=[{"role": "user", "content": raw_prefixed}]
    )
    assert (result.kept, result.appended) == (1, 0)
    assert len(messages(ref)) == 1


def test_different_parts_are_still_a_different_message():
    ref = _hermes_session(("user", PARTS))
    other = [PARTS[0], {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    with pytest.raises(core.TruncationRefused):
        core.save_transcript(session_id=ref, messages=[{"role": "user", "content": other}])
    assert len(messages(ref)) == 1


def test_a_plain_string_that_looks_like_json_is_compared_as_that_string():
    looks_like_json = json.dumps(PARTS)  # a user pasting JSON: Hermes stores it as given
    ref = _hermes_session(("user", looks_like_json))
    result = core.save_transcript(
        session_id=ref,
        messages=[
            {"role": "user", "content": looks_like_json},
            {"role": "assistant", "content": "ok"},
        ],
    )
    assert (result.kept, result.appended) == (1, 1)
    with pytest.raises(core.TruncationRefused):
        core.save_transcript(
            session_id=ref, messages=[{"role": "user", "content": looks_like_json + " "}]
        )
    if _sqlite():
        # Hermes would have prefixed a list: this row was a string, and a list is not it.
        with pytest.raises(core.TruncationRefused):
            core.save_transcript(session_id=ref, messages=[{"role": "user", "content": PARTS}])
    assert [m["active"] for m in messages(ref)] == [1, 1]


def test_a_string_offered_for_a_stored_list_is_not_that_list():
    if not _sqlite():
        pytest.skip("on PostgreSQL a list is stored as plain JSON text, the string's own text")
    ref = _hermes_session(("user", PARTS))
    for text in (json.dumps(PARTS), json.dumps(PARTS, ensure_ascii=False)):
        with pytest.raises(core.TruncationRefused):
            core.save_transcript(session_id=ref, messages=[{"role": "user", "content": text}])
    assert _active(ref) == [("user", "\x00json:" + json.dumps(PARTS))]


def test_a_list_the_core_wrote_is_still_the_same_message():
    ref = core.create_session(source="api_server").session_id
    core.append_message(session_id=ref, role="user", content=PARTS)
    reordered = [dict(reversed(list(part.items()))) for part in PARTS]
    result = core.save_transcript(
        session_id=ref,
        messages=[{"role": "user", "content": reordered}, {"role": "assistant", "content": "seen"}],
    )
    assert (result.kept, result.appended) == (1, 1)
    assert len(messages(ref)) == 2


def test_an_undone_multimodal_turn_saved_again_stays_undone():
    ref = _hermes_session(("user", "hello"), ("assistant", "hi"), ("user", PARTS))
    core.undo_last_turn(session_id=ref)
    result = core.save_transcript(
        session_id=ref,
        messages=[
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "hi"},
            {"role": "user", "content": PARTS},  # the runtime missed the undo
        ],
    )
    assert (result.kept, result.appended) == (2, 0)
    assert _active(ref) == [("user", "hello"), ("assistant", "hi")]
