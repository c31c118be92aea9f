"""RFC 9457 problem details: every error the API answers, in one shape and one table.

An error body is ``application/problem+json`` with ``type`` (a stable URI per domain error,
``https://sessions-admin.dev/problems/<slug>``), ``title``, ``status``, ``detail`` (the core's
own words) and extension members (``live_session_id`` for an ended session, ``errors`` for
invalid input). ``PROBLEM_OF`` maps the core's and the ledger's exception classes to their
problem, most specific class first, so a rule refused by the core reads the same through the
API as in the console; the handlers installed by ``install`` turn ninja's own errors (auth,
validation, throttling, unparsable bodies) and Django's (an oversized body) into the same shape.
Anything unmapped is a 500 problem, logged, never a traceback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse
from ninja.errors import AuthenticationError, HttpError, Throttled, ValidationError

from sessions_admin.core import db as core_db
from sessions_admin.core.deletion import (
    ConversationsKept,
    DatabaseNotWritten,
    DeletePartlyApplied,
    RestoreConflict,
    SessionsWentLive,
)
from sessions_admin.core.errors import (
    AmbiguousSessionRef,
    ConversationNotFound,
    InvalidInput,
    NothingToUndo,
    ReadOnlyStore,
    ResumePlanChanged,
    SessionBeingDeleted,
    SessionEnded,
    SessionNotFound,
    StoreBusy,
    StoreError,
    TitleTaken,
    TruncationRefused,
)
from sessions_admin.core.holds import SessionsHeld
from sessions_admin.core.idempotency import IdempotencyKeyReused
from sessions_admin.core.merge import MergeNotFound, PlanChanged
from sessions_admin.core.text import storability_problem
from sessions_admin.core.transcript import RewritePlanChanged
from sessions_admin.ledger.actions.audit import DashboardNotWritten

logger = logging.getLogger(__name__)

TYPE_BASE = "https://sessions-admin.dev/problems/"
MEDIA_TYPE = "application/problem+json"
RETRY_AFTER_SECONDS = 5


@dataclass(eq=False)
class Problem(Exception):
    """An error the API answers as it is (raised by routes and auth for what is not a core
    exception: a missing token, a scope that does not allow the route, a source outside a
    runtime token's sources)."""

    status: int
    slug: str
    title: str
    detail: str = ""
    extensions: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.detail or self.title)

    def body(self) -> dict[str, Any]:
        return {
            "type": TYPE_BASE + self.slug,
            "title": self.title,
            "status": self.status,
            "detail": self.detail or self.title,
            **self.extensions,
        }


def unauthorized(detail: str) -> Problem:
    return Problem(
        401, "unauthorized", "Unauthorized", detail, headers={"WWW-Authenticate": "Bearer"}
    )


def forbidden(detail: str) -> Problem:
    return Problem(403, "forbidden", "Forbidden", detail)


def not_found(detail: str) -> Problem:
    return Problem(404, "not-found", "Not found", detail)


def invalid_input(detail: str, errors: list[dict[str, str]] | None = None) -> Problem:
    return Problem(
        422,
        "invalid-input",
        "Invalid input",
        detail,
        {"errors": errors if errors is not None else [{"field": "", "message": detail}]},
    )


def _session_ended(error: SessionEnded) -> dict[str, Any]:
    return {
        "session_id": error.session_id,
        "end_reason": error.end_reason,
        "live_session_id": error.live_session_id,
        "via": error.via,
    }


def _invalid_field(error: InvalidInput) -> dict[str, Any]:
    if not error.field:
        return {}
    return {"errors": [{"field": error.field, "message": str(error)}]}


def _partly_applied(error: DeletePartlyApplied) -> dict[str, Any]:
    return {
        "deleted_sessions": error.result.deleted_sessions,
        "deleted_messages": error.result.deleted_messages,
        "trash_entry_ids": list(error.result.trash_entry_ids),
    }


# (exception class, status, slug, title, extension members): the first class that matches wins.
PROBLEM_OF: list[tuple[type[BaseException], int, str, str, Callable[[Any], dict]]] = [
    (SessionEnded, 409, "session-ended", "Session ended", _session_ended),
    (PlanChanged, 409, "plan-changed", "Plan changed", lambda e: {}),
    (RewritePlanChanged, 409, "plan-changed", "Plan changed", lambda e: {}),
    (ResumePlanChanged, 409, "plan-changed", "Plan changed", lambda e: {}),
    (SessionsHeld, 409, "held", "Held", lambda e: {}),
    (SessionBeingDeleted, 409, "being-deleted", "Being deleted", lambda e: {}),
    (SessionsWentLive, 409, "plan-changed", "Plan changed", lambda e: {}),
    (ConversationsKept, 409, "plan-changed", "Plan changed", lambda e: {}),
    (RestoreConflict, 409, "restore-conflict", "Restore conflict", lambda e: {}),
    (SessionNotFound, 404, "not-found", "Not found", lambda e: {}),
    (ConversationNotFound, 404, "not-found", "Not found", lambda e: {}),
    (MergeNotFound, 404, "not-found", "Not found", lambda e: {}),
    (AmbiguousSessionRef, 422, "invalid-input", "Invalid input", lambda e: {}),
    (TitleTaken, 409, "title-taken", "Title taken", lambda e: {"owner": e.owner}),
    (TruncationRefused, 409, "truncation-refused", "Truncation refused", lambda e: {}),
    (NothingToUndo, 409, "nothing-to-undo", "Nothing to undo", lambda e: {}),
    (IdempotencyKeyReused, 422, "idempotency-key-reused", "Idempotency key reused", lambda e: {}),
    (ReadOnlyStore, 403, "read-only", "Store attached read-only", lambda e: {}),
    (StoreBusy, 503, "store-busy", "Store busy", lambda e: {}),
    (DatabaseNotWritten, 503, "store-busy", "Database not written", lambda e: {}),
    (DashboardNotWritten, 503, "store-busy", "Database not written", lambda e: {}),
    (InvalidInput, 422, "invalid-input", "Invalid input", _invalid_field),
    (StoreError, 409, "refused", "Refused", lambda e: {}),
    (DeletePartlyApplied, 500, "partly-applied", "Partly applied", _partly_applied),
]


def problem_of(error: BaseException) -> Problem | None:
    """The problem a core or ledger exception answers as, or None for an unexpected one."""
    if isinstance(error, Problem):
        return error
    for cls, status, slug, title, extend in PROBLEM_OF:
        if isinstance(error, cls):
            extensions = extend(error)
            if slug == "invalid-input" and "errors" not in extensions:
                extensions["errors"] = [{"field": "", "message": str(error)}]
            headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 503 else {}
            return Problem(status, slug, title, str(error), extensions, headers)
    return None


def response(problem: Problem) -> HttpResponse:
    answer = HttpResponse(
        json.dumps(problem.body(), ensure_ascii=False, default=str),
        status=problem.status,
        content_type=MEDIA_TYPE,
    )
    for name, value in problem.headers.items():
        answer[name] = value
    return answer


class UnstorableText(ValueError):
    """A JSON body holding a string neither database can store (a NUL, a lone surrogate)."""

    def __init__(self, where: str, problem: str):
        self.where = where
        self.problem = problem
        super().__init__(f"{where or 'the body'} {problem}")


def check_storable(value: Any, where: str = "") -> None:
    """Raise ``UnstorableText`` for the first string (key or value) no database can store."""
    if isinstance(value, str):
        problem = storability_problem(value)
        if problem:
            raise UnstorableText(where, problem)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_storable(key, where)
            check_storable(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_storable(item, f"{where}[{index}]")


def _field(location: tuple) -> str:
    """``("body", "messages", 0, "content")`` -> ``messages[0].content``."""
    parts = list(location)
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        # ninja's location starts with the source, and a body's with its parameter too (every
        # route names its body parameter ``body``).
        parts = parts[2:] if parts[0] == "body" and parts[1:2] == ["body"] else parts[1:]
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _from_validation(error: ValidationError) -> Problem:
    errors = [
        {"field": _field(tuple(item.get("loc", ()))), "message": str(item.get("msg", ""))}
        for item in error.errors
    ]
    detail = "; ".join(f"{e['field'] or 'body'}: {e['message']}" for e in errors[:5])
    return invalid_input(detail or "The request does not match the schema.", errors)


def _from_http_error(error: HttpError) -> Problem:
    cause = error.__cause__
    if isinstance(cause, UnstorableText):
        return invalid_input(
            f"The field {cause.where or '(body)'} {cause.problem}: nothing was changed.",
            [{"field": cause.where, "message": cause.problem}],
        )
    if isinstance(cause, RequestDataTooBig):
        return _too_large()
    if isinstance(error, Throttled):
        return Problem(
            429,
            "throttled",
            "Too many requests",
            "This token made too many requests: wait and retry.",
        )
    if isinstance(error, AuthenticationError):
        return unauthorized("Give a token (Authorization: Bearer sa_...) or sign in.")
    if error.status_code == 400:
        return Problem(
            400,
            "malformed-request",
            "Malformed request",
            "The request body is not valid JSON (or not UTF-8): nothing was changed.",
        )
    if error.status_code == 403:
        return forbidden(str(error))
    return Problem(error.status_code, "http-error", str(error) or "Error", str(error))


def _too_large() -> Problem:
    from django.conf import settings

    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return Problem(
        413,
        "too-large",
        "Request too large",
        f"The request body is over {limit:,} bytes (DATA_UPLOAD_MAX_MEMORY_SIZE): nothing was "
        "changed. Send fewer messages per request.",
        {"max_bytes": limit},
    )


def problem_for(error: BaseException) -> Problem:
    """Every exception a route or ninja raised, as the problem the API answers."""
    if isinstance(error, ValidationError):
        return _from_validation(error)
    if isinstance(error, HttpError):
        return _from_http_error(error)
    if isinstance(error, RequestDataTooBig):
        return _too_large()
    if isinstance(error, Http404):
        return not_found(str(error) or "Not found.")
    if isinstance(error, PermissionDenied):
        return forbidden(str(error) or "Forbidden.")
    known = problem_of(error)
    if known is not None:
        return known
    if isinstance(error, DatabaseError) and (
        core_db.is_busy_error(error) or core_db.connection_lost(error)
    ):
        if core_db.connection_lost(error):
            core_db.close_broken_connections()
        return Problem(
            503,
            "store-busy",
            "Database unavailable",
            "A database was busy or restarted and this request did not finish: read the "
            "current state before trying again.",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    if isinstance(error, DatabaseError) and (storage := core_db.storage_failure(error)):
        return Problem(
            503,
            "store-busy",
            "Database not written",
            f"A database could not be written ({storage}): this request did not finish.",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    return Problem(500, "internal", "Internal error", "An unexpected error; it was logged.")


# Refused changing calls the audit log records (as the console records a refused form): not a
# 404 (nothing to act on), a 405 or a 429 (the throttle exists to keep floods out).
AUDITED_REFUSALS = frozenset({400, 401, 403, 409, 413, 422})
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def install(
    api,
    *,
    refused: Callable[[HttpRequest, Problem, BaseException], None],
    unauthenticated: Callable[[HttpRequest, Problem], Problem] | None = None,
) -> None:
    """Route every exception of ``api`` through ``problem_for``; ``refused`` records a refused
    changing call (an error the action audited itself is marked ``audited_entry`` and skipped
    there); ``unauthenticated`` may answer a 401 otherwise (a throttle's 429)."""

    def handle(request: HttpRequest, error: Exception) -> HttpResponse:
        problem = problem_for(error)
        if problem.status == 401 and unauthenticated is not None:
            problem = unauthenticated(request, problem)
        if problem.status >= 500:
            logger.error(
                "API %s %s answered %s",
                request.method,
                request.path,
                problem.status,
                exc_info=error,
            )
        if request.method not in SAFE_METHODS and problem.status in AUDITED_REFUSALS:
            refused(request, problem, error)
        return response(problem)

    for error_class in (Exception, Http404, HttpError, ValidationError):
        api.add_exception_handler(error_class, handle)
