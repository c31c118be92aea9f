"""Property-based testing from the published schema (schemathesis): for every operation, generated
requests (valid and invalid) never get a 5xx nor a response the schema does not describe
(status, content type, headers, body).

The calls go in-process through Django's WSGI handler, with an admin token and with a runtime
token (each scope reaches its own routes), on this test's databases, over a small seeded store.
"""

from __future__ import annotations

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings

from sessions_admin.ledger import actions

schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())
# A random id names no session: a 404 for a well-formed request is the right answer, not a bug.
EXCLUDED = [schemathesis.checks.positive_data_acceptance]


@pytest.fixture
def secrets_by_scope(seeded, no_worker) -> dict[str, str]:
    return {
        scope: actions.create_api_token(actor=None, name=f"fuzz-{scope}", scope=scope).secret
        for scope in ("runtime", "admin")
    }


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_no_generated_request_breaks_the_api(case, secrets_by_scope, settings):
    settings.SESSIONS_ADMIN_API_RATE = ""
    settings.SESSIONS_ADMIN_SWITCH_STREAM_SECONDS = 0.2  # a switch stream or long poll: short
    for secret in secrets_by_scope.values():
        case.call_and_validate(
            headers={"Authorization": f"Bearer {secret}"}, excluded_checks=EXCLUDED
        )
