"""The trash keeps every store value exactly: delete, then restore, gives back the same rows.

A store row can hold values plain JSON loses or refuses (schema 30's ``display_identity``
is a sha256 digest BLOB; SQLite integers reach 2**63 - 1; jsonb rewrites 1e+16 as an
integer and -0.0 as 0). Each test compares the rows (SQLite: ``typeof`` and ``quote`` of
every column) before the delete and after the restore.
"""

from __future__ import annotations

import hashlib
import math

import pytest

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.ledger import trash
from sessions_admin.ledger.models import TrashEntry

AWKWARD_FLOATS = [1e16, 1e-7, -0.0, 0.1 + 0.2, 5.0, 1.7976931348623157e308, 1712345678.123456]
# Either side of where repr() starts writing an exponent (the trash's fast path ends there).
EDGE_FLOATS = [1e-4, 9.999999999999999e-05, 9999999999999998.0, -9999999999999998.0, -1e-4]
AWKWARD_INTS = [2**53, 2**53 + 1, 2**63 - 1, -(2**63), -(2**53) - 1]


def _same(a: object, b: object) -> bool:
    """Equal values of the same type; floats by their exact repr (-0.0 is not 0.0, nan is nan)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return repr(a) == repr(b) or (math.isnan(a) and math.isnan(b))
    return a == b


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"\x00\xff binary",
        hashlib.sha256(b"x").digest(),
        *AWKWARD_INTS,
        *AWKWARD_FLOATS,
        *EDGE_FLOATS,
        math.inf,
        -math.inf,
        math.nan,
        "plain",
        "nul \x00 inside",
        "emoji \U0001f600",
        None,
        0,
        -7,
    ],
)
def test_a_value_survives_the_trash_database_exactly(value):
    """Through the dashboard's own JSON column (SQLite text or PostgreSQL jsonb) and back."""
    entry = TrashEntry.objects.create(
        actor_name="t",
        reason="r",
        session_ids=["s"],
        payload=trash.encode_payload({"sessions": [{"id": "s", "v": value}]}),
    )
    stored = TrashEntry.objects.get(pk=entry.pk).payload
    restored = trash.decode_payload(stored)["sessions"][0]["v"]
    assert _same(restored, value), (value, stored)


def test_old_plain_json_entries_still_decode_unchanged():
    old = {"sessions": [{"id": "s", "n": 3, "f": 1.5, "t": "x", "z": None}], "messages": []}
    assert trash.decode_payload(old)["sessions"] == old["sessions"]


def _typed_rows(table: str, where: str, params: list) -> list[tuple]:
    """Every column of the rows as (typeof, quote) on SQLite: the exact stored value."""
    columns = [r[1] for r in db.fetchall(f"PRAGMA table_info({table})")]
    shown = ", ".join(f"typeof({c}), quote({c})" for c in columns)
    return db.fetchall(f"SELECT {shown} FROM {table} WHERE {where} ORDER BY rowid", params)


def _delete_and_restore(session_id: str) -> None:
    plan = core.plan_cascade_delete(session_ids=[session_id])
    result = core.execute_cascade_delete(
        session_ids=[session_id], expected_fingerprint=plan.fingerprint, actor="t", reason="r"
    )
    assert db.fetchone("SELECT COUNT(*) FROM sessions WHERE id = %s", [session_id])[0] == 0
    core.restore_trash_entry(entry_id=result.trash_entry_ids[0], actor="t")


def test_sqlite_rows_come_back_byte_exact_blobs_big_integers_and_floats_included():
    if db.vendor() != "sqlite":
        pytest.skip("BLOBs and untyped columns are SQLite's")
    sid = core.create_session(source="cli", session_key="cli:trash").session_id
    message_ids = [
        core.append_message(session_id=sid, role="user", content=f"m{n}").message_ids[0]
        for n in range(4)
    ]
    # A runtime's per-session table the store deletes by ON DELETE CASCADE, with a BLOB column.
    db.execute(
        "CREATE TABLE runtime_extra (session_id TEXT NOT NULL REFERENCES sessions(id) "
        "ON DELETE CASCADE, n INTEGER, blob BLOB, anything)"
    )
    values = [
        hashlib.sha256(b"identity").digest(),
        b"\x00\xff",
        *AWKWARD_INTS,
        *AWKWARD_FLOATS,
        math.inf,
        "nul \x00 text",
        "plain",
    ]
    for n, value in enumerate(values):
        db.execute(
            "INSERT INTO runtime_extra (session_id, n, blob, anything) VALUES (%s, %s, %s, %s)",
            [sid, n, value, value],
        )
    # Values of every storage class in the message rows themselves (SQLite keeps a BLOB
    # in a TEXT column; the REAL/INTEGER columns hold edge values).
    db.execute(
        "UPDATE messages SET reasoning_details = %s, token_count = %s, timestamp = %s WHERE id = %s",
        [hashlib.sha256(b"m0").digest(), 2**63 - 1, 1e16, message_ids[0]],
    )
    db.execute(
        "UPDATE messages SET token_count = %s, timestamp = %s WHERE id = %s",
        [-(2**63), 0.1 + 0.2, message_ids[1]],
    )
    db.execute(
        "UPDATE sessions SET input_tokens = %s, estimated_cost_usd = %s WHERE id = %s",
        [2**62 + 1, 1e-7, sid],
    )
    before = {
        "sessions": _typed_rows("sessions", "id = %s", [sid]),
        "messages": _typed_rows("messages", "session_id = %s", [sid]),
        "runtime_extra": _typed_rows("runtime_extra", "session_id = %s", [sid]),
    }
    assert any(t == "blob" for row in before["runtime_extra"] for t in row[::2])

    _delete_and_restore(sid)

    after = {
        "sessions": _typed_rows("sessions", "id = %s", [sid]),
        "messages": _typed_rows("messages", "session_id = %s", [sid]),
        "runtime_extra": _typed_rows("runtime_extra", "session_id = %s", [sid]),
    }
    assert after == before


def test_typed_store_rows_come_back_exact():
    """Both backends: the store's own typed columns at their edges."""
    sid = core.create_session(source="cli", session_key="cli:typed").session_id
    mid = core.append_message(session_id=sid, role="user", content="text with é").message_ids[0]
    db.execute(
        "UPDATE sessions SET input_tokens = %s, output_tokens = %s, estimated_cost_usd = %s, "
        "ended_at = %s WHERE id = %s",
        [2**62 + 3, 2**53 + 1, 1e16, 1712345678.123456, sid],
    )
    db.execute("UPDATE messages SET timestamp = %s WHERE id = %s", [1e-7, mid])
    columns = "input_tokens, output_tokens, estimated_cost_usd, ended_at"
    before = db.fetchone(f"SELECT {columns} FROM sessions WHERE id = %s", [sid])
    before_message = db.fetchone("SELECT timestamp, content FROM messages WHERE id = %s", [mid])

    _delete_and_restore(sid)

    after = db.fetchone(f"SELECT {columns} FROM sessions WHERE id = %s", [sid])
    after_message = db.fetchone("SELECT timestamp, content FROM messages WHERE id = %s", [mid])
    assert all(_same(a, b) for a, b in zip(after, before, strict=True)), (after, before)
    assert all(_same(a, b) for a, b in zip(after_message, before_message, strict=True))
