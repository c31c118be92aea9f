"""Requests refused authentication (no token, an unknown one) are throttled per client
address, and past the rate they are not each written to the audit log."""

from __future__ import annotations

from django.core.cache import cache

from sessions_admin.core import db
from sessions_admin.ledger.models import AuditEntry
from tests.api.conftest import ApiClient

HOLD = {"kind": "user", "subject": "x", "reason": "y"}


def test_refused_authentications_are_throttled_per_address_and_not_all_audited(
    make_token, settings
):
    settings.SESSIONS_ADMIN_API_AUTH_FAIL_RATE = "5/min"
    cache.clear()
    audited = AuditEntry.objects.count()
    nobody = ApiClient()
    answers = [nobody.post("holds", HOLD, user_agent="U" * 500) for _ in range(20)]
    answers += [ApiClient(f"sa_{n:043d}").post("holds", HOLD) for n in range(20)]
    answers += [nobody.get("sessions") for _ in range(5)]
    statuses = [a.status for a in answers]
    assert statuses == [401] * 5 + [429] * 40, statuses
    throttled = answers[-1]
    assert throttled.body["type"].endswith("/throttled")
    assert throttled.headers["Content-Type"] == "application/problem+json"
    assert 1 <= int(throttled.headers["Retry-After"]) <= 60
    # Only the refusals within the rate are in the audit log; no hold was placed.
    assert AuditEntry.objects.count() - audited == 5
    assert AuditEntry.objects.filter(outcome="refused").count() == 5
    assert db.fetchall("SELECT id FROM sessions_admin_holds") == []
    # Another address is not affected, and a valid token from this one still gets through.
    other = nobody.client.post(
        "/api/v1/holds", HOLD, content_type="application/json", REMOTE_ADDR="10.0.0.9"
    )
    assert other.status_code == 401
    assert ApiClient(make_token("viewer", name="valid-here")).get("me").status == 200


def test_no_limit_when_the_rate_is_empty(settings):
    settings.SESSIONS_ADMIN_API_AUTH_FAIL_RATE = ""
    cache.clear()
    assert {ApiClient().get("me").status for _ in range(70)} == {401}
