"""Erasure requests: the dashboard's side of ``core.erasure``.

A request holds the subject in plain text only while it is pending or running, and
otherwise a salted hash of it (``subject_hash``; the salt is the request's own). Running
it (``ledger.actions.run_erasure``, audited) erases the store's side through
``core.erasure.erase`` and then the dashboard's own copies:

- the trash (``plan_trash``): trashed sessions whose user id, chat id or key field equals
  the subject's (or that are erased store sessions, or children of such in the same
  operation) go; an operation holding only those is dropped whole, one shared with other
  people loses only the subject's rows. Another person's held rows stay and the receipt's
  ``kept`` names the hold; a hold on the subject's own trashed rows refuses the erasure.
  ``plan`` gives one fingerprint for the store's plan and the trash's;
- earlier audit entries keep their shape but every mention of the subject (user id,
  chat ids, session keys) and of the erased sessions' ids, as a whole word (``core.erasure
  .redact_text``), is replaced by its salted hash, and their session links are re-pointed
  at the hashes; the erasure's own entry names only hashes and counts; bulk delete reasons
  and descriptions, trash entry reasons and the request's own reference are redacted the
  same way;
- bulk delete job items naming an erased session are dropped;
- SQLite: the rewrites run with ``secure_delete`` on and the dashboard's WAL is
  checkpointed and truncated; PostgreSQL: the touched tables are vacuumed.

The receipt lists what went, by salted hash and count, when, by whom and under which
request reference.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from django.db import connections, router
from django.db.models import Q
from django.utils import timezone

from sessions_admin.core import db, erasure, holds
from sessions_admin.core.erasure import ErasurePlan, Subject
from sessions_admin.core.errors import InvalidInput
from sessions_admin.ledger.models import (
    AuditEntry,
    AuditSession,
    DeleteJob,
    DeleteJobItem,
    ErasureRequest,
    TrashEntry,
    TrashSession,
)
from sessions_admin.ledger.trash import decode_trash_rows, decode_trash_value

LEASE_SECONDS = 600


def hash_of(salt: str, value: str) -> str:
    return hashlib.sha256(f"{salt}\x00{value}".encode("utf-8", "surrogatepass")).hexdigest()


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
    # One refused because the store changed after the confirmation is not retried: it would
    # erase what nobody previewed. The operator previews and confirms again.
    pending = ErasureRequest.objects.filter(
        state__in=[ErasureRequest.PENDING, ErasureRequest.FAILED]
    ).exclude(error__startswith="PlanChanged")
    stale = ErasureRequest.objects.filter(state=ErasureRequest.RUNNING, lease_expires_at__lt=now)
    return sorted(
        set(pending.values_list("pk", flat=True)) | set(stale.values_list("pk", flat=True))
    )


@dataclass(frozen=True)
class TrashPlan:
    """The subject's rows in the trash, matched by the trashed sessions' exact fields.

    A trashed session is the subject's when its user id, chat id or session key is one of
    theirs (compared whole), when it is one of the store sessions being erased (a delete in
    parts), or when its parent in the same operation is (delegates and continuations the
    runtime left without a user id). An operation holding only such sessions is purged
    whole; one shared with other people keeps their rows and loses only the subject's.
    """

    purge: tuple[str, ...] = ()  # operations dropped whole
    prune: tuple[tuple[int, tuple[str, ...]], ...] = ()  # (entry, the subject's sessions in it)
    session_ids: tuple[str, ...] = ()  # the subject's sessions found in the trash
    # (operation, hold in words): another person's held rows beside the subject's, kept.
    kept: tuple[tuple[str, str], ...] = ()
    held: tuple[tuple[str, str], ...] = ()  # the subject's own trashed rows under a hold

    @property
    def operations(self) -> tuple[str, ...]:
        pruned = TrashEntry.objects.filter(pk__in=[pk for pk, _ in self.prune]).values_list(
            "operation", flat=True
        )
        return tuple(sorted({*self.purge, *pruned}))

    def as_list(self) -> list:
        return [list(self.purge), [[pk, list(ids)] for pk, ids in self.prune], list(self.held)]


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
    purge, prune, found, kept, held, other_users = [], [], set(), [], {}, set()
    for operation, entries in operations.items():
        rows = {str(row.get("id")): row for _pk, _payload, rs in entries for row in rs}
        theirs = {sid for sid, row in rows.items() if _is_subjects(row, subject, store_ids)}
        parts = {pk: payload.get("part_of") for pk, payload, _rs in entries}
        theirs |= {sid for sid in parts.values() if sid in store_ids}
        grew = True
        while grew:  # children of the subject's trashed sessions go with them
            more = {
                sid
                for sid, row in rows.items()
                if sid not in theirs and row.get("parent_session_id") in theirs
            }
            theirs |= more
            grew = bool(more)
        if not theirs:
            continue
        other_users |= {
            rows[sid].get("user_id")
            for sid in theirs
            if sid in rows and rows[sid].get("user_id") not in (None, "", subject.user_id)
        }
        found |= theirs
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
        held=tuple(sorted((sid, hold.describe()) for sid, hold in held.items())),
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
        return self.store.empty and not (self.trash.purge or self.trash.prune)


def plan(subject: Subject) -> FullPlan:
    """The preview of an erasure request (nothing changes)."""
    store = erasure.plan_erasure(subject=subject)
    trash = plan_trash(subject, store.session_ids)
    fingerprint = hashlib.sha256(
        json.dumps([store.fingerprint, trash.as_list()]).encode()
    ).hexdigest()[:32]
    return FullPlan(store=store, trash=trash, fingerprint=fingerprint)


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


def _prune_entry(entry_id: int, session_ids: Sequence[str]) -> int:
    """Cut the subject's sessions and everything of theirs out of a shared trash entry."""
    ids = set(session_ids)
    entry = TrashEntry.objects.filter(pk=entry_id).first()
    if entry is None:
        return 0
    payload = dict(entry.payload)

    def keep(row: dict, *columns: str) -> bool:
        return not any(_value(row.get(c)) in ids for c in columns)

    payload["sessions"] = [r for r in payload.get("sessions", []) if keep(r, "id")]
    payload["messages"] = [r for r in payload.get("messages", []) if keep(r, "session_id")]
    payload["conversations"] = [
        r for r in payload.get("conversations", []) if keep(r, "session_id")
    ]
    payload["responses"] = [
        r for r in payload.get("responses", []) if _response_session(r) not in ids
    ]
    payload["dependents"] = {
        table: [r for r in rows if not any(_value(v) in ids for v in r.values())]
        for table, rows in payload.get("dependents", {}).items()
    }
    payload["kept_children"] = [
        pair for pair in payload.get("kept_children", []) if not set(map(str, pair)) & ids
    ]
    remaining = [s for s in entry.session_ids if s not in ids]
    TrashEntry.objects.filter(pk=entry_id).update(
        payload=payload,
        session_ids=remaining,
        session_count=len(payload["sessions"]),
        message_count=len(payload["messages"]),
    )
    TrashSession.objects.filter(entry_id=entry_id, session_id__in=list(ids)).delete()
    return 1


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


def redact_operator_text(subject: Subject, salt: str) -> int:
    """Bulk delete reasons and descriptions and trash entry reasons that name the subject
    (a whole token): those words become their hashes. Returns how many rows changed."""
    replacements = _replacements(subject, (), salt)
    strings = subject.strings
    if not strings:
        return 0
    changed = 0
    for model, fields in ((DeleteJob, ("reason", "description")), (TrashEntry, ("reason",))):
        query = Q()
        for value in strings:
            for name in fields:
                query |= Q(**{f"{name}__contains": value})
        for row in model.objects.filter(query).values("pk", *fields):
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


def redact_audit(subject: Subject, session_ids: Sequence[str], salt: str) -> int:
    """Replace the subject's identifiers and the erased session ids, each as a whole token,
    by their hashes in earlier audit entries; returns how many entries changed."""
    replacements = _replacements(subject, session_ids, salt)
    if not replacements:
        return 0
    candidates = set(
        AuditSession.objects.filter(session_id__in=list(session_ids)).values_list(
            "entry_id", flat=True
        )
    )
    table = AuditEntry._meta.db_table
    alias = router.db_for_write(AuditEntry)
    strings = list(subject.values)
    # A LIKE narrows the entries; the whole-token replacement decides what changes.
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
        if any(getattr(entry, name) != value for name, value in fields.items()):
            AuditEntry.objects.filter(pk=entry.pk).update(**fields)
            changed += 1
    for link in AuditSession.objects.filter(session_id__in=list(session_ids)):
        AuditSession.objects.filter(pk=link.pk).update(
            session_id=replacements.get(link.session_id, link.session_id)
        )
    return changed


def erase_trash(trash: TrashPlan) -> tuple[list[str], int]:
    """Drop the operations that are the subject's alone; cut the subject's rows out of the
    entries shared with other people. Returns the operations changed and entries touched."""
    purge = list(trash.purge)
    entries = 0
    for start in range(0, len(purge), 500):
        batch = TrashEntry.objects.filter(operation__in=purge[start : start + 500])
        entries += batch.count()
        batch.delete()
    pruned = TrashEntry.objects.filter(pk__in=[pk for pk, _ in trash.prune]).values_list(
        "operation", flat=True
    )
    operations = sorted({*purge, *pruned})
    for entry_id, session_ids in trash.prune:
        entries += _prune_entry(entry_id, session_ids)
    return operations, entries


def kept_in_receipt(plan: ErasurePlan, trash: TrashPlan) -> dict:
    """What the erasure left, and why: the receipt says it in counts and hold numbers."""
    return {
        "other_peoples_sessions_mentioning_subject": len(plan.mentions),
        "held_rows_of_other_people_in_shared_trash": [words for _op, words in trash.kept],
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
        operations, trash_entries = erase_trash(trash)
        session_ids = [*session_ids, *trash.session_ids]
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
            "operator_texts_redacted": redact_operator_text(subject, request.salt),
        }
        if sqlite:
            storage = [
                "dashboard: secure_delete during the rewrite; WAL checkpointed and truncated"
            ]
        else:
            storage = ["dashboard: VACUUM of the erasure, trash, audit and job item tables"]
        receipt = receipt_of(request, plan, result, dashboard, storage)
        receipt["kept"] = kept_in_receipt(plan, trash)
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
        "hashing": "sha256(salt + NUL + value), hex; the salt is this request's own",
        "salt": salt,
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
        ErasureRequest.objects.filter(pk=request.pk).update(receipt=receipt)


def finish(request: ErasureRequest, receipt: dict) -> None:
    ErasureRequest.objects.filter(pk=request.pk).update(
        state=ErasureRequest.DONE,
        subject="",
        receipt=receipt,
        finished_at=timezone.now(),
        lease_expires_at=None,
    )


def fail(request: ErasureRequest, error: str) -> None:
    ErasureRequest.objects.filter(pk=request.pk).update(
        state=ErasureRequest.FAILED, error=error[:2000], lease_expires_at=None
    )


def refuse_held(full: FullPlan) -> None:
    """``SessionsHeld`` (naming each hold) if a standing hold covers anything the erasure
    would change: the subject's sessions, the sessions holding their moved messages, the
    targets of the merges it closes, their trashed sessions."""
    held = holds.holds_on(full.store.held_scope)
    if full.trash.held:
        trashed = set(dict(full.trash.held))
        for entry in TrashEntry.objects.filter(sessions__session_id__in=list(trashed)).distinct():
            rows = decode_trash_rows(entry.payload.get("sessions", []))
            held.update(holds.held_among_rows([r for r in rows if r.get("id") in trashed]))
    if held:
        raise holds.SessionsHeld(held)
