"""SESSIONS_ADMIN_CACHE_URL: which of Django's caches holds the store-wide figures."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connections

from sessions_admin import settings as settings_module


def test_unset_is_a_file_cache_under_the_var_directory():
    cache = settings_module._cache_from_url("")
    assert cache["BACKEND"].endswith("FileBasedCache")
    assert cache["LOCATION"] == str(settings_module.VAR_DIR / "cache")


def test_db_is_djangos_database_cache_in_its_own_table():
    assert settings_module._cache_from_url("db://") == {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache",
        "LOCATION": settings_module.CACHE_TABLE,
    }


@pytest.mark.parametrize("url", ["redis://cache.internal:6379/0", "rediss://user:pw@cache:6380/1"])
def test_redis_is_djangos_redis_cache_on_that_url(url):
    assert settings_module._cache_from_url(url) == {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": url,
    }


@pytest.mark.parametrize("url", ["memcached://x", "file:///tmp/cache", "nonsense"])
def test_anything_else_is_refused_in_words(url):
    with pytest.raises(ImproperlyConfigured, match="SESSIONS_ADMIN_CACHE_URL"):
        settings_module._cache_from_url(url)


def test_migrate_makes_the_database_caches_table(settings):
    settings.CACHES = {"default": settings_module._cache_from_url("db://")}
    with connections["default"].cursor() as c:
        c.execute(f"DROP TABLE IF EXISTS {settings_module.CACHE_TABLE}")
    call_command("migrate", verbosity=0)  # nothing to migrate: post_migrate still runs
    tables = connections["default"].introspection.table_names()
    assert settings_module.CACHE_TABLE in tables


def test_two_hosts_making_the_table_at_once_both_start(settings, monkeypatch):
    """The loser of the race (its CREATE TABLE fails: the winner's table exists) starts too."""
    from django.core.management.base import CommandError

    from sessions_admin.ledger import apps as ledger_apps

    settings.CACHES = {"default": settings_module._cache_from_url("db://")}
    calls = []

    def racing(name, **kwargs):
        calls.append(name)
        if len(calls) == 1:
            call_command(name, **kwargs)  # the winner makes it ...
            raise CommandError('table "sessions_admin_cache" already exists')  # ... we lose
        call_command(name, **kwargs)

    with connections["default"].cursor() as c:
        c.execute(f"DROP TABLE IF EXISTS {settings_module.CACHE_TABLE}")
    monkeypatch.setattr("django.core.management.call_command", racing)
    ledger_apps.create_cache_table()
    assert calls == ["createcachetable", "createcachetable"]
    assert settings_module.CACHE_TABLE in connections["default"].introspection.table_names()
