"""No byte of an erased person is left in any database file, whatever SQLite's build.

SQLite: every connection is opened with ``secure_delete`` OFF (python.org's, macOS's and
Homebrew's builds; Debian's defaults to on), and the subject's bytes are freed before the
erasure (a merge moved their messages, an FTS segment merge, a trash entry restored):
``secure_delete`` on the erasure's own deletes never reaches those, only the file rewrite
does. PostgreSQL: the data directory's files after a CHECKPOINT, once the operator's
rewrite step (VACUUM FULL) ran. Both read the raw bytes of every file.
"""

from __future__ import annotations

import io
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from django.db.backends.signals import connection_created

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.erasure import Subject
from sessions_admin.ledger import actions, erasure, schedule
from sessions_admin.ledger.models import AuditEntry, ErasureRequest
from sessions_admin.routers import responses_alias, store_alias
from tests.builders import erasures_run_inline  # noqa: F401 - an autouse fixture
from tests.helpers import file_bytes

USER = "u-bytes-60613"
CHAT = "chat-bytes-73302"
SECRET = "quokka-marmalade-4419"
TITLE = "Heliotrope ledger 5521"
SLUG = "slug-bytes-9087"
# One token for the full-text indexes (unicode61 splits the others at their hyphens).
WORD = "zygomorphicbassoon"
DISTINCTIVE = [USER, CHAT, SECRET, TITLE, SLUG, WORD]


def _secure_delete_off(sender, connection, **kwargs):
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA secure_delete = OFF")


@pytest.fixture
def secure_delete_off():
    """Every SQLite connection opens with ``secure_delete`` off, as most builds have it."""
    connection_created.connect(_secure_delete_off)
    connections.close_all()
    try:
        for alias in dict.fromkeys(["default", store_alias(), responses_alias()]):
            if connections[alias].vendor != "sqlite":
                continue
            with connections[alias].cursor() as cursor:
                cursor.execute("PRAGMA secure_delete")
                assert cursor.fetchone()[0] == 0
        yield
    finally:
        connection_created.disconnect(_secure_delete_off)
        connections.close_all()


def subject_with_freed_bytes() -> dict[str, str]:
    """The subject's data, some of it moved or rewritten before the erasure (freeing the old
    copies' space without zeroing it), and an unrelated person's."""
    first = core.create_session(
        source="telegram", user_id=USER, chat_id=CHAT, session_key=f"tg:{CHAT}", title=TITLE
    ).session_id
    core.append_messages(
        session_id=first,
        messages=[
            # Longer than a page: its overflow pages go to the freelist when a merge moves it.
            {"role": "user", "content": f"my code word is {SECRET}, or {WORD}. " * 600},
            {"role": "assistant", "content": f"noted, {WORD}", "reasoning": f"said {SECRET}"},
        ],
    )
    core.end_session(session_id=first, end_reason="user_exit")
    second = core.create_session(source="telegram", user_id=USER, chat_id=CHAT).session_id
    core.append_messages(
        session_id=second,
        messages=[{"role": "user", "content": f"again {SECRET} {WORD} " + "padding " * 200}],
    )
    core.record_turn(response_id="resp-bytes-1", session_id=second, conversation=SLUG)
    core.record_turn(
        response_id="resp-bytes-2",
        session_id=second,
        conversation=SLUG,
        data={"note": f"stored {SECRET}"},
    )
    # A merge moves the first session's messages into the second (freeing their old copies).
    plan = core.plan_merge(session_ids=[first, second], target_id=second)
    core.merge_sessions(
        session_ids=[first, second], target_id=second, expected_fingerprint=plan.fingerprint
    )
    # A trash entry holding them, restored: the dashboard frees its copy.
    old = core.create_session(source="telegram", user_id=USER).session_id
    core.append_message(session_id=old, role="user", content=f"old {SECRET} {WORD}")
    core.end_session(session_id=old, end_reason="user_exit")
    cascade = core.plan_cascade_delete(session_ids=[old])
    deleted = actions.cascade_delete(
        actor=None,
        session_ids=[old],
        include_branches=False,
        expected_fingerprint=cascade.fingerprint,
        reason="tidy up",
    )
    actions.restore(actor=None, entry_id=deleted.trash_entry_ids[0])
    # An earlier delete (to the trash): the store freed the rows' space, overflow pages too.
    # (Its session id is not among the strings looked for: a session only in the trash is
    # matched by the erasure's plan, items 1-3 of issue 25, not by the file rewrite.)
    gone = core.create_session(source="telegram", user_id=USER).session_id
    core.append_message(session_id=gone, role="user", content=f"gone {SECRET} {WORD} " * 800)
    core.end_session(session_id=gone, end_reason="user_exit")
    cascade = core.plan_cascade_delete(session_ids=[gone])
    actions.cascade_delete(
        actor=None,
        session_ids=[gone],
        include_branches=False,
        expected_fingerprint=cascade.fingerprint,
        reason="tidy up",
    )
    if db.vendor() == "sqlite":
        # A full-text segment merge: the old segments' pages are freed, not zeroed.
        for fts in ("messages_fts", "messages_fts_trigram"):
            db.execute(f"INSERT INTO {fts}({fts}) VALUES ('optimize')")
    other = core.create_session(source="cli", user_id="u-unrelated-bytes").session_id
    core.append_message(session_id=other, role="user", content="bystander text 31337")
    return {"first": first, "second": second, "old": old, "gone": gone, "other": other}


def _erase(subject: Subject) -> ErasureRequest:
    plan = erasure.plan(subject)
    request = actions.request_erasure(
        actor=None, subject=subject, reference="DSR-B-1", expected_fingerprint=plan.fingerprint
    )
    assert actions.run_erasure(request_id=request.pk) is not None
    request.refresh_from_db()
    return request


def _sqlite_files() -> list[Path]:
    files = []
    for alias in dict.fromkeys([store_alias(), responses_alias(), "default"]):
        name = Path(connections[alias].settings_dict["NAME"])
        files += sorted(p for p in name.parent.glob(name.name + "*") if p.is_file())
    return files


def _bytes_if_present(path: Path) -> bytes:
    """A file's bytes, or none if the server removed it since it was listed (PostgreSQL
    rewrites and unlinks its relation-cache file, ``pg_internal.init``, at any time)."""
    try:
        return file_bytes(path)
    except subprocess.CalledProcessError:
        if path.exists():
            raise
        return b""


def _found(files: list[Path], values: list[str]) -> dict[str, list[str]]:
    contents = {path: _bytes_if_present(path) for path in files}
    found = {
        value: [str(path) for path, data in contents.items() if value.encode() in data]
        for value in values
    }
    return {value: paths for value, paths in found.items() if paths}


def test_sqlite_no_byte_is_left_even_with_secure_delete_off(secure_delete_off, settings):
    if connections[store_alias()].vendor != "sqlite":
        pytest.skip("SQLite's files")
    ids = subject_with_freed_bytes()
    values = [*DISTINCTIVE, ids["first"], ids["second"], ids["old"]]
    assert set(_found(_sqlite_files(), values)) >= {USER, SECRET, WORD}, "the test saw no data"

    # The erasure alone (its own deletes zeroed) leaves what was freed before it.
    settings.SESSIONS_ADMIN_ERASURE_REWRITE_AUTO = False
    request = _erase(Subject(user_id=USER, chat_ids=(CHAT,)))
    assert request.receipt["file_rewrite"] == {"state": "pending", "at": None}
    assert erasure.requests_awaiting_rewrite() == [request.pk]
    assert _found(_sqlite_files(), values), "nothing was freed before the erasure"

    call_command("erasure_rewrite", stdout=io.StringIO())

    request.refresh_from_db()
    assert request.receipt["file_rewrite"]["state"] == "done"
    assert erasure.verify_receipt(erasure.receipt_text(request.receipt).encode()).valid
    assert _found(_sqlite_files(), values) == {}
    # Nothing else went.
    assert db.fetchone("SELECT content FROM messages WHERE session_id = %s", [ids["other"]]) == (
        "bystander text 31337",
    )
    assert _found(_sqlite_files(), ["bystander text 31337"])


def test_sqlite_an_idle_store_is_rewritten_by_the_erasure_itself(secure_delete_off):
    if connections[store_alias()].vendor != "sqlite":
        pytest.skip("SQLite's files")
    ids = subject_with_freed_bytes()
    request = _erase(Subject(user_id=USER, chat_ids=(CHAT,)))
    assert request.receipt["file_rewrite"]["state"] == "done"
    assert _found(_sqlite_files(), [*DISTINCTIVE, ids["first"], ids["second"]]) == {}


def _runtime_writes(path: str, session_id: str, stop: threading.Event) -> None:
    """A runtime of its own (another connection) writing a few times a second."""
    import sqlite3

    connection = sqlite3.connect(path, timeout=10, isolation_level=None)
    try:
        n = 0
        while not stop.is_set():
            n += 1
            connection.execute("UPDATE sessions SET title = ? WHERE id = ?", (f"t{n}", session_id))
            time.sleep(0.05)
    finally:
        connection.close()


def test_sqlite_a_busy_runtime_defers_the_rewrite_to_a_quiet_moment(secure_delete_off, settings):
    """While the runtime writes the rewrite waits (never holding its writers); the scheduler
    rewrites at the next quiet moment, and only then does the receipt say done."""
    if connections[store_alias()].vendor != "sqlite":
        pytest.skip("SQLite's files")
    ids = subject_with_freed_bytes()
    values = [*DISTINCTIVE, ids["first"], ids["second"]]
    stop = threading.Event()
    writer = threading.Thread(
        target=_runtime_writes,
        args=(str(connections[store_alias()].settings_dict["NAME"]), ids["other"], stop),
        daemon=True,
    )
    writer.start()
    try:
        request = _erase(Subject(user_id=USER, chat_ids=(CHAT,)))
        assert request.receipt["file_rewrite"] == {"state": "pending", "at": None}
        assert actions.finish_erasure_rewrites() == []  # still busy: nothing done
        assert not AuditEntry.objects.filter(action="erasure_files_rewritten").exists()
    finally:
        stop.set()
        writer.join(timeout=30)

    settings.SESSIONS_ADMIN_ERASURE_INDEX_RETRY_SECONDS = 0
    halt = threading.Event()
    thread = threading.Thread(
        target=schedule.run_schedule, kwargs={"interval": 0.05, "stop": halt}, daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while erasure.requests_awaiting_rewrite() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        halt.set()
        thread.join(timeout=60)
    request.refresh_from_db()
    assert request.receipt["file_rewrite"]["state"] == "done"
    assert AuditEntry.objects.filter(action="erasure_files_rewritten").count() == 1
    assert _found(_sqlite_files(), values) == {}


def _postgres_files() -> list[Path]:
    with connections[store_alias()].cursor() as cursor:
        cursor.execute("SHOW data_directory")
        data = Path(cursor.fetchone()[0])
    # pg_wal holds every change as it was made (the WAL archive's and backups' retention is
    # the operator's: docs/retention.md); the server log is not a database file.
    skipped = {"pg_wal", "log", "pg_log"}
    files = []
    for root, dirs, names in os.walk(data):
        dirs[:] = [d for d in dirs if d not in skipped]
        files += [Path(root) / name for name in names]
    return [path for path in files if path.is_file()]


def _checkpoint() -> None:
    with connections[store_alias()].cursor() as cursor:
        cursor.execute("CHECKPOINT")


def test_postgresql_no_byte_is_left_once_the_rewrite_ran():
    if connections[store_alias()].vendor != "postgresql":
        pytest.skip("PostgreSQL's data directory")
    ids = subject_with_freed_bytes()
    values = [*DISTINCTIVE, ids["first"], ids["second"], ids["old"]]
    # Statistics sample common values (the user id, on three sessions) into pg_statistic;
    # tables the erasure empties keep theirs through a later ANALYZE (it skips an empty
    # table), as autovacuum left them in a full run: their rows must go too.
    with connections[store_alias()].cursor() as cursor:
        cursor.execute(
            "ANALYZE sessions, messages, conversations, responses, sessions_admin_slug_history"
        )
    _checkpoint()
    assert set(_found(_postgres_files(), values)) >= {USER, SECRET}, "the test saw no data"

    request = _erase(Subject(user_id=USER, chat_ids=(CHAT,)))
    assert request.receipt["file_rewrite"] == {"state": "pending", "at": None}
    _checkpoint()
    assert _found(_postgres_files(), values), "a plain VACUUM left no dead tuple?"

    call_command("erasure_rewrite", "--request", str(request.pk), stdout=io.StringIO())

    request.refresh_from_db()
    assert request.receipt["file_rewrite"]["state"] == "done"
    assert any("VACUUM FULL" in note for note in request.receipt["storage"])
    _checkpoint()
    left = _found(_postgres_files(), values)
    assert left == {}, _relations(sorted({p for paths in left.values() for p in paths}))
    assert db.fetchone("SELECT content FROM messages WHERE session_id = %s", [ids["other"]]) == (
        "bystander text 31337",
    )


def _relations(paths: list[str]) -> list[str]:
    """The tables and indexes behind data files (for a failure's message)."""
    names = []
    with connections[store_alias()].cursor() as cursor:
        for path in paths:
            node = Path(path).name.split(".")[0].split("_")[0]
            cursor.execute(
                "SELECT relname FROM pg_class WHERE pg_relation_filenode(oid)::text = %s", [node]
            )
            row = cursor.fetchone()
            names.append(f"{path}: {row[0] if row else '?'}")
    return names


def test_postgresql_a_rewrite_waits_for_a_transaction_that_still_sees_the_erased_rows(
    monkeypatch,
):
    """VACUUM FULL copies the row versions an open transaction may still see: a report's
    snapshot from before the erasure kept the subject's rows alive through the rewrite,
    and the receipt said done. The rewrite now waits for such transactions (a bound),
    says why it did not run, and runs once they ended."""
    if connections[store_alias()].vendor != "postgresql":
        pytest.skip("PostgreSQL's snapshots")
    import psycopg

    from sessions_admin.core.erasure import files as erasure_files

    monkeypatch.setattr(erasure_files, "REWRITE_OLD_SNAPSHOT_WAIT_SECONDS", 0.5)
    ids = subject_with_freed_bytes()
    values = [*DISTINCTIVE, ids["first"], ids["second"], ids["old"]]
    params = connections[store_alias()].get_connection_params()
    report = psycopg.connect(**params)
    try:
        # A long transaction: one snapshot, from before the erasure, still open after it.
        # It holds no lock on the store's tables (it read none yet), so VACUUM FULL's lock
        # does not wait for it.
        report.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        report.execute("SELECT 1")
        request = _erase(Subject(user_id=USER, chat_ids=(CHAT,)))
        # The operator is told why: the transaction, by pid.
        pid = report.info.backend_pid
        with pytest.raises(CommandError, match=rf"older than the rewrite .*pid {pid} "):
            call_command("erasure_rewrite", "--request", str(request.pk), stdout=io.StringIO())
        request.refresh_from_db()
        assert request.receipt["file_rewrite"]["state"] == "pending"
        # What the report sees is still there for it, so nothing may say otherwise.
        assert (
            report.execute(
                "SELECT count(*) FROM messages WHERE content LIKE %s", [f"%{SECRET}%"]
            ).fetchone()[0]
            > 0
        )
    finally:
        report.rollback()
        report.close()

    call_command("erasure_rewrite", "--request", str(request.pk), stdout=io.StringIO())
    request.refresh_from_db()
    assert request.receipt["file_rewrite"]["state"] == "done"
    _checkpoint()
    left = _found(_postgres_files(), values)
    assert left == {}, _relations(sorted({p for paths in left.values() for p in paths}))


def test_a_large_store_is_left_to_the_operators_rewrite(settings):
    """An automatic rewrite never takes on a database over the bound (its lock grows with
    the file); the receipt stays pending until ``erasure_rewrite`` runs it."""
    settings.SESSIONS_ADMIN_ERASURE_REWRITE_AUTO = True
    settings.SESSIONS_ADMIN_ERASURE_REWRITE_AUTO_MAX_MB = 0.001  # 1 kB: every file is over
    subject_with_freed_bytes()
    request = _erase(Subject(user_id=USER, chat_ids=(CHAT,)))
    assert request.receipt["file_rewrite"] == {"state": "pending", "at": None}
    assert actions.finish_erasure_rewrites(automatic=True) == []
    out = io.StringIO()
    call_command("erasure_rewrite", "--request", str(request.pk), stdout=out)
    assert f"#{request.pk}: files rewritten" in out.getvalue()
    request.refresh_from_db()
    assert request.receipt["file_rewrite"]["state"] == "done"
