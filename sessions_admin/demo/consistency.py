"""Store consistency: the invariants every core operation keeps, checked over the whole store.

``check_store()`` reads only and returns violations as sentences (empty: consistent): counters
equal the active rows; the full-text indexes equal the rows (SQLite, either FTS layout;
PostgreSQL only needs its expression index); no child names a missing parent (the core clears
a kept child's link), no message or conversation a missing session; the switch-event log has
no gap; no key has two live sessions, no message postdates its session's end, no slug is
stranded on an ended session (states only a runtime writing past the core can produce); and
``check_trash``: no session both in the store and in an unrestored trash entry.

``check_acks(paths)`` checks a simulator's acknowledgement log (``--acks``): every acknowledged message exists exactly
once, with its content, in the store or an unrestored trash entry. The checks scan whole
tables: tests and operators' spot checks, not page loads."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from sessions_admin.core import being_deleted, db, lineage
from sessions_admin.core.schema import FTS_DOCUMENT_SQL, existing_tables
from sessions_admin.demo.simulator import message_hash
from sessions_admin.ledger.models import TrashEntry
from sessions_admin.ledger.trash import decode_trash_rows
from sessions_admin.routers import responses_alias
from sessions_admin.store import health

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


def check_trash() -> list[str]:
    """Trash entries (complete, not restored) whose rows are in the store all the same: the
    sessions of an entry holding session rows, the messages of an entry holding a part."""
    problems = []
    doubled: dict[int, list[str]] = {}
    entries = TrashEntry.objects.filter(state=TrashEntry.COMPLETE)
    for pk, ids in entries.filter(session_count__gt=0).values_list("pk", "session_ids"):
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            doubled.setdefault(pk, []).extend(lineage.existing_session_ids(chunk))
    for pk, payload in entries.filter(session_count=0).values_list("pk", "payload"):
        message_ids = [int(m["id"]) for m in decode_trash_rows(payload.get("messages", []))]
        for start in range(0, len(message_ids), 500):
            chunk = message_ids[start : start + 500]
            doubled.setdefault(pk, []).extend(
                f"message {row[0]}"
                for row in db.fetchall(
                    f"SELECT id FROM messages WHERE id IN ({db.placeholders(chunk)})", chunk
                )
            )
    for pk, found in sorted(doubled.items()):
        if found:
            problems.append(
                f"Trash entry #{pk} holds rows that are in the store too: {_named(found)}."
            )
    holder: dict[int, int] = {}
    twice: list[str] = []
    for pk, payload in entries.values_list("pk", "payload").iterator(chunk_size=50):
        for row in decode_trash_rows(payload.get("messages", [])):
            message_id = int(row["id"])
            if message_id in holder:
                twice.append(f"message {message_id} (#{holder[message_id]} and #{pk})")
            holder[message_id] = pk
    if twice:
        problems.append(f"The trash holds messages twice: {_named(twice)}.")
    return problems


def _failing(kind: str, then: str = "") -> list[str]:
    """The ids of the sessions failing the health check ``kind`` (``store.health``)."""
    sql, params = health.predicate(kind)
    return [r[0] for r in db.fetchall(f"SELECT s.id FROM sessions s WHERE {sql} {then}", params)]


def _listed(what: str, sql: str) -> list[str]:
    """``["<how many> <what>: <the ids>"]`` for the ids ``sql`` selects; [] for none."""
    ids = [r[0] for r in db.fetchall(sql)]
    return [f"{len(ids)} {what}: {_named(ids)}"] if ids else []


def _check_counters() -> list[str]:
    problems = []
    wrong = _failing("counter_mismatch")
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
            + (
                " AND s.id NOT IN (SELECT session_id FROM sessions_admin_deletions)"
                if being_deleted.table_present()
                else ""
            )
        )
    ]
    if wrong:
        problems.append(
            f"{len(wrong)} session(s) whose tool_call_count differs from their active messages: "
            + _named(wrong)
        )
    return problems


# The full-text tables a store may hold. Two layouts exist:
# - inline (hermes-agent 0.19, and stores this console creates): each table keeps its own copy of
#   one document per message, ``content || ' ' || tool_name || ' ' || tool_calls``, for every
#   message (upstream's legacy triggers cut a tool row's content to a prefix: either text is
#   Hermes's own);
# - external content (schema 30): each table indexes the rows of a view named by its
#   ``content=`` option (``messages_fts_src``: every message; ``messages_fts_trigram_src``: no
#   tool rows, no cron, subagent or delegate sessions), in separate columns, and reads its text
#   back through that view, so only which rows are indexed can differ from the view.
# Which rows an FTS5 table has indexed is read from its ``_docsize`` shadow table (one row per
# indexed document, for both layouts), never from the table itself: an external-content table
# reads its rows from the view, whatever its index holds.
SEARCH_TABLES = ("messages_fts", "messages_fts_trigram")
_TOOL_PREFIX = 8192
_INLINE_DOCUMENTS = (
    FTS_DOCUMENT_SQL.format(t="m."),
    "COALESCE(CASE WHEN m.role = 'tool' THEN substr(COALESCE(m.content, ''), 1, "
    f"{_TOOL_PREFIX}) ELSE m.content END, '') || ' ' || COALESCE(m.tool_name, '') || ' ' || "
    "COALESCE(m.tool_calls, '')",
)
_FTS_OPTION = r"\b{name}\s*=\s*(?:'([^']*)'|\"([^\"]*)\"|(\w+))"


def _fts_option(create_sql: str, name: str) -> str | None:
    found = re.search(_FTS_OPTION.format(name=name), create_sql, re.IGNORECASE)
    return next((g for g in found.groups() if g is not None), None) if found else None


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _check_search_index() -> list[str]:
    if db.vendor() == "postgresql":
        found = db.fetchone(
            "SELECT 1 FROM pg_indexes WHERE tablename = 'messages' AND indexname = 'idx_sa_messages_fts'"
        )
        return [] if found else ["The full-text index idx_sa_messages_fts on messages is missing."]
    tables = existing_tables("store")
    if "messages_fts" not in tables:
        return ["The full-text index messages_fts is missing."]
    problems = []
    for table in SEARCH_TABLES:
        if table in tables:
            problems += _check_fts_table(table, tables)
    return problems


def _expected_rows_sql(table: str, create_sql: str, tables: set[str]) -> tuple[str, bool]:
    """(SELECT of the message ids the table should index, whether it is external content)."""
    content = _fts_option(create_sql, "content")
    if content:
        rowid = _fts_option(create_sql, "content_rowid") or "rowid"
        expected = f"SELECT {_quoted(rowid)} AS id FROM {_quoted(content)}"
        external = True
    else:
        expected = "SELECT id FROM messages"
        external = False
    if "state_meta" in tables:
        # Upstream's deferred rebuild: ids in (progress, high water] are not indexed yet, and
        # its triggers skip them too.
        marker = "COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = '{}'), -1)"
        high, done = marker.format("fts_rebuild_high_water"), marker.format("fts_rebuild_progress")
        expected = f"SELECT id FROM ({expected}) WHERE id > {high} OR id <= {done}"
    return expected, external


def _check_fts_table(table: str, tables: set[str]) -> list[str]:
    row = db.fetchone("SELECT sql FROM sqlite_master WHERE name = %s", [table])
    create_sql = (row[0] or "") if row else ""
    expected, external = _expected_rows_sql(table, create_sql, tables)
    if f"{table}_docsize" in tables:
        indexed = f"SELECT id FROM {table}_docsize"
    elif not external:
        indexed = f"SELECT rowid AS id FROM {table}"
    else:
        return []  # columnsize=0: which rows an external index holds is not readable
    problems = _listed(
        f"message(s) missing from {table}",
        f"SELECT e.id FROM ({expected}) e WHERE NOT EXISTS "
        f"(SELECT 1 FROM ({indexed}) i WHERE i.id = e.id) ORDER BY e.id",
    )
    problems += _listed(
        f"{table} entr(ies) with no message to index",
        f"SELECT i.id FROM ({indexed}) i WHERE NOT EXISTS "
        f"(SELECT 1 FROM ({expected}) e WHERE e.id = i.id) ORDER BY i.id",
    )
    if not external:
        differs = " AND ".join(f"f.content IS NOT ({doc})" for doc in _INLINE_DOCUMENTS)
        problems += _listed(
            f"{table} entr(ies) whose text differs from the message",
            f"SELECT m.id FROM messages m JOIN {table} f ON f.rowid = m.id "
            f"WHERE {differs} ORDER BY m.id",
        )
    return problems


def _check_links() -> list[str]:
    problems = []
    orphans = _failing("missing_parent")
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
    late = _failing("written_after_end", "ORDER BY s.id")
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


# ------------------------------------------------------------- the simulator's acks


def read_acks(paths: Iterable[Path]) -> tuple[dict[int, dict], list[dict], list[dict]]:
    """(acknowledged message id -> record, refusals, unexpected errors) from simulator acknowledgement logs."""
    acked: dict[int, dict] = {}
    refused: list[dict] = []
    errors: list[dict] = []
    for path in paths:
        with open(path, encoding="utf-8") as acks:
            for line in acks:
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

    return message_hash(row["role"], row["content"], row["tool_call_id"], row["tool_calls"])


def check_acks(paths: Iterable[Path]) -> list[str]:
    """Every acknowledged message exists exactly once (store or unrestored trash), unchanged."""

    acked, _refused, errors = read_acks(paths)
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
