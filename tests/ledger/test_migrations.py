"""The ledger's migrations 0001-0009 are one squashed migration that ``replaces`` them.

A database migrated to 0009 before the squash has nothing left to run; one part-way
through those nine, whose files are gone, is stopped by ``migrate`` with what to do
(Django alone would plan nothing for it and say nothing).
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.recorder import MigrationRecorder

from sessions_admin.ledger.apps import partly_squashed_history

SQUASH = "0001_squashed_0009_trash_owner_and_restore_intent"
AFTER_0005 = [
    "0006_retention_policies",
    "0007_erasure_requests",
    "0008_audit_partial_outcome",
    "0009_trash_owner_and_restore_intent",
]


def _unrecord(*names: str) -> None:
    recorder = MigrationRecorder(connection)
    for name in names:
        recorder.record_unapplied("ledger", name)


def _ledger_plan() -> list[str]:
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [migration.name for migration, _backwards in plan if migration.app_label == "ledger"]


@pytest.mark.django_db(databases="__all__")
def test_a_database_migrated_to_0009_before_the_squash_has_nothing_to_run():
    _unrecord(SQUASH)
    assert _ledger_plan() == []
    assert partly_squashed_history(databases=["default"]) == []


@pytest.mark.django_db(databases="__all__")
def test_a_database_part_way_through_the_squashed_migrations_is_stopped_with_what_to_do():
    _unrecord(SQUASH, *AFTER_0005)
    [error] = partly_squashed_history(databases=["default"])
    assert error.id == "ledger.E001"
    assert "ledger.0005_trash_operation" in error.msg
    assert SQUASH in error.msg
