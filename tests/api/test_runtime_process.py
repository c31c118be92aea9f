"""A runtime in another process, knowing only HTTP, drives a whole lifecycle against a real server.

gunicorn serves the dashboard on this test's databases; ``clients/runtime_client.py`` runs with
``python -I`` (no project on its path: it imports nothing of ours) and drives many chats at once
through the runtime routes, retrying appends with their idempotency keys. Afterwards the store
holds exactly the messages the client was told it stored (none twice, none lost, each in the
session the answer named, active unless an undo took it), the live sessions it expects, and
``check_consistency`` finds nothing wrong.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command

from sessions_admin.core import db
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import AuditEntry
from tests.helpers import Gunicorn, server_env, serving

CLIENT = Path(__file__).parent / "clients" / "runtime_client.py"


@pytest.fixture
def server(tmp_path) -> Iterator[str]:
    env = server_env(tmp_path, SESSIONS_ADMIN_API_RATE="", SESSIONS_ADMIN_THREADS="8")
    gunicorn = Gunicorn(env, tmp_path / "server.log")
    with serving(gunicorn):
        yield gunicorn.base


def test_a_runtime_speaking_only_http_keeps_the_store_whole(server, tmp_path):
    secret = actions.create_api_token(actor=None, name="proc-runtime", scope="runtime").secret
    chats, turns = 6, 12
    run = subprocess.run(
        [sys.executable, "-I", str(CLIENT), server, secret, str(chats), str(turns), "7"],
        cwd=tmp_path,  # nowhere near the project
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, (run.stderr[-3000:], run.stdout[-3000:])
    log = json.loads(run.stdout)
    assert log["errors"] == []
    acked = log["acked"]
    assert len(acked) >= chats * turns * 2

    # Every acknowledged message is stored once, where the answer said, active unless undone.
    stored = {
        content: (message_id, session_id, role, active)
        for message_id, session_id, role, content, active in db.fetchall(
            "SELECT id, session_id, role, content, active FROM messages "
            "WHERE content LIKE %s ORDER BY id",
            ["proc-%"],
        )
    }
    count = db.fetchone("SELECT COUNT(*) FROM messages WHERE content LIKE %s", ["proc-%"])[0]
    assert count == len(stored) == len(acked), "a message was stored twice, or one was lost"
    inactive = set(log["inactive"])
    for ack in acked:
        message_id, session_id, role, active = stored[ack["nonce"]]
        assert (message_id, session_id, role) == (ack["id"], ack["session_id"], ack["role"])
        assert bool(active) == (ack["id"] not in inactive), ack
    # No stale write landed; each chat's key has the live session the client ended in.
    assert db.fetchone("SELECT COUNT(*) FROM messages WHERE content = 'stale'")[0] == 0
    for key, session_id in log["live"].items():
        live = db.fetchall(
            "SELECT id FROM sessions WHERE session_key = %s AND ended_at IS NULL", [key]
        )
        assert live == [(session_id,)], key
    # What the client read back in pages is each live session's active transcript.
    for session_id, ids in log["read"].items():
        active_ids = db.fetchall(
            "SELECT id FROM messages WHERE session_id = %s AND active = 1 ORDER BY id",
            [session_id],
        )
        assert ids == [row[0] for row in active_ids]
    call_command("check_consistency")
    # Each changing request has its entry, naming the token.
    assert AuditEntry.objects.filter(actor_name="api:proc-runtime").count() >= len(acked) // 2
