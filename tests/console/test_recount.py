"""The repair of the health finding "Counters that disagree with the rows" (attack round 46, Z4).

Hermes 0.19's own ``rewind_to_message`` flips rows inactive and keeps ``message_count``; on an
ended session no console action recounted, so the finding had no repair.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.ledger.models import AuditEntry
from sessions_admin.store import health
from tests.helpers import session


def _rewound_by_the_runtime() -> str:
    """An ended session whose last turn a runtime rewound past the core, as Hermes does."""
    session_id = core.create_session(source="cli", session_key="cli:rewound").session_id
    for role, content in (("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2")):
        core.append_message(session_id=session_id, role=role, content=content)
    db.execute(
        "UPDATE messages SET active = 0 WHERE session_id = %s AND content IN ('q2', 'a2')",
        [session_id],
    )
    core.end_session(session_id=session_id, end_reason="user_exit")
    db.execute("UPDATE sessions SET message_count = 4 WHERE id = %s", [session_id])
    return session_id


def test_support_recounts_a_session_from_its_page(signed_in):
    session_id = _rewound_by_the_runtime()
    assert health.count("counter_mismatch") == 1
    client = signed_in("support")
    page = client.get(reverse("session_detail", args=[session_id])).content.decode()
    assert "Recount: 4 counted, 2 active" in page

    answer = client.post(reverse("session_recount", args=[session_id]), {"reason": "ticket 9"})

    assert answer.status_code == 302
    assert session(session_id)["message_count"] == 2
    assert health.count("counter_mismatch") == 0
    entry = AuditEntry.objects.get(action="recount")
    assert entry.outcome == AuditEntry.OK and entry.reason == "ticket 9"
    assert entry.after == {"message_count": [4, 2], "tool_call_count": [0, 0]}
    page = client.get(reverse("session_detail", args=[session_id])).content.decode()
    assert "Recount:" not in page  # nothing left to offer


def test_a_viewer_cannot_recount(signed_in):
    session_id = _rewound_by_the_runtime()
    answer = signed_in("viewer").post(reverse("session_recount", args=[session_id]))
    assert answer.status_code == 403
    assert session(session_id)["message_count"] == 4


def test_the_core_recount_touches_only_the_counters():
    session_id = _rewound_by_the_runtime()
    before = dict(session(session_id))
    result = core.recount_session(session_id=session_id)
    assert (result.before, result.after) == ((4, 0), (2, 0))
    after = dict(session(session_id))
    assert {k for k in before if before[k] != after[k]} == {"message_count"}
    with pytest.raises(core.SessionNotFound):
        core.recount_session(session_id="no-such-session")
