"""Shared test setup.

Every test gets both databases (``default`` and ``store``) in transactional
mode: the core opens its own transactions and notifies listeners on commit,
and the concurrency tests need real commits visible across threads. The store
is created once per run with the same ``ensure_store_schema`` production uses,
and emptied after every test.
"""

from __future__ import annotations

import pytest
from django.db import connections

from sessions_admin.core import db as core_db
from sessions_admin.core import events
from sessions_admin.routers import responses_alias, store_alias

STORE_TABLES = [
    "sessions_admin_switch_events",
    "sessions_admin_switch_cursors",
    "sessions_admin_merges",
    "sessions_admin_undos",
    "sessions_admin_slug_history",
    "sessions_admin_holds",
    "messages",
    "sessions",
]
RESPONSE_TABLES = ["conversations", "responses"]


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("django_db") is None and not item.get_closest_marker("own_db"):
            item.add_marker(pytest.mark.django_db(transaction=True, databases="__all__"))


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


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
    with connections[store_alias()].cursor() as cursor:
        for table in STORE_TABLES:
            cursor.execute(f"DELETE FROM {table}")
    with connections[responses_alias()].cursor() as cursor:
        for table in RESPONSE_TABLES:
            cursor.execute(f"DELETE FROM {table}")


@pytest.fixture(autouse=True)
def _clean_store(request):
    if request.node.get_closest_marker("django_db") is None:
        yield
        return
    request.getfixturevalue("django_db_setup")
    yield
    _wipe()
    with events._listeners_lock:
        events._listeners.clear()


# The tests that walk every URL (access, fuzz, page headers) share these.


@pytest.fixture
def no_worker(monkeypatch):
    """Looking at a job wakes the delete worker: it would delete the seeded job's session."""
    from sessions_admin.ledger import worker

    monkeypatch.setattr(worker, "ensure_worker_running", lambda: None)


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
