"""Issue 25 item 17 on a store hermes-agent 0.19 writes: its multimodal row is the same message.

Hermes's ``SessionDB.append_message`` stores list content with its
``_encode_content`` (a NUL prefix and ``json.dumps``); the runtime later saves
its transcript through the core with that content as the list it holds. The row
is recognised, only what is new is appended, and Hermes reads back the list.
"""

from __future__ import annotations

import pytest

from sessions_admin import core
from tests.helpers import messages
from tests.hermes.conftest import call, raw_rows

PARTS = [
    {"type": "text", "text": "Is this the café's receipt?"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
]


def test_a_save_keeps_the_multimodal_row_hermes_wrote(hermes, attach):
    hermes.run(
        [
            call("state.create_session", "api-1", "api_server"),
            call("state.append_message", "api-1", "user", PARTS),
            call("state.append_message", "api-1", "assistant", "Yes, from Tuesday."),
        ]
    )
    stored = raw_rows(hermes.state, "SELECT content FROM messages WHERE role = 'user'")
    assert stored[0][0].startswith("\x00json:")  # as Hermes keeps a list
    attach()

    result = core.save_transcript(
        session_id="api-1",
        messages=[
            {"role": "user", "content": PARTS},
            {"role": "assistant", "content": "Yes, from Tuesday."},
            {"role": "user", "content": "thanks"},
        ],
    )
    assert (result.kept, result.appended, result.deactivated) == (2, 1, 0)
    assert [m["active"] for m in messages("api-1")] == [1, 1, 1]
    loaded = hermes.one(call("state.get_messages_as_conversation", "api-1"))
    assert [(m["role"], m["content"]) for m in loaded] == [
        ("user", PARTS),
        ("assistant", "Yes, from Tuesday."),
        ("user", "thanks"),
    ]

    with pytest.raises(core.TruncationRefused):  # a string is not the list Hermes stored
        core.save_transcript(
            session_id="api-1",
            messages=[{"role": "user", "content": "Is this the café's receipt?"}],
        )
