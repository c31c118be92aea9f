"""The log's request context and formats, loaded by ``LOGGING`` before Django's apps are.

Every record carries ``request_id`` and ``operator`` (``RequestContextFilter``: the request
``console.requestlog`` is handling in this context, "-" outside one). ``ExpectedAnswerFilter``
keeps an expected refusal to one line: Django logs every 4xx answer again on
``django.request``, a 403 from ``PermissionDenied`` with its whole traceback; the request line
already says it, so those records are dropped (5xx, with their tracebacks, pass).
``SESSIONS_ADMIN_LOG_FORMAT=json`` selects ``JsonFormatter``: one JSON object per line, with the
standard library only. Nothing here imports models: ``LOGGING`` is applied first.
"""

from __future__ import annotations

import json
import logging
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

# The request being handled in this context, with its id (set by RequestLogMiddleware).
current_request: ContextVar[tuple[str, Any] | None] = ContextVar(
    "sessions_admin_request", default=None
)


def operator_of(request: Any) -> str:
    """Who the request acts as, without a query of its own: the signed-in operator Django
    already loaded, or the API token that authenticated it; "-" for neither."""
    user = getattr(request, "_cached_user", None)
    if user is not None and getattr(user, "is_authenticated", False):
        return user.get_username()
    token = getattr(request, "api_token_name", None)
    if token:
        return f"token:{token}"
    return "-"


class RequestContextFilter(logging.Filter):
    """Gives every record ``request_id`` and ``operator`` ("-" outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = current_request.get()
        if not hasattr(record, "request_id"):
            record.request_id = current[0] if current else "-"
        if not hasattr(record, "operator"):
            record.operator = operator_of(current[1]) if current else "-"
        return True


class ExpectedAnswerFilter(logging.Filter):
    """Drops ``django.request``'s records of 4xx answers (the request line says them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "django.request":
            return True
        status = getattr(record, "status_code", None)
        return not (isinstance(status, int) and status < 500)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: time, level, logger, message, request_id,
    operator, the request line's fields (method, path, view, status, duration_ms, client) or
    an action's (action, outcome, entry, sessions), and the traceback of a 5xx."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", "-"),
            "operator": getattr(record, "operator", "-"),
        }
        entry.update(getattr(record, "request_fields", None) or {})
        entry.update(getattr(record, "action_fields", None) or {})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)
