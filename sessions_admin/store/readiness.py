"""Is the store ready to serve: it answers, and it holds the tables the dashboard reads and writes.

The cheap half of ``attach.inspect_configured`` for a load balancer's readiness probe
(``/readyz``, every few seconds): one query listing the store's tables, through the
connection requests use, no column-by-column inspection and no write. The full checks stay
where they were (start-up, ``manage.py check``). Initialised means the runtime's ``sessions``
and ``messages`` and, unless the store is attached read-only (whose connections get stand-ins),
the dashboard's own tables that ``init_store`` adds; the response store, when separate, needs
``responses`` and ``conversations``.
"""

from __future__ import annotations

from django.db import DatabaseError, connections

from sessions_admin.core.db import read_only
from sessions_admin.routers import responses_alias, store_alias
from sessions_admin.store.attach import OWN_TABLES

RUNTIME_TABLES = ("sessions", "messages")
RESPONSE_TABLES = ("responses", "conversations")


def _tables(alias: str) -> set[str]:
    connection = connections[alias]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            return {row[0] for row in cursor.fetchall()}
        return set(connection.introspection.table_names(cursor))


def store_problems() -> list[str]:
    """Why the store cannot serve now, in words (empty: it can)."""
    wanted = {store_alias(): [*RUNTIME_TABLES, *(() if read_only() else OWN_TABLES)]}
    if responses_alias() != store_alias():
        wanted[responses_alias()] = list(RESPONSE_TABLES)
    problems = []
    for alias, needed in wanted.items():
        role = "store" if alias == store_alias() else "response store"
        try:
            tables = _tables(alias)
        except DatabaseError as error:
            first_line = str(error).strip().splitlines()[:1]
            problems.append(
                f"the {role} does not answer: {type(error).__name__}: {''.join(first_line)}"
            )
            continue
        missing = [name for name in needed if name not in tables]
        if missing:
            problems.append(
                f"the {role} is not initialised (no {', '.join(missing)}): run "
                "`python manage.py init_store`"
            )
    return problems
