"""Erasure requests: the dashboard's side of ``core.erasure``; operators: docs/retention.md.

A request holds the subject in plain text only until it is done, then only its keyed hash
(``hash_of``). Until then ``receipt`` holds the run's record (``RUN``): the process running it
(``claim``: taken over at once from a process that is gone, else when the lease ends) and, from
the first run on, the confirmed plan and rows counted before it (``record_run``); later runs
carry out that record (``recorded_run``), never a new plan of what a killed run left. After the
store's side (``core.erasure.erase``), the trash (``plan_trash``), job items, audit redaction,
pending cascades' notes (``note_pending_deletes``) and the receipt change in one transaction.

Over 800 lines on purpose: requests, their lease and take-over, the trash plan, the redaction of
the dashboard's rows and the receipt are the dashboard's half of one erasure, resumed step by
step from what each step recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router, transaction
from django.db.models import Count, Q, Sum
from django.utils import timezone

from sessions_admin.core import db, erasure, faults, holds
from sessions_admin.core.deletion import TRASH_DATABASE
from sessions_admin.core.erasure import (
    ErasurePlan,
    ErasureStopped,
    LateRows,
    RowsPresent,
    Subject,
)
from sessions_admin.core.errors import InvalidInput, StoreError
from sessions_admin.core.fingerprints import plan_fingerprint
from sessions_admin.core.merge_moves import MergeMoves, merge_moves
from sessions_admin.core.processes import process_dead, this_process
from sessions_admin.ledger.models import (
    AuditAction,
    AuditEntry,
    AuditSession,
    DeleteJob,
    DeleteJobItem,
    ErasureRequest,
    TrashEntry,
    TrashSession,
)
from sessions_admin.ledger.trash import (
    ERASED_TRASH,
    LedgerTrash,
    decode_trash_rows,
    decode_trash_value,
    note_pending_cascades,
    pending_cascades,
    stale_pending_trash,
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


MISSING_ERASURE_KEY = (
    "Erasure requests and receipts are keyed and signed with the dashboard's secret key, and "
    "none is set here: set SESSIONS_ADMIN_SECRET_KEY (or SESSIONS_ADMIN_ERASURE_KEY) to the one "
    "the dashboard serves with (the demo's is in var/secret_key, read when neither is set)."
)


def key_problem() -> str | None:
    """Why no erasure request or receipt can be keyed or signed here, or None."""
    try:
        _secret()
    except ImproperlyConfigured as error:
        return str(error)
    return None


def _secret() -> bytes:
    """The server-side secret receipts are keyed and signed with, never shown anywhere.

    ``SESSIONS_ADMIN_ERASURE_KEY`` when set (so rotating ``SECRET_KEY`` keeps receipts
    verifiable), otherwise Django's ``SECRET_KEY``.
    """
    key = getattr(settings, "SESSIONS_ADMIN_ERASURE_KEY", "")
    if not key:
        try:
            key = settings.SECRET_KEY
        except ImproperlyConfigured:  # Django refuses to hand out an empty key
            key = ""
    if not key:
        raise ImproperlyConfigured(MISSING_ERASURE_KEY)
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
        # Requests queued before keys were matched whole called them fragments.
        session_keys=tuple(data.get("session_keys", data.get("key_fragments", ()))),
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


# While a request is not done, its ``receipt`` field holds its run's record instead (under
# this key): the process running it, and from the first run on the confirmed plan (the ids
# it erases) and the rows counted before it began. ``finish`` replaces it with the receipt.
RUN = "run"


class ErasureTakenOver(StoreError):
    """Another worker took this request over (this one was thought dead): this one stops."""

    def __init__(self, request_id: int):
        super().__init__(
            f"Erasure request #{request_id} was taken over by another worker; this run stopped."
        )


def owner_dead(request: ErasureRequest) -> bool:
    """Whether the process running ``request`` is known to be gone: it ran on this machine,
    since this boot, and its pid is no longer alive (or the machine rebooted since). A
    worker on another machine is only thought dead when its lease runs out."""
    return process_dead((request.receipt or {}).get(RUN, {}).get("owner"))


def _record(request: ErasureRequest, **fields) -> dict:
    run = dict((request.receipt or {}).get(RUN, {})) if request.state != ErasureRequest.DONE else {}
    run.update(fields)
    return {RUN: run}


def claim(request_id: int) -> ErasureRequest | None:
    """Take a pending or failed request, or a running one whose worker died: its process is
    gone (``owner_dead``: taken over at once, so a retry does not wait for the lease) or its
    lease ran out. An erasure run again carries out the plan its first run recorded."""
    now = timezone.now()
    lease = now + timezone.timedelta(seconds=LEASE_SECONDS)
    request = ErasureRequest.objects.filter(pk=request_id).first()
    if request is None or request.state == ErasureRequest.DONE or not request.subject:
        # Done, or superseded by another request's erasure of the person (no subject left).
        return None
    record = _record(request, owner=this_process())
    if request.state == ErasureRequest.RUNNING:
        expired = request.lease_expires_at is not None and request.lease_expires_at < now
        if not (expired or owner_dead(request)):
            return None
        # ``started_at`` tells runs apart: of two retries taking it over, one wins.
        claimed = ErasureRequest.objects.filter(
            pk=request_id, state=ErasureRequest.RUNNING, started_at=request.started_at
        ).update(started_at=now, lease_expires_at=lease, receipt=record)
    else:
        claimed = ErasureRequest.objects.filter(pk=request_id, state=request.state).update(
            state=ErasureRequest.RUNNING, started_at=now, lease_expires_at=lease, receipt=record
        )
    return ErasureRequest.objects.get(pk=request_id) if claimed else None


def renew(request: ErasureRequest) -> None:
    """Extend this run's lease (between delete batches); ``ErasureTakenOver`` if another
    worker took the request meanwhile, so two never go on side by side."""
    try:
        renewed = ErasureRequest.objects.filter(
            pk=request.pk, state=ErasureRequest.RUNNING, started_at=request.started_at
        ).update(lease_expires_at=timezone.now() + timezone.timedelta(seconds=LEASE_SECONDS))
    except Exception as error:
        error.database = TRASH_DATABASE  # the dashboard's, not the store (``ErasureStopped``)
        raise
    if not renewed:
        raise ErasureTakenOver(request.pk)


def record_run(
    request: ErasureRequest, full: FullPlan, before: RowsPresent, late: LateRows
) -> None:
    """Keep the confirmed plan and the rows counted before anything is erased on the request
    (plain ids: it is running; ``finish`` drops them), so a killed run is resumed from it."""
    _update_run(
        request,
        plan=erasure.plan_record(full.store),
        trash=full.trash.as_record(),
        fingerprint=full.fingerprint,
        before=before.as_record(),
        late=late.as_record(),
    )


def record_progress(request: ErasureRequest, plan: ErasurePlan, late: LateRows) -> None:
    """Keep what a running erasure learnt (the sessions a runtime started below the subject's,
    added to its plan; the rows written after its count that it deleted): a resumed run
    erases and counts them too. ``ErasureTakenOver`` if another worker took the request."""
    try:
        _update_run(request, plan=erasure.plan_record(plan), late=late.as_record())
    except ErasureTakenOver:
        raise
    except Exception as error:
        error.database = TRASH_DATABASE  # the dashboard's, not the store (``ErasureStopped``)
        raise


def recorded_late(request: ErasureRequest) -> LateRows:
    """The ``LateRows`` an earlier run of ``request`` recorded (none counted yet: no mark)."""
    run = (request.receipt or {}).get(RUN) if request.state != ErasureRequest.DONE else None
    return LateRows.from_record((run or {}).get("late"))


def _update_run(request: ErasureRequest, **fields) -> None:
    record = _record(request, **fields)
    recorded = ErasureRequest.objects.filter(
        pk=request.pk, state=ErasureRequest.RUNNING, started_at=request.started_at
    ).update(receipt=record)
    if not recorded:
        raise ErasureTakenOver(request.pk)
    request.receipt = record


def recorded_run(request: ErasureRequest) -> tuple[FullPlan, RowsPresent] | None:
    """The plan and counts an earlier run of ``request`` recorded (None: none began)."""
    run = (request.receipt or {}).get(RUN) if request.state != ErasureRequest.DONE else None
    if not isinstance(run, dict) or "plan" not in run:
        return None
    full = FullPlan(
        store=erasure.plan_from_record(run["plan"]),
        trash=TrashPlan.from_record(run["trash"]),
        fingerprint=run["fingerprint"],
    )
    return full, RowsPresent.from_record(run["before"])


class SessionsUnderErasure(StoreError):
    """Sessions an erasure that began is taking (in the store or the trash): another operator
    restoring, deleting or trashing them meanwhile would bring back, or keep in the trash, what
    its receipt counts as erased."""

    def __init__(self, request_id: int, session_ids: Sequence[str]):
        self.request_id = request_id
        self.session_ids = tuple(session_ids)
        shown = ", ".join(self.session_ids[:5]) + (" ..." if len(self.session_ids) > 5 else "")
        super().__init__(
            f"Erasure request #{request_id} is erasing {len(self.session_ids)} of these "
            f"sessions ({shown}): nothing was changed. Let it finish (a failed one is finished "
            "from its page)."
        )


def refuse_under_erasure(session_ids: Sequence[str]) -> None:
    """``SessionsUnderErasure`` if an erasure that began and has not finished (running, or
    failed and waiting to be run again) is taking one of these sessions."""
    wanted = set(session_ids)
    if not wanted:
        return
    for request in ErasureRequest.objects.filter(
        state__in=[ErasureRequest.RUNNING, ErasureRequest.FAILED]
    ).order_by("pk"):
        recorded = recorded_run(request)
        if recorded is None:
            continue
        full, _before = recorded
        # The other people's sessions it takes the subject's moved rows out of count too, in the
        # store or in a trash entry (attack round 44: a restore of such an entry, as the erasure
        # began, put the person's moved messages back after a receipt that said "done").
        cut_from = TrashEntry.objects.filter(
            pk__in=[pk for pk, _ids in full.trash.prune_messages]
        ).values_list("session_ids", flat=True)
        taken = wanted & {
            *full.store.session_ids,
            *full.trash.session_ids,
            *full.store.touched_session_ids,
            *(sid for ids in cut_from for sid in ids or ()),
        }
        if taken:
            raise SessionsUnderErasure(request.pk, sorted(taken))


class TrashBesideErasures(LedgerTrash):
    """The dashboard's trash as a restore uses it: the restore is checked against the erasures
    that began once more as it begins writing, in its store transaction under the store's
    lock (``refuse_under_erasure``). The restore action's own check can run before an erasure
    records its plan and the store write after the erasure began (attack round 44, Q1); an
    erasure records its plan before it writes the store, so one of the two sees the other."""

    def begin_restore(self, entry_ids: Sequence[int], *, actor: str) -> None:
        refuse_under_erasure(
            [
                sid
                for ids in TrashEntry.objects.filter(pk__in=list(entry_ids)).values_list(
                    "session_ids", flat=True
                )
                for sid in ids or ()
            ]
        )
        super().begin_restore(entry_ids, actor=actor)


RESTORING_TRASH = TrashBesideErasures()


def unfinished_request_for(subject: Subject) -> ErasureRequest | None:
    """An earlier request for the same subject that began erasing and did not finish (killed,
    or failed): running it again finishes it, where a new request would look the subject
    up in what the first one left."""
    candidates = ErasureRequest.objects.filter(
        state__in=[ErasureRequest.RUNNING, ErasureRequest.FAILED]
    ).order_by("pk")
    for request in candidates:
        if recorded_run(request) is not None and subject_from_json(request.subject) == subject:
            return request
    return None


def open_request_for(subject: Subject) -> ErasureRequest | None:
    """A request for the same person (user id) that is queued, running, or began erasing and
    did not finish: a second one is refused and points to it (two runs of one person would
    each count and hash what the other deleted). Called inside ``requests_serialized``."""
    for request in ErasureRequest.objects.filter(
        state__in=[ErasureRequest.PENDING, ErasureRequest.RUNNING, ErasureRequest.FAILED]
    ).order_by("pk"):
        if (
            request.subject
            and subject_from_json(request.subject).user_id == subject.user_id
            and (request.state != ErasureRequest.FAILED or recorded_run(request) is not None)
        ):
            return request
    return None


@contextlib.contextmanager
def requests_serialized(subject: Subject) -> Iterator[None]:
    """A transaction of the dashboard's database in which no other request for this person is
    being queued: the check for an open request and the new request's row go in together, so
    two confirmations of one preview at once queue one request, not two."""
    alias = router.db_for_write(ErasureRequest)
    with transaction.atomic(using=alias):
        db.lock_names(f"erasure-request:{subject.user_id}", alias=alias)
        yield


def interrupted_request_ids() -> list[int]:
    """Running requests whose worker is gone (its process died, or its lease ran out) and
    queued ones nobody started: the scheduler runs them (``ledger/schedule.py``). Failed
    ones wait for the operator (opening the page, or ``erase_subject``), who sees why."""
    now = timezone.now()
    return sorted(
        request.pk
        for request in ErasureRequest.objects.filter(
            state__in=[ErasureRequest.PENDING, ErasureRequest.RUNNING]
        )
        if request.state == ErasureRequest.PENDING
        or (request.lease_expires_at is not None and request.lease_expires_at < now)
        or owner_dead(request)
    )


def resumable_request_ids() -> list[int]:
    now = timezone.now()
    # One refused because the store changed after the confirmation is not retried: it would
    # erase what nobody previewed. The operator previews and confirms again.
    pending = ErasureRequest.objects.filter(
        state__in=[ErasureRequest.PENDING, ErasureRequest.FAILED]
    ).exclude(error__startswith="PlanChanged")
    stale = {
        request.pk
        for request in ErasureRequest.objects.filter(state=ErasureRequest.RUNNING)
        if (request.lease_expires_at is not None and request.lease_expires_at < now)
        or owner_dead(request)
    }
    return sorted(set(pending.values_list("pk", flat=True)) | stale)


@dataclass(frozen=True)
class TrashPlan:
    """The subject's rows in the trash, matched by the trashed sessions' exact fields.

    A trashed session is the subject's when its user id, chat id or session key is one of
    theirs (compared whole), when it is one of the store sessions being erased (a delete in
    parts), or when its parent in the same operation is (delegates and continuations the
    runtime left without a user id). An operation holding only such sessions is purged
    whole; one shared with other people keeps their rows and loses only the subject's.
    The store's switch events naming those trashed sessions are tombstoned with the rest.
    """

    purge: tuple[str, ...] = ()  # operations dropped whole
    prune: tuple[tuple[int, tuple[str, ...]], ...] = ()  # (entry, the subject's sessions in it)
    session_ids: tuple[str, ...] = ()  # the subject's sessions found in the trash
    # (operation, hold in words): another person's held rows beside the subject's, kept.
    kept: tuple[tuple[str, str], ...] = ()
    # The numbers of those holds: all the receipt names of them. A hold's words carry its
    # reason and its subject (another person, or this one), which a receipt must not.
    kept_holds: tuple[int, ...] = ()
    held: tuple[tuple[str, str], ...] = ()  # the subject's own trashed rows under a hold
    # The switch events naming those trashed sessions (by ``seq``): tombstoned as the store's.
    switch_events: tuple[int, ...] = ()
    # The chat ids and session keys of those trashed sessions: redacted from the audit log and
    # operator text with the store's (a session deleted before the erasure named them there).
    chat_ids: tuple[str, ...] = ()
    session_keys: tuple[str, ...] = ()
    # The slugs those trashed sessions had (their conversations rows in the trash).
    slugs: tuple[str, ...] = ()
    # (entry, message ids): the subject's messages a merge moved into another person's
    # session, now in the trash with it (attack round 44): cut out of the entry.
    prune_messages: tuple[tuple[int, tuple[int, ...]], ...] = ()

    def redaction_subject(self, store_side: Subject) -> Subject:
        """``store_side`` (the store plan's ``redaction_subject``) with these chat ids and keys."""
        return Subject(
            user_id=store_side.user_id,
            chat_ids=tuple(dict.fromkeys([*store_side.chat_ids, *self.chat_ids])),
            session_keys=tuple(dict.fromkeys([*store_side.session_keys, *self.session_keys])),
        )

    @property
    def operations(self) -> tuple[str, ...]:
        pruned = TrashEntry.objects.filter(pk__in=self.pruned_entries).values_list(
            "operation", flat=True
        )
        return tuple(sorted({*self.purge, *pruned}))

    @property
    def pruned_entries(self) -> list[int]:
        return sorted({pk for pk, _ in self.prune} | {pk for pk, _ in self.prune_messages})

    def as_list(self) -> list:
        return [
            list(self.purge),
            [[pk, list(ids)] for pk, ids in self.prune],
            list(self.held),
            [[pk, list(ids)] for pk, ids in self.prune_messages],
        ]

    def as_record(self) -> dict:
        return {
            "purge": list(self.purge),
            "prune": [[pk, list(ids)] for pk, ids in self.prune],
            "session_ids": list(self.session_ids),
            "kept": [list(pair) for pair in self.kept],
            "kept_holds": list(self.kept_holds),
            "held": [list(pair) for pair in self.held],
            "switch_events": list(self.switch_events),
            "chat_ids": list(self.chat_ids),
            "session_keys": list(self.session_keys),
            "slugs": list(self.slugs),
            "prune_messages": [[pk, list(ids)] for pk, ids in self.prune_messages],
        }

    @classmethod
    def from_record(cls, record: dict) -> TrashPlan:
        return cls(
            purge=tuple(record["purge"]),
            prune=tuple((int(pk), tuple(ids)) for pk, ids in record["prune"]),
            session_ids=tuple(record["session_ids"]),
            kept=tuple((op, words) for op, words in record["kept"]),
            kept_holds=tuple(int(pk) for pk in record.get("kept_holds", ())),
            held=tuple((sid, words) for sid, words in record["held"]),
            switch_events=tuple(int(seq) for seq in record.get("switch_events", ())),
            chat_ids=tuple(record.get("chat_ids", ())),
            session_keys=tuple(record.get("session_keys", ())),
            slugs=tuple(record.get("slugs", ())),
            prune_messages=tuple(
                (int(pk), tuple(int(m) for m in ids))
                for pk, ids in record.get("prune_messages", ())
            ),
        )


def _is_subjects(row: dict, subject: Subject, store_ids: set[str]) -> bool:
    return (
        row.get("id") in store_ids
        or row.get("user_id") == subject.user_id
        or (row.get("chat_id") is not None and row.get("chat_id") in subject.chat_ids)
        or (row.get("session_key") is not None and row.get("session_key") in subject.session_keys)
    )


def plan_trash(subject: Subject, session_ids: Sequence[str]) -> TrashPlan:
    """The subject's rows in the trash (``TrashPlan``); refused (``InvalidInput``) when the
    trashed sessions matched by chat id or key belong to another user id."""
    store_ids = set(session_ids)
    operations: dict[str, list[tuple[int, dict, list[dict]]]] = {}
    for pk, operation, payload in TrashEntry.objects.order_by("pk").values_list(
        "pk", "operation", "payload"
    ):
        if not isinstance(payload, dict):
            continue
        rows = decode_trash_rows(payload.get("sessions", []))
        operations.setdefault(operation, []).append((pk, payload, rows))
    # Children of the subject's sessions go with them, wherever each one is: in the same
    # trash operation, in another one, or trashed while their parent is still in the store.
    every_row = {
        str(row.get("id")): row
        for entries in operations.values()
        for _pk, _payload, rs in entries
        for row in rs
    }
    subjects = {sid for sid, row in every_row.items() if _is_subjects(row, subject, store_ids)}
    # A session a merge moved below its target belongs with the session it was below: the
    # subject's when that one is, never the subject's through the target (attack round 44).
    moves = merge_moves()

    def below_theirs(sid: str, row: dict) -> bool:
        if (before := moves.original_parent(sid)) is not None:
            return before in subjects or before in store_ids
        return row.get("parent_session_id") in subjects or row.get("parent_session_id") in store_ids

    grew = True
    while grew:
        more = {
            sid for sid, row in every_row.items() if sid not in subjects and below_theirs(sid, row)
        }
        subjects |= more
        grew = bool(more)
    _refuse_others_merged_into(subject, subjects | store_ids, moves, every_row)
    # The subject's messages a merge moved out of their sessions, in another person's session
    # in the trash now (by the ids the merge recorded).
    absorbed = {sid for sid in moves.messages if sid in subjects or sid in store_ids}
    purge, prune, found, kept, held, other_users = [], [], set(), [], {}, set()
    prune_messages: list[tuple[int, tuple[int, ...]]] = []
    slugs: set[str] = set()
    kept_holds: set[int] = set()
    for operation, entries in operations.items():
        rows = {str(row.get("id")): row for _pk, _payload, rs in entries for row in rs}
        theirs = {sid for sid in rows if sid in subjects}
        parts = {pk: payload.get("part_of") for pk, payload, _rs in entries}
        theirs |= {sid for sid in parts.values() if sid in store_ids}
        for pk, payload, _rs in entries if absorbed else ():
            moved = {
                message_id: _value(m.get("session_id"))
                for m in payload.get("messages", [])
                if isinstance(message_id := _value(m.get("id")), int)
                and _value(m.get("session_id")) not in theirs
                and moves.moved_from(message_id, absorbed)
            }
            if moved:
                prune_messages.append((pk, tuple(sorted(moved))))
                found_in = [rows[s] for s in set(moved.values()) if s in rows]
                # A hold on the session holding them stops the erasure, as in the store.
                held.update(holds.held_among_rows(found_in))
        if not theirs:
            continue
        other_users |= {
            rows[sid].get("user_id")
            for sid in theirs
            if sid in rows and rows[sid].get("user_id") not in (None, "", subject.user_id)
        }
        found |= theirs
        slugs |= {
            str(_value(row.get("name")))
            for _pk, payload, _rs in entries
            for row in payload.get("conversations", [])
            if _value(row.get("session_id")) in theirs and row.get("name")
        }
        for sid, hold in holds.held_among_rows([rows[s] for s in theirs if s in rows]).items():
            held[sid] = hold
        entry_ids = {
            pk: {str(row.get("id")) for row in rs} | ({parts[pk]} if parts[pk] else set())
            for pk, _payload, rs in entries
        }
        if all(ids <= theirs for ids in entry_ids.values()):
            purge.append(operation)
            continue
        for pk, ids in entry_ids.items():
            if ids & theirs:
                prune.append((pk, tuple(sorted(ids & theirs))))
        others = [row for sid, row in rows.items() if sid not in theirs]
        for hold in {h.id: h for h in holds.held_among_rows(others).values()}.values():
            kept.append((operation, hold.describe()))
            kept_holds.add(hold.id)
    if other_users:
        raise InvalidInput(
            f"This subject would touch trashed sessions of {len(other_users) + 1} users "
            f"({len(other_users)} besides the user id given): the chat ids and session keys "
            "must be this person's alone. Nothing was erased."
        )
    return TrashPlan(
        purge=tuple(sorted(purge)),
        prune=tuple(sorted(prune)),
        session_ids=tuple(sorted(found)),
        kept=tuple(sorted(set(kept))),
        kept_holds=tuple(sorted(kept_holds)),
        held=tuple(sorted((sid, hold.describe()) for sid, hold in held.items())),
        switch_events=erasure.switch_events_of(session_ids=sorted(found - store_ids)),
        chat_ids=_field_of(every_row, found, "chat_id"),
        session_keys=_field_of(every_row, found, "session_key"),
        slugs=tuple(sorted(slugs)),
        prune_messages=tuple(sorted(prune_messages)),
    )


def _refuse_others_merged_into(
    subject: Subject, subjects: set[str], moves: MergeMoves, every_row: dict[str, dict]
) -> None:
    """One person's erasure never takes what a merge moved into their session out of another
    person's, in the store or in the trash (attack round 44: a cascade of the target into the
    trash, then the erasure, purged the other person's moved messages and delegate)."""
    absorbed = moves.absorbed_into(subjects)
    if not absorbed:
        return
    users = {sid: row.get("user_id") for sid, row in every_row.items() if sid in absorbed}
    users.update(
        db.fetchall_in("SELECT id, user_id FROM sessions WHERE id IN ({marks})", sorted(absorbed))
    )
    owners = {sid: users.get(sid) for sid in absorbed}
    others = sorted(
        sid
        for sid in absorbed
        if sid not in subjects and owners.get(sid) not in (None, "", subject.user_id)
    )
    if others:
        first = others[0]
        raise InvalidInput(
            f"A merge moved session {first} (another user's) into session {absorbed[first]} "
            "of this subject's, which is in the trash or the store: erasing it would erase "
            "the other person's messages too. Restore the trash entry and undo the merge "
            "first (or erase the other person as well). Nothing was erased."
        )


def _field_of(rows: dict[str, dict], session_ids: set[str], field: str) -> tuple[str, ...]:
    """The distinct non-empty values of ``field`` among these trashed session rows."""
    return tuple(
        sorted(
            {str(rows[sid][field]) for sid in session_ids if sid in rows and rows[sid].get(field)}
        )
    )


@dataclass(frozen=True)
class FullPlan:
    """What an erasure request removes: the store's side (``core.erasure.plan_erasure``)
    and the dashboard's trash; one fingerprint covers both."""

    store: ErasurePlan
    trash: TrashPlan
    fingerprint: str

    @property
    def held(self) -> tuple[tuple[str, str], ...]:
        return (*self.store.held, *self.trash.held)

    @property
    def empty(self) -> bool:
        return self.store.empty and not (
            self.trash.purge or self.trash.prune or self.trash.prune_messages
        )


def plan(subject: Subject) -> FullPlan:
    """The preview of an erasure request (nothing changes)."""
    store = erasure.plan_erasure(subject=subject)
    trash = plan_trash(subject, store.session_ids)
    if trash.session_ids:
        # The store's own rows about the trashed sessions and their slugs go with the rest,
        # and the children a delete of theirs kept (their link is in the trash entry).
        store = erasure.plan_erasure(
            subject=subject,
            trashed_ids=trash.session_ids,
            trashed_slugs=trash.slugs,
            cut_children=_cut_children_of(trash.session_ids),
        )
    fingerprint = plan_fingerprint("erasure-with-trash", [store.fingerprint, trash.as_list()])
    return FullPlan(store=store, trash=trash, fingerprint=fingerprint)


def _cut_children_of(session_ids: Sequence[str]) -> list[str]:
    """Sessions a delete kept in the store with their link to one of ``session_ids`` (in the
    trash) cleared: the (child, parent) pairs its trash entries recorded."""
    parents = set(session_ids)
    children: set[str] = set()
    for payload in TrashEntry.objects.exclude(state=TrashEntry.RESTORED).values_list(
        "payload", flat=True
    ):
        for pair in payload.get("kept_children", []) if isinstance(payload, dict) else []:
            if isinstance(pair, list | tuple) and len(pair) == 2 and str(pair[1]) in parents:
                children.add(str(pair[0]))
    return sorted(children)


def trash_to_purge(subject: Subject, session_ids: Sequence[str]) -> list[str]:
    """Trash operations the erasure changes (dropped whole, or the subject's rows cut out)."""
    return list(plan_trash(subject, session_ids).operations)


def _value(value: object) -> object:
    return decode_trash_value(value)


def _response_session(row: dict) -> object:
    data = _value(row.get("data"))
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return None
    return data.get("session_id") if isinstance(data, dict) else None


def _prune_entry(entry_id: int, session_ids: Sequence[str], message_ids: Sequence[int] = ()) -> int:
    """Cut the subject's sessions and everything of theirs out of a shared trash entry, and
    ``message_ids`` (theirs, moved by a merge into another person's session in it)."""
    ids = set(session_ids)
    moved = set(message_ids)
    entry = TrashEntry.objects.filter(pk=entry_id).first()
    if entry is None:
        return 0
    payload = dict(entry.payload)

    def keep(row: dict, *columns: str) -> bool:
        return not any(_value(row.get(c)) in ids for c in columns)

    payload["sessions"] = [r for r in payload.get("sessions", []) if keep(r, "id")]
    cut = [r for r in payload.get("messages", []) if _value(r.get("id")) in moved]
    payload["messages"] = [
        r
        for r in payload.get("messages", [])
        if keep(r, "session_id") and _value(r.get("id")) not in moved
    ]
    if cut:
        # The sessions that held them (another person's) are restored with counters that say
        # so (attack round 44: a restore brought message_count 4 back over 2 messages).
        payload["sessions"] = _recounted(payload.get("sessions", []), cut)
    payload["conversations"] = [
        r for r in payload.get("conversations", []) if keep(r, "session_id")
    ]
    payload["responses"] = [
        r for r in payload.get("responses", []) if _response_session(r) not in ids
    ]
    payload["idempotency"] = [r for r in payload.get("idempotency", []) if keep(r, "session_id")]
    payload["dependents"] = {
        table: [r for r in rows if not any(_value(v) in ids for v in r.values())]
        for table, rows in payload.get("dependents", {}).items()
    }
    payload["kept_children"] = [
        pair for pair in payload.get("kept_children", []) if not set(map(str, pair)) & ids
    ]
    if payload.get("part_of") in ids:
        # A part of one of their sessions (a delete in parts): its id must not outlive them.
        payload["part_of"] = None
    remaining = [s for s in entry.session_ids if s not in ids]
    TrashEntry.objects.filter(pk=entry_id).update(
        payload=payload,
        session_ids=remaining,
        session_count=len(payload["sessions"]),
        message_count=len(payload["messages"]),
    )
    TrashSession.objects.filter(entry_id=entry_id, session_id__in=list(ids)).delete()
    return 1


def _recounted(sessions: list[dict], cut: list[dict]) -> list[dict]:
    """These trashed session rows less the active messages and tool calls ``cut`` took out of
    them (``rows.recompute_counters``'s rule: active rows only)."""
    fewer: dict[object, list[int]] = {}
    for message in cut:
        if _value(message.get("active")) in (0, False):
            continue
        calls = _value(message.get("tool_calls"))
        try:
            parsed = json.loads(calls) if calls else []
        except (TypeError, ValueError):
            parsed = []
        counts = fewer.setdefault(_value(message.get("session_id")), [0, 0])
        counts[0] += 1
        counts[1] += len(parsed) if isinstance(parsed, list) else 0  # an array's length
    recounted = []
    for row in sessions:
        less = fewer.get(_value(row.get("id")))
        if less:
            row = dict(row)
            for column, n in (("message_count", less[0]), ("tool_call_count", less[1])):
                value = _value(row.get(column))
                if isinstance(value, int) and n:
                    row[column] = max(0, value - n)
        recounted.append(row)
    return recounted


def _replacements(subject: Subject, session_ids: Sequence[str], salt: str) -> dict[str, str]:
    return {
        value: f"[erased:{hash_of(salt, value)[:16]}]"
        for value in {*subject.values, *session_ids}
        if value
    }


def _in_text(replacements: dict[str, str]) -> dict[str, str]:
    """The replacements looked for inside free text: values short enough to be ordinary
    words ("42", "bob") are replaced only where they are a whole value."""
    return {k: v for k, v in replacements.items() if len(k) >= erasure.MIN_MENTION}


# Values looked for in one LIKE query of the audit log or operator texts (each is a few LIKEs).
AUDIT_LIKE_CHUNK = 50


def redact_operator_text(subject: Subject, salt: str) -> int:
    """Bulk delete reasons and descriptions and trash entry reasons that name the subject
    (a whole token): those words become their hashes. Returns how many rows changed."""
    replacements = _replacements(subject, (), salt)
    strings = subject.strings
    if not strings:
        return 0
    changed = 0
    for model, fields in ((DeleteJob, ("reason", "description")), (TrashEntry, ("reason",))):
        # In chunks: a subject of many chats has as many values (SQLite refuses an expression
        # deeper than 1,000).
        found: set[int] = set()
        for start in range(0, len(strings), AUDIT_LIKE_CHUNK):
            query = Q()
            for value in strings[start : start + AUDIT_LIKE_CHUNK]:
                for name in fields:
                    query |= Q(**{f"{name}__contains": value})
            found |= set(model.objects.filter(query).values_list("pk", flat=True))
        for row in model.objects.filter(pk__in=sorted(found)).values("pk", *fields):
            new = {name: erasure.redact_text(row[name], _in_text(replacements)) for name in fields}
            if any(new[name] != row[name] for name in fields):
                model.objects.filter(pk=row["pk"]).update(**new)
                changed += 1
    return changed


def redact_reference(request: ErasureRequest, subject: Subject) -> None:
    """The request's own reference loses any identifier of the subject before it is audited."""
    replacements = _replacements(subject, (), request.salt)
    reference = replacements.get(request.reference) or erasure.redact_text(
        request.reference, _in_text(replacements)
    )
    if reference != request.reference:
        ErasureRequest.objects.filter(pk=request.pk).update(reference=reference)
        request.reference = reference


def _redact(value, replacements: dict[str, str]):
    if isinstance(value, str):
        if value in replacements:
            return replacements[value]
        return erasure.redact_text(value, _in_text(replacements))
    if isinstance(value, list):
        return [_redact(v, replacements) for v in value]
    if isinstance(value, dict):
        return {_redact(k, replacements): _redact(v, replacements) for k, v in value.items()}
    return value


# In an entry about someone else that names the subject, the fields whose value says who a
# record is about (a hold's subject, a user id, a chat id or session key given): such a value
# equal to one of the subject's is replaced whole. Any other field (a source, an end reason,
# another person's key holding the subject's id as a part) is that entry's own and stays.
PERSON_FIELDS = frozenset(
    {"subject", "user_id", "user", "chat_id", "chat_ids", "session_key", "session_keys"}
)


def _redact_person_fields(value, replacements: dict[str, str], ids: dict[str, str], key=None):
    """``value`` (an unlinked entry's ``before`` or ``after``) with the subject's values
    replaced where a person field holds exactly one, and the erased session ids, slugs and
    response ids (``ids``: unique names, never ordinary words) wherever they are whole."""
    if isinstance(value, str):
        if value in ids:
            return ids[value]
        if key in PERSON_FIELDS and value in replacements:
            return replacements[value]
        return value
    if isinstance(value, list):
        return [_redact_person_fields(v, replacements, ids, key) for v in value]
    if isinstance(value, dict):
        return {
            ids.get(k, k): _redact_person_fields(v, replacements, ids, k) for k, v in value.items()
        }
    return value


def _hash_idempotency_key(before, salt: str):
    """An append's ``before`` with its ``idempotency_key`` replaced by the key's hash."""
    if not isinstance(before, dict) or not isinstance(before.get("idempotency_key"), str):
        return before
    key = before["idempotency_key"]
    if key.startswith("[erased:"):
        return before
    return {**before, "idempotency_key": f"[erased:{hash_of(salt, key)[:16]}]"}


def redact_audit(
    subject: Subject,
    session_ids: Sequence[str],
    salt: str,
    *,
    names: Sequence[str] = (),
    request_id: int | None = None,
) -> int:
    """Replace the subject's identifiers, the erased session ids and ``names`` (the erased
    slugs and stored response ids: a runtime's turn and resolve entries name them), each as
    a whole token, by their hashes in earlier audit entries; returns how many changed.

    Looked for in the entries linked to the erased sessions, the entries whose text holds
    one of the subject's values or ``names``, and the earlier entries of erasure request
    ``request_id`` (a run a hold stopped named the held sessions in its words, linking
    none). In the entries linked to the erased sessions the API's idempotency keys (client
    text, often built from the person's ids) are hashed whole too (attack round 41)."""
    replacements = _replacements(subject, [*session_ids, *names], salt)
    if not replacements:
        return 0
    linked = set(
        AuditSession.objects.filter(session_id__in=list(session_ids)).values_list(
            "entry_id", flat=True
        )
    )
    candidates = set(linked)
    own_entries: set[int] = set()
    if request_id is not None:
        own_entries = set(
            AuditEntry.objects.filter(
                action=AuditAction.ERASURE, before__erasure_request=request_id
            ).values_list("pk", flat=True)
        )
        candidates |= own_entries
    table = AuditEntry._meta.db_table
    alias = router.db_for_write(AuditEntry)
    strings = list(dict.fromkeys([*subject.values, *(name for name in names if name)]))
    # A LIKE narrows the entries; the whole-token replacement decides what changes. In
    # chunks: an erasure of many sessions has as many slugs.
    for start in range(0, len(strings), AUDIT_LIKE_CHUNK):
        chunk = strings[start : start + AUDIT_LIKE_CHUNK]
        where = " OR ".join(
            "(CAST(before AS TEXT) LIKE %s ESCAPE '\\' OR CAST(after AS TEXT) LIKE %s "
            "ESCAPE '\\' OR reason LIKE %s ESCAPE '\\' OR detail LIKE %s ESCAPE '\\')"
            for _ in chunk
        )
        params = [
            p
            for s in chunk
            for p in [db.contains_pattern(json.dumps(s)[1:-1])] * 2 + [db.contains_pattern(s)] * 2
        ]
        with connections[alias].cursor() as cursor:
            cursor.execute(f"SELECT id FROM {table} WHERE {where}", params)
            candidates |= {row[0] for row in cursor.fetchall()}
    about = linked | own_entries
    ids = {
        value: replacement
        for value, replacement in replacements.items()
        if value in set(session_ids) | set(names)
    }
    changed = 0
    for entry in AuditEntry.objects.filter(pk__in=candidates):
        before = entry.before
        if entry.pk in linked:
            before = _hash_idempotency_key(before, salt)
        if entry.pk in about:
            # About the subject (their sessions, the request's own entries): every field.
            redacted = (_redact(before, replacements), _redact(entry.after, replacements))
        else:
            # About someone else, naming the subject: only what names them whole (attack
            # round 42: a user id "telegram" rewrote every telegram session's source).
            redacted = (
                _redact_person_fields(before, replacements, ids),
                _redact_person_fields(entry.after, replacements, ids),
            )
        fields = {
            "session_ids": _redact(entry.session_ids, replacements),
            "before": redacted[0],
            "after": redacted[1],
            "reason": _redact(entry.reason, replacements),
            "detail": _redact(entry.detail, replacements),
        }
        if any(getattr(entry, name) != value for name, value in fields.items()):
            AuditEntry.objects.filter(pk=entry.pk).update(**fields)
            changed += 1
    for link in AuditSession.objects.filter(session_id__in=list(session_ids)):
        AuditSession.objects.filter(pk=link.pk).update(
            session_id=replacements.get(link.session_id, link.session_id)
        )
    return changed


@dataclass(frozen=True)
class TrashErased:
    operations: list[str]  # the trash operations changed
    entries: int  # the entries dropped or cut
    sessions: int  # the sessions (and messages) the trash lost: not restored, so only there
    messages: int


def erase_trash(trash: TrashPlan) -> TrashErased:
    """Drop the operations that are the subject's alone; cut the subject's rows out of the
    entries shared with other people. Says what the trash lost."""
    purge = list(trash.purge)
    entries = sessions = messages = 0
    for start in range(0, len(purge), 500):
        batch = TrashEntry.objects.filter(operation__in=purge[start : start + 500])
        entries += batch.count()
        held = batch.exclude(state=TrashEntry.RESTORED).aggregate(
            sessions=Sum("session_count"), messages=Sum("message_count")
        )
        sessions += held["sessions"] or 0
        messages += held["messages"] or 0
        batch.delete()
    pruned = TrashEntry.objects.filter(pk__in=trash.pruned_entries).values_list(
        "operation", flat=True
    )
    operations = sorted({*purge, *pruned})
    cut_sessions = dict(trash.prune)
    cut_messages = dict(trash.prune_messages)
    for entry_id in trash.pruned_entries:
        was = TrashEntry.objects.filter(pk=entry_id).values(
            "session_count", "message_count", "state"
        )
        before = was.first() or {"session_count": 0, "message_count": 0, "state": ""}
        entries += _prune_entry(
            entry_id, cut_sessions.get(entry_id, ()), cut_messages.get(entry_id, ())
        )
        if before["state"] == TrashEntry.RESTORED:
            # Its copy of rows a restore put back in the store goes too, but what it held is
            # counted where it is now, in the store (attack round 44: a receipt counted a
            # person's moved messages twice after a restore), as a purge's count leaves it out.
            continue
        after = was.first() or before
        sessions += before["session_count"] - after["session_count"]
        messages += before["message_count"] - after["message_count"]
    return TrashErased(operations, entries, sessions, messages)


def kept_in_receipt(plan: ErasurePlan, trash: TrashPlan) -> dict:
    """What the erasure left, and why: the receipt says it in counts and hold numbers only
    (never a hold's reason or subject: another person's, or this person's own id)."""
    return {
        "other_peoples_sessions_mentioning_subject": len(plan.mentions),
        "held_rows_of_other_people_in_shared_trash": [
            f"legal hold #{pk}" for pk in trash.kept_holds
        ],
    }


def complete(
    request: ErasureRequest,
    plan: ErasurePlan,
    result: erasure.ErasureResult,
    trash: TrashPlan | None = None,
) -> dict:
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
        if trash is None:
            trash = plan_trash(subject, session_ids)
        # One transaction: a run killed here changed nothing of the dashboard's, and the next
        # one does all of it (from the recorded plan), so its counts are the whole of it. One
        # the dashboard's database refused rolled back the same way: said so, with the store's
        # side it finished.
        try:
            receipt = _complete_dashboard(request, plan, result, trash, session_ids, sqlite)
        except Exception as error:
            if not db.storage_failure(error):
                raise
            error.database = TRASH_DATABASE  # the dashboard's, not the store
            raise ErasureStopped(
                error=error, erased=RowsPresent(**_counts_of(result)), store_done=True
            ) from error
        if sqlite:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        else:
            with connection.cursor() as cursor:
                for table in _erased_tables():
                    cursor.execute(f"VACUUM {table}")
    finally:
        if sqlite:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA secure_delete = OFF")
    return receipt


# A pending cascade entry whose trash an erasure took keeps, in ``after`` under this key, the
# request that took it: ``ledger.actions.complete_stale_deletes`` completes it from what that
# trash held then (``note_pending_deletes``), not from the emptied trash.


def settle_pending_deletes(trash: TrashPlan) -> None:
    """Before the store is erased: the pending trash entries of a pending cascade whose trash
    the erasure takes are settled from the store (``stale_pending_trash``: a batch that
    committed is marked complete), so ``note_pending_deletes`` counts every committed batch.
    Only while the store still shows what the cascade left (an erasure's first run)."""
    for _entry, operation in pending_cascades(trash.operations):
        stale_pending_trash(operation=operation)


def note_pending_deletes(request: ErasureRequest, trash: TrashPlan) -> int:
    """Keep on each pending cascade entry whose trash operation this erasure drops or cuts
    what that trash held before (``ERASED_TRASH``, ``ledger.trash.note_pending_cascades``);
    in the erasure's transaction, so the note is there exactly when the trash is gone."""
    return note_pending_cascades(
        trash.operations, key=ERASED_TRASH, cause={"erasure_request": request.pk}
    )


def note_erased_job_items(items, *, request_id: int) -> None:
    """Before ``items`` go: each job whose pending items are among them keeps how many this
    erasure took from it (``DeleteJob.params["erased"]``, by request), so its page says so
    instead of ending "1 of 2" without a word (``jobs.job_progress``)."""
    for state, key in (
        (DeleteJobItem.PENDING, DeleteJob.ERASED_ITEMS),
        # Deleted by the job, now taken out of its trash entry: its page stops promising
        # that entry restores everything the job deleted (attack round 42).
        (DeleteJobItem.DONE, DeleteJob.ERASED_FROM_TRASH),
    ):
        counted = (
            items.filter(state=state)
            .values("job_id")
            .annotate(count=Count("pk"))
            .order_by("job_id")
        )
        for row in counted:
            job = DeleteJob.objects.select_for_update().filter(pk=row["job_id"]).first()
            if job is None:
                continue
            erased = dict((job.params or {}).get(key) or {})
            erased[str(request_id)] = int(erased.get(str(request_id), 0)) + row["count"]
            DeleteJob.objects.filter(pk=job.pk).update(params={**(job.params or {}), key: erased})


def _counts_of(result: erasure.ErasureResult) -> dict:
    return {name: getattr(result, name) for name in RowsPresent.__dataclass_fields__}


def _complete_dashboard(
    request: ErasureRequest,
    plan: ErasurePlan,
    result: erasure.ErasureResult,
    trash: TrashPlan,
    session_ids: list[str],
    sqlite: bool,
) -> dict:
    """The dashboard's side of ``complete`` in one transaction; returns the receipt."""
    with transaction.atomic(using=router.db_for_write(TrashEntry)):
        note_pending_deletes(request, trash)
        erased_trash = erase_trash(trash)
        session_ids = [*session_ids, *trash.session_ids]
        items = 0
        for start in range(0, len(session_ids), 500):
            chunk = DeleteJobItem.objects.filter(session_id__in=session_ids[start : start + 500])
            note_erased_job_items(chunk, request_id=request.pk)
            items += chunk.delete()[0]
        faults.checkpoint("erasure.during_dashboard")
        dashboard = {
            "trash_operations": len(erased_trash.operations),
            "trash_entries": erased_trash.entries,
            "trash_sessions": erased_trash.sessions,
            "trash_messages": erased_trash.messages,
            "job_items": items,
            # The erased sessions' own chat ids and keys too, not only the values given.
            "audit_entries_redacted": redact_audit(
                trash.redaction_subject(plan.redaction_subject),
                session_ids,
                request.salt,
                names=[*plan.conversation_names, *trash.slugs, *plan.response_ids],
                request_id=request.pk,
            ),
            "operator_texts_redacted": redact_operator_text(
                trash.redaction_subject(plan.redaction_subject), request.salt
            ),
        }
        if sqlite:
            storage = [
                "dashboard: secure_delete during the rewrite; WAL checkpointed and truncated"
            ]
        else:
            storage = ["dashboard: VACUUM of the erasure, trash, audit and job item tables"]
        receipt = receipt_of(
            request, plan, result, dashboard, storage, trashed_ids=trash.session_ids
        )
        receipt["kept"] = kept_in_receipt(plan, trash)
        receipt = signed(receipt)
        finish(request, receipt)
    return receipt


def receipt_of(
    request: ErasureRequest,
    plan: ErasurePlan,
    result: erasure.ErasureResult,
    dashboard: dict,
    storage: list[str],
    *,
    trashed_ids: Sequence[str] = (),
) -> dict:
    salt = request.salt
    # Every session the erasure removed: the store's and those it purged from the trash.
    erased_ids = {*plan.session_ids, *trashed_ids}
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
            # What the dashboard's trash lost (sessions deleted before the erasure, only
            # there): the store's own counts above do not include them.
            "sessions_in_trash": dashboard.get("trash_sessions", 0),
            "messages_in_trash": dashboard.get("trash_messages", 0),
            "job_items": dashboard["job_items"],
            "audit_entries_redacted": dashboard["audit_entries_redacted"],
        },
        "session_ids_sha256": sorted(hash_of(salt, sid) for sid in erased_ids),
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
    # A receipt from before receipts were signed stays unsigned: signing it now would
    # vouch for its salted hashes.
    _later_step(request_ids, notes, "search_index", {"merged": True, "merged_at": now}, sign=None)


def _later_step(
    request_ids: Sequence[int], notes: Sequence[str], key: str, step: dict, *, sign: bool | None
) -> None:
    """Receipts of finished erasures gain a step done after them (under ``key``) and its
    storage ``notes``; signed anew (``sign`` True), or only those signed already (None)."""
    for request in ErasureRequest.objects.filter(pk__in=request_ids):
        receipt = dict(request.receipt)
        receipt[key] = step
        receipt["storage"] = [*receipt.get("storage", []), *notes]
        if sign or (sign is None and "signature" in receipt):
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
    _later_step(request_ids, notes, "file_rewrite", {"state": REWRITE_DONE, "at": now}, sign=True)


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
    return erasure.vacuum_full_postgresql(
        alias, _erased_tables(), lock_ms=busy_ms, max_bytes=max_bytes
    )


def _erased_tables() -> list[str]:
    """The dashboard's tables an erasure deletes from or rewrites: vacuumed after it."""
    models = (ErasureRequest, TrashEntry, TrashSession, AuditEntry, AuditSession, DeleteJobItem)
    return [model._meta.db_table for model in models]


def finish(request: ErasureRequest, receipt: dict) -> None:
    """Done: the receipt replaces the run's record (the plan's plain ids), the subject goes."""
    finished = ErasureRequest.objects.filter(
        pk=request.pk, state=ErasureRequest.RUNNING, started_at=request.started_at
    ).update(
        state=ErasureRequest.DONE,
        subject="",
        receipt=signed(receipt),
        finished_at=timezone.now(),
        lease_expires_at=None,
        # An earlier run's failure ("... Nothing was deleted") no longer describes it.
        error="",
    )
    if not finished:
        raise ErasureTakenOver(request.pk)
    supersede_unstarted(request)


def supersede_unstarted(request: ErasureRequest) -> None:
    """Close the other requests for the person ``request`` erased that never began erasing
    (their first run refused: the plan changed, a hold stood): their plain subject goes with
    the rest of the person, and running them again does nothing (``claim``)."""
    user_id = subject_from_json(request.subject).user_id
    others = ErasureRequest.objects.filter(
        state__in=[ErasureRequest.PENDING, ErasureRequest.FAILED]
    ).exclude(pk=request.pk)
    for other in others:
        if (
            other.subject
            and recorded_run(other) is None
            and subject_from_json(other.subject).user_id == user_id
        ):
            ErasureRequest.objects.filter(pk=other.pk, state=other.state).update(
                state=ErasureRequest.FAILED,
                subject="",
                error=(
                    f"Superseded: erasure request #{request.pk} erased this person (see its "
                    "receipt). Nothing is left for this request to do."
                ),
                lease_expires_at=None,
            )


def fail(request: ErasureRequest, error: str) -> None:
    """Failed, keeping the subject and the run's record so it can run again; a run another
    worker took over leaves the request to it."""
    ErasureRequest.objects.filter(
        pk=request.pk, state=ErasureRequest.RUNNING, started_at=request.started_at
    ).update(state=ErasureRequest.FAILED, error=error[:2000], lease_expires_at=None)


def refuse_held(full: FullPlan, *, recorded: tuple[RowsPresent, LateRows] | None = None) -> None:
    """``SessionsHeld`` (naming each hold) if a standing hold covers anything the erasure
    would change: the subject's sessions, the sessions holding their moved messages, the
    targets of the merges it closes, their trashed sessions. ``recorded``: a recorded run's
    counts (before it, and its late rows), so the refusal says what earlier runs erased
    (attack round 41: a run again under the hold said "Nothing was deleted" of a request
    whose first run had erased half the person's messages)."""
    held = holds.holds_on(full.store.held_scope)
    if full.trash.held:
        trashed = set(dict(full.trash.held))
        for entry in TrashEntry.objects.filter(sessions__session_id__in=list(trashed)).distinct():
            rows = decode_trash_rows(entry.payload.get("sessions", []))
            held.update(holds.held_among_rows([r for r in rows if r.get("id") in trashed]))
    if not held:
        return
    erased = erasure.erased_so_far(full.store, *recorded) if recorded else None
    if erased is None or not (erased.sessions or erased.messages):
        raise holds.SessionsHeld(held)
    before = recorded[0]
    raise holds.SessionsHeld(
        held,
        outcome=(
            f"This run deleted nothing. Earlier runs of this request erased {erased.sessions} "
            f"of {before.sessions} sessions ({erased.messages} of {before.messages} messages) "
            f"before the hold; {erasure.REST_WAITS_FOR_THE_HOLD}"
        ),
    )


def being_erased(session_id: str) -> bool:
    """Whether an erasure that began and has not finished (running, killed, failed) has
    ``session_id`` in its recorded plan: its trash rows may still be there, waiting for the
    run to prune them, and nothing of them may be shown meanwhile."""
    for receipt in ErasureRequest.objects.exclude(state=ErasureRequest.DONE).values_list(
        "receipt", flat=True
    ):
        run = (receipt or {}).get(RUN)
        if not isinstance(run, dict):
            continue
        planned = (run.get("plan") or {}).get("session_ids") or ()
        trashed = (run.get("trash") or {}).get("session_ids") or ()
        if session_id in planned or session_id in trashed:
            return True
    return False
