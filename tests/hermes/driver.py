"""Run hermes-agent's own code against a store: the runtime side of the Hermes tests.

Executed by the Python that has hermes-agent installed (its own virtualenv,
see sessions_admin.devtools.ensure_hermes), never imported by the test
process. Reads one JSON request from standard input:

    {"home": dir, "state": path or null, "responses": path or null,
     "ops": [{"call": "state.append_message", "args": [...], "kwargs": {...}},
             {"sql": "PRAGMA integrity_check", "on": "state"}, ...]}

and writes {"hermes_version", "schema_version", "results": [...]} to standard
output; a failing op gives {"error": "ExceptionName: text"} in its place.
``state`` is opened with ``hermes_state.SessionDB`` (which runs Hermes's own
schema initialisation, exactly as the runtime does on start-up) and
``responses`` with the API server's ``ResponseStore``.

An op ``{"api_turn": {"conversation": slug, "input": text, "reply": text}}``
is one ``POST /v1/responses`` turn as the 0.19 API server handles it (see
``APIServerAdapter._handle_responses``): the slug's latest response through
``get_conversation``/``get``, its ``session_id`` or a new uuid4 session (a cold
start), the turn appended to that session, the full history stored with
``put`` and the slug advanced with ``set_conversation``; the model's reply is
the given text.

``driver.py --serve`` keeps the stores open like a running gateway: the
request's first line is the header above without ``ops``, then each line is a
list of ops, answered by one line ``{"results": [...]}``; it exits at the end
of its input.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys


def _plain(value):
    if isinstance(value, sqlite3.Row):
        return {key: _plain(value[key]) for key in value.keys()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _api_turn(targets: dict, conversation: str, user_input: str, reply: str) -> dict:
    """One /v1/responses turn with ``conversation``, as hermes-agent 0.19's API server runs it."""
    import time
    import uuid

    db, store = targets["state"], targets["responses"]
    previous_response_id = store.get_conversation(conversation)
    history, stored_session_id = [], None
    if previous_response_id:
        stored = store.get(previous_response_id)
        if stored is None:
            raise LookupError(f"Previous response not found: {previous_response_id}")
        history = list(stored.get("conversation_history", []))
        stored_session_id = stored.get("session_id")
    session_id = stored_session_id or str(uuid.uuid4())
    if db.get_session(session_id) is None:
        db.create_session(session_id, "api_server")
    db.append_message(session_id, "user", user_input)
    db.append_message(session_id, "assistant", reply)
    full_history = [*history, {"role": "user", "content": user_input}]
    full_history.append({"role": "assistant", "content": reply})
    response_id = f"resp_{uuid.uuid4().hex[:28]}"
    response = {
        "id": response_id,
        "object": "response",
        "status": "completed",
        "created_at": int(time.time()),
        "model": "hermes-agent",
        "output": [{"type": "message", "role": "assistant", "content": reply}],
    }
    store.put(
        response_id,
        {
            "response": response,
            "conversation_history": full_history,
            "instructions": None,
            "session_id": session_id,
        },
    )
    store.set_conversation(conversation, response_id)
    return {
        "response_id": response_id,
        "session_id": session_id,
        "cold_start": previous_response_id is None,
        "history_length": len(full_history),
    }


def _run(targets: dict, ops: list[dict]) -> list:
    results = []
    for op in ops:
        try:
            if "call" in op:
                target, method = op["call"].split(".", 1)
                value = getattr(targets[target], method)(
                    *op.get("args", []), **op.get("kwargs", {})
                )
            elif "api_turn" in op:
                turn = op["api_turn"]
                value = _api_turn(targets, turn["conversation"], turn["input"], turn["reply"])
            else:
                target = targets[op.get("on", "state")]
                conn = target._conn
                value = [list(row) for row in conn.execute(op["sql"], op.get("params", []))]
                if op.get("commit"):
                    conn.commit()
            results.append(_plain(value))
        except Exception as error:  # noqa: BLE001 - reported to the test
            results.append({"error": f"{type(error).__name__}: {error}"})
    return results


def _open(request: dict) -> dict:
    os.environ["HERMES_HOME"] = request["home"]
    from pathlib import Path

    import hermes_state
    from gateway.platforms.api_server import ResponseStore

    targets = {}
    if request.get("state"):
        targets["state"] = hermes_state.SessionDB(db_path=Path(request["state"]))
    if request.get("responses"):
        targets["responses"] = ResponseStore(
            max_size=int(request.get("max_responses", 100)), db_path=request["responses"]
        )
    return targets


def serve() -> int:
    targets = _open(json.loads(sys.stdin.readline()))
    try:
        for line in sys.stdin:
            if line.strip():
                sys.stdout.write(json.dumps({"results": _run(targets, json.loads(line))}) + "\n")
                sys.stdout.flush()
    finally:
        for target in targets.values():
            target.close()
    return 0


def main() -> int:
    if "--serve" in sys.argv[1:]:
        return serve()
    request = json.load(sys.stdin)
    targets = _open(request)  # sets HERMES_HOME before hermes_state is imported
    import importlib.metadata

    import hermes_state

    try:
        results = _run(targets, request["ops"])
    finally:
        for target in targets.values():
            target.close()
    json.dump(
        {
            "hermes_version": importlib.metadata.version("hermes-agent"),
            "schema_version": hermes_state.SCHEMA_VERSION,
            "results": results,
        },
        sys.stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
