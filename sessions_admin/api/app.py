"""The API's ninja instance, its routers and its URLs (mounted at ``/api/v1/``).

Every route is authenticated (``auth.api_auth``; a router that names no permission of its own
gets ``VIEW``), throttled per token, and answers errors as problem details (``problems``). JSON
bodies are checked whole before any route runs (``StrictJSONParser``): a string neither
database can store is a 422 naming its field, so nothing half-applies. The schema
(``openapi.json``) and the docs page (ninja's vendored Swagger UI, no CDN, no inline script)
need no sign-in.
"""

from __future__ import annotations

import functools
import json
from collections import Counter

from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpResponseNotAllowed
from django.urls import re_path
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI, Schema
from ninja.errors import ValidationError
from ninja.operation import PathView
from ninja.parser import Parser

from sessions_admin.api import (
    deletion,
    governance,
    merges,
    problems,
    runtime,
    sessions,
    switches,
)
from sessions_admin.api.auth import (
    SIGNED_IN,
    VIEW,
    TokenRateThrottle,
    api_auth,
    record_refused_call,
    throttle_refused_authentication,
)


def _unique_names(pairs: list[tuple[str, object]]) -> dict:
    """An object whose names are each given once: ``{"typed_count": 2, "typed_count": 1}``
    is refused, not read as its last value (a proxy or a log reading the first would see
    another request than the one carried out)."""
    found = dict(pairs)
    if len(found) != len(pairs):
        repeated = sorted(name for name, n in Counter(name for name, _ in pairs).items() if n > 1)
        raise ValueError(f"a name given more than once in one object: {', '.join(repeated)}")
    return found


class StrictJSONParser(Parser):
    def parse_body(self, request):
        # Decoded as UTF-8 first: ``json.loads`` of bytes guesses UTF-16 and UTF-32 and skips a
        # byte-order mark, where docs/api.md promises a 400 for a body that is not UTF-8 JSON.
        data = json.loads(request.body.decode("utf-8"), object_pairs_hook=_unique_names)
        problems.check_storable(data)
        return data

    def parse_querydict(self, data, list_fields, request):
        """A parameter given twice is a 422 unless the route takes a list: ninja kept the last
        value (``?active=junk&active=true`` was answered as ``active=true``)."""
        repeated = [key for key in data if key not in list_fields and len(data.getlist(key)) > 1]
        if repeated:
            raise ValidationError(
                [
                    {"loc": ("query", key), "msg": "given more than once", "type": "repeated"}
                    for key in repeated
                ]
            )
        return super().parse_querydict(data, list_fields, request)


PROBLEM_SCHEMA = {
    "type": "object",
    "description": "An RFC 9457 problem detail (docs/api.md, Errors).",
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
    },
    "required": ["type", "title", "status", "detail"],
    "additionalProperties": True,
}


class SessionsAdminAPI(NinjaAPI):
    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        """ninja's schema, every operation also declaring its problem answers (4XX, 5XX)."""
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        schema.setdefault("components", {}).setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
        problem = {
            "description": "A problem detail",
            "content": {problems.MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for operations in schema["paths"].values():
            for operation in operations.values():
                responses = operation.setdefault("responses", {})
                for status in ("4XX", "5XX"):
                    responses.setdefault(status, problem)
        return schema


api = SessionsAdminAPI(
    title="sessions_admin API",
    version="1",
    description="The session store's rules over HTTP: runtime lifecycle writes and operator "
    "actions (docs/api.md). Errors are RFC 9457 problem details.",
    urls_namespace="api",
    auth=api_auth(VIEW),
    throttle=[TokenRateThrottle()],
    parser=StrictJSONParser(),
    docs_decorator=login_not_required,
)
problems.install(api, refused=record_refused_call, unauthenticated=throttle_refused_authentication)
api.add_router("/runtime", runtime.router)
api.add_router("/switches", switches.router)
api.add_router("/merges", merges.router)
api.add_router("/", deletion.router)
api.add_router("/", sessions.router)
api.add_router("/", governance.router)


class MeOut(Schema):
    name: str
    scope: str
    via: str  # "token" or "session"
    sources: list[str]


@api.get("/me", response=MeOut, auth=api_auth(SIGNED_IN), tags=["auth"])
def me(request):
    """Who the request acts for: a token's name, scope and sources, or the signed-in operator."""
    caller = request.auth
    return MeOut(
        name=caller.name,
        scope=caller.scope,
        via="session" if caller.user is not None else "token",
        sources=list(caller.sources),
    )


def _operation_names(view) -> dict[str, str]:
    """{method: route function name} of one path's ninja view (its ``PathView``), so a refused
    call is audited under its own route's action (``auth.refused_action``), not the name of
    the path's first route."""
    for cell in getattr(view, "__closure__", None) or ():
        path_view = cell.cell_contents
        if isinstance(path_view, PathView):
            return {
                method: operation.view_func.__name__
                for operation in path_view.operations
                for method in operation.methods
            }
    return {}


def _answering_problems(view):
    """``view`` with ninja's plain-text 405 (and its root's 404) answered as problem details."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        try:
            answer = view(request, *args, **kwargs)
        except Http404:  # ninja's root view, outside its exception handlers
            return no_such_route(request)
        if isinstance(answer, HttpResponseNotAllowed):
            problem = problems.Problem(
                405,
                "method-not-allowed",
                "Method not allowed",
                f"{request.method} is not allowed here; the methods are {answer['Allow']}.",
                headers={"Allow": answer["Allow"]},
            )
            return problems.response(problem)
        return answer

    wrapped.operation_names = _operation_names(view)
    # Token calls carry no CSRF token: ninja checks it itself for signed-in sessions.
    wrapped.csrf_exempt = True
    wrapped.login_required = False
    return wrapped


@csrf_exempt
@login_not_required
def no_such_route(request, rest: str = ""):
    return problems.response(problems.not_found(f"The API has no route {request.path!r}."))


def urlpatterns() -> tuple:
    """``api.urls`` with every view open to the API's own auth (the console's
    ``LoginRequiredMiddleware`` would send a token caller to the sign-in page), and every
    error a problem detail, an unknown path's 404 included."""
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        pattern.callback = _answering_problems(pattern.callback)
    patterns = [*patterns, re_path(r"^(?P<rest>.*)$", no_such_route, name="no_such_route")]
    return patterns, app_name, namespace
