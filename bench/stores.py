"""Seeded benchmark stores, built once per size and reused by every bench module.

    from bench import stores
    var_dir = stores.sqlite_store(10_000)          # bench/.stores/10000 (state.db, dashboard.db)
    env = stores.sqlite_env(var_dir)               # environment for a Django process on it
    copy = stores.clone_sqlite_store(10_000, tmp)  # a private copy for destructive benchmarks

    url = stores.postgres_store(10_000)            # postgres://.../bench_10000 (the store)
    env = stores.postgres_env(10_000)              # dashboard and store on the bench cluster
    url = stores.clone_postgres_store(10_000, "bench_10000_writes")  # CREATE DATABASE ... TEMPLATE

Seeding goes through the project's own commands (migrate, init_store, seed_demo), so a
bench store is what an operator's demo store would be, only bigger. A 100,000-session
SQLite store takes about five minutes to seed; it is cached under bench/.stores/<size>
and reused until that directory is deleted. PostgreSQL stores live in a persistent
bench cluster (data under bench/.pg, owned by the postgres user, on a free loopback
port), started on demand and left running for the next benchmark.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The product refuses to start without a secret key outside tests; benchmarks sign in to
# throwaway stores, so every bench process (and the servers and children it starts, which
# inherit the environment) gets a random one unless the caller set one.
os.environ.setdefault("SESSIONS_ADMIN_SECRET_KEY", "bench-only-" + secrets.token_urlsafe(48))

from bench import multiply  # noqa: E402
from sessions_admin.devtools import _as_postgres_user, free_port  # noqa: E402

STORES_DIR = ROOT / "bench" / ".stores"
PG_DIR = ROOT / "bench" / ".pg"
SQLITE_FILES = ("state.db", "dashboard.db")


def parse_size(text: str | int) -> int:
    """'10k' -> 10000, '100k' -> 100000, '1m' -> 1000000, '2500' -> 2500."""
    if isinstance(text, int):
        value = text
    else:
        match = re.fullmatch(r"\s*([\d_,]+)\s*([kKmM]?)\s*", text)
        if not match:
            raise ValueError(f"not a store size: {text!r} (try 10k, 100k or a number)")
        value = int(re.sub(r"[_,]", "", match.group(1)))
        value *= {"": 1, "k": 1_000, "m": 1_000_000}[match.group(2).lower()]
    if value < 1:
        raise ValueError(f"a store needs at least one session, not {value}")
    return value


def size_label(size: int) -> str:
    """10000 -> '10k', 100000 -> '100k', 2500 -> '2500'."""
    if size % 1_000_000 == 0:
        return f"{size // 1_000_000}m"
    if size % 1_000 == 0:
        return f"{size // 1_000}k"
    return str(size)


def _manage(args: list[str], env: dict, log: Path) -> None:
    print("manage.py", " ".join(args), flush=True)
    with log.open("a") as out:
        subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            check=True,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


# Stores above this many sessions are a seeded base of MULTIPLIED_BASE sessions and copies of
# it made inside the database (bench/multiply.py): seed_demo alone would take hours for 1m.
LARGEST_SEEDED = 100_000
MULTIPLIED_BASE = 10_000


def _seed(env: dict, size: int, log: Path, multiply) -> None:
    """Seed `size` sessions; `multiply(copies)` copies the seeded base in the database."""
    started = time.monotonic()
    copies = size // MULTIPLIED_BASE - 1 if size > LARGEST_SEEDED else 0
    for args in (
        ["migrate", "--noinput", "-v", "0"],
        ["init_store"],
        ["seed_demo", "--sessions", str(MULTIPLIED_BASE if copies else size)],
    ):
        _manage(args, env, log)
    if copies:
        print(f"Copying the {MULTIPLIED_BASE:,}-session base {copies} times...", flush=True)
        multiply(copies)
    with log.open("a") as out:
        out.write(f"seeded {size:,} sessions in {time.monotonic() - started:.0f} s\n")
    print(f"Seeded in {time.monotonic() - started:.0f} s", flush=True)


# --- SQLite -----------------------------------------------------------------


def prepare_console(env: dict) -> None:
    """The dashboard's tables and the store's own tables, on the databases ``env`` names."""
    for command in (["migrate", "--noinput", "-v", "0"], ["init_store"]):
        subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=ROOT,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )


def sqlite_env(var_dir: Path) -> dict:
    """Environment for a Django process (manage.py, run.py) on the SQLite store in var_dir."""
    env = {**os.environ, "SESSIONS_ADMIN_VAR_DIR": str(var_dir)}
    for name in ("DATABASE_URL", "SESSIONS_ADMIN_STORE_URL", "SESSIONS_ADMIN_RESPONSES_URL"):
        env.pop(name, None)
    return env


def sqlite_store(size: int) -> Path:
    """The var dir of a seeded SQLite store of `size` sessions (seeded on first use)."""
    var_dir = STORES_DIR / str(size)
    marker = var_dir / "seeded"
    if marker.exists():
        return var_dir
    var_dir.mkdir(parents=True, exist_ok=True)
    for name in SQLITE_FILES:  # a half-seeded store from an interrupted run starts over
        for suffix in ("", "-wal", "-shm"):
            (var_dir / f"{name}{suffix}").unlink(missing_ok=True)
    print(f"Seeding a {size:,}-session SQLite store in {var_dir} (once)...", flush=True)
    _seed(
        sqlite_env(var_dir),
        size,
        var_dir / "seed.log",
        lambda copies: multiply.multiply_sqlite(str(var_dir / "state.db"), copies),
    )
    marker.write_text(dt.datetime.now(dt.UTC).isoformat())
    return var_dir


def _checkpoint(path: Path) -> None:
    import sqlite3

    if not path.exists():
        return
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def clone_sqlite_store(size: int, dest: Path) -> Path:
    """Copy the seeded store of `size` into var dir `dest` (replaced); return `dest`."""
    source = sqlite_store(size)
    dest.mkdir(parents=True, exist_ok=True)
    for name in SQLITE_FILES:
        _checkpoint(source / name)  # the copy is then the whole database in one file
        for suffix in ("-wal", "-shm"):
            (dest / f"{name}{suffix}").unlink(missing_ok=True)
        shutil.copyfile(source / name, dest / name)
    return dest


# --- PostgreSQL ---------------------------------------------------------------


def _pg_data() -> Path:
    return PG_DIR / "data"


def _pg_running() -> bool:
    if not (_pg_data() / "postmaster.pid").exists():
        return False
    status = subprocess.run(
        _as_postgres_user(["pg_ctl", "-D", str(_pg_data()), "status"]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return status.returncode == 0


def postgres_server() -> str:
    """URL base (no database) of the bench cluster, initialised and started if needed."""
    if not shutil.which("initdb") or not shutil.which("pg_ctl"):
        raise RuntimeError("PostgreSQL's initdb and pg_ctl are not on the PATH")
    port_file = PG_DIR / "port"
    if _pg_running() and port_file.exists():
        return f"postgres://postgres@127.0.0.1:{port_file.read_text().strip()}"
    PG_DIR.mkdir(parents=True, exist_ok=True)
    data = _pg_data()
    if not (data / "PG_VERSION").exists():
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir()
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            shutil.chown(PG_DIR, "postgres", "postgres")
            shutil.chown(data, "postgres", "postgres")
        subprocess.run(
            _as_postgres_user(
                ["initdb", "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8"]
                + ["--no-sync"]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
        )
    port = free_port()
    # Durability settings stay at their defaults: the read benchmarks don't care, and the
    # write benchmarks should see the cost of a real commit.
    # pg_stat_statements is loaded for bench/load.py --profile (statement counts and times);
    # it costs nothing measurable until a statement's planning is tracked, which only the
    # profile turns on, for its window.
    options = (
        f"-h 127.0.0.1 -p {port} -k {PG_DIR} -c shared_buffers=256MB"
        " -c shared_preload_libraries=pg_stat_statements"
    )
    subprocess.run(
        _as_postgres_user(
            ["pg_ctl", "-D", str(data), "-l", str(PG_DIR / "server.log"), "-o", options]
            + ["-w", "start"]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    port_file.write_text(str(port))
    return f"postgres://postgres@127.0.0.1:{port}"


def stop_postgres_server() -> None:
    if _pg_running():
        subprocess.run(
            _as_postgres_user(["pg_ctl", "-D", str(_pg_data()), "-m", "fast", "-w", "stop"]),
            stdout=subprocess.DEVNULL,
        )


def _admin_connection(base: str):
    import psycopg

    return psycopg.connect(f"{base}/postgres", autocommit=True)


def _database_exists(base: str, name: str) -> bool:
    with _admin_connection(base) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()


def _recreate_database(base: str, name: str, template: str | None = None) -> None:
    with _admin_connection(base) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if template:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        else:
            conn.execute(f'CREATE DATABASE "{name}"')


def postgres_database(size: int) -> str:
    return f"bench_{size}"


def postgres_env(size: int, *, store_database: str | None = None) -> dict:
    """Environment for a Django process with dashboard and store on the bench cluster.

    The dashboard tables (users, audit) live in bench_<size>_dashboard, the store in
    bench_<size> or `store_database` (a clone). Uploads and logs go to a var dir beside.
    """
    base = postgres_server()
    var_dir = STORES_DIR / f"pg-{size}"
    var_dir.mkdir(parents=True, exist_ok=True)
    env = sqlite_env(var_dir)
    env["DATABASE_URL"] = f"{base}/{postgres_database(size)}_dashboard"
    env["SESSIONS_ADMIN_STORE_URL"] = f"{base}/{store_database or postgres_database(size)}"
    return env


def postgres_store(size: int) -> str:
    """URL of the seeded PostgreSQL store of `size` sessions (seeded on first use)."""
    base = postgres_server()
    name = postgres_database(size)
    marker = PG_DIR / f"seeded-{size}"
    if (
        marker.exists()
        and _database_exists(base, name)
        and _database_exists(base, f"{name}_dashboard")
    ):
        return f"{base}/{name}"
    print(f"Seeding a {size:,}-session PostgreSQL store ({name}, once)...", flush=True)
    _recreate_database(base, name)
    _recreate_database(base, f"{name}_dashboard")
    env = postgres_env(size)
    log = STORES_DIR / f"pg-{size}" / "seed.log"
    # Seeding commits once per core operation; waiting for each WAL flush would make it
    # several times slower than on SQLite. Only the seeding skips the wait: the setting is
    # reset before anything is measured.
    with _admin_connection(base) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    try:
        _seed(
            env,
            size,
            log,
            lambda copies: multiply.multiply_postgres(f"{base}/{name}", copies),
        )
    finally:
        with _admin_connection(base) as conn:
            conn.execute(f'ALTER DATABASE "{name}" RESET synchronous_commit')
    with __import__("psycopg").connect(f"{base}/{name}", autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    marker.write_text(dt.datetime.now(dt.UTC).isoformat())
    return f"{base}/{name}"


def clone_postgres_store(size: int, name: str) -> str:
    """A fresh copy of the seeded store of `size` as database `name` (replaced); its URL.

    Use postgres_env(size, store_database=name) to point a Django process at it. Drop it
    with drop_postgres_database(name) when done.
    """
    postgres_store(size)
    base = postgres_server()
    _recreate_database(base, name, template=postgres_database(size))
    return f"{base}/{name}"


def drop_postgres_database(name: str) -> None:
    base = postgres_server()
    with _admin_connection(base) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Build (once) the seeded benchmark stores.")
    parser.add_argument("--size", default="10k")
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="sqlite")
    args = parser.parse_args()
    size = parse_size(args.size)
    if args.db in ("sqlite", "both"):
        print(sqlite_store(size))
    if args.db in ("postgres", "both"):
        print(postgres_store(size))
