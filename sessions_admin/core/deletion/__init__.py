"""Cascade delete, bulk delete and the trash; import what a caller needs from here.

``plan`` computes what a delete takes (the cascade plan, its closure, the conversations kept
whole) and ``selection`` what a bulk delete preset selects and its dry run. ``trash`` is the
protocol of where deleted rows are kept and the row snapshots put there. ``steps`` is one step
of a delete under the store's lock (trash copy first, then one short transaction), shared by
``batches`` (whole sessions, a cascade, a job's batch) and ``parts`` (one large session in
several transactions; its mark lives in ``core.being_deleted``), and ``give_back`` returns the
parts of a session such a delete must keep. ``restore`` puts a trash operation back.
``fts_merges`` defers SQLite's full-text merges during a job to short steps between its
commits. Names
with a leading underscore are shared between these modules only.
"""

from sessions_admin.core.deletion.batches import (
    BATCH_MESSAGES,
    BATCH_SESSIONS,
    DatabaseNotWritten,
    DeletePartlyApplied,
    as_sentence,
    cascade_whole,
    claim_cascade,
    database_words,
    delete_batch,
    delete_claimed_cascade,
    delete_in_batches,
    execute_cascade_delete,
    failed_database,
)
from sessions_admin.core.deletion.fts_merges import defer_merges as defer_fts_merges
from sessions_admin.core.deletion.give_back import stop_deleting
from sessions_admin.core.deletion.plan import (
    CHUNK,
    TYPED_CONFIRMATION_MESSAGES,
    TYPED_CONFIRMATION_SESSIONS,
    ConversationsKept,
    DeletePlan,
    DeleteResult,
    WholeConversations,
    active_since,
    children_kept,
    conversation_groups,
    conversation_names_of,
    conversation_within,
    count_messages,
    kept_whole,
    lineage_closure,
    lost_undo_words,
    needs_typed_confirmation,
    ordered_by_conversation,
    ordered_children_first,
    plan_cascade_delete,
    response_ids_of,
    typed_count_problem,
)
from sessions_admin.core.deletion.restore import (
    RESTORE_LOCK,
    LostLink,
    RestoreConflict,
    RestoreResult,
    WaitingLink,
    restore_trash_entry,
    settle_in_store,
)
from sessions_admin.core.deletion.selection import (
    DRY_RUN_MAX_AGE_SECONDS,
    PRESET_MAX_DAYS,
    PRESETS,
    SAMPLE_SIZE,
    SELECTION_MAX,
    SOURCE_MAX_LENGTH,
    BulkDeletePreview,
    confirmed_cutoff,
    days_before,
    days_text,
    going_on_outside,
    live_session_ids,
    plural_days,
    preset_description,
    preset_session_ids,
    preview_bulk_delete,
    takes_live,
)
from sessions_admin.core.deletion.steps import (
    COPY_ATTEMPTS,
    DeleteGivenBack,
    GoneRows,
    SessionsWentLive,
)
from sessions_admin.core.deletion.trash import (
    NO_TRASH,
    TRASH_DATABASE,
    NoTrash,
    Trash,
    TrashContents,
    new_operation_id,
    rows_key,
    same_rows,
    set_default_trash,
    snapshot_rows,
)
from sessions_admin.core.merge import PlanChanged
