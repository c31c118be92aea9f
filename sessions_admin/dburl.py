"""Turn the database URLs of the environment into Django DATABASES entries.

Only the two schemes the project supports are accepted, so a typo in an
operator's URL fails loudly at start-up instead of silently falling back to a
different store.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse


class DatabaseUrlError(ValueError):
    pass


# A short busy timeout keeps our writers polite: the runtime is the main writer
# of the store, and our transactions are short (BEGIN IMMEDIATE, small batches).
SQLITE_BUSY_TIMEOUT_SECONDS = 5
SQLITE_CONN_MAX_AGE = 600  # seconds a request thread keeps its SQLite connection
SQLITE_INIT_COMMAND = "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"


PG_CONNECTION_OPTIONS = "-c jit=off -c TimeZone=UTC -c max_parallel_workers_per_gather=0"


# A pooled connection idle this long is closed (down to the pool's one kept connection), so a
# burst's connections are given back to PostgreSQL's max_connections within a minute.
PG_POOL_MAX_IDLE_SECONDS = 60
# How long a request waits for a pooled connection before it fails. The pool holds more than a
# worker's threads, so a request waits only while the pool opens a connection: when PostgreSQL
# is down, this is how long a page (or /readyz) takes to say so (psycopg's default, 30 s, held
# every request that long).
PG_POOL_TIMEOUT_SECONDS = 5
# How long the pool keeps retrying a connection it could not open before giving up on that
# try (the next request that finds no connection starts a new one, at once). psycopg's
# default, 300 s, doubles its wait between tries (1, 2, 4, 8 ... s): after PostgreSQL was down
# for a quarter of a minute, a worker went on answering 503 for as long again once it was
# back, longer after a longer outage. Kept under the timeout above, so a request waiting
# for a connection sees the server's return.
PG_POOL_RECONNECT_SECONDS = 3


def parse_database_url(
    url: str, *, base_dir: Path, conn_max_age: int = 0, pool_size: int = 0
) -> dict:
    """A DATABASES entry for ``url``.

    PostgreSQL: with ``conn_max_age`` seconds, each thread keeps its own connection that long;
    otherwise, with ``pool_size``, the process's threads share a pool of at most that many
    (Django's psycopg pool); with neither, a new connection per request (Django's default).
    SQLite connections are kept ``SQLITE_CONN_MAX_AGE`` seconds whatever either says."""
    parsed = urlparse(url)
    scheme = parsed.scheme.lower()
    if scheme == "sqlite":
        # SQLAlchemy's convention: sqlite:///relative/path (relative to base_dir),
        # sqlite:////absolute/path.
        raw_path = unquote(parsed.path)
        if not raw_path.strip("/"):
            raise DatabaseUrlError(f"SQLite URL has no file path: {url!r}")
        if raw_path.startswith("//"):
            path = Path(raw_path[1:])
        else:
            path = base_dir / raw_path.lstrip("/")
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(path),
            "OPTIONS": {
                "timeout": SQLITE_BUSY_TIMEOUT_SECONDS,
                "transaction_mode": "IMMEDIATE",
                "init_command": SQLITE_INIT_COMMAND,
            },
            # Kept between requests: a file a thread keeps open has no server to run out of
            # connections, and opening both databases again (their PRAGMAs, Django's SQL
            # functions; a WAL checkpoint when the closed one was the last) cost more CPU
            # than the rest of an API append (bench/api.py).
            "CONN_MAX_AGE": SQLITE_CONN_MAX_AGE,
        }
    if scheme in {"postgres", "postgresql", "pgsql"}:
        name = unquote(parsed.path.lstrip("/"))
        if not name:
            raise DatabaseUrlError(f"PostgreSQL URL has no database name: {url!r}")
        options: dict = {}
        for key, values in parse_qs(parsed.query).items():
            options[key] = values[-1]
        # Set once, in the connection's startup message (no round trip of their own):
        # - jit off: the lineage CTEs get huge row estimates; JIT compiling them costs more
        #   than running them (and a SET LOCAL per page was a round trip, in a transaction);
        # - TimeZone UTC, settings.TIME_ZONE: Django sends its own SET on every new connection
        #   whose server default differs;
        # - no parallel workers: the console's statements read a page through indexes, and a
        #   worker process started for one (a search's bitmap scan, a count) cost more CPU than
        #   it saved: under load 50-51 requests/s with them, 58 without (bench/load.py).
        # An operator's own ?options= come after ours, so theirs win.
        options["options"] = " ".join(
            part for part in (PG_CONNECTION_OPTIONS, options.get("options", "")) if part
        )
        if pool_size and not conn_max_age:
            # A connection per request cost PostgreSQL more CPU than the request's own
            # queries (a backend forked, signed in, its catalog caches cold: 27 ms against 10
            # per console page, docs/benchmarks.md); a pool reuses warm ones. Django gives a
            # connection back when it closes it: at the end of each request, and in the
            # background threads after each round of work.
            options["pool"] = {
                "min_size": 1,
                "max_size": pool_size,
                "max_idle": PG_POOL_MAX_IDLE_SECONDS,
                "timeout": PG_POOL_TIMEOUT_SECONDS,
                "reconnect_timeout": PG_POOL_RECONNECT_SECONDS,
            }
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "OPTIONS": options,
            "CONN_MAX_AGE": conn_max_age,
            # A kept or pooled connection the server dropped (a restart, an idle timeout) is
            # noticed before a request uses it, not as that request's error.
            "CONN_HEALTH_CHECKS": conn_max_age > 0 or "pool" in options,
        }
    raise DatabaseUrlError(
        f"Unsupported database URL scheme {scheme!r} in {url!r}: use sqlite:/// or postgres://"
    )
