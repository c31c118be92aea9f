"""Erasure requests: the dashboard's side of ``core.erasure``.

A request holds the subject in plain text only while it is pending or running, and
otherwise a keyed hash of it (``subject_hash``: HMAC-SHA256 with a key derived from the
server's secret, over the request's own salt and the value; ``hash_of``). Running
it (``ledger.actions.run_erasure``, audited) erases the store's side through
``core.erasure.erase`` and then the dashboard's own copies:

- trash entries holding one of the subject's sessions, or naming the subject anywhere
  in their rows, are purged (whole operations);
- earlier audit entries keep their shape but every mention of the subject (user id,
  chat ids, key fragments) and of the erased sessions' ids is replaced by its keyed
  hash, and their session links are re-pointed at the hashes; the erasure's own entry
  names only hashes and counts;
- bulk delete job items naming an erased session are dropped;
- SQLite: the rewrites run with ``secure_delete`` on and the dashboard's WAL is
  checkpointed and truncated; PostgreSQL: the touched tables are vacuumed.

The receipt lists what went, by keyed hash and count (the rows the databases lost),
when, by whom and under which request reference, whether the search index was merged and
the files rewritten (``file_rewrite``: pending, then done). It is signed (HMAC-SHA256 of
its canonical JSON, another key derived from the same secret) and issued as one exact
text (``receipt_text``); ``verify_receipt`` accepts only that text, byte for byte, with
a matching signature. Neither key nor salt is ever in a receipt.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router
from django.utils import timezone

from sessions_admin.core import db, erasure
from sessions_admin.core.erasure import ErasurePlan, Subject
from sessions_admin.ledger.models import (
    AuditEntry,
    AuditSession,
    DeleteJobItem,
    ErasureRequest,
    TrashEntry,
    TrashSession,
)

LEASE_SECONDS = 600
REWRITE_PENDING, REWRITE_DONE = "pending", "done"


# What each key derived from the server's secret is for: a hash key never signs, and the
# other way round.
HASH_PURPOSE = "sessions_admin.erasure.hash"
SIGNATURE_PURPOSE = "sessions_admin.erasure.receipt"
SIGNATURE_ALGORITHM = "HMAC-SHA256"
HASHING = (
    "HMAC-SHA256, keyed with the server's erasure key, of the request's own salt, NUL, and "
    "the value; hex. Neither the key nor the salt is in the receipt: only the server can "
    "tell whether a candidate value is one of these."
)
# A receipt lists one hash per erased id: 100,000 sessions make about 8 MB.
MAX_RECEIPT_BYTES = 32 * 1024 * 1024


def _secret() -> bytes:
    """The server-side secret receipts are keyed and signed with, never shown anywhere.

    ``SESSIONS_ADMIN_ERASURE_KEY`` when set (so rotating ``SECRET_KEY`` keeps receipts
    verifiable), otherwise Django's ``SECRET_KEY``.
    """
    key = getattr(settings, "SESSIONS_ADMIN_ERASURE_KEY", "") or settings.SECRET_KEY
    if not key:
        raise ImproperlyConfigured(
            "Erasure receipts need SECRET_KEY or SESSIONS_ADMIN_ERASURE_KEY."
        )
    return key.encode("utf-8", "surrogatepass")


def _keyed(purpose: str, message: bytes) -> str:
    key = hashlib.sha256(purpose.encode() + b"\x00" + _secret()).digest()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def hash_of(salt: str, value: str) -> str:
    """The keyed hash standing for ``value`` in receipts, audit redactions and the request.

    Without the server's key nobody can check a guess against it (a plain salted hash
    printed beside its salt let anyone holding a receipt try candidate ids).
    """
    return _keyed(HASH_PURPOSE, f"{salt}\x00{value}".encode("utf-8", "surrogatepass"))


def _canonical(receipt: dict) -> bytes:
    body = {key: value for key, value in receipt.items() if key != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def signed(receipt: dict) -> dict:
    """``receipt`` with its signature: an HMAC of its canonical JSON (sorted keys, no spaces)."""
    body = {key: value for key, value in receipt.items() if key != "signature"}
    return {
        **body,
        "signature": {
            "algorithm": SIGNATURE_ALGORITHM,
            "over": "the receipt without its signature, as JSON with sorted keys and no spaces",
            "value": _keyed(SIGNATURE_PURPOSE, _canonical(body)),
        },
    }


def receipt_text(receipt: dict) -> str:
    """The receipt's file, byte for byte as issued (the download and ``erase_subject``)."""
    return json.dumps(receipt, indent=2, sort_keys=True, ensure_ascii=True) + "\n"


@dataclass(frozen=True)
class ReceiptCheck:
    valid: bool
    message: str
    request_id: int | None = None


def parse_receipt(data: bytes) -> object:
    """The JSON of a receipt ``verify_receipt`` found valid."""
    return json.loads(data.decode("utf-8"))


def verify_receipt(data: bytes) -> ReceiptCheck:
    """Whether ``data`` is a receipt this server issued, unchanged to the byte.

    The signature covers the receipt's content; the file must also be exactly as issued
    (``receipt_text``), so reordered keys, a duplicated key or changed spacing fail too.
    A receipt from before receipts were signed (salted hashes) cannot be verified.
    """
    if len(data) > MAX_RECEIPT_BYTES:
        return ReceiptCheck(
            False,
            f"Not verified: the file is over {MAX_RECEIPT_BYTES // (1024 * 1024)} MB, "
            "larger than any receipt.",
        )
    if not data.strip():
        return ReceiptCheck(False, "Not verified: the file is empty.")
    if b"\x00" in data:
        return ReceiptCheck(
            False, "Not verified: the file holds NUL bytes; a receipt is JSON text."
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return ReceiptCheck(False, "Not verified: the file is not UTF-8 text; a receipt is JSON.")
    try:
        receipt = json.loads(text)
    except (ValueError, RecursionError) as error:
        where = f" (line {error.lineno}, column {error.colno})" if hasattr(error, "lineno") else ""
        return ReceiptCheck(False, f"Not verified: the file is not valid JSON{where}.")
    if not isinstance(receipt, dict) or "erasure_request" not in receipt or "erased" not in receipt:
        return ReceiptCheck(False, "Not verified: this JSON is not an erasure receipt.")
    number = receipt.get("erasure_request")
    request_id = number if isinstance(number, int) and not isinstance(number, bool) else None
    if "signature" not in receipt:
        if "salt" in receipt:
            return ReceiptCheck(
                False,
                "Cannot be verified: this receipt was issued before receipts were signed (its "
                "hashes are salted, not keyed, and it carries no signature).",
                request_id,
            )
        return ReceiptCheck(False, "Not verified: the receipt has no signature.", request_id)
    signature = receipt["signature"]
    if (
        not isinstance(signature, dict)
        or signature.get("algorithm") != SIGNATURE_ALGORITHM
        or not isinstance(signature.get("value"), str)
    ):
        return ReceiptCheck(
            False,
            f"Not verified: the signature is not an {SIGNATURE_ALGORITHM} signature of this "
            "server's.",
            request_id,
        )
    issued = receipt_text(receipt)
    if text not in (issued, issued[:-1]):  # the final newline may have been left out
        return ReceiptCheck(
            False,
            "Not verified: the file is not byte for byte the receipt as issued (its keys were "
            "reordered, added or repeated, or its spacing changed).",
            request_id,
        )
    expected = signed(receipt)["signature"]
    if not hmac.compare_digest(signature["value"], expected["value"]) or signature != expected:
        return ReceiptCheck(
            False,
            "Not verified: the signature does not match the content. The receipt was changed "
            "after it was issued, or another server (another key) issued it.",
            request_id,
        )
    return ReceiptCheck(
        True, f"Valid: erasure receipt #{request_id}, unchanged since issued.", request_id
    )


def subject_from_json(text: str) -> Subject:
    data = json.loads(text)
    return Subject(
        user_id=data["user_id"],
        chat_ids=tuple(data.get("chat_ids", ())),
        key_fragments=tuple(data.get("key_fragments", ())),
    )


def create_request(
    *, subject: Subject, reference: str, actor: str, fingerprint: str
) -> ErasureRequest:
    subject.check()
    salt = secrets.token_hex(16)
    return ErasureRequest.objects.create(
        reference=reference,
        subject=json.dumps(asdict(subject)),
        subject_hash=hash_of(salt, subject.user_id),
        salt=salt,
        fingerprint=fingerprint,
        created_by=actor,
    )


def claim(request_id: int) -> ErasureRequest | None:
    """Take a pending or failed request, or a running one whose worker died (its lease ran
    out). An erasure run again erases what is left: every step is idempotent."""
    now = timezone.now()
    lease = now + timezone.timedelta(seconds=LEASE_SECONDS)
    claimed = ErasureRequest.objects.filter(
        pk=request_id, state__in=[ErasureRequest.PENDING, ErasureRequest.FAILED]
    ).update(
        state=ErasureRequest.RUNNING, started_at=now, lease_expires_at=lease
    ) or ErasureRequest.objects.filter(
        pk=request_id, state=ErasureRequest.RUNNING, lease_expires_at__lt=now
    ).update(lease_expires_at=lease)
    return ErasureRequest.objects.get(pk=request_id) if claimed else None


def resumable_request_ids() -> list[int]:
    now = timezone.now()
    pending = ErasureRequest.objects.filter(
        state__in=[ErasureRequest.PENDING, ErasureRequest.FAILED]
    )
    stale = ErasureRequest.objects.filter(state=ErasureRequest.RUNNING, lease_expires_at__lt=now)
    return sorted(
        set(pending.values_list("pk", flat=True)) | set(stale.values_list("pk", flat=True))
    )


def trash_to_purge(subject: Subject, session_ids: Sequence[str]) -> list[str]:
    """Trash operations holding one of these sessions or naming the subject in their rows."""
    operations = set(
        TrashSession.objects.filter(session_id__in=list(session_ids)).values_list(
            "entry__operation", flat=True
        )
    )
    table = TrashEntry._meta.db_table
    alias = router.db_for_read(TrashEntry)
    strings = subject.strings
    if strings:
        where = " OR ".join("CAST(payload AS TEXT) LIKE %s ESCAPE '\\'" for _ in strings)
        with connections[alias].cursor() as cursor:
            cursor.execute(
                f"SELECT DISTINCT operation FROM {table} WHERE {where}",
                [db.contains_pattern(json.dumps(s)[1:-1]) for s in strings],
            )
            operations |= {row[0] for row in cursor.fetchall()}
    return sorted(operations)


def _redact(value, replacements: dict[str, str]):
    if isinstance(value, str):
        for old, new in replacements.items():
            if old in value:
                value = value.replace(old, new)
        return value
    if isinstance(value, list):
        return [_redact(v, replacements) for v in value]
    if isinstance(value, dict):
        return {_redact(k, replacements): _redact(v, replacements) for k, v in value.items()}
    return value


def redact_audit(subject: Subject, session_ids: Sequence[str], salt: str) -> int:
    """Replace the subject's strings and the erased session ids by their hashes in earlier
    audit entries; returns how many entries changed."""
    replacements = {
        value: f"[erased:{hash_of(salt, value)[:16]}]"
        for value in sorted(
            {*subject.strings, subject.user_id, *session_ids}, key=len, reverse=True
        )
        if value
    }
    if not replacements:
        return 0
    candidates = set(
        AuditSession.objects.filter(session_id__in=list(session_ids)).values_list(
            "entry_id", flat=True
        )
    )
    table = AuditEntry._meta.db_table
    alias = router.db_for_write(AuditEntry)
    strings = [s for s in {*subject.strings, subject.user_id} if s]
    where = " OR ".join(
        "(CAST(before AS TEXT) LIKE %s ESCAPE '\\' OR CAST(after AS TEXT) LIKE %s ESCAPE '\\' "
        "OR reason LIKE %s ESCAPE '\\' OR detail LIKE %s ESCAPE '\\')"
        for _ in strings
    )
    params = [
        p
        for s in strings
        for p in [db.contains_pattern(json.dumps(s)[1:-1])] * 2 + [db.contains_pattern(s)] * 2
    ]
    with connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT id FROM {table} WHERE {where}", params)
        candidates |= {row[0] for row in cursor.fetchall()}
    changed = 0
    for entry in AuditEntry.objects.filter(pk__in=candidates):
        fields = {
            "session_ids": _redact(entry.session_ids, replacements),
            "before": _redact(entry.before, replacements),
            "after": _redact(entry.after, replacements),
            "reason": _redact(entry.reason, replacements),
            "detail": _redact(entry.detail, replacements),
        }
        AuditEntry.objects.filter(pk=entry.pk).update(**fields)
        changed += 1
    for link in AuditSession.objects.filter(session_id__in=list(session_ids)):
        AuditSession.objects.filter(pk=link.pk).update(
            session_id=replacements.get(link.session_id, link.session_id)
        )
    return changed


def complete(request: ErasureRequest, plan: ErasurePlan, result: erasure.ErasureResult) -> dict:
    """The dashboard's side of an erasure, then the receipt; the request keeps only hashes.

    Everything here, the request's own row included, is rewritten with ``secure_delete``
    on (SQLite) before the WAL is truncated, so no old page image keeps the subject.
    """
    subject = plan.subject
    session_ids = list(plan.session_ids)
    alias = router.db_for_write(TrashEntry)
    connection = connections[alias]
    sqlite = connection.vendor == "sqlite"
    if sqlite:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA secure_delete = ON")
    try:
        operations = trash_to_purge(subject, session_ids)
        trash_entries = 0
        for start in range(0, len(operations), 500):
            batch = TrashEntry.objects.filter(operation__in=operations[start : start + 500])
            trash_entries += batch.count()
            batch.delete()
        items = 0
        for start in range(0, len(session_ids), 500):
            items += DeleteJobItem.objects.filter(
                session_id__in=session_ids[start : start + 500]
            ).delete()[0]
        dashboard = {
            "trash_operations": len(operations),
            "trash_entries": trash_entries,
            "job_items": items,
            "audit_entries_redacted": redact_audit(subject, session_ids, request.salt),
        }
        if sqlite:
            storage = [
                "dashboard: secure_delete during the rewrite; WAL checkpointed and truncated"
            ]
        else:
            storage = ["dashboard: VACUUM of the erasure, trash, audit and job item tables"]
        receipt = signed(receipt_of(request, plan, result, dashboard, storage))
        finish(request, receipt)
        if sqlite:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        else:
            with connection.cursor() as cursor:
                for model in (
                    ErasureRequest,
                    TrashEntry,
                    TrashSession,
                    AuditEntry,
                    AuditSession,
                    DeleteJobItem,
                ):
                    cursor.execute(f"VACUUM {model._meta.db_table}")
    finally:
        if sqlite:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA secure_delete = OFF")
    return receipt


def receipt_of(
    request: ErasureRequest,
    plan: ErasurePlan,
    result: erasure.ErasureResult,
    dashboard: dict,
    storage: list[str],
) -> dict:
    salt = request.salt
    return {
        "erasure_request": request.pk,
        "reference": request.reference,
        "requested_by": request.created_by,
        "requested_at": request.created_at.isoformat(),
        "finished_at": timezone.now().isoformat(),
        "subject_sha256": request.subject_hash,
        "hashing": HASHING,
        "erased": {
            "sessions": result.sessions,
            "messages": result.messages,
            "messages_in_other_sessions": result.other_messages,
            "conversation_slugs": result.conversations,
            "stored_responses": result.responses,
            "own_table_rows": result.side_rows,
            "trash_operations": dashboard["trash_operations"],
            "trash_entries": dashboard["trash_entries"],
            "job_items": dashboard["job_items"],
            "audit_entries_redacted": dashboard["audit_entries_redacted"],
        },
        "session_ids_sha256": sorted(hash_of(salt, sid) for sid in plan.session_ids),
        "conversation_slugs_sha256": sorted(hash_of(salt, n) for n in plan.conversation_names),
        "response_ids_sha256": sorted(hash_of(salt, r) for r in plan.response_ids),
        "storage": [*result.storage, *storage],
        # Whether every full-text index was merged whole after the deletes; while not,
        # older index segments may still hold the subject's words (``index_merged``).
        "search_index": {
            "merged": result.index_merged,
            "merged_at": timezone.now().isoformat() if result.index_merged else None,
        },
        # Until the files are rewritten, space freed before or by the erasure may still
        # hold the subject's bytes (``rewrite_store_files``); the erasure is finished once "done".
        "file_rewrite": {"state": REWRITE_PENDING, "at": None},
    }


def requests_awaiting_index_merge() -> list[int]:
    """Finished erasures whose search index merge has not finished yet (SQLite stores)."""
    return list(
        ErasureRequest.objects.filter(
            state=ErasureRequest.DONE, receipt__search_index__merged=False
        ).values_list("pk", flat=True)
    )


def index_merged(request_ids: Sequence[int], notes: Sequence[str]) -> None:
    """A later merge finished: the receipts of ``request_ids`` say so, and when."""
    now = timezone.now().isoformat()
    for request in ErasureRequest.objects.filter(pk__in=request_ids):
        receipt = dict(request.receipt)
        receipt["search_index"] = {"merged": True, "merged_at": now}
        receipt["storage"] = [*receipt.get("storage", []), *notes]
        # A receipt from before receipts were signed stays unsigned: signing it now would
        # vouch for its salted hashes.
        if "signature" in receipt:
            receipt = signed(receipt)
        ErasureRequest.objects.filter(pk=request.pk).update(receipt=receipt)


def requests_awaiting_rewrite() -> list[int]:
    """Finished erasures whose files are not rewritten yet, their index merged (it goes first:
    a rewrite copies the index's older segments as they are)."""
    return list(
        ErasureRequest.objects.filter(
            state=ErasureRequest.DONE, receipt__file_rewrite__state=REWRITE_PENDING
        )
        .exclude(receipt__search_index__merged=False)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def files_rewritten(request_ids: Sequence[int], notes: Sequence[str]) -> None:
    """The rewrite ran: the receipts of ``request_ids`` say done, and when (signed anew)."""
    now = timezone.now().isoformat()
    for request in ErasureRequest.objects.filter(pk__in=request_ids):
        receipt = dict(request.receipt)
        receipt["file_rewrite"] = {"state": REWRITE_DONE, "at": now}
        receipt["storage"] = [*receipt.get("storage", []), *notes]
        ErasureRequest.objects.filter(pk=request.pk).update(receipt=signed(receipt))


def rewrite_dashboard_file(
    *,
    quiet_seconds: float = erasure.REWRITE_QUIET_SECONDS,
    busy_ms: int = erasure.REWRITE_BUSY_MS,
    max_bytes: int | None = None,
) -> tuple[bool, str, float]:
    """Rewrite the dashboard's database so no byte its erasures freed is left (as
    ``core.erasure.rewrite_store_files`` does for the store): whether it ran, a note, and
    how long it held the lock."""
    alias = router.db_for_write(ErasureRequest)
    if connections[alias].vendor == "sqlite":
        return erasure.vacuum_sqlite(
            alias, quiet_seconds=quiet_seconds, busy_ms=busy_ms, max_bytes=max_bytes
        )
    tables = [
        model._meta.db_table
        for model in (
            ErasureRequest,
            TrashEntry,
            TrashSession,
            AuditEntry,
            AuditSession,
            DeleteJobItem,
        )
    ]
    return erasure.vacuum_full_postgresql(alias, tables, lock_ms=busy_ms, max_bytes=max_bytes)


def finish(request: ErasureRequest, receipt: dict) -> None:
    ErasureRequest.objects.filter(pk=request.pk).update(
        state=ErasureRequest.DONE,
        subject="",
        receipt=signed(receipt),
        finished_at=timezone.now(),
        lease_expires_at=None,
    )


def fail(request: ErasureRequest, error: str) -> None:
    ErasureRequest.objects.filter(pk=request.pk).update(
        state=ErasureRequest.FAILED, error=error[:2000], lease_expires_at=None
    )
