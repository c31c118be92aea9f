"""A running Hermes gateway's session routing, in hermes-agent's own Python, for the repair tests.

Executed by the Python that has hermes-agent installed, never imported by the
test process. Unlike ``driver.py`` (one request, one process), this process
stays up between the console's actions, as a gateway does: its
``gateway.session.SessionStore`` keeps its in-memory routing across them, and
only state.db tells it what the console changed. One JSON request a line on
standard input, one JSON answer a line on standard output:

    {"op": "route", "chat": {...}}         -> the session the gateway routes a message to
    {"op": "append", "session_id", "role", "content"}  (SessionDB.append_message)
    {"op": "reset", "chat": {...}}         -> the gateway's own /reset (SessionStore.reset_session)
    {"op": "end", "session_id", "reason"}  (SessionDB.end_session, e.g. agent_close)
    {"op": "create", "session_id", "chat": {...}}  (SessionDB.create_session with the chat's key)
    {"op": "sql", "sql", "params"}         -> rows, read through Hermes's connection

``chat`` is {"platform", "chat_id", "chat_type", "user_id"}. An op that raises
answers {"error": "Name: text"}.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    home = sys.argv[1]
    os.environ["HERMES_HOME"] = home  # before hermes_state computes its default path
    from pathlib import Path

    from gateway.config import GatewayConfig, Platform
    from gateway.session import SessionSource, SessionStore

    store = SessionStore(Path(home) / "sessions", GatewayConfig())

    def source(chat: dict) -> SessionSource:
        return SessionSource(
            platform=Platform(chat["platform"]),
            chat_id=chat["chat_id"],
            chat_type=chat.get("chat_type", "dm"),
            user_id=chat.get("user_id"),
        )

    def run(request: dict):
        op = request["op"]
        if op == "route":
            return store.get_or_create_session(source(request["chat"])).session_id
        if op == "append":
            return store._db.append_message(
                request["session_id"], request["role"], request["content"]
            )
        if op == "reset":
            key = store._generate_session_key(source(request["chat"]))
            entry = store.reset_session(key)
            return entry.session_id if entry else None
        if op == "end":
            store._db.end_session(request["session_id"], request["reason"])
            return None
        if op == "create":
            chat = request["chat"]
            key = store._generate_session_key(source(chat))
            return store._db.create_session(
                request["session_id"],
                chat["platform"],
                user_id=chat.get("user_id"),
                session_key=key,
                chat_id=chat["chat_id"],
                chat_type=chat.get("chat_type", "dm"),
            )
        if op == "key":
            return store._generate_session_key(source(request["chat"]))
        if op == "sql":
            with store._db._lock:
                return [
                    list(row)
                    for row in store._db._conn.execute(request["sql"], request.get("params", []))
                ]
        raise ValueError(f"unknown op {op!r}")

    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = {"result": run(json.loads(line))}
        except Exception as error:  # noqa: BLE001 - reported to the test
            answer = {"error": f"{type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
