"""The store core: every operation on the session store, and the reads they need.

No HTTP here. Views, management commands and a Python runtime all call these functions;
none of them writes to the store itself. Each operation takes keyword-only arguments, runs in
one transaction and returns a frozen dataclass or raises a ``core.errors.StoreError``.

This module re-exports only part of it: what a runtime calls (sessions and their messages,
turns and conversations, transcript edits, lineage reads, switch events and their follower,
the errors) plus merge, cascade delete and fork groups. The rest is imported from its own
module: ``holds``, ``retention``, ``erasure``, ``portability``, ``stray``, ``slug_history``,
``schema``, ``bulk_insert``, ``text``, ``ids``.
"""

from __future__ import annotations

from sessions_admin.core.conversations import (
    ConversationTarget,
    conversation_session,
    evict_responses,
    record_turn,
    resolve_conversation,
)
from sessions_admin.core.deletion import (
    BulkDeletePreview,
    ConversationsKept,
    DatabaseNotWritten,
    DeleteGivenBack,
    DeletePartlyApplied,
    DeletePlan,
    DeleteResult,
    RestoreConflict,
    RestoreResult,
    SessionsWentLive,
    Trash,
    TrashContents,
    execute_cascade_delete,
    lost_undo_words,
    plan_cascade_delete,
    preset_session_ids,
    preview_bulk_delete,
    restore_trash_entry,
    set_default_trash,
    stop_deleting,
    takes_live,
)
from sessions_admin.core.errors import (
    AmbiguousSessionRef,
    ConversationNotFound,
    InvalidInput,
    NothingToUndo,
    ReadOnlyStore,
    SessionBeingDeleted,
    SessionEnded,
    SessionNotFound,
    StoreBusy,
    StoreError,
    TitleTaken,
    TruncationRefused,
    TurnInProgress,
)
from sessions_admin.core.events import (
    SessionSwitchListener,
    SwitchEvent,
    read_switch_events,
    register_listener,
    unregister_listener,
)
from sessions_admin.core.follower import SwitchFollower, start_switch_follower
from sessions_admin.core.forks import (
    ForkGroup,
    find_fork_groups,
    fork_group,
    fork_groups_of_session,
    fork_session_ids,
)
from sessions_admin.core.lifecycle import (
    AppendResult,
    BranchResult,
    CompressionResult,
    EndResult,
    RecountResult,
    ResetResult,
    ResumeResult,
    SessionRef,
    add_usage,
    append_message,
    append_messages,
    branch_session,
    create_session,
    end_session,
    recount_session,
    reset_session_key,
    resolve_session_ref,
    resume_session,
    rotate_for_compression,
    set_title,
)
from sessions_admin.core.lineage import (
    LineageNode,
    children_of,
    compression_chain,
    compression_tip,
    current_session,
    lineage_tree,
    live_session_for_key,
    parent_of,
    root_of,
)
from sessions_admin.core.merge import (
    MergeNotFound,
    MergePlan,
    MergeRecord,
    MergeResult,
    PlanChanged,
    UndoableMerge,
    UnmergeResult,
    merge_preview,
    merge_record,
    merge_sessions,
    merges_of_session,
    plan_merge,
    undoable_merges_of,
    unmerge,
)
from sessions_admin.core.transcript import (
    RewriteResult,
    SaveResult,
    active_transcript,
    redo_turn,
    retry_last_turn,
    save_transcript,
    undo_last_turn,
)

__all__ = [name for name in dir() if not name.startswith("_") and name != "annotations"]
