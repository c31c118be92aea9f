"""Connection plumbing for the core: one transaction per operation, bounded retries.

SQLite: the store alias opens transactions with BEGIN IMMEDIATE (settings), so
an operation takes the write lock up front and never deadlocks half-way; a
busy store is retried for a bounded time, then reported as ``StoreBusy`` with
nothing changed. PostgreSQL: READ COMMITTED with row locks (``FOR UPDATE``) on
the rows an operation checks; serialization failures and deadlocks are retried
the same way.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

from django.conf import settings
from django.db import OperationalError, connections, transaction
from django.db.utils import DatabaseError

from sessions_admin.core.errors import ReadOnlyStore, StoreBusy
from sessions_admin.routers import store_alias

T = TypeVar("T")

RETRY_SECONDS = 10.0
# How long one PostgreSQL statement may wait for a row lock before the attempt is retried.
PG_LOCK_TIMEOUT_MS = 2000

# Told of every wait on a busy store by ``store_operation``: the operation's name and the
# seconds it sleeps before trying again, or None when it gives up (``StoreBusy``). The
# dashboard counts them for its metrics (console/metrics.py); a runtime may add its own.
# An observer that raises is ignored: counting never fails an operation.
BUSY_OBSERVERS: list[Callable[[str, float | None], None]] = []


def _tell_busy(operation: str, pause: float | None) -> None:
    for observer in list(BUSY_OBSERVERS):
        with contextlib.suppress(Exception):
            observer(operation, pause)


def is_busy_error(error: BaseException) -> bool:
    """A lock or serialization conflict: worth retrying, and "busy, try again" to an operator.

    SQLite: the write lock is taken (``database is locked``/``busy``).
    PostgreSQL: serialization_failure (40001), deadlock_detected (40P01),
    lock_not_available (55P03, our ``lock_timeout``).
    """
    cause = error.__cause__ or error
    text = str(cause).lower()
    if (
        "database is locked" in text
        or "database is busy" in text
        or "database table is locked" in text
    ):
        return True
    return getattr(cause, "sqlstate", None) in {"40001", "40P01", "55P03"}


# SQLite's words for a file that cannot grow or be written (a full disk, a file-size limit,
# a read-only file or mount), and PostgreSQL's classes: insufficient_resources (53: disk_full
# 53100, out of memory), read_only_sql_transaction (25006), and I/O errors (58030).
_FULL_WORDS = ("database or disk is full", "no space left on device", "could not extend file")
_UNWRITABLE_WORDS = (
    "disk i/o error",
    "attempt to write a readonly database",
    "read-only file system",
    "unable to open database file",
)


# PostgreSQL's server went away under a connection: a restart, a crash, a stop. Classes
# connection_exception (08) and operator_intervention (57P01-57P03), or the client's words
# when the server died before it could say anything.
_CONNECTION_LOST_WORDS = (
    "server closed the connection",
    "terminating connection",
    "connection is closed",
    "connection already closed",
    "the database system is",
    # Not back yet: a new connection to a server still down (or starting) is refused.
    "connection refused",
    "could not connect to server",
    # The same through the connection pool: it could not open one before its timeout.
    "couldn't get a connection after",
)


def connection_lost(error: BaseException) -> bool:
    """``error`` is a database server that closed the connection (it restarted or stopped):
    nothing the statement did committed, and the next connection works once it is back."""
    cause = error.__cause__ or error
    sqlstate = getattr(cause, "sqlstate", None) or ""
    if sqlstate.startswith("08") or sqlstate in {"57P01", "57P02", "57P03"}:
        return True
    text = str(cause).lower()
    return any(words in text for words in _CONNECTION_LOST_WORDS)


def close_broken_connections() -> None:
    """Close this thread's connections a lost server broke, so the next statement reconnects
    (Django would otherwise keep using a closed one until the request ends). Not one inside
    a transaction: whoever opened it rolls it back."""
    for connection in connections.all(initialized_only=True):
        if connection.in_atomic_block or connection.connection is None:
            continue
        if not connection.is_usable():
            connection.close()


def release_connections() -> None:
    """Close this process's connections and its PostgreSQL connection pools, so a process it
    forks (gunicorn's workers, from the master that checked the store) opens its own."""
    for connection in connections.all(initialized_only=True):
        connection.close()
        close_pool = getattr(connection, "close_pool", None)
        if close_pool is not None:
            close_pool()


def _forget_inherited_pools() -> None:
    """In a forked child: a parent's connection pools cannot serve it. The threads that open
    and hand out their connections were the parent's, so a request would wait for a connection
    forever, and the connections' sockets are still the parent's. The child makes its own on
    first use (Django keeps the pools per process, by alias)."""
    try:
        from django.db.backends.postgresql.base import DatabaseWrapper
    except ImportError:  # no psycopg: no pools
        return
    DatabaseWrapper._connection_pools.clear()


os.register_at_fork(after_in_child=_forget_inherited_pools)


SERVER_BACK_SECONDS = 10.0


def when_server_back(write: Callable[[], T], *, lost: bool) -> T:
    """``write()``; after a database server closed the connection (it restarted), on a new
    connection, waiting up to ``SERVER_BACK_SECONDS`` for the server to be back: an outcome
    recorded a few seconds late is worth more than one left pending or running."""
    deadline = time.monotonic() + (SERVER_BACK_SECONDS if lost else 0)
    while True:
        if lost:
            close_broken_connections()
        try:
            return write()
        except Exception as error:
            if not connection_lost(error) or time.monotonic() >= deadline:
                raise
            lost = True
            time.sleep(0.5)


def storage_failure(error: BaseException) -> str | None:
    """``"full"`` or ``"unwritable"`` when ``error`` is a database that could not be written.

    Not a bug and not "busy": retrying does not help until an operator frees space or
    makes the file writable again, and the edges say so in those words.
    """
    cause = error.__cause__ or error
    text = str(cause).lower()
    sqlstate = getattr(cause, "sqlstate", None) or ""
    if any(words in text for words in _FULL_WORDS) or sqlstate == "53100":
        return "full"
    if any(words in text for words in _UNWRITABLE_WORDS) or sqlstate in {"25006", "58030"}:
        return "unwritable"
    if sqlstate.startswith("53"):
        return "full"
    return None


def read_only() -> bool:
    """The dashboard is attached read-only: no operation may write to the store."""
    return bool(getattr(settings, "SESSIONS_ADMIN_READ_ONLY", False))


def require_writable_store(operation: str) -> None:
    if read_only():
        raise ReadOnlyStore(operation)


# Answers to read questions a page asks more than once (memoized_reads), or None outside one.
_read_memo: ContextVar[dict | None] = ContextVar("sessions_admin_read_memo", default=None)


@contextlib.contextmanager
def memoized_reads() -> Iterator[None]:
    """Within it, a read that asks for it (``remembered``) is answered once per question.

    For one page's reads: the session page asks where a segment's conversation continues
    three times (the page, its actions panel, the stray-message check), each a walk of
    the compression chain. Any store operation run inside forgets every answer.
    """
    token = _read_memo.set({})
    try:
        yield
    finally:
        _read_memo.reset(token)


def remembered(question: tuple, read: Callable[[], T]) -> T:
    """``read()``'s answer, read once per ``question`` inside ``memoized_reads`` (every time
    outside one). The answer is shared: give back a copy of anything a caller may change."""
    memo = _read_memo.get()
    if memo is None:
        return read()
    if question not in memo:
        memo[question] = read()
    return memo[question]


@contextlib.contextmanager
def _without_memoized_reads() -> Iterator[None]:
    """A store operation reads afresh throughout, and what was read before it is forgotten."""
    memo = _read_memo.get()
    if memo is None:
        yield
        return
    memo.clear()
    token = _read_memo.set(None)
    try:
        yield
    finally:
        _read_memo.reset(token)
        memo.clear()


def store_operation(func: Callable[..., T]) -> Callable[..., T]:
    """Run ``func`` in one store transaction, retrying a busy store within a bound.

    Nested calls (an operation calling another) join the outer transaction and
    are not retried on their own: only the outermost call owns the retry. In
    read-only mode every operation is refused before it opens a transaction.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        require_writable_store(func.__name__)
        with _without_memoized_reads():
            return _run_store_operation(func, args, kwargs)

    return wrapper


def _run_store_operation(func: Callable[..., T], args: tuple, kwargs: dict) -> T:
    alias = store_alias()
    connection = connections[alias]
    if connection.in_atomic_block:
        return func(*args, **kwargs)
    deadline = time.monotonic() + RETRY_SECONDS
    attempt = 0
    while True:
        attempt += 1
        try:
            with transaction.atomic(using=alias):
                if connection.vendor == "postgresql":
                    with connection.cursor() as c:
                        c.execute(f"SET LOCAL lock_timeout = {int(PG_LOCK_TIMEOUT_MS)}")
                return func(*args, **kwargs)
        except (OperationalError, DatabaseError) as error:
            if storage_failure(error) and not getattr(error, "database", None):
                # A write the operation tagged as not the store's (the trash, in the
                # dashboard's database) keeps its tag; any other failed in the store.
                error.database = "store"
            if not is_busy_error(error) or time.monotonic() >= deadline:
                if is_busy_error(error):
                    _tell_busy(func.__name__, None)
                    raise StoreBusy(func.__name__, attempt) from error
                raise
            pause = min(0.5, 0.02 * attempt) * (0.5 + random.random())
            _tell_busy(func.__name__, pause)
            time.sleep(pause)


def lock_names(*names: str | None, alias: str | None = None) -> None:
    """Serialize this transaction with every other one naming one of ``names``, until it ends.

    What an operation reads and then acts on (the live session of a key, whether an id
    exists) must not change between the read and the write. SQLite: ``BEGIN IMMEDIATE``
    already holds the one write lock from the first statement, so there is nothing to do.
    PostgreSQL (READ COMMITTED): a transaction-scoped advisory lock per name, taken in
    sorted order so two operations never wait for each other crosswise; every statement
    after it sees what the previous holder committed. Names are namespaced by the caller
    (``key:<session_key>``, ``session:<id>``, ``conversation:<slug>``). ``alias``: another
    database than the store (the dashboard's), whose transaction it is.
    """
    wanted = sorted({name for name in names if name})
    if not wanted or vendor(alias) != "postgresql":
        return
    with cursor(alias) as c:
        for name in wanted:
            c.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [name])


def key_lock_name(session_key: str | None) -> str | None:
    return f"key:{session_key}" if session_key else None


def session_lock_name(session_id: str | None) -> str | None:
    return f"session:{session_id}" if session_id else None


def cursor(alias: str | None = None):
    return connections[alias or store_alias()].cursor()


def vendor(alias: str | None = None) -> str:
    return connections[alias or store_alias()].vendor


def fetchone(sql: str, params: Sequence[Any] = (), *, alias: str | None = None) -> tuple | None:
    with cursor(alias) as c:
        c.execute(sql, list(params))
        return c.fetchone()


def fetchall(sql: str, params: Sequence[Any] = (), *, alias: str | None = None) -> list[tuple]:
    with cursor(alias) as c:
        c.execute(sql, list(params))
        return c.fetchall()


def fetchdicts(
    sql: str, params: Sequence[Any] = (), *, alias: str | None = None
) -> list[dict[str, Any]]:
    with cursor(alias) as c:
        c.execute(sql, list(params))
        names = [d[0] for d in c.description]
        return [dict(zip(names, row, strict=True)) for row in c.fetchall()]


def fetch_batch(
    statements: Sequence[tuple[str, Sequence[Any]]], *, alias: str | None = None
) -> list[list[tuple]]:
    """The rows of each of several independent SELECTs, in order.

    PostgreSQL: one round trip. Django's psycopg cursors bind parameters client-side, so
    the statements go to the server as one simple-protocol message and come back as one
    result set each (``nextset``). SQLite (in process, no round trips) and a PostgreSQL
    connection configured for server-side binding (one statement per message) run them
    one after the other.
    """
    connection = connections[alias or store_alias()]
    server_side = connection.settings_dict.get("OPTIONS", {}).get("server_side_binding")
    if connection.vendor != "postgresql" or server_side or len(statements) < 2:
        return [fetchall(sql, params, alias=alias) for sql, params in statements]
    with cursor(alias) as c:
        c.execute(
            "; ".join(sql for sql, _params in statements),
            [value for _sql, params in statements for value in params],
        )
        results = [c.fetchall()]
        while c.nextset():
            results.append(c.fetchall())
    return results


def execute(sql: str, params: Sequence[Any] = (), *, alias: str | None = None) -> int:
    with cursor(alias) as c:
        c.execute(sql, list(params))
        return c.rowcount


def json_field(column: str, key: str, *, alias: str | None = None) -> str:
    """SQL for ``column``'s JSON text field ``key`` as text (``key`` is a constant)."""
    if vendor(alias) == "postgresql":
        # model_config is text a runtime wrote; only parse what looks like an object.
        return f"(CASE WHEN {column} LIKE '{{%%' THEN ({column}::jsonb ->> '{key}') END)"
    return f"json_extract(CASE WHEN json_valid({column}) THEN {column} END, '$.{key}')"


def json_text_holds(column: str, value: str, *, alias: str | None = None) -> tuple[str, list]:
    """A cheap first test, `` AND ...`` SQL and its parameters, that ``column``'s JSON text may
    hold the string ``value``: on PostgreSQL a search of the raw text for it in quotes, which
    it checks before parsing the JSON of every row (a scan of the stored responses for one
    session's slugs parsed each one: 8 to 18 ms a page at 100,000 sessions, 1 with this). Nothing on SQLite (its index answers),
    nor for a value a JSON writer may escape (quotes, backslashes, slashes, control or
    non-ASCII characters), which the raw text would then not hold as is."""
    if vendor(alias) != "postgresql" or not value.isascii() or not value.isprintable():
        return "", []
    if any(character in value for character in '"\\/'):
        return "", []
    return f" AND strpos({column}, %s) > 0", [f'"{value}"']


def json_array_length(column: str) -> str:
    if vendor() == "postgresql":
        return (
            f"(CASE WHEN {column} LIKE '[%%' THEN json_array_length({column}::json) "
            f"WHEN {column} IS NOT NULL AND {column} <> '' THEN 1 ELSE 0 END)"
        )
    return (
        f"(CASE WHEN json_valid({column}) AND json_type({column}) = 'array' "
        f"THEN json_array_length({column}) "
        f"WHEN {column} IS NOT NULL AND {column} <> '' THEN 1 ELSE 0 END)"
    )


def for_update() -> str:
    """Row lock suffix: PostgreSQL needs it; SQLite's BEGIN IMMEDIATE already serializes."""
    return " FOR UPDATE" if vendor() == "postgresql" else ""


def in_list(column: str, values: Sequence[Any]) -> tuple[str, list]:
    """``column IN values`` with one parameter, whatever the number of values."""
    if vendor() == "postgresql":
        return f"{column} = ANY(%s)", [list(values)]
    return f"{column} IN (SELECT value FROM json_each(%s))", [json.dumps(list(values))]


def contains_pattern(value: str) -> str:
    """A LIKE pattern matching text that contains ``value`` as it is (use with ESCAPE '\\')."""
    escaped = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def placeholders(values: Iterable[Any]) -> str:
    return ", ".join("%s" for _ in values)


# Values bound in one statement's IN list: far below SQLite's variable limit, and a plan
# PostgreSQL makes quickly.
IN_CHUNK = 500


def _in_chunks(
    fetch: Callable[..., list],
    sql: str,
    values: Iterable[Any],
    before: Sequence[Any],
    after: Sequence[Any],
    alias: str | None,
) -> list:
    wanted = list(dict.fromkeys(values))
    rows: list = []
    for start in range(0, len(wanted), IN_CHUNK):
        chunk = wanted[start : start + IN_CHUNK]
        # Replaced, not ``format``ed: the statement may hold braces of its own (JSON paths).
        statement = sql.replace("{marks}", placeholders(chunk))
        rows += fetch(statement, [*before, *chunk, *after], alias=alias)
    return rows


def fetchall_in(
    sql: str,
    values: Iterable[Any],
    *,
    before: Sequence[Any] = (),
    after: Sequence[Any] = (),
    alias: str | None = None,
    dicts: bool = False,
) -> list:
    """Every row of ``sql`` whose ``{marks}`` is an IN list of ``values`` (each once), asked
    ``IN_CHUNK`` values at a time; ``before``/``after``: the parameters around the list;
    ``dicts``: each row as a dict."""
    return _in_chunks(fetchdicts if dicts else fetchall, sql, values, before, after, alias)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
