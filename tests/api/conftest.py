"""What the API tests share: tokens of each scope, and a client that speaks JSON with a token."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client

from sessions_admin.ledger import actions

API = "/api/v1"


@dataclass
class Answer:
    status: int
    body: Any
    headers: Any


class ApiClient:
    """Django's test client with ``Authorization: Bearer <secret>`` and JSON bodies."""

    def __init__(self, secret: str | None = None, client: Client | None = None):
        self.secret = secret
        self.client = client or Client()

    def call(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None, **headers
    ) -> Answer:
        extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
        if self.secret:
            extra["HTTP_AUTHORIZATION"] = f"Bearer {self.secret}"
        data = raw if raw is not None else (None if body is None else json.dumps(body))
        url = path if path.startswith("/") else f"{API}/{path}"
        kwargs = {"content_type": "application/json"} if data is not None else {}
        response = self.client.generic(method, url, data or b"", **kwargs, **extra)
        content_type = response.get("Content-Type", "")
        if response.streaming:  # a stream (text/event-stream) is read to its end
            return Answer(response.status_code, b"".join(response.streaming_content), response)
        parsed = (
            json.loads(response.content)
            if "json" in content_type and response.content
            else response.content
        )
        return Answer(response.status_code, parsed, response)

    def get(self, path: str, **headers) -> Answer:
        return self.call("GET", path, **headers)

    def post(self, path: str, body: Any = None, **headers) -> Answer:
        return self.call("POST", path, body if body is not None else {}, **headers)

    def put(self, path: str, body: Any = None, **headers) -> Answer:
        return self.call("PUT", path, body if body is not None else {}, **headers)


@pytest.fixture
def make_token(ada):
    """``make_token(scope, name=..., sources=..., expires_days=...)`` -> its secret, created by
    ada as an admin (a token works while its creator is an active admin)."""
    from sessions_admin.signin.roles import assign_role

    assign_role(ada, "admin")
    count = iter(range(1, 1000))

    def make(scope: str, *, name: str | None = None, sources=(), expires_days=None) -> str:
        created = actions.create_api_token(
            actor=ada,
            name=name or f"{scope}-{next(count)}",
            scope=scope,
            sources=list(sources),
            expires_days=expires_days,
        )
        return created.secret

    return make


@pytest.fixture
def runtime(make_token) -> ApiClient:
    """A client holding a runtime token (every source)."""
    return ApiClient(make_token("runtime", name="runtime-main"))
