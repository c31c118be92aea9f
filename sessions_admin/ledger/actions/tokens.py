"""Creating and revoking API tokens, audited (``ledger.models.ApiToken``; the API is
``sessions_admin.api``).

A token and its audit entry live in the same (dashboard) database, so each action writes both
in one transaction: there is no store change to record as pending first, and a token never
exists without the entry that says who created it. The secret is returned once, by
``create_api_token``, and never stored: only its SHA-256 is.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.text import operator_identifier
from sessions_admin.ledger.actions.audit import _audit_alias, _name, record
from sessions_admin.ledger.models import ApiToken, AuditAction

SECRET_PREFIX = "sa_"
# The name is the actor of every audit entry the token writes (``api:<name>``): kept plain.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
MAX_EXPIRES_DAYS = 3650
MAX_SOURCES = 50
SCOPES = tuple(scope for scope, _ in ApiToken.SCOPES)


@dataclass(frozen=True)
class CreatedToken:
    token: ApiToken
    secret: str  # shown once; only its hash is stored


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def _checked(
    name: object, scope: object, sources: object, expires_days: object
) -> tuple[str, str, list[str], int | None]:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidInput(
            "Give the token a name of 1 to 100 letters, digits, dots, dashes or underscores, "
            "starting with a letter or digit."
        )
    if scope not in SCOPES:
        raise InvalidInput(f"The scope must be one of {', '.join(SCOPES)}.")
    if sources is None:
        sources = []
    if isinstance(sources, str) or not isinstance(sources, list | tuple):
        raise InvalidInput("Give the sources as a list.")
    sources = list(
        dict.fromkeys(operator_identifier(s, field="source", max_length=200) for s in sources)
    )
    if sources and scope != ApiToken.RUNTIME:
        raise InvalidInput("Only a runtime token is limited to sources.")
    if len(sources) > MAX_SOURCES:
        raise InvalidInput(f"Name at most {MAX_SOURCES} sources.")
    if expires_days is not None:
        if isinstance(expires_days, bool) or not isinstance(expires_days, int):
            raise InvalidInput("The expiry must be a whole number of days.")
        if not 1 <= expires_days <= MAX_EXPIRES_DAYS:
            raise InvalidInput(f"The expiry must be between 1 and {MAX_EXPIRES_DAYS} days.")
    return name, scope, sources, expires_days


def create_api_token(
    *,
    actor,
    name: str,
    scope: str,
    sources: list[str] | tuple[str, ...] = (),
    expires_days: int | None = None,
) -> CreatedToken:
    """A new token and its secret (shown once), audited; ``InvalidInput`` changes nothing."""
    name, scope, sources, expires_days = _checked(name, scope, sources, expires_days)
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    now = timezone.now()
    alias = _audit_alias()
    with transaction.atomic(using=alias):
        # Revoked tokens keep their names: an audit entry's "api:<name>" names one token only.
        # Whatever the case: the audit log filters actors regardless of it.
        if ApiToken.objects.using(alias).select_for_update().filter(name__iexact=name).exists():
            raise InvalidInput(f"A token named {name!r} exists already (revoked names stay taken).")
        token = ApiToken.objects.using(alias).create(
            name=name,
            scope=scope,
            sources=sources,
            secret_hash=hash_secret(secret),
            created_by=actor if getattr(actor, "pk", None) else None,
            created_by_operator=bool(getattr(actor, "pk", None)),
            created_by_name=_name(actor)[:150],
            expires_at=now + timedelta(days=expires_days) if expires_days else None,
        )
        record(
            actor=actor,
            action=AuditAction.API_TOKEN_CREATE,
            session_ids=[],
            after={
                "token": token.pk,
                "name": name,
                "scope": scope,
                "sources": sources,
                "expires_at": token.expires_at.isoformat() if token.expires_at else None,
            },
        )
    return CreatedToken(token=token, secret=secret)


def revoke_api_token(*, actor, name: str) -> ApiToken:
    """Revoke the token named ``name``: refused from its next request on. Audited."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidInput("No token has that name.")
    alias = _audit_alias()
    with transaction.atomic(using=alias):
        token = ApiToken.objects.using(alias).select_for_update().filter(name=name).first()
        if token is None:
            raise InvalidInput(f"No token is named {name!r}.")
        if token.revoked_at is not None:
            raise InvalidInput(f"The token {name!r} is revoked already.")
        token.revoked_at = timezone.now()
        token.save(using=alias, update_fields=["revoked_at"])
        record(
            actor=actor,
            action=AuditAction.API_TOKEN_REVOKE,
            session_ids=[],
            before={"token": token.pk, "name": name, "scope": token.scope},
            after={"revoked_at": token.revoked_at.isoformat()},
        )
    return token
