"""Shared test setup.

Every test gets both databases (``default`` and ``store``) in transactional
mode: the core opens its own transactions and notifies listeners on commit,
and the concurrency tests need real commits visible across threads. The store
is created once per run with the same ``ensure_store_schema`` production uses,
and emptied after every test.
"""

from __future__ import annotations

import pytest
from django.db import connections, transaction
from django.test import TransactionTestCase

from sessions_admin.core import db as core_db
from sessions_admin.core import events
from sessions_admin.core.schema import META_TABLE, OWN_TABLES
from sessions_admin.routers import responses_alias, store_alias

# Emptied between tests: the store's own tables, then the runtime's (children first).
# Not the store's own values (the plans' key): a deployment keeps them for good.
STORE_TABLES = [*(t for t in OWN_TABLES if t != META_TABLE), "messages", "sessions"]
RESPONSE_TABLES = ["conversations", "responses"]


# Rows every test may rely on and none changes: content types, permissions, the roles' groups
# (re-applied by every ``assign_role``) and the migration history.
KEPT_TABLES = frozenset(
    {
        "django_migrations",
        "django_content_type",
        "auth_permission",
        "auth_group",
        "auth_group_permissions",
    }
)
_flushed_tables: dict[str, list[str]] = {}


def _empty_databases(self) -> None:
    """What ``TransactionTestCase`` does after each test, without re-running post_migrate.

    Django's flush empties every table and then re-creates content types, permissions and
    roles through the post_migrate signal: 0.2 s a test, a third of the suite's time. Leaving
    those tables alone needs no re-creation; every other table is emptied as before.
    """
    for alias in self._databases_names(include_mirrors=False):
        connection = connections[alias]
        if alias not in _flushed_tables:
            existing = connection.introspection.django_table_names(
                only_existing=True, include_views=False
            )
            _flushed_tables[alias] = sorted(set(existing) - KEPT_TABLES)
        _empty_tables(connection, _flushed_tables[alias])


def _empty_tables(connection, tables: list[str]) -> None:
    """DELETE, not TRUNCATE: PostgreSQL's TRUNCATE re-creates each table's files (35 ms a test).

    Django's foreign keys are deferred on both backends, so inside one transaction the order
    is free; PostgreSQL takes the whole script in one round trip.
    """
    deletes = [f"DELETE FROM {connection.ops.quote_name(table)}" for table in tables]
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("; ".join(deletes))
        else:
            for statement in deletes:
                cursor.execute(statement)


TransactionTestCase._fixture_teardown = _empty_databases


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("django_db") is None and not item.get_closest_marker("own_db"):
            item.add_marker(pytest.mark.django_db(transaction=True, databases="__all__"))


@pytest.fixture(autouse=True)
def _test_settings(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # A page computes a cold store-wide figure itself, as before issue 16, so a test sees
    # its figures on the first GET; tests/console/test_cold_pages.py turns this off to test
    # what a dashboard does: a placeholder, and the figure computed in the background.
    settings.SESSIONS_ADMIN_COLD_FIGURES_INLINE = True
    # Every test client comes from one address and many tests are refused on purpose (401):
    # the refused-authentication throttle is tested on its own (tests/api/test_auth_throttle.py).
    settings.SESSIONS_ADMIN_API_AUTH_FAIL_RATE = ""


@pytest.fixture
def short_waits(monkeypatch):
    """A busy store gives up in well under a second: retries, lock timeouts, busy timeout."""
    monkeypatch.setattr(core_db, "RETRY_SECONDS", 0.6)
    monkeypatch.setattr(core_db, "PG_LOCK_TIMEOUT_MS", 150)
    store = connections["store"]
    if store.vendor == "sqlite":
        store.ensure_connection()
        with store.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout = 150")


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    from sessions_admin.core.schema import ensure_store_schema

    with django_db_blocker.unblock():
        ensure_store_schema()


def _wipe() -> None:
    _empty_tables(connections[store_alias()], STORE_TABLES)
    _empty_tables(connections[responses_alias()], RESPONSE_TABLES)


@pytest.fixture(autouse=True)
def _clean_store(request):
    if request.node.get_closest_marker("django_db") is None:
        yield
        return
    request.getfixturevalue("django_db_setup")
    yield
    _wipe()
    # The store-wide figures of the store just emptied: /forks/ reads them from the cache
    # now (issue 16), and the next test's store is another one under the same name.
    from sessions_admin.store import cached

    cached.drop_figures()
    with events._listeners_lock:
        events._listeners.clear()


# The tests that walk every URL (access, fuzz, page headers) share these.


@pytest.fixture
def no_worker(monkeypatch):
    """Looking at a job wakes the delete worker: it would delete the seeded job's session."""
    from sessions_admin.ledger import worker

    monkeypatch.setattr(worker, "ensure_worker_running", lambda: None)


@pytest.fixture
def ada(db):
    """The operator the audit entries of a test name."""
    from django.contrib.auth.models import User

    return User.objects.create_user("ada")


@pytest.fixture
def seeded():
    """A small store holding one of every kind of object a URL can name (tests/console/urlmap)."""
    from tests.console import urlmap

    return urlmap.seed()


@pytest.fixture
def admin_client():
    from django.contrib.auth.models import User
    from django.test import Client

    from sessions_admin.signin.roles import assign_role

    client = Client()
    user = User.objects.create_user("walking-admin")
    assign_role(user, "admin")
    client.force_login(user)
    return client
