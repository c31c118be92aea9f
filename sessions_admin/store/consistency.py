"""Store consistency: the invariants every core operation keeps, checked over the whole store.

``check_store()`` reads only and returns violations as sentences (empty: consistent):

- each session's ``message_count`` / ``tool_call_count`` equal its active rows
  (the ``counter_mismatch`` health predicate, plus tool calls);
- the full-text index equals the rows: on SQLite ``messages_fts`` holds one
  entry per message with the text the triggers index; on PostgreSQL search is
  an expression over the row itself (``schema.PG_TSVECTOR_SQL``), so only its
  index has to exist;
- no child names a missing parent (the ``missing_parent`` health predicate; the
  core clears a kept child's link when its parent is deleted, so no such
  state is legitimate), and no message belongs to a missing session;
- no conversation records a missing session;
- the switch-event log is numbered 1, 2, 3... with no gap;
- at most one live session per session_key, delegates aside (the
  ``several_live`` health predicate);
- no message stamped later than its session's end (``written_after_end``: a
  runtime wrote with a stale session id);
- no conversation slug stranded on a session a rotation ended, with nothing
  live continuing it (``stranded_conversation``).

The last three are states only a runtime writing past the core can produce;
the core refuses each.

``check_ledger(paths)`` checks a simulator's ledger (``sessions_admin.simulator``)
against the store and the trash: every acknowledged message exists exactly
once, in a session that still exists or in a trash entry not restored, with
the content that was acknowledged.

The checks scan whole tables: tests and operators' spot checks, not page loads.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from sessions_admin.core import db, lineage
from sessions_admin.routers import responses_alias
from sessions_admin.store import health
from sessions_admin.store.schema import FTS_DOCUMENT_SQL, existing_tables

SHOWN = 10  # offending ids named per violation


def _named(ids: list) -> str:
    shown = ", ".join(str(i) for i in ids[:SHOWN])
    return shown + (f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else "")


def check_store() -> list[str]:
    """Every violated invariant of the store, as a sentence; an empty list when consistent."""
    problems: list[str] = []
    problems += _check_counters()
    problems += _check_search_index()
    problems += _check_links()
    problems += _check_conversations()
    problems += _check_switch_events()
    problems += _check_live_per_key()
    problems += _check_written_after_end()
    problems += _check_stranded_conversations()
    return problems


def _check_counters() -> list[str]:
    problems = []
    sql, params = health.predicate("counter_mismatch")
    wrong = [r[0] for r in db.fetchall(f"SELECT s.id FROM sessions s WHERE {sql}", params)]
    if wrong:
        problems.append(
            f"{len(wrong)} session(s) whose message_count differs from their active messages: "
            + _named(wrong)
        )
    tool_calls = db.json_array_length("m.tool_calls")
    wrong = [
        r[0]
        for r in db.fetchall(
            "SELECT s.id FROM sessions s WHERE COALESCE(s.tool_call_count, 0) <> "
            f"(SELECT COALESCE(SUM({tool_calls}), 0) FROM messages m "
            "WHERE m.session_id = s.id AND m.active = 1 AND m.tool_calls IS NOT NULL)"
        )
    ]
    if wrong:
        problems.append(
            f"{len(wrong)} session(s) whose tool_call_count differs from their active messages: "
            + _named(wrong)
        )
    return problems


def _check_search_index() -> list[str]:
    if db.vendor() == "postgresql":
        found = db.fetchone(
            "SELECT 1 FROM pg_indexes WHERE tablename = 'messages' AND indexname = 'idx_sa_messages_fts'"
        )
        return [] if found else ["The full-text index idx_sa_messages_fts on messages is missing."]
    if "messages_fts" not in existing_tables("store"):
        return ["The full-text index messages_fts is missing."]
    problems = []
    unindexed = [
        r[0]
        for r in db.fetchall(
            "SELECT m.id FROM messages m WHERE NOT EXISTS "
            "(SELECT 1 FROM messages_fts f WHERE f.rowid = m.id) ORDER BY m.id"
        )
    ]
    if unindexed:
        problems.append(
            f"{len(unindexed)} message(s) missing from messages_fts: {_named(unindexed)}"
        )
    stray = [
        r[0]
        for r in db.fetchall(
            "SELECT f.rowid FROM messages_fts f WHERE NOT EXISTS "
            "(SELECT 1 FROM messages m WHERE m.id = f.rowid) ORDER BY f.rowid"
        )
    ]
    if stray:
        problems.append(f"{len(stray)} messages_fts entr(ies) with no message: {_named(stray)}")
    stale = [
        r[0]
        for r in db.fetchall(
            "SELECT m.id FROM messages m JOIN messages_fts f ON f.rowid = m.id "
            f"WHERE f.content IS NOT ({FTS_DOCUMENT_SQL.format(t='m.')}) ORDER BY m.id"
        )
    ]
    if stale:
        problems.append(
            f"{len(stale)} messages_fts entr(ies) whose text differs from the message: "
            + _named(stale)
        )
    return problems


def _check_links() -> list[str]:
    problems = []
    sql, params = health.predicate("missing_parent")
    orphans = [r[0] for r in db.fetchall(f"SELECT s.id FROM sessions s WHERE {sql}", params)]
    if orphans:
        problems.append(f"{len(orphans)} session(s) whose parent is missing: {_named(orphans)}")
    homeless = [
        r[0]
        for r in db.fetchall(
            "SELECT m.id FROM messages m WHERE NOT EXISTS "
            "(SELECT 1 FROM sessions s WHERE s.id = m.session_id) ORDER BY m.id"
        )
    ]
    if homeless:
        problems.append(f"{len(homeless)} message(s) whose session is missing: {_named(homeless)}")
    return problems


def _check_conversations() -> list[str]:
    # The conversations may live in another database (response_store.db): no join.
    rows = db.fetchall(
        "SELECT name, session_id FROM conversations WHERE session_id IS NOT NULL",
        alias=responses_alias(),
    )
    present = lineage.existing_session_ids(sid for _name, sid in rows)
    missing = sorted(f"{name} -> {sid}" for name, sid in rows if sid not in present)
    if missing:
        return [f"{len(missing)} conversation(s) recording a missing session: {_named(missing)}"]
    return []


def _check_switch_events() -> list[str]:
    count, low, high = db.fetchone(
        "SELECT COUNT(*), MIN(seq), MAX(seq) FROM sessions_admin_switch_events"
    )
    if not count:
        return []
    if int(low) != 1 or int(high) != int(count):
        return [
            f"The switch-event log has gaps: {count} events numbered {low} to {high} "
            "(expected 1 to the count)."
        ]
    return []


def _check_live_per_key() -> list[str]:
    sql, params = health.predicate("several_live")
    rows = db.fetchall(
        f"SELECT s.session_key, s.id FROM sessions s WHERE {sql} "
        "ORDER BY s.session_key, s.started_at, s.id",
        params,
    )
    if not rows:
        return []
    by_key: dict[str, list[str]] = {}
    for key, session_id in rows:
        by_key.setdefault(key, []).append(session_id)
    return [
        f"{len(by_key)} session_key(s) with more than one live session: "
        + _named([f"{key!r} ({', '.join(ids)})" for key, ids in by_key.items()])
    ]


def _check_written_after_end() -> list[str]:
    sql, params = health.predicate("written_after_end")
    late = [
        r[0] for r in db.fetchall(f"SELECT s.id FROM sessions s WHERE {sql} ORDER BY s.id", params)
    ]
    if late:
        return [
            f"{len(late)} ended session(s) holding messages stamped after their end "
            "(written with a stale session id): " + _named(late)
        ]
    return []


def _check_stranded_conversations() -> list[str]:
    stranded = [f"{name} -> {sid}" for name, sid in health.stranded_conversations()]
    if stranded:
        return [
            f"{len(stranded)} conversation(s) stranded on a session a rotation ended, "
            "with no live session continuing it: " + _named(stranded)
        ]
    return []


# --------------------------------------------------------------------------- ledger


def read_ledger(paths: Iterable[Path]) -> tuple[dict[int, dict], list[dict], list[dict]]:
    """(acknowledged message id -> record, refusals, unexpected errors) from simulator ledgers."""
    acked: dict[int, dict] = {}
    refused: list[dict] = []
    errors: list[dict] = []
    for path in paths:
        with open(path, encoding="utf-8") as ledger:
            for line in ledger:
                if not line.strip():
                    continue
                record = json.loads(line)
                if record["kind"] == "ack":
                    acked[int(record["message_id"])] = record
                elif record["kind"] == "refused":
                    refused.append(record)
                else:
                    errors.append(record)
    return acked, refused, errors


def _row_hash(row: dict) -> str:
    from sessions_admin.simulator import message_hash

    return message_hash(row["role"], row["content"], row["tool_call_id"], row["tool_calls"])


def check_ledger(paths: Iterable[Path]) -> list[str]:
    """Every acknowledged message exists exactly once (store or unrestored trash), unchanged."""
    from sessions_admin.core.deletion import decode_trash_rows
    from sessions_admin.ledger.models import TrashEntry

    acked, _refused, errors = read_ledger(paths)
    problems = [
        f"The simulator hit an unexpected error: {e.get('error')}: {e.get('detail')}"
        for e in errors[:SHOWN]
    ]
    found: Counter = Counter()
    where: dict[int, list[str]] = {}
    ids = sorted(acked)
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        for row in db.fetchdicts(
            "SELECT m.id, m.session_id, m.role, m.content, m.tool_call_id, m.tool_calls, "
            "(SELECT 1 FROM sessions s WHERE s.id = m.session_id) AS session_exists "
            f"FROM messages m WHERE m.id IN ({db.placeholders(chunk)})",
            chunk,
        ):
            message_id = int(row["id"])
            if _row_hash(row) != acked[message_id]["hash"]:
                problems.append(f"Message {message_id} in the store differs from what was acked.")
                continue
            if not row["session_exists"]:
                problems.append(f"Message {message_id}'s session {row['session_id']} is missing.")
            found[message_id] += 1
            where.setdefault(message_id, []).append(f"store:{row['session_id']}")
    for entry in TrashEntry.objects.exclude(state=TrashEntry.RESTORED).order_by("pk"):
        if entry.state == TrashEntry.PENDING and lineage.existing_session_ids(entry.session_ids):
            continue  # its delete never committed: the rows are still in the store
        for row in decode_trash_rows(entry.payload.get("messages", [])):
            message_id = int(row["id"])
            if message_id in acked and _row_hash(row) == acked[message_id]["hash"]:
                found[message_id] += 1
                where.setdefault(message_id, []).append(f"trash:{entry.pk}")
    lost = [i for i in ids if found[i] == 0]
    if lost:
        problems.append(
            f"{len(lost)} acknowledged message(s) are neither in the store nor in the trash: "
            + _named([f"{i} (acked in {acked[i]['session_id']})" for i in lost])
        )
    doubled = [i for i in ids if found[i] > 1]
    if doubled:
        problems.append(
            f"{len(doubled)} acknowledged message(s) exist more than once: "
            + _named([f"{i} ({', '.join(where[i])})" for i in doubled])
        )
    return problems
