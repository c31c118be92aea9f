"""Appends a retried request cannot store twice: the caller's idempotency key is recorded in the
store, in the same transaction as the messages it appended.

A runtime that lost the answer to an append (a timeout, a dropped connection) cannot know
whether it landed; it sends the same request again with the same key. The key's row
(``sessions_admin_idempotency``: key and the caller's scope, a hash of the request, the session
and the first answer) commits with the messages or not at all, so a retry either finds it and
gets the first answer back, storing nothing, or finds nothing because nothing was stored. The
key is locked before it is read (``db.lock_names``), so two copies of one request racing each
other are one append. The same key with another request is refused (``IdempotencyKeyReused``):
the caller reused a key, and which request it meant cannot be guessed. Keys are kept at least
``KEEP_SECONDS`` (a day; a retry comes within minutes): about one append in ``PRUNE_EVERY`` drops
the older ones in its own transaction, by the ``created_at`` index.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sessions_admin.core import db
from sessions_admin.core.errors import StoreError
from sessions_admin.core.lifecycle import append_messages
from sessions_admin.core.rows import require_session_id, require_text
from sessions_admin.core.schema import existing_tables
from sessions_admin.routers import store_alias

TABLE = "sessions_admin_idempotency"
KEY_MAX = 200
KEEP_SECONDS = 24 * 3600
PRUNE_EVERY = 256


class IdempotencyKeyReused(StoreError):
    def __init__(self, key: str, session_id: str):
        self.key = key
        self.session_id = session_id
        super().__init__(
            f"The idempotency key {key!r} was used for another request (session {session_id}); "
            "nothing was changed. Use a new key for a new request."
        )


@dataclass(frozen=True)
class OnceResult:
    response: dict[str, Any]  # the first request's answer, the same for every retry
    replayed: bool  # True: a retry; nothing was written this time


@db.store_operation
def append_messages_once(
    *,
    key: str,
    scope: str,
    request_hash: str,
    session_id: str,
    messages: Iterable[Mapping[str, Any]],
) -> OnceResult:
    """``append_messages`` at most once per (``scope``, ``key``); a retry gets the first answer.

    ``scope`` separates callers (an API token), so two runtimes choosing the same key do not
    collide; ``request_hash`` names the request (its session and body), so a key reused for
    another request raises ``IdempotencyKeyReused`` instead of answering for the wrong one.
    """
    require_text("idempotency key", key, max_length=KEY_MAX)
    require_text("idempotency scope", scope, max_length=KEY_MAX)
    require_text("request hash", request_hash, max_length=KEY_MAX)
    require_session_id(session_id)
    db.lock_names(f"idempotency:{scope}:{key}")
    row = db.fetchone(
        f"SELECT request_hash, session_id, response_json FROM {TABLE} WHERE scope = %s AND key = %s",
        [scope, key],
    )
    if row is not None:
        if row[0] != request_hash:
            raise IdempotencyKeyReused(key, row[1])
        return OnceResult(json.loads(row[2]), replayed=True)
    result = append_messages(session_id=session_id, messages=messages)
    response = {
        "session_id": result.session_id,
        "message_ids": list(result.message_ids),
        "message_count": result.message_count,
        "tool_call_count": result.tool_call_count,
    }
    db.execute(
        f"INSERT INTO {TABLE} (scope, key, request_hash, session_id, response_json, created_at) "
        "VALUES (%s, %s, %s, %s, %s, %s)",
        [scope, key, request_hash, session_id, json.dumps(response), time.time()],
    )
    if random.random() < 1 / PRUNE_EVERY:
        forget_idempotency_keys(older_than_seconds=KEEP_SECONDS)
    return OnceResult(response, replayed=False)


def forget_keys_of(session_ids: Sequence[str]) -> int:
    """In a delete's transaction: the keys of appends to these sessions go with them (a retry
    of such an append can only fail now; and the keys and first answers name the sessions,
    which an erasure of their trash would not find in the store)."""
    if not session_ids or TABLE not in existing_tables(store_alias()):
        return 0
    return db.execute(
        f"DELETE FROM {TABLE} WHERE session_id IN ({db.placeholders(session_ids)})",
        list(session_ids),
    )


@db.store_operation
def forget_idempotency_keys(*, older_than_seconds: float) -> int:
    """Drop keys recorded more than ``older_than_seconds`` ago (a retry comes within minutes)."""
    return db.execute(
        f"DELETE FROM {TABLE} WHERE created_at < %s", [time.time() - float(older_than_seconds)]
    )
