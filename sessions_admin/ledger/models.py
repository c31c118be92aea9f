"""The dashboard's own records of what operators did: audit, trash, background jobs.

Default database only; never in the store (the store belongs to the runtime).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import connections, models, router


class AuditAction(models.TextChoices):
    """Every action name the audit log records, defined once. A refused request to a URL no
    action covers (a permission or CSRF denial) is recorded under the URL's name instead."""

    API_TOKEN_CREATE = "api_token_create"
    API_TOKEN_REVOKE = "api_token_revoke"
    APPEND = "append"
    BRANCH = "branch"
    BULK_DELETE = "bulk_delete"
    BULK_DELETE_HELD = "bulk_delete_held", "bulk delete: held sessions left out"
    BULK_DELETE_KEPT_WHOLE = "bulk_delete_kept_whole", "bulk delete: conversations kept whole"
    CANCEL_BULK_DELETE = "cancel_bulk_delete"
    CASCADE_DELETE = "cascade_delete"
    ERASURE = "erasure"
    ERASURE_FILES_REWRITTEN = "erasure_files_rewritten"
    ERASURE_INDEX_MERGED = "erasure_index_merged"
    ERASURE_REQUEST = "erasure_request"
    IMPORT_SESSIONS = "import_sessions"
    MERGE = "merge"
    MOVE_STRAY_MESSAGES = "move_stray_messages"
    PLACE_HOLD = "place_hold"
    PURGE_TRASH = "purge_trash"
    RECOUNT = "recount", "recount counters"
    REDO = "redo"
    RELEASE_HOLD = "release_hold"
    RESET = "reset"
    RESOLVE_CONVERSATION = "resolve_conversation"
    RESTORE = "restore"
    RESUME = "resume"
    RESUME_BULK_DELETE = "resume_bulk_delete"
    ROTATE_FOR_COMPRESSION = "rotate_for_compression"
    RETENTION_POLICY_CREATE = "retention_policy_create"
    RETENTION_POLICY_DELETE = "retention_policy_delete"
    RETENTION_POLICY_DISABLE = "retention_policy_disable"
    RETENTION_POLICY_ENABLE = "retention_policy_enable"
    RETENTION_RUN = "retention_run"
    RETRY = "retry"
    RETURN_STRAY_MESSAGES = "return_stray_messages"
    SAVE_TRANSCRIPT = "save_transcript"
    SIGN_IN = "sign_in"
    START_SESSION = "start_session"
    TURN = "turn"
    UNDO = "undo"
    UNMERGE = "unmerge"
    USAGE = "usage"


class AuditEntry(models.Model):
    """One operator action: written ``pending`` before the store is touched, completed after.

    Also one refused attempt (``outcome`` ``refused``, ``detail`` saying why): a
    permission denied, a stale or forged preview, a CSRF failure, a failed sign-in
    (``sessions_admin.ledger.actions.record_refusal``). Entries are only ever added
    and completed: no URL edits or deletes one, for any role.

    ``pending`` that stays pending means the outcome is unknown: the action is still
    running, or its process stopped (a crash, a kill) between the store change and
    recording the result, so the store may hold the change. ``completed_at`` is when
    the outcome was recorded (empty for entries written before outcomes were two-step).
    """

    OK, FAILED, PENDING, REFUSED = "ok", "failed", "pending", "refused"
    # Failed after part of it committed (a delete's first batches): ``after`` says exactly what
    # committed and names its trash operation, ``detail`` what stopped it.
    PARTIAL = "partial"
    OUTCOMES = [
        (OK, "ok"),
        (FAILED, "failed"),
        (PARTIAL, "partly applied"),
        (PENDING, "pending (outcome unknown)"),
        (REFUSED, "refused before it ran"),
    ]

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_name = models.CharField(max_length=150)  # kept when the user is deleted
    action = models.CharField(max_length=40, db_index=True)
    session_ids = models.JSONField(default=list)
    before = models.JSONField(default=dict)
    after = models.JSONField(default=dict)
    reason = models.TextField(blank=True)
    outcome = models.CharField(max_length=20, default=OK, choices=OUTCOMES, db_index=True)
    detail = models.TextField(blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    # Where the request came from (sessions_admin.ledger.context); empty outside a request.
    client_address = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=512, blank=True, default="")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_name} at {self.created_at:%Y-%m-%d %H:%M}"


class AuditSession(models.Model):
    """One row per session an audit entry touched, so a session's history is one indexed query."""

    entry = models.ForeignKey(AuditEntry, on_delete=models.CASCADE, related_name="sessions")
    session_id = models.TextField(db_index=True)  # store ids are TEXT of any length

    def __str__(self) -> str:
        return self.session_id


def new_trash_operation() -> str:
    """An entry made outside a delete (a test, a shell) is an operation of its own."""
    return uuid.uuid4().hex


class TrashEntry(models.Model):
    """Rows removed from the store by one delete batch, restorable until purged.

    ``operation`` names the operator action the batch belongs to (a cascade delete,
    a bulk delete job: ``ledger.trash.job_operation``): the trash page lists one row
    per operation and a restore puts every entry of it back together.
    """

    PENDING, COMPLETE, RESTORED = "pending", "complete", "restored"

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    operation = models.CharField(max_length=64, default=new_trash_operation, db_index=True)
    state = models.CharField(max_length=20, default=PENDING, db_index=True)
    actor_name = models.CharField(max_length=150)
    reason = models.TextField(blank=True)
    job = models.ForeignKey("DeleteJob", null=True, blank=True, on_delete=models.SET_NULL)
    session_ids = models.JSONField(default=list)
    session_count = models.IntegerField(default=0)
    message_count = models.IntegerField(default=0)
    payload = models.JSONField(default=dict)
    restored_at = models.DateTimeField(null=True, blank=True)
    restored_by = models.CharField(max_length=150, blank=True)
    # The process writing the entry (its delete batch pending, or its restore under way):
    # ``ledger.processes.this_process``. One found dead leaves work ``settle_trash`` finishes.
    owner = models.JSONField(default=dict, blank=True)
    # A restore's intent, recorded before its store transaction: the store may then commit
    # while the entry is not yet marked restored (the process died, the dashboard's disk
    # filled). ``settle_trash`` reads the store to tell which it was.
    restoring_since = models.DateTimeField(null=True, blank=True)
    restoring_by = models.CharField(max_length=150, blank=True)
    restore_audit = models.IntegerField(null=True, blank=True)  # the restore's audit entry

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"trash {self.pk}: {self.session_count} sessions"


class TrashSession(models.Model):
    entry = models.ForeignKey(TrashEntry, on_delete=models.CASCADE, related_name="sessions")
    session_id = models.TextField(db_index=True)
    title = models.TextField(blank=True)
    source = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return self.session_id


class DeleteJob(models.Model):
    """A delete running in small batches in the background; resumable after a restart.

    ``kind``: a bulk delete (its items, skipping what it must), or a confirmed cascade delete
    or a trash restore too long to run in the request (``ledger.jobs.runs_as_job``): those
    carry their audit entry (completed by the worker), their trash ``operation`` and the
    confirmed plan (``params``); a cascade's items are its planned sessions, children first.
    """

    PENDING, RUNNING, DONE, FAILED, CANCELLED = "pending", "running", "done", "failed", "cancelled"
    BULK, CASCADE, RESTORE = "bulk", "cascade", "restore"

    # ``params`` key: how many of the job's pending sessions an erasure took, by request id
    # (``ledger.erasure.note_erased_job_items``): never deleted, nor skipped, by the job.
    ERASED_ITEMS = "erased"
    # Sessions this job deleted that an erasure request later took out of the trash, by
    # request (``ledger.erasure.note_erased_job_items``): its trash entry no longer holds them.
    ERASED_FROM_TRASH = "erased_from_trash"

    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150)
    reason = models.TextField()
    description = models.TextField(blank=True)
    include_live = models.BooleanField(default=False)
    state = models.CharField(max_length=20, default=PENDING, db_index=True)
    total = models.IntegerField(default=0)
    done = models.IntegerField(default=0)
    skipped = models.IntegerField(default=0)
    deleted_messages = models.BigIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    # Purged, not trashed: nothing of it can be restored (a retention policy set to purge).
    purge = models.BooleanField(default=False)
    policy = models.ForeignKey(
        "RetentionPolicy", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    kind = models.CharField(max_length=20, default=BULK)
    # A cascade's or a restore's: its trash operation, its pending audit entry, its plan.
    operation = models.CharField(max_length=100, blank=True)
    audit_entry = models.BigIntegerField(null=True, blank=True)
    params = models.JSONField(default=dict, blank=True)
    total_messages = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"delete job {self.pk} ({self.state}, {self.done}/{self.total})"


class DeleteJobItem(models.Model):
    PENDING, DONE, SKIPPED = 0, 1, 2

    job = models.ForeignKey(DeleteJob, on_delete=models.CASCADE, related_name="items")
    position = models.IntegerField()
    session_id = models.TextField()
    state = models.SmallIntegerField(default=PENDING)

    class Meta:
        indexes = [models.Index(fields=["job", "state", "position"])]

    def __str__(self) -> str:
        return self.session_id


class RetentionPolicy(models.Model):
    """Sessions to delete on a schedule: a rule (``core.retention.RetentionRule``), whether
    they go through the trash or are purged, and when it next runs.

    Created disabled: the page shows what a run would delete now before an admin
    enables it. Each run is a bulk delete job (``DeleteJob.policy``) with its audit entry.
    """

    TRASH, PURGE = "trash", "purge"

    name = models.CharField(max_length=200)
    source = models.CharField(max_length=200, blank=True)
    older_than_days = models.FloatField()
    status = models.CharField(max_length=20, default="ended")
    end_reason = models.CharField(max_length=200, blank=True)
    title = models.CharField(max_length=20, default="any")
    mode = models.CharField(max_length=10, default=TRASH)
    every_hours = models.FloatField(default=24.0)
    enabled = models.BooleanField(default=False)
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return f"retention policy {self.pk} ({self.name})"


class ErasureRequest(models.Model):
    """ "Delete everything about this person": a subject, a reference, and its receipt.

    The subject (user id, chat ids, key fragments) is kept in plain text only while the
    erasure is pending or running (``subject``); afterwards only its keyed hash stays
    (``ledger.erasure.hash_of``: HMAC with the server's key over ``salt`` and the value).
    Until it is done, ``receipt`` holds the run's record (``ledger.erasure.RUN``: its
    worker, the confirmed plan's ids, the rows counted before); then the receipt.
    """

    PENDING, RUNNING, DONE, FAILED = "pending", "running", "done", "failed"

    reference = models.CharField(max_length=200)
    subject = models.TextField(blank=True)  # JSON; emptied when the erasure ends
    subject_hash = models.CharField(max_length=64)
    salt = models.CharField(max_length=64)
    fingerprint = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=20, default=PENDING, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    receipt = models.JSONField(default=dict)  # the run's record until done
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"erasure {self.pk} ({self.state})"


class ApiToken(models.Model):
    """A bearer token of the HTTP API (``sessions_admin.api``): a name, a scope, a hash.

    The secret (``sa_`` + 43 URL-safe characters) is shown once, when the token is created
    (``ledger.actions.create_api_token``); only its SHA-256 is kept, so a copy of this table
    signs nobody in. ``viewer``, ``support`` and ``admin`` carry exactly the console roles'
    permissions; ``runtime`` carries the lifecycle routes only, limited to ``sources`` when
    that list is not empty. A revoked or expired token is refused from the next request on
    (every request reads its row); ``last_used_at`` is written at most once a minute. A token an
    operator created on the console (``created_by_operator``) works only while that operator's
    account does: once it is deactivated or deleted (``created_by`` then NULL) the token is
    refused too, as the operator's own sign-in is; one the ``api_token`` command created (no
    operator) is not tied to any account.
    """

    RUNTIME, VIEWER, SUPPORT, ADMIN = "runtime", "viewer", "support", "admin"
    SCOPES = [(RUNTIME, "runtime"), (VIEWER, "viewer"), (SUPPORT, "support"), (ADMIN, "admin")]

    name = models.CharField(max_length=100, unique=True)  # revoked names stay taken
    scope = models.CharField(max_length=20, choices=SCOPES)
    sources = models.JSONField(default=list, blank=True)  # runtime scope: [] is every source
    secret_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_by_name = models.CharField(max_length=150)
    # True when an operator created it: ``created_by`` NULL then means that account was deleted
    # (not a command's token), and the token stops with it.
    created_by_operator = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"API token {self.name} ({self.scope})"

    def state_at(self, now) -> str:
        """ "active", "expired" or "revoked", as the API would answer its request at ``now``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        if self.creator_gone():
            return "creator inactive"
        return "active"

    def creator_gone(self) -> str | None:
        """Why the operator who created the token no longer vouches for it (deactivated or
        deleted), or None (still active, or created by the command)."""
        if not self.created_by_operator:
            return None
        if self.created_by_id is None:
            return f"the account of {self.created_by_name}, who created it, was deleted"
        # Read with the token by ``with_secret_hash``; otherwise from the account.
        active = getattr(self, "creator_is_active", None)
        if active is None:
            active = self.created_by.is_active
        if not active:
            return f"the account of {self.created_by_name}, who created it, is deactivated"
        return None

    @classmethod
    def with_secret_hash(cls, secret_hash: str) -> ApiToken | None:
        """The token whose secret hashes to ``secret_hash``, with whether its creator's account
        is active (``creator_is_active``), in one read.

        Every API request reads its token's row (so a revocation refuses the next request);
        written as SQL, as the ORM's query building cost four times the read itself
        (docs/benchmarks.md, "HTTP API appends").
        """
        alias = router.db_for_read(cls)
        quote = connections[alias].ops.quote_name
        users = cls._meta.get_field("created_by").related_model._meta
        sql = (
            f"SELECT t.*, u.{quote(users.get_field('is_active').column)} AS creator_is_active "
            f"FROM {quote(cls._meta.db_table)} t LEFT JOIN {quote(users.db_table)} u "
            f"ON u.{quote(users.pk.column)} = t.{quote(cls._meta.get_field('created_by').column)} "
            f"WHERE t.{quote(cls._meta.get_field('secret_hash').column)} = %s"
        )
        found = list(cls.objects.using(alias).raw(sql, [secret_hash]))
        return found[0] if found else None
