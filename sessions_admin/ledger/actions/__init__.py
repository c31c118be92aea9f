"""Operator actions: the core operation plus its audit entry, for every edge that acts.

Views and commands call ``actions.merge(...)``, ``actions.restore(...)``..., imported from
here. ``audit`` is the machinery every action goes through (the pending entry committed
before the store changes, then completed; refusals; the words of a failure), and why it
runs in those steps; the other modules hold one domain's actions each: ``sessions``
(resume, reset, rewrite, stray messages), ``merges``, ``deletion`` (cascades, bulk delete
jobs, restore, purge, and settling what dead processes left pending), ``long_deletes``
(cascades and restores too large for one request, as jobs), ``holds``,
``retention``, ``erasure``, ``portability`` (imports) and ``tokens`` (API tokens). Each action calls the others in
its own module, so a test that replaces one patches it there (``actions.erasure``), not
here. Names with a leading underscore are shared between these modules only.
"""

from sessions_admin.ledger.actions.audit import (
    DETAIL_MAX,
    ENTRY_SESSION_IDS,
    MAX_AUDIT_SESSIONS,
    STALE_PENDING_SECONDS,
    AuditIncomplete,
    DashboardNotWritten,
    _audit_alias,
    _audited,
    _caller_transaction,
    _check_fingerprint,
    _complete,
    _counts,
    _failure_detail,
    _link_sessions,
    _name,
    _storable,
    record,
    record_refusal,
)
from sessions_admin.ledger.actions.deletion import (
    _completed_from_erased_trash,
    _completed_from_purged_trash,
    cancel_bulk_delete,
    cascade_delete,
    complete_stale_deletes,
    complete_stale_purges,
    complete_stale_restores,
    purge,
    restore,
    resume_bulk_delete,
    settle_deletes_and_restores,
    start_bulk_delete,
)
from sessions_admin.ledger.actions.erasure import (
    _complete_stopped_erasure_runs,
    _erasure_after,
    _fail_erasure,
    finish_erasure_index_merges,
    finish_erasure_rewrites,
    request_erasure,
    resume_interrupted_erasures,
    rewrite_auto_max_bytes,
    rewrite_erasure_files,
    rewrites_automatically,
    run_erasure,
    start_erasures,
)
from sessions_admin.ledger.actions.holds import (
    place_hold,
    release_hold,
)
from sessions_admin.ledger.actions.long_deletes import (
    restore_size,
    start_cascade_delete,
    start_restore,
)
from sessions_admin.ledger.actions.merges import (
    complete_stale_merges,
    complete_stale_unmerges,
    merge,
    unmerge,
)
from sessions_admin.ledger.actions.portability import (
    IMPORT,
    _read_export,
    import_sessions,
    preview_import,
)
from sessions_admin.ledger.actions.retention import (
    MAX_HELD_NAMED,
    _policy_state,
    create_retention_policy,
    delete_retention_policy,
    run_retention_policy,
    set_retention_policy_enabled,
    start_due_policies,
)
from sessions_admin.ledger.actions.sessions import (
    STRAY_MOVE,
    STRAY_RETURN,
    _key_of,
    move_stray_messages,
    recount,
    reset,
    resume,
    rewrite,
    undo_stray_move,
)
from sessions_admin.ledger.actions.tokens import (
    CreatedToken,
    create_api_token,
    revoke_api_token,
)
