"""db.memoized_reads: one page's repeated lineage questions are read once, never across a change."""

from __future__ import annotations

from django.db import connections
from django.test.utils import CaptureQueriesContext

from sessions_admin import core
from sessions_admin.core import db, lineage
from sessions_admin.core.lifecycle import where_it_continues
from sessions_admin.routers import store_alias


def _compressed_pair() -> tuple[str, str]:
    parent = core.create_session(source="cli", session_key="k:memo").session_id
    core.append_message(session_id=parent, role="user", content="hello")
    child = core.rotate_for_compression(
        session_id=parent, summary="Summary", carry_messages=[]
    ).new_session_id
    return parent, child


def test_a_repeated_question_is_read_once_inside_and_every_time_outside():
    parent, child = _compressed_pair()
    row = lineage.session_row(parent)
    store = connections[store_alias()]
    with CaptureQueriesContext(store) as outside:
        for _ in range(3):
            assert where_it_continues(row) == (child, "compression chain")
    with db.memoized_reads(), CaptureQueriesContext(store) as inside:
        for _ in range(3):
            assert where_it_continues(lineage.session_row(parent)) == (child, "compression chain")
    assert len(outside.captured_queries) >= 3
    # The row and the walk once each, where outside every call read again.
    assert len(inside.captured_queries) * 2 <= len(outside.captured_queries)


def test_a_change_made_inside_is_seen_by_the_next_read():
    parent, child = _compressed_pair()
    with db.memoized_reads():
        assert lineage.compression_chain(session_id=parent) == [parent, child]
        assert lineage.session_row(child)["ended_at"] is None
        grandchild = core.rotate_for_compression(
            session_id=child, summary="Again", carry_messages=[]
        ).new_session_id
        assert lineage.compression_chain(session_id=parent) == [parent, child, grandchild]
        assert lineage.session_row(child)["end_reason"] == "compression"
        assert where_it_continues(lineage.session_row(parent))[0] == grandchild


def test_an_operation_inside_reads_afresh_what_it_changes():
    parent, child = _compressed_pair()
    with db.memoized_reads():
        assert lineage.session_row(child)["title"] is None

        @db.store_operation
        def retitle_then_read() -> str:
            lineage.session_row(child)
            db.execute("UPDATE sessions SET title = 'renamed' WHERE id = %s", [child])
            return lineage.session_row(child)["title"]

        assert retitle_then_read() == "renamed"
        assert lineage.session_row(child)["title"] == "renamed"


def test_an_answer_is_a_copy_the_caller_may_change():
    parent, child = _compressed_pair()
    with db.memoized_reads():
        chain = lineage.compression_chain(session_id=parent)
        chain.append("not-a-session")
        row = lineage.session_row(parent)
        row["end_reason"] = "scribbled"
        assert lineage.compression_chain(session_id=parent) == [parent, child]
        assert lineage.session_row(parent)["end_reason"] == "compression"
