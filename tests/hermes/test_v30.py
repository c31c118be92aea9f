"""Upstream's schema-30 layout (more columns, display triggers, external-content FTS5, views).

Built from upstream's DDL, with rows as upstream writes them (tests/hermes/v30.py). After every action FTS5's own
``integrity-check`` (rank 1: the index against its external content, the
views) must pass, as must the foreign-key and integrity checks: an
external-content index that drifts from its view corrupts on the next delete.
"""

from __future__ import annotations

import sqlite3

import pytest
from django.urls import reverse

from sessions_admin import core
from sessions_admin.demo import consistency
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import TrashEntry
from sessions_admin.store import attach as attach_module
from tests.hermes import v30
from tests.hermes.conftest import raw_rows

KEY = "agent:main:slack:dm:9"


@pytest.fixture
def v30_store(hermes_home):
    path = hermes_home / "state.db"
    v30.create(path)
    w = v30.Writer(path)
    w.conn.execute("INSERT INTO system_prompts VALUES ('h1', 'You are helpful.')")
    w.session("v-a", "slack", session_key=KEY, system_prompt_hash="h1", title="Slack planning")
    w.message("v-a", "user", "the ocelot question")
    w.message("v-a", "assistant", "Ocelot answer.")
    w.message("v-a", "tool", "tool output about the pangolin", tool_name="search")
    w.conn.execute(
        "UPDATE sessions SET ended_at = started_at + 5, end_reason = 'agent_close' WHERE id = 'v-a'"
    )
    w.usage("v-a", "m1")
    w.session("v-b", "slack", session_key=KEY)
    w.message("v-b", "user", "and the quetzal question")
    w.message("v-b", "assistant", "Quetzal answer.")
    w.session("v-del", "slack", parent_session_id="v-a", model_config='{"_delegate_from": "v-a"}')
    w.message("v-del", "user", "delegated tapir work")
    w.session("v-cron", "cron")
    w.message("v-cron", "user", "nightly wombat report")
    w.message("v-cron", "assistant", "Wombat report done.")
    w.close()
    return path


def test_the_check_accepts_the_newer_layout(v30_store):
    found = attach_module.inspect_sqlite(str(v30_store), alias="store", role="store")
    assert found.schema_version == 30 and found.fts_layout == "external"
    assert [(f.level, f.code) for f in found.findings] == [("warning", "own_tables_missing")]


def test_pages_and_every_action_keep_the_external_indexes_in_step(v30_store, attach, admin, client):
    attach()
    assert v30.fts_problems(v30_store) == []
    for sid in ("v-a", "v-b", "v-del", "v-cron"):
        for url in (
            reverse("session_detail", args=[sid]),
            reverse("session_transcript", args=[sid]) + "?after=0:0",
            reverse("cascade_delete", args=[sid]),
        ):
            assert client.get(url).status_code == 200, url
    for url in (reverse("session_list") + "?q=quetzal", reverse("fork_list"), reverse("home")):
        assert client.get(url).status_code == 200, url
    assert [g.session_ids for g in core.find_fork_groups()] == [("v-a", "v-b")]

    # Merge the key fork, then the cron session (its messages join the trigram index).
    key_merge = core.merge_sessions(session_ids=["v-a", "v-b"], target_id="v-a")
    assert v30.fts_problems(v30_store) == []
    cron_merge = core.merge_sessions(session_ids=["v-a", "v-cron"], target_id="v-a")
    assert v30.fts_problems(v30_store) == []
    assert v30.search(v30_store, "wombat") == {"v-a"}
    assert v30.search(v30_store, "womba", "messages_fts_trigram") == {"v-a"}

    core.undo_last_turn(session_id="v-a")
    core.redo_turn(session_id="v-a")
    assert v30.fts_problems(v30_store) == []

    # Unmerge the cron session: its messages leave the trigram index again.
    core.unmerge(merge_id=cron_merge.merge_id)
    assert v30.fts_problems(v30_store) == []
    assert v30.search(v30_store, "womba", "messages_fts_trigram") == set()
    assert v30.search(v30_store, "wombat") == {"v-cron"}

    # Delete the conversation (its delegate goes too), then restore it from the trash.
    core.unmerge(merge_id=key_merge.merge_id)
    plan = core.plan_cascade_delete(session_ids=["v-a"])
    assert set(plan.session_ids) == {"v-a", "v-del"}
    result = core.execute_cascade_delete(
        session_ids=["v-a"], expected_fingerprint=plan.fingerprint, actor="t", reason="r"
    )
    assert v30.fts_problems(v30_store) == []
    assert v30.search(v30_store, "ocelot") == set() and v30.search(v30_store, "tapir") == set()
    core.restore_trash_entry(entry_id=result.trash_entry_ids[0], actor="t")
    assert v30.fts_problems(v30_store) == []
    assert v30.search(v30_store, "ocelot") == {"v-a"} and v30.search(v30_store, "tapir") == {
        "v-del"
    }
    assert v30.search(v30_store, "oce", "messages_fts_trigram") == {"v-a"}
    assert v30.search(v30_store, "tapi", "messages_fts_trigram") == set()


HERMES_TABLES = ("sessions", "messages", "session_model_usage")


def _typed(path) -> dict[str, list[tuple]]:
    """Exact values of every row; sessions and usage rows by key (their rowid is not data)."""
    return {table: sorted(v30.typed_rows(path, table)) for table in HERMES_TABLES}


def test_rows_as_upstream_writes_them_are_deleted_and_restored_byte_exact(
    v30_store, attach, admin, client
):
    """display_identity BLOBs and full usage rows: cascade delete (console) and a bulk-delete job."""
    attach()
    before = _typed(v30_store)
    assert {r[-4] for r in before["messages"]} == {"blob"}  # display_identity, as upstream writes
    assert len(before["session_model_usage"][0]) == 2 * 18

    plan = client.get(reverse("cascade_delete", args=["v-a"])).context["plan"]
    response = client.post(
        reverse("cascade_delete_confirm", args=["v-a"]),
        {"fingerprint": plan.fingerprint, "reason": "cleanup"},
    )
    assert response.status_code == 302
    assert v30.typed_rows(v30_store, "session_model_usage") == []
    # The job run here, in this thread (the console's worker thread would race this test).
    job_id = jobs.create_bulk_delete_job(
        session_ids=["v-b", "v-cron"], include_live=True, actor="t", reason="old"
    )
    assert jobs.run_job(job_id=job_id).state == "done"
    assert v30.typed_rows(v30_store, "messages") == []
    assert v30.fts_problems(v30_store) == []

    for entry in TrashEntry.objects.order_by("pk"):
        response = client.post(reverse("trash_restore", args=[entry.pk]), {"reason": "oops"})
        assert response.status_code == 302
    assert _typed(v30_store) == before
    assert v30.fts_problems(v30_store) == []
    assert v30.search(v30_store, "ocelot") == {"v-a"}
    assert v30.search(v30_store, "wombat") == {"v-cron"}
    assert v30.search(v30_store, "quetz", "messages_fts_trigram") == {"v-b"}


def _drop_from_index(path, table: str, message_id: int) -> None:
    """Take one row out of an external-content index the way FTS5 deletes one ('delete')."""
    conn = sqlite3.connect(path)
    columns = "content, tool_name, tool_calls" if table == "messages_fts" else "content, tool_name"
    source = f"{table}_src"
    conn.execute(
        f"INSERT INTO {table}({table}, rowid, {columns}) "
        f"SELECT 'delete', id, {columns} FROM {source} WHERE id = ?",
        [message_id],
    )
    conn.commit()
    conn.close()


def test_the_consistency_check_reads_the_external_layout(v30_store, attach):
    attach()
    assert consistency._check_search_index() == []
    ocelot = raw_rows(v30_store, "SELECT id FROM messages WHERE content = 'the ocelot question'")
    quetzal = raw_rows(v30_store, "SELECT id FROM messages WHERE content = 'Quetzal answer.'")
    _drop_from_index(v30_store, "messages_fts", ocelot[0][0])
    _drop_from_index(v30_store, "messages_fts_trigram", quetzal[0][0])
    assert consistency._check_search_index() == [
        f"1 message(s) missing from messages_fts: {ocelot[0][0]}",
        f"1 message(s) missing from messages_fts_trigram: {quetzal[0][0]}",
    ]
