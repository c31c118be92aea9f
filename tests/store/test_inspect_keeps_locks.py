"""The store check reads a SQLite store without costing this process its locks on it.

POSIX record locks belong to a process: closing any handle on a database file drops every lock
the process's SQLite connections hold on it. The check used to read the file's header with
open(); a process with a connection to the store (a dashboard worker, a test run) that ran it
lost its lock, and the next runtime to close its own connection took itself for the last one:
it checkpointed and deleted the -wal and -shm files the dashboard's connections still used.
Those went on with a write-ahead index no other process saw (commits lost in between, then
"disk I/O error" on every new connection: the full suite's failure of stop 35).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from sessions_admin.store import attach

pytestmark = pytest.mark.django_db(databases=["default", "store"])

# A runtime: one write, then its connection closes (the moment SQLite checks for other users).
RUNTIME_WRITE = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=5)
conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('from-runtime', 'cli', 1)")
conn.commit()
conn.close()
"""


def _store(path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT, started_at REAL)")
    conn.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT)")
    return conn


@pytest.mark.parametrize("role", ["store", "responses"])
def test_a_runtime_closing_after_the_check_leaves_our_connections_their_files(tmp_path, role):
    path = tmp_path / "state.db"
    held = _store(path)  # this process's connection, open across the check
    assert held.execute("SELECT COUNT(*) FROM sessions").fetchone() == (0,)

    found = attach.inspect_sqlite(str(path), alias="store", role=role)
    assert found.exists and "sessions" in found.tables

    subprocess.run([sys.executable, "-c", RUNTIME_WRITE, str(path)], check=True, timeout=60)

    # The runtime saw our connection: it left the write-ahead files in place...
    assert (tmp_path / "state.db-wal").exists()
    assert (tmp_path / "state.db-shm").exists()
    # ...and its write is what this process's connections read, old and new.
    assert held.execute("SELECT id FROM sessions").fetchall() == [("from-runtime",)]
    fresh = sqlite3.connect(path)
    assert fresh.execute("SELECT id FROM sessions").fetchall() == [("from-runtime",)]
    fresh.close()
    held.close()


def test_a_file_that_is_not_a_database_is_still_named_so(tmp_path):
    path = tmp_path / "state.db"
    path.write_text("not a database, just some text that is long enough " * 40)
    found = attach.inspect_sqlite(str(path), alias="store", role="store")
    assert [(f.level, f.code) for f in found.findings] == [("error", "not_sqlite")]
