"""What a delete batch checks before it deletes, and what it keeps.

A batch copies its rows to the trash before taking the store's lock, then reads them again
under the lock and deletes only if they are exactly the rows it copied (``rows_key``). It
keeps the rows of every table the store deletes with a session (ON DELETE CASCADE),
including a table a runtime created after the dashboard's last delete.
"""

from __future__ import annotations

import math

import pytest
from django.db import connections

from sessions_admin import core
from sessions_admin.core import db, deletion


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (0.0, -0.0),
        (1, 1.0),
        ("a", "a "),
        (b"\x00", b"\x00\x00"),
        (None, 0),
    ],
)
def test_rows_that_compare_equal_loosely_are_not_the_same_rows(first, second):
    row = {"id": "s", "value": first}
    other = {"id": "s", "value": second}
    assert deletion.rows_key({"sessions": [row]}) != deletion.rows_key({"sessions": [other]})
    assert not deletion.same_rows(row, deletion.rows_key(other), other)


def test_two_reads_of_the_same_rows_are_the_same_rows():
    def read():  # new objects each time, as two reads of the store give
        return {
            "sessions": [{"id": "s" + str(1), "value": float("nan"), "blob": bytes(3)}],
            "messages": [{"id": 2**63 - 1, "content": "x" * 3, "at": 0.1 + 0.2}],
        }

    first, second = read(), read()
    assert deletion.same_rows(first, deletion.rows_key(second), second)
    # A NaN is the same value as itself (PostgreSQL's double precision holds one).
    assert math.isnan(first["sessions"][0]["value"])


def test_a_memoryview_is_compared_by_its_bytes():
    first = {"rows": [{"blob": memoryview(b"abc")}]}
    second = {"rows": [{"blob": memoryview(b"abc")}]}
    changed = {"rows": [{"blob": memoryview(b"abd")}]}
    assert deletion.same_rows(first, deletion.rows_key(second), second)
    assert not deletion.same_rows(first, deletion.rows_key(changed), changed)


@pytest.mark.skipif(
    "connections['store'].vendor != 'sqlite'",
    reason="a runtime's own per-session tables are a SQLite store's (Hermes's)",
)
def test_a_cascading_table_created_after_a_delete_is_kept_by_the_next_one():
    first = core.create_session(source="cli").session_id
    second = core.create_session(source="cli").session_id
    core.end_session(session_id=first, end_reason="done")
    core.end_session(session_id=second, end_reason="done")
    deletion.delete_batch([first], actor="t", reason="r", job_id=None)
    # The runtime adds a per-session table of its own, as Hermes did with session_model_usage.
    db.execute(
        "CREATE TABLE runtime_extras (session_id TEXT NOT NULL REFERENCES sessions(id) "
        "ON DELETE CASCADE, note TEXT)"
    )
    try:
        db.execute("INSERT INTO runtime_extras VALUES (%s, %s)", [second, "keep me"])
        _, _, entry_id = deletion.delete_batch([second], actor="t", reason="r", job_id=None)
        assert db.fetchall("SELECT * FROM runtime_extras") == []
        core.restore_trash_entry(entry_id=entry_id, actor="t")
        assert db.fetchall("SELECT session_id, note FROM runtime_extras") == [(second, "keep me")]
    finally:
        db.execute("DROP TABLE runtime_extras")
        connections["store"].close()
