"""One log line per request, with its request id (``X-Request-ID``) and operator.

``RequestLogMiddleware`` is first in MIDDLEWARE, so it sees every answer, refusals and errors
turned into pages included. It takes the request's ``X-Request-ID`` when it is a sane token (up
to 128 of ``A-Za-z0-9._:-``, as proxies and load balancers make them) or makes one (32 hex
digits), returns it in the response's ``X-Request-ID``, and writes one line on the
``sessions_admin.request`` logger once the answer is ready: method, path, view (URL name),
status, milliseconds, client address; the operator and request id come with every record
logged meanwhile (``console.logformat``). It also times the request for the metrics
(``console.metrics``), once. Probes answered well (``/healthz``, ``/readyz``, ``/metrics``,
every few seconds) log at DEBUG, a failing one at WARNING; a 5xx at ERROR.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from sessions_admin.console import metrics
from sessions_admin.console.logformat import current_request
from sessions_admin.ledger.context import client_address
from sessions_admin.signin.middleware import PROBE_PATHS

REQUEST_ID_HEADER = "X-Request-ID"
_SANE_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")

request_log = logging.getLogger("sessions_admin.request")


def request_id_of(header: str | None) -> str:
    """The caller's request id when it is a sane token, else a new one."""
    if header and _SANE_ID.fullmatch(header):
        return header
    return uuid.uuid4().hex


def _view_name(request) -> str:
    match = getattr(request, "resolver_match", None)
    return (match.view_name or "-") if match is not None else "-"


class RequestLogMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        request_id = request_id_of(request.META.get("HTTP_X_REQUEST_ID"))
        request.request_id = request_id
        token = current_request.set((request_id, request))
        try:
            response = self.get_response(request)
            response[REQUEST_ID_HEADER] = request_id
            elapsed = time.perf_counter() - started
            status = response.status_code
            if request.path in PROBE_PATHS:
                level = logging.DEBUG if status < 400 else logging.WARNING
            else:
                level = logging.ERROR if status >= 500 else logging.INFO
            fields = {
                "method": request.method,
                "path": request.path,
                "view": _view_name(request),
                "status": status,
                "duration_ms": round(elapsed * 1000, 1),
                "client": client_address(request) or "-",
            }
            metrics.count_request(
                view=fields["view"], method=request.method, status=status, seconds=elapsed
            )
            request_log.log(
                level,
                "%(method)s %(path)s %(status)s %(duration_ms)sms view=%(view)s client=%(client)s",
                fields,
                extra={"request_fields": fields},
            )
        finally:
            current_request.reset(token)
        return response
