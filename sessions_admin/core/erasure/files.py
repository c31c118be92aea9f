"""What only the files still hold after an erasure's deletes, and taking it out.

``secure_delete`` zeroes what the erasure's own deletes free; the WAL keeps copies of the pages
until a checkpoint, the full-text indexes keep old segments until they are merged, and space
freed before the erasure keeps its bytes until the file is rewritten (``rewrite_store_files``:
SQLite's VACUUM after a quiet window, PostgreSQL's VACUUM FULL under a short lock timeout)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from django.db import OperationalError, connections

from sessions_admin.core import db
from sessions_admin.core.db import store_operation
from sessions_admin.core.schema import META_TABLE, OWN_TABLES, existing_tables
from sessions_admin.routers import responses_alias, store_alias

CHECKPOINT_SECONDS = 30.0
PASSIVE_ROUNDS = 5


@dataclass(frozen=True)
class IndexMerge:
    finished: bool
    notes: tuple[str, ...]


def _secure_delete(on: bool) -> list[str]:
    """SQLite: zero what deletes free, on every connection this erasure writes through."""
    done = []
    for alias in dict.fromkeys([store_alias(), responses_alias()]):
        connection = connections[alias]
        if connection.vendor == "sqlite":
            with connection.cursor() as cursor:
                cursor.execute(f"PRAGMA secure_delete = {'ON' if on else 'OFF'}")
            done.append(alias)
    return done


def _checkpoint(alias: str) -> str:
    return checkpoint_wal(alias)[1]


def checkpoint_wal(alias: str, *, seconds: float = CHECKPOINT_SECONDS) -> tuple[bool, str]:
    """Merge the WAL into the file and truncate it, retrying while a reader holds it;
    whether it was truncated, and a note saying so.

    The erasure's deletes and index merges can leave a WAL of gigabytes; a TRUNCATE
    checkpoint holds the runtime's writers while it copies. So PASSIVE checkpoints (which
    never block a writer) copy it first, and the TRUNCATE that follows has little left.
    """
    deadline = time.monotonic() + seconds
    with connections[alias].cursor() as cursor:
        for _ in range(PASSIVE_ROUNDS):
            cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
            _busy, log, done = cursor.fetchone()
            if log <= 0 or done >= log:
                break
        while True:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            busy, _log, _done = cursor.fetchone()
            if not busy:
                return True, f"{alias}: WAL checkpointed and truncated"
            if time.monotonic() >= deadline:
                return False, (
                    f"{alias}: WAL checkpoint still blocked by a reader after {seconds:g} s"
                )
            time.sleep(0.2)


# Pages of index one merge step rewrites: a step is one short store transaction, so the
# runtime's writers wait for it tens of milliseconds, never for the whole index.
FTS_MERGE_PAGES = 64
FTS_MERGE_SECONDS = 30.0


@store_operation
def _fts_merge_step(fts: str) -> bool:
    """One bounded step of merging ``fts`` into a single segment; whether it did any work.

    FTS5 keeps a deleted message's terms in older segments (with a delete marker) until
    they are merged; ``'optimize'`` merges the whole index in one transaction, which held
    the runtime's writers for seconds on a 100k store (bench/retention.py). A negative
    ``'merge'`` merges every segment whatever its level, ``FTS_MERGE_PAGES`` pages at a
    time; FTS5 says it is finished when a step changes fewer than two rows.
    """
    raw = connections[store_alias()].connection
    before = raw.total_changes
    with connections[store_alias()].cursor() as cursor:
        cursor.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('merge', %s)", [-FTS_MERGE_PAGES])
    return raw.total_changes - before >= 2


def _merge_fts(fts: str, seconds: float) -> tuple[bool, str]:
    """Merge ``fts`` into one segment in short steps, within ``seconds``; whether it finished.

    While the runtime keeps writing, each of its inserts adds a segment and the merge
    starts over (bench/retention.py: on a 100k store with 20 appends a second it never
    finished, rewriting the index again and again). So the merge stops at its time budget,
    and the erasure's receipt says the index's older segments may still hold deleted terms
    until a later ``merge_search_indexes`` finishes (the dashboard retries it in its
    scheduler). SQLite 3.42's FTS5 'secure-delete' option removes terms at delete time;
    this store's SQLite may be older.
    """
    deadline = time.monotonic() + seconds
    steps = 1
    while _fts_merge_step(fts):
        steps += 1
        if time.monotonic() >= deadline:
            return False, (
                f"{fts}: merge stopped after {steps} steps ({seconds:g} s) while the runtime "
                "wrote; deleted terms may stay in older index segments until a later merge "
                "finishes"
            )
    return True, f"{fts}: merged into one segment in {steps} steps (deleted terms dropped)"


def _search_index_merges(seconds: float) -> IndexMerge:
    store = connections[store_alias()]
    if store.vendor != "sqlite":
        return IndexMerge(True, ())  # PostgreSQL's index entries go with VACUUM
    tables = existing_tables(store_alias())
    finished, notes = True, []
    for fts in ("messages_fts", "messages_fts_trigram"):
        if fts in tables:
            done, note = _merge_fts(fts, seconds)
            finished = finished and done
            notes.append(note)
    return IndexMerge(finished, tuple(notes))


def merge_search_indexes(*, seconds: float = FTS_MERGE_SECONDS) -> IndexMerge:
    """Finish what an erasure's index merge could not: merge each full-text index into one
    segment (``seconds`` a index at most), zeroing freed pages, then truncate the WAL.

    ``finished`` is True once every index was merged whole after the erasure's deletes:
    no older segment is left to hold a deleted term.
    """
    _secure_delete(True)
    try:
        merge = _search_index_merges(seconds)
        if connections[store_alias()].vendor == "sqlite":
            merge = IndexMerge(merge.finished, (*merge.notes, _checkpoint(store_alias())))
    finally:
        _secure_delete(False)
    return merge


def _purge_leftovers() -> tuple[bool, list[str]]:
    """What deleted rows leave in the files (SQLite) or as dead tuples (PostgreSQL)."""
    merge = _search_index_merges(FTS_MERGE_SECONDS)
    done = list(merge.notes)
    for alias in dict.fromkeys([store_alias(), responses_alias()]):
        connection = connections[alias]
        if connection.vendor == "sqlite":
            done.append(_checkpoint(alias))
        else:
            tables = (
                ["sessions", "messages", "sessions_admin_switch_events", "sessions_admin_merges"]
                if alias == store_alias()
                else []
            )
            if alias == responses_alias():
                tables += ["conversations", "responses"]
            with connection.cursor() as cursor:
                for table in dict.fromkeys(tables):
                    cursor.execute(f"VACUUM {table}")
            done.append(f"{alias}: VACUUM {', '.join(dict.fromkeys(tables))}")
    return merge.finished, done


# The file rewrite: what takes the bytes out of space freed before the erasure.
#
# ``secure_delete`` zeroes only what the erasure's own deletes free. Space freed earlier
# (a merge that moved the subject's messages, an FTS segment merge, the runtime's deletes,
# all on connections whose SQLite has ``secure_delete`` off, as python.org's, macOS's and
# Homebrew's builds do) keeps the old bytes in free blocks and freelist pages; only
# rewriting the file removes them. SQLite: VACUUM, which holds the runtime's writers for
# its length, so it starts only after a quiet window (no other connection committed) and
# waits for the write lock at most ``busy_ms``; a busy store makes it wait for a later
# try. ``auto_vacuum = INCREMENTAL`` would not do: ``incremental_vacuum`` only gives back
# freelist pages at the end of the file, never a page's free blocks. PostgreSQL: VACUUM
# FULL of the tables an erasure touches (rebuilding their indexes) under a short
# ``lock_timeout``; it takes an ACCESS EXCLUSIVE lock for its length, so it is a step the
# operator runs (``manage.py erasure_rewrite`` or the request's page).

REWRITE_BUSY_MS = 250
REWRITE_QUIET_SECONDS = 1.0
REWRITE_TRIES = 3
# PostgreSQL: how long a rewrite waits for the transactions that began before it.
REWRITE_OLD_SNAPSHOT_WAIT_SECONDS = 10.0

# The tables whose rows an erasure deletes or rewrites, by database.
# A follower's cursor (switch_cursors) and the console's own values (meta) name no session:
# the rest of our tables may.
STORE_REWRITE_TABLES = (
    "sessions",
    "messages",
    *(table for table in OWN_TABLES if table not in ("sessions_admin_switch_cursors", META_TABLE)),
)
RESPONSE_REWRITE_TABLES = ("conversations", "responses")


@dataclass(frozen=True)
class FileRewrite:
    done: bool
    notes: tuple[str, ...]
    # The longest time one rewrite statement held its lock (the runtime's writers waited).
    longest_lock_seconds: float = 0.0


def _quiet(alias: str, seconds: float) -> bool:
    """No other connection committed to ``alias`` in the last ``seconds`` (SQLite)."""
    with connections[alias].cursor() as cursor:
        cursor.execute("PRAGMA data_version")
        before = cursor.fetchone()[0]
        time.sleep(seconds)
        cursor.execute("PRAGMA data_version")
        return cursor.fetchone()[0] == before


def _too_large(name: str, size: int, max_bytes: int | None) -> str | None:
    if max_bytes is None or size <= max_bytes:
        return None
    return (
        f"{name}: not rewritten automatically ({size / 1e6:,.0f} MB, over "
        f"{max_bytes / 1e6:,.0f} MB: the rewrite would hold the runtime out for long); "
        "run manage.py erasure_rewrite at a quiet hour"
    )


def vacuum_sqlite(
    alias: str,
    *,
    quiet_seconds: float = REWRITE_QUIET_SECONDS,
    busy_ms: int = REWRITE_BUSY_MS,
    max_bytes: int | None = None,
) -> tuple[bool, str, float]:
    """VACUUM one SQLite database when quiet, then truncate its WAL.

    ``max_bytes``: leave a larger file alone (a VACUUM's length grows with the file).
    Returns whether no freed byte is left, a note, and how long the VACUUM held the lock.
    """
    connection = connections[alias]
    connection.ensure_connection()
    name = Path(str(connection.settings_dict["NAME"])).name
    if connection.in_atomic_block:
        raise RuntimeError("A file rewrite cannot run inside a transaction.")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA page_count")
        pages = int(cursor.fetchone()[0])
        cursor.execute("PRAGMA page_size")
        size = pages * int(cursor.fetchone()[0])
    if too_large := _too_large(name, size, max_bytes):
        return False, too_large, 0.0
    if not _quiet(alias, quiet_seconds):
        return (
            False,
            f"{name}: not rewritten, another connection was writing; tried again later",
            0.0,
        )
    took = 0.0
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        previous = int(cursor.fetchone()[0])
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
        try:
            started = time.monotonic()
            cursor.execute("VACUUM")
            took = time.monotonic() - started
        except OperationalError as error:
            if not db.is_busy_error(error):
                raise
            return False, f"{name}: not rewritten, the write lock was taken; tried again later", 0.0
        finally:
            cursor.execute(f"PRAGMA busy_timeout = {previous}")
    # The VACUUM wrote the whole file into the WAL; the TRUNCATE checkpoint that copies it
    # back holds the writers too, so the lock reported counts it (an upper bound: its
    # PASSIVE rounds do not block them).
    started = time.monotonic()
    truncated, note = checkpoint_wal(alias)
    took += time.monotonic() - started
    if not truncated:
        return False, f"{name}: rewritten (VACUUM, {took:.2f} s) but {note}", took
    return (
        True,
        f"{name}: rewritten (VACUUM and WAL checkpoint, writers held up to {took:.2f} s); "
        "WAL truncated",
        took,
    )


def vacuum_full_postgresql(
    alias: str,
    tables: Sequence[str],
    *,
    lock_ms: int = REWRITE_BUSY_MS,
    tries: int = REWRITE_TRIES,
    max_bytes: int | None = None,
) -> tuple[bool, str, float]:
    """VACUUM FULL each table (and so its indexes and TOAST table), waiting for its lock at
    most ``lock_ms`` a try; whether all were rewritten, a note, the longest lock held."""
    connection = connections[alias]
    connection.ensure_connection()
    if connection.in_atomic_block:
        raise RuntimeError("A file rewrite cannot run inside a transaction.")
    present = existing_tables(alias)
    rewritten, longest, left = [], 0.0, []
    with connection.cursor() as cursor:
        if max_bytes is not None:
            names = [t for t in tables if t in present]
            cursor.execute(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relname = ANY(%s)",
                [names],
            )
            if too_large := _too_large(alias, int(cursor.fetchone()[0]), max_bytes):
                return False, too_large, 0.0
        if holders := _wait_for_older_snapshots(cursor, REWRITE_OLD_SNAPSHOT_WAIT_SECONDS):
            return (
                False,
                f"{alias}: not rewritten: a transaction older than the rewrite still sees the "
                f"erased rows, and VACUUM FULL would copy them ({'; '.join(holders)}); "
                "tried again later",
                0.0,
            )
        cursor.execute(f"SET lock_timeout = {int(lock_ms)}")
        try:
            for table in tables:
                if table not in present:
                    continue
                for attempt in range(tries):
                    started = time.monotonic()
                    try:
                        cursor.execute(f"VACUUM (FULL) {connection.ops.quote_name(table)}")
                    except Exception as error:  # noqa: BLE001 - only a lock timeout is retried
                        if not db.is_busy_error(error) or attempt == tries - 1:
                            if not db.is_busy_error(error):
                                raise
                            left.append(table)
                            break
                        time.sleep(0.5)
                        continue
                    took = time.monotonic() - started
                    longest = max(longest, took)
                    rewritten.append(f"{table} {took:.2f} s")
                    break
            if not left:
                statistics = _refresh_statistics(cursor, [t for t in tables if t in present])
        finally:
            cursor.execute("RESET lock_timeout")
    note = f"{alias}: VACUUM FULL {', '.join(rewritten) or 'nothing'}"
    if left:
        return False, f"{note}; not rewritten (the runtime held them): {', '.join(left)}", longest
    return statistics[0], f"{note}; {statistics[1]}", longest


def _older_snapshot_holders(cursor, horizon: str) -> list[str]:
    """What keeps row versions older than ``horizon`` (an xid) visible on this database:
    other backends' snapshots and transaction ids, prepared transactions, replication
    slots. ``age()`` compares xids modulo wraparound: older means a larger age."""
    cursor.execute(
        "SELECT format('pid %%s (%%s, %%s since %%s)', pid, "
        "COALESCE(NULLIF(application_name, ''), backend_type), state, "
        "to_char(xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')) "
        "FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
        "AND datname = current_database() "
        "AND (age(backend_xmin) > age(%s::xid) OR age(backend_xid) > age(%s::xid)) "
        # A plain (lazy) VACUUM's snapshot does not hold rows back (PROC_IN_VACUUM).
        "AND NOT (backend_type = 'autovacuum worker' AND query LIKE 'autovacuum: VACUUM %%' "
        "AND query NOT LIKE '%%ANALYZE%%') "
        "UNION ALL SELECT format('prepared transaction %%L', gid) FROM pg_prepared_xacts "
        "WHERE database = current_database() AND age(transaction) > age(%s::xid) "
        "UNION ALL SELECT format('replication slot %%L', slot_name) FROM pg_replication_slots "
        "WHERE age(xmin) > age(%s::xid) OR age(catalog_xmin) > age(%s::xid)",
        [horizon] * 5,
    )
    return [row[0] for row in cursor.fetchall()]


def _wait_for_older_snapshots(cursor, seconds: float) -> list[str]:
    """Wait at most ``seconds`` until no transaction that began before now can still see a
    row the erasure deleted; what still does then (nothing: go on).

    VACUUM FULL copies every row version some running transaction may still see (it keeps
    them "recently dead"), so an erasure's rows would come through the rewrite into the
    new files while, say, a report's transaction or an ANALYZE from before it is open.
    Every transaction begun after now sees them deleted; waiting for the older ones to end
    is what makes a rewrite that says done true.
    """
    cursor.execute("SELECT xid(pg_snapshot_xmax(pg_current_snapshot()))::text")
    horizon = cursor.fetchone()[0]
    deadline = time.monotonic() + seconds
    while holders := _older_snapshot_holders(cursor, horizon):
        if time.monotonic() >= deadline:
            return holders
        time.sleep(0.1)
    return []


def _needs_privilege(error: Exception) -> bool:
    """PostgreSQL refused a step only a superuser (or the owner) may take."""
    text = str(error).lower()
    return "permission" in text or "must be" in text


def _refresh_statistics(cursor, tables: Sequence[str]) -> tuple[bool, str]:
    """ANALYZE keeps sample values of each column (``pg_statistic``: a user id common enough
    is one): re-analyze the tables from what is left, then rewrite ``pg_statistic`` so
    the old samples' dead tuples go too (superuser only; otherwise they stay until
    autovacuum reuses their space, and the note says so)."""
    if not tables:
        return True, "no statistics to refresh"
    cursor.execute("ANALYZE " + ", ".join(tables))
    # ANALYZE of an empty table leaves its statistics as they were (it has no sample to
    # replace them with): an erasure that emptied a table (the one person's responses) kept
    # that person's values there, live, through the rewrite. Those rows are deleted.
    empty = []
    for table in tables:
        cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {table})")
        if not cursor.fetchone()[0]:
            empty.append(table)
    if empty:
        try:
            cursor.execute(
                "DELETE FROM pg_catalog.pg_statistic WHERE starelid IN ("
                "SELECT unnest(%s::regclass[])::oid "
                "UNION SELECT indexrelid FROM pg_catalog.pg_index "
                "WHERE indrelid = ANY(%s::regclass[]))",
                [empty, empty],
            )
        except Exception as error:  # noqa: BLE001 - a missing privilege is reported, not raised
            if not _needs_privilege(error):
                raise
            return False, (
                "statistics re-analyzed; the old statistics of the tables it emptied "
                f"({', '.join(empty)}) not deleted (needs a superuser)"
            )
    # The old samples are dead from the ANALYZE on; a snapshot older than it still sees them.
    if holders := _wait_for_older_snapshots(cursor, REWRITE_OLD_SNAPSHOT_WAIT_SECONDS):
        return False, (
            "statistics re-analyzed; pg_statistic not rewritten: a transaction older than "
            f"the ANALYZE still sees the old samples ({'; '.join(holders)})"
        )
    try:
        cursor.execute("VACUUM (FULL) pg_catalog.pg_statistic")
    except Exception as error:  # noqa: BLE001 - a missing privilege is reported, not raised
        if db.is_busy_error(error):
            return False, "statistics re-analyzed; pg_statistic busy, not rewritten"
        if not _needs_privilege(error):
            raise
        return False, (
            "statistics re-analyzed; pg_statistic not rewritten (needs a superuser): its old "
            "sample values stay until autovacuum reuses their space"
        )
    return True, "statistics re-analyzed and pg_statistic rewritten"


def rewrite_store_files(
    *,
    quiet_seconds: float = REWRITE_QUIET_SECONDS,
    busy_ms: int = REWRITE_BUSY_MS,
    max_bytes: int | None = None,
) -> FileRewrite:
    """Rewrite the store's and the response store's files so no freed byte is left.

    Run it after the search index merge finished (a rewrite copies the index's segments as
    they are). SQLite: VACUUM each file in a quiet moment; PostgreSQL: VACUUM FULL of the
    tables an erasure touches. ``done`` is False when the runtime kept one from running,
    or a database is larger than ``max_bytes`` (automatic runs: the operator runs those).
    """
    done, notes, longest = True, [], 0.0
    for alias in dict.fromkeys([store_alias(), responses_alias()]):
        if connections[alias].vendor == "sqlite":
            ok, note, took = vacuum_sqlite(
                alias, quiet_seconds=quiet_seconds, busy_ms=busy_ms, max_bytes=max_bytes
            )
        else:
            tables = [
                *(STORE_REWRITE_TABLES if alias == store_alias() else ()),
                *(RESPONSE_REWRITE_TABLES if alias == responses_alias() else ()),
            ]
            ok, note, took = vacuum_full_postgresql(
                alias, tables, lock_ms=busy_ms, max_bytes=max_bytes
            )
        done = done and ok
        notes.append(note)
        longest = max(longest, took)
    return FileRewrite(done, tuple(notes), longest)
