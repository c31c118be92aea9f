"""API tokens (admins): the tokens of the HTTP API, creating one (its secret shown once) and
revoking one (its name typed to confirm). docs/api.md says what each scope may do.

The page is about the dashboard, not the store, so it stays open to admins while the store is
attached read-only (as the sign-in failures page does). The secret is rendered into the answer
of the create request only: never stored, never put in a message or a redirect.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from sessions_admin.console.forms import ApiTokenForm, ApiTokenRevokeForm
from sessions_admin.console.http import HtmxHttpRequest
from sessions_admin.console.refusals import Refused, attempt, attempt_valid, refuse
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import ApiToken, AuditAction
from sessions_admin.signin.roles import role_of
from sessions_admin.signin.tokens import token_state

TEMPLATE = "console/api_tokens.html"


def _admin_only(request: HtmxHttpRequest, action: str) -> None:
    if role_of(request.user) != "admin":
        why = "Only admins manage API tokens."
        refuse(request, action, why)
        raise PermissionDenied(why)


def _render(
    request: HtmxHttpRequest,
    *,
    created: actions.CreatedToken | None = None,
    values: dict | None = None,
    problems=(),
    status: int = 200,
) -> HttpResponse:
    now = timezone.now()
    context = {
        "tokens": [(token, token_state(token, now)) for token in ApiToken.objects.all()],
        "scopes": [scope for scope, _ in ApiToken.SCOPES],
        "created": created,
        "values": values or {"scope": ApiToken.RUNTIME},
        "problems": list(problems),
    }
    return render(request, TEMPLATE, context, status=status)


@require_GET
def api_tokens(request: HtmxHttpRequest) -> HttpResponse:
    _admin_only(request, "api_tokens")
    return _render(request)


@require_POST
def api_token_create(request: HtmxHttpRequest) -> HttpResponse:
    _admin_only(request, AuditAction.API_TOKEN_CREATE)
    form = ApiTokenForm(request.POST)
    values = {name: form.shown_back(name) for name in ("name", "scope", "sources", "expires_days")}
    created = attempt_valid(
        request,
        AuditAction.API_TOKEN_CREATE,
        form,
        lambda data: actions.create_api_token(
            actor=request.user,
            name=data["name"],
            scope=data["scope"],
            sources=data["sources"],
            expires_days=data["expires_days"],
        ),
    )
    if isinstance(created, Refused):
        problems = created.said("No token was created: ")
        return _render(request, values=values, problems=problems, status=400)
    return _render(request, created=created, status=201)


@require_POST
def api_token_revoke(request: HtmxHttpRequest) -> HttpResponse:
    _admin_only(request, AuditAction.API_TOKEN_REVOKE)
    form = ApiTokenRevokeForm(request.POST)
    if form.problem() is not None:
        refuse(
            request,
            AuditAction.API_TOKEN_REVOKE,
            form.problem(),
            message="The token stays valid: ",
        )
        return redirect("api_tokens")
    token = attempt(
        request,
        AuditAction.API_TOKEN_REVOKE,
        lambda: actions.revoke_api_token(actor=request.user, name=form.cleaned_data["name"]),
        message="Nothing was revoked: ",
    )
    if isinstance(token, Refused):
        return redirect("api_tokens")
    messages.success(request, f"Revoked the API token {token.name}: its next request is refused.")
    return redirect("api_tokens")
