"""What of a plan is still in the databases, and what an erasure took out of them.

Receipts and audit entries count what the databases lost, never what was asked for:
``rows_present`` before and after each batch, ``LateRows`` for what a runtime wrote meanwhile
above the plan's marks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from django.db import connections, transaction

from sessions_admin.core import db
from sessions_admin.core.erasure.plan import ErasurePlan, _chunks
from sessions_admin.routers import responses_alias, store_alias


@dataclass(frozen=True)
class RowsPresent:
    """How many of a plan's rows the databases hold: its sessions and their messages, the
    messages a merge moved elsewhere, its slugs, responses and own-table rows.

    The receipt's counts are what the databases lost: this before the erasure's first run
    minus this after its last (the request keeps the first, ``as_record``). Counting each
    delete statement's rows instead counted 0 slugs and responses, since the sessions' own
    deletes (``delete_in_batches``) had already removed them, missed the own-table rows that
    go with a session (its delete-in-parts mark), and forgot what a killed run deleted.
    """

    sessions: int
    messages: int
    other_messages: int
    conversations: int
    responses: int
    side_rows: int

    def as_record(self) -> dict:
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict) -> RowsPresent:
        return cls(**{name: int(record[name]) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class ErasureResult(RowsPresent):
    """What one run erased (the counts ``RowsPresent`` names) and how it left no byte."""

    storage: tuple[str, ...]  # what was done so no deleted byte is left
    # False while a full-text index still has segments written before the deletes (SQLite:
    # a runtime writing all along kept the merge from finishing); ``merge_search_indexes``
    # is run again later until it is True.
    index_merged: bool = True
    # The plan as carried out: the recorded one, with the sessions a runtime started below
    # the subject's while it ran (``LateRows``). None only where no erasure ran.
    plan: ErasurePlan | None = None


@dataclass(frozen=True)
class LateRows:
    """What an erasure deleted that was not there when its rows were counted (``before``),
    so the receipt counts it too.

    ``added``: the sessions a runtime started below the subject's while it ran, put in the
    plan (and recorded) before they are deleted; like the plan's own, they count as erased
    once they are no longer in the store. ``messages``: those deleted so far, across every
    run, that a runtime appended with its own SQL after the count (ids above ``mark``, the
    store's highest message id then; None for a run recorded before marks were kept: they
    are not told apart). Each run records them after every batch that deleted some, so only
    a run killed between a batch's commit and that record leaves that batch's out.
    ``conversations``, ``responses``, ``side_rows``: the slugs, stored responses and own-table
    rows (slug history, a released hold) written about the subject meanwhile, put in the plan (and
    recorded with these counts) before they are deleted (``_written_meanwhile``).
    """

    mark: int | None
    added: tuple[str, ...] = ()
    # Sessions of the plan a runtime wrote again (same id) after their delete, deleted again.
    recreated: int = 0
    messages: int = 0
    conversations: int = 0
    responses: int = 0
    side_rows: int = 0
    # The subject's messages a merge moved that a restore put back in the store after the plan
    # was made, put in the plan (and recorded) before they are deleted (``_close_merges``).
    other_messages: int = 0

    def as_record(self) -> dict:
        return {**asdict(self), "added": list(self.added)}

    @classmethod
    def from_record(cls, record: dict | None) -> LateRows:
        if not record:
            return cls(mark=None)
        mark = record.get("mark")
        return cls(
            mark=None if mark is None else int(mark),
            added=tuple(record.get("added", ())),
            recreated=int(record.get("recreated", 0)),
            messages=int(record.get("messages", 0)),
            conversations=int(record.get("conversations", 0)),
            responses=int(record.get("responses", 0)),
            side_rows=int(record.get("side_rows", 0)),
            other_messages=int(record.get("other_messages", 0)),
        )


# The key columns of each own table ``_side_rows`` lists rows of.
SIDE_ROW_KEYS = {
    "sessions_admin_switch_events": ("seq",),
    "sessions_admin_undos": ("id",),
    "sessions_admin_merges": ("id",),
    "sessions_admin_slug_history": ("id",),
    "sessions_admin_holds": ("id",),
    "sessions_admin_deletions": ("session_id",),
    "sessions_admin_delete_claims": ("operation",),
    "sessions_admin_idempotency": ("scope", "key"),
    "sessions_admin_end_marks": ("session_id",),
    "compression_locks": ("session_id",),
    "async_delegations": ("delegation_id",),
    "gateway_routing": ("scope", "session_key"),
}


def _count_in(table: str, column: str, values: Sequence, *, alias: str | None = None) -> int:
    return sum(
        int(
            db.fetchone(
                f"SELECT COUNT(*) FROM {table} WHERE {column} IN ({db.placeholders(chunk)})",
                list(chunk),
                alias=alias,
            )[0]
        )
        for chunk in _chunks(list(values))
    )


def rows_present(*, plan: ErasurePlan) -> RowsPresent:
    """How many of ``plan``'s rows are in the store and the response store now."""
    alias = responses_alias()
    side = 0
    for table, rows in plan.side_rows.items():
        columns = SIDE_ROW_KEYS[table]
        where = " AND ".join(f"{c} = %s" for c in columns)
        for row in rows:
            side += int(
                db.fetchone(
                    f"SELECT COUNT(*) FROM {table} WHERE {where}", list(row[: len(columns)])
                )[0]
            )
    return RowsPresent(
        sessions=_count_in("sessions", "id", plan.session_ids),
        messages=_count_in("messages", "session_id", plan.session_ids),
        other_messages=_count_in("messages", "id", [m for m, _ in plan.other_messages]),
        conversations=_count_in("conversations", "name", plan.conversation_names, alias=alias),
        responses=_count_in("responses", "response_id", plan.response_ids, alias=alias),
        side_rows=side,
    )


def counted_before(*, plan: ErasurePlan) -> tuple[RowsPresent, LateRows]:
    """``rows_present`` before an erasure's first run, and the store's highest message id as
    of the same count (one snapshot): a message above it was appended afterwards
    (``LateRows``). Messages ids only grow (AUTOINCREMENT on SQLite, a sequence on
    PostgreSQL)."""
    outer = connections[store_alias()].in_atomic_block  # a caller's transaction: its snapshot
    with transaction.atomic(using=store_alias()):
        if db.vendor() == "postgresql" and not outer:
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        mark = int(db.fetchone("SELECT COALESCE(MAX(id), 0) FROM messages")[0])
        before = rows_present(plan=plan)
    return before, LateRows(mark=mark)


def _erased(before: RowsPresent, now: RowsPresent, late: LateRows) -> dict[str, int]:
    """The counts gone: the plan's rows counted ``before`` minus those left ``now``, and the
    rows written after that count which the erasure deleted (``late``)."""
    gone = {
        name: getattr(before, name) - getattr(now, name)
        for name in RowsPresent.__dataclass_fields__
    }
    # ``now`` counts the added sessions still there (the plan holds them), ``before`` none.
    gone["sessions"] += len(late.added) + late.recreated
    for name in ("messages", "other_messages", "conversations", "responses", "side_rows"):
        gone[name] += getattr(late, name)
    return gone


def erased_so_far(plan: ErasurePlan, before: RowsPresent, late: LateRows) -> RowsPresent | None:
    """The rows gone since ``before`` (every run's), or None if the store cannot be read."""
    try:
        now = rows_present(plan=plan)
    except Exception:
        return None
    return RowsPresent(**_erased(before, now, late))
