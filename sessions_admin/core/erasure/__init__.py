"""Erasure: everything the store and the response store hold about one person, purged.

Subject values are compared whole, with their case, never ``LIKE``; a plan reaching another
user's session is refused, sessions merely mentioning the subject are listed and kept, and held
sessions are never changed. ``erase`` deletes exactly the plan, with no trash copy, after
re-checking its fingerprint or from a recorded plan (a resumed run; every step is idempotent),
then clears what deleted rows leave (``rewrite_store_files`` for what only a rewrite frees).
Counts are what the databases lost; an unwritable database raises ``ErasureStopped``. Operators:
docs/retention.md ("Erasure requests"); the dashboard's side: ``ledger/erasure.py``.

``subject`` is who is erased and how a value is matched in text; ``plan`` what an erasure
takes (sessions, their lineage, side rows, copies a merge or a branch made) and its record;
``counts`` what is present and what went; ``run`` the batched delete under the store's lock,
with the checks against what changed since the plan; ``files`` what only the files keep
afterwards (WAL checkpoints, full-text index merges, the file rewrite). Import from here;
names with a leading underscore are shared between these modules only.
"""

from sessions_admin.core.erasure.counts import (
    SIDE_ROW_KEYS,
    ErasureResult,
    LateRows,
    RowsPresent,
    counted_before,
    erased_so_far,
    rows_present,
)
from sessions_admin.core.erasure.files import (
    REWRITE_BUSY_MS,
    REWRITE_QUIET_SECONDS,
    FileRewrite,
    IndexMerge,
    checkpoint_wal,
    merge_search_indexes,
    rewrite_store_files,
    vacuum_full_postgresql,
    vacuum_sqlite,
)
from sessions_admin.core.erasure.plan import (
    ErasurePlan,
    plan_erasure,
    plan_from_record,
    plan_record,
)
from sessions_admin.core.erasure.run import (
    ERASED_SESSION,
    ERASED_WORDS,
    REST_WAITS_FOR_THE_HOLD,
    ChildrenSincePlan,
    ErasureStopped,
    HeldMidway,
    MergedSincePlan,
    RuntimeOutpacedErasure,
    erase,
    switch_events_of,
)
from sessions_admin.core.erasure.subject import (
    MIN_MENTION,
    Subject,
    names_subject,
    redact_text,
)

__all__ = [
    "ERASED_SESSION",
    "ERASED_WORDS",
    "MIN_MENTION",
    "REWRITE_BUSY_MS",
    "REST_WAITS_FOR_THE_HOLD",
    "REWRITE_QUIET_SECONDS",
    "SIDE_ROW_KEYS",
    "ChildrenSincePlan",
    "ErasurePlan",
    "ErasureResult",
    "ErasureStopped",
    "FileRewrite",
    "HeldMidway",
    "IndexMerge",
    "LateRows",
    "MergedSincePlan",
    "RowsPresent",
    "RuntimeOutpacedErasure",
    "Subject",
    "checkpoint_wal",
    "counted_before",
    "erase",
    "erased_so_far",
    "merge_search_indexes",
    "names_subject",
    "plan_erasure",
    "plan_from_record",
    "plan_record",
    "redact_text",
    "rewrite_store_files",
    "rows_present",
    "switch_events_of",
    "vacuum_full_postgresql",
    "vacuum_sqlite",
]
