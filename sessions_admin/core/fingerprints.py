"""The fingerprint of a destructive plan: what its confirmation carries back.

A preview shows a plan and its fingerprint; the confirmation is executed only when the plan
computed again has the same one (Django admin's ``delete_selected``, two phases). The
fingerprint is a keyed hash (HMAC-SHA256 with the store's secret, below): a client can get
one only from a preview the server made, never compute one from ids it knows, so a
confirmation with no preview shown is refused like a stale one (attack round 43: a bulk
delete was confirmed with ``sha256`` of its session ids, no dry run ever made).

Every kind of plan has its own key (``kind``): one kind's fingerprint never confirms another.

The secret is the store's own: a random value kept in the store's ``sessions_admin_meta``
table (``PLAN_KEY_NAME``), made by the first process that needs it. So
every process sharing the store (the console's workers, manage.py commands, a Python runtime
calling the core, the API's workers) makes the same fingerprint for the same plan, whatever
secret key each has, and a preview made in one is confirmed in another; nobody without the
store's files can compute one. Where the store lacks the table (``init_store`` not run since
it came), or is attached read-only, the process's Django secret key stands in (a preview and its
confirmation in the same deployment still agree). Deleting the row refuses the previews
shown before: they are made again."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import secrets

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, ProgrammingError, connections, transaction

from sessions_admin.core import db
from sessions_admin.core.schema import META_TABLE, PLAN_KEY_NAME
from sessions_admin.routers import store_alias

_NO_SECRET = b"sessions_admin: no secret key in this process"
_READ_KEY = f"SELECT value FROM {META_TABLE} WHERE name = %s"


def _store_secret() -> str | None:
    """The store's plan key, made now if it has none (None: no table to keep one in)."""
    try:
        with _failure_contained():
            row = db.fetchone(_READ_KEY, [PLAN_KEY_NAME])
            if (row is None or not row[0]) and not db.read_only():
                db.execute(
                    f"INSERT INTO {META_TABLE} (name, value) VALUES (%s, %s) "
                    "ON CONFLICT (name) DO NOTHING",
                    [PLAN_KEY_NAME, secrets.token_hex(32)],
                )
                row = db.fetchone(_READ_KEY, [PLAN_KEY_NAME])
    except DatabaseError as error:
        if not _no_place_for_a_key(error):
            raise  # a busy or broken store says so; a stand-in key would refuse as "changed"
        return None
    return row[0] if row and row[0] else None


def _failure_contained():
    """On PostgreSQL a savepoint, since a failed statement would end the caller's transaction;
    on SQLite nothing (a failed statement ends nothing there, and a transaction of ours would
    take the store's write lock, IMMEDIATE, just to read the key)."""
    alias = store_alias()
    if connections[alias].vendor == "postgresql":
        return transaction.atomic(using=alias)
    return contextlib.nullcontext()


def _no_place_for_a_key(error: DatabaseError) -> bool:
    """The store has no table for the key (``init_store`` not run since it came) or cannot be
    written (a read-only file): not a store that is busy or gone."""
    text = str(error).lower()
    return isinstance(error, ProgrammingError) or any(
        words in text for words in ("no such table", "readonly", "read-only", "read only")
    )


def _secret() -> bytes:
    secret = _store_secret()
    if secret is None:
        try:
            secret = settings.SECRET_KEY
        except ImproperlyConfigured:  # Django refuses to hand out an empty SECRET_KEY
            secret = ""
    return secret.encode("utf-8", "surrogatepass") if secret else _NO_SECRET


def plan_fingerprint(kind: str, payload: object, *, length: int = 32) -> str:
    """``length`` hex digits of the keyed hash of ``payload`` (JSON, keys sorted) for ``kind``."""
    key = hashlib.sha256(b"sessions_admin.plan\x00" + kind.encode() + b"\x00" + _secret()).digest()
    text = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
    return hmac.new(key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:length]


def matches(given: object, expected: object) -> bool:
    """Whether the fingerprint a confirmation carries (``given``) is the plan's (``expected``),
    compared in constant time: how long a refusal takes says nothing of how much of a guess
    was right. Anything but two strings (a missing field, a number) never matches."""
    if not isinstance(given, str) or not isinstance(expected, str) or not expected:
        return False
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )
