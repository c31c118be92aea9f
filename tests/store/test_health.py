from __future__ import annotations

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.store import health
from tests.builders import foreign_keys_off


def _ids(kind: str) -> set[str]:
    sql, params = health.predicate(kind)
    return {r[0] for r in db.fetchall(f"SELECT s.id FROM sessions s WHERE {sql}", params)}


def test_each_check_finds_exactly_the_broken_sessions():
    healthy = core.create_session(source="cli").session_id
    core.append_message(session_id=healthy, role="user", content="hi")
    continuation = core.rotate_for_compression(session_id=healthy).new_session_id
    dangling = core.create_session(source="cli").session_id
    core.append_message(session_id=dangling, role="user", content="hi")
    core.end_session(session_id=dangling, end_reason="compression")
    orphan = core.create_session(source="cli", parent_session_id=healthy).session_id
    core.append_message(session_id=orphan, role="user", content="hi")
    with foreign_keys_off():
        db.execute("UPDATE sessions SET parent_session_id = 'gone' WHERE id = %s", [orphan])
    miscounted = core.create_session(source="cli").session_id
    core.append_message(session_id=miscounted, role="user", content="hi")
    db.execute("UPDATE sessions SET message_count = 7 WHERE id = %s", [miscounted])

    assert _ids("dangling_compression") == {dangling}
    assert _ids("missing_parent") == {orphan}
    assert _ids("counter_mismatch") == {miscounted}
    assert _ids("empty") == {continuation}
    assert health.count("missing_parent") == 1
    assert health.count("forks") == 0
