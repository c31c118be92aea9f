"""Importing sessions from an export file, audited, and its dry run."""

from __future__ import annotations

from typing import IO

from sessions_admin.core import portability as portability_core
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.text import operator_text, storability_problem
from sessions_admin.ledger.actions.audit import _audited, _failure_detail, record
from sessions_admin.ledger.models import AuditAction, AuditEntry
from sessions_admin.ledger.trash import trashed_among, trashed_titles_among
from sessions_admin.store.attach import database_file_named

IMPORT = AuditAction.IMPORT_SESSIONS


def _read_export(file: str, stream: IO[bytes] | None) -> list[dict]:
    """The session objects of an export: ``stream`` when given (standard input), else
    ``file``; none of them a session in the trash (``_refuse_trashed``)."""
    sessions = _read_file(file, stream)
    _refuse_trashed(sessions)
    return sessions


def _refuse_trashed(sessions: list[dict]) -> None:
    """An imported session under the id of one in the trash would keep that one from ever
    being restored (attack round 46, Y3): the import is refused, naming them."""
    ids = _storable([s.get("id") for s in sessions if isinstance(s, dict)])
    trashed = trashed_among(ids)
    if trashed:
        named = ", ".join(
            f"{sid} (trash entry #{entry})" for sid, entry in list(trashed.items())[:10]
        )
        raise InvalidInput(
            f"{len(trashed)} session(s) of the file are in the trash: {named}. Imported, they "
            "would keep those from being restored: restore the trash entries instead, or purge "
            "them first."
        )
    # Titles are unique: one a deleted session holds would block its restore as well (AA2).
    titles = trashed_titles_among(
        _storable([s.get("title") for s in sessions if isinstance(s, dict)])
    )
    if titles:
        named = ", ".join(f"{title!r} ({sid})" for title, sid in list(titles.items())[:10])
        raise InvalidInput(
            f"{len(titles)} title(s) of the file are held by deleted sessions in the trash: "
            f"{named}. Imported, they would keep those from being restored: restore or purge "
            "them first, or change the titles in the file."
        )


def _storable(values: list) -> list[str]:
    """The texts among ``values`` a database can compare (the import refuses the others, with
    its own message, once the file is checked)."""
    return [v for v in values if isinstance(v, str) and storability_problem(v) is None]


def _read_file(file: str, stream: IO[bytes] | None) -> list[dict]:
    if stream is not None:
        return portability_core.read_export(stream)
    alias = database_file_named(file)
    if alias is not None:
        raise InvalidInput(
            f"{file} is a database the dashboard uses ({alias!r}), not an export: import a "
            "file written by export_sessions."
        )
    try:
        with open(file, "rb") as handle:
            return portability_core.read_export(handle)
    except OSError as error:
        raise InvalidInput(f"Cannot read {file}: {error}") from error


def preview_import(
    *,
    actor,
    file: str,
    stream: IO[bytes] | None = None,
    skip_existing: bool = False,
    graft: bool = False,
    reason: str = "",
) -> portability_core.ImportPlan:
    """What importing ``file`` would do (a dry run): nothing is written, so only a refusal
    is audited (outcome ``failed``, ``before`` saying it was a dry run)."""
    reason = operator_text(reason, field="reason")
    try:
        return portability_core.plan_import(_read_export(file, stream))
    except Exception as error:
        entry = record(
            actor=actor,
            action=IMPORT,
            session_ids=[],
            before={"file": file, "skip_existing": skip_existing, "graft": graft, "dry_run": True},
            reason=reason,
            outcome=AuditEntry.FAILED,
            detail=_failure_detail(error),
        )
        error.audited_entry = entry.pk
        raise


def import_sessions(
    *,
    actor,
    file: str,
    stream: IO[bytes] | None = None,
    skip_existing: bool = False,
    graft: bool = False,
    reason: str = "",
) -> portability_core.ImportResult:
    """``core.portability.import_sessions`` of an export file (``stream``: its bytes, when it
    is not a file to open), audited; reading the file is part of the action, so an unreadable
    or invalid file is a failed entry too, and an interrupted import names what it kept."""
    reason = operator_text(reason, field="reason")
    return _audited(
        actor=actor,
        action=IMPORT,
        session_ids=[],
        reason=reason,
        before={"file": file, "skip_existing": skip_existing, "graft": graft},
        run=lambda: portability_core.import_sessions(
            sessions=_read_export(file, stream), skip_existing=skip_existing, graft=graft
        ),
        after=lambda r: {
            "imported": len(r.imported),
            "skipped": list(r.skipped)[:100],
            "detached": list(r.detached)[:100],
            "not_grafted": list(r.ungrafted)[:100],
            "grafted": list(r.grafted)[:100],
            "ended_on_import": len(r.ended_on_import),
            "messages": r.messages,
        },
        result_ids=lambda r: r.imported,
        # An interrupted import keeps the batches written before the failure.
        failed_ids=lambda error: getattr(error, "imported", ()),
    )
