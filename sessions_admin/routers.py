"""Send the runtime's store models to the store database, everything else to default.

The store belongs to the runtime: Django never migrates it. Its schema is
created (additively, idempotently) by ``sessions_admin.core.schema``.
"""

from __future__ import annotations

from django.conf import settings

STORE_APP = "store"


def store_alias() -> str:
    return "store"


def responses_alias() -> str:
    # Hermes keeps conversations in a separate response_store.db; without one
    # configured they live beside the sessions.
    return "responses" if "responses" in settings.DATABASES else "store"


class StoreRouter:
    def db_for_read(self, model, **hints):
        if model._meta.app_label == STORE_APP:
            return getattr(model, "store_alias", store_alias)()
        return "default"

    db_for_write = db_for_read

    def allow_relation(self, obj1, obj2, **hints):
        return (obj1._meta.app_label == STORE_APP) == (obj2._meta.app_label == STORE_APP)

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        if app_label == STORE_APP:
            return False
        return db == "default"
