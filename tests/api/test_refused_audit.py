"""A refused changing call is audited under its own route's action, the one its success records,
not the name of a read that shares its path (a refused cascade delete was ``api_cascade_plan``)."""

from __future__ import annotations

import pytest

from sessions_admin.ledger.models import AuditAction, AuditEntry
from tests.api.conftest import ApiClient
from tests.api.test_access import ROUTES, RUNTIME, SAFE, _call

# Each changing route of the access table: the action its refusal is audited under. A POST that
# only reads (a dry run, a preview) audits no success: it keeps ``api_<route>``.
REFUSED_AS = {
    ("POST", "/runtime/sessions"): AuditAction.START_SESSION,
    ("POST", "/runtime/sessions/{session_id}/messages"): AuditAction.APPEND,
    ("POST", "/runtime/sessions/{session_id}/turns"): AuditAction.TURN,
    ("POST", "/runtime/sessions/{session_id}/usage"): AuditAction.USAGE,
    ("POST", "/runtime/sessions/{session_id}/rotate"): AuditAction.ROTATE_FOR_COMPRESSION,
    ("POST", "/runtime/reset"): AuditAction.RESET,
    ("POST", "/runtime/resume"): AuditAction.RESUME,
    ("POST", "/runtime/sessions/{session_id}/branch"): AuditAction.BRANCH,
    ("POST", "/runtime/sessions/{session_id}/undo"): AuditAction.UNDO,
    ("POST", "/runtime/sessions/{session_id}/retry"): AuditAction.RETRY,
    ("POST", "/runtime/sessions/{session_id}/redo"): AuditAction.REDO,
    ("PUT", "/runtime/sessions/{session_id}/transcript"): AuditAction.SAVE_TRANSCRIPT,
    ("POST", "/runtime/conversations/resolve"): AuditAction.RESOLVE_CONVERSATION,
    ("POST", "/merges"): AuditAction.MERGE,
    ("POST", "/merges/{merge_id}/undo"): AuditAction.UNMERGE,
    ("POST", "/cascades/{session_id}"): AuditAction.CASCADE_DELETE,
    ("POST", "/bulk-deletes/dry-run"): "api_bulk_delete_dry_run",
    ("POST", "/bulk-deletes"): AuditAction.BULK_DELETE,
    ("POST", "/jobs/{job_id}/cancel"): AuditAction.CANCEL_BULK_DELETE,
    ("POST", "/trash/{entry_id}/restore"): AuditAction.RESTORE,
    ("POST", "/holds"): AuditAction.PLACE_HOLD,
    ("POST", "/holds/{hold_id}/release"): AuditAction.RELEASE_HOLD,
    ("POST", "/retention/policies"): AuditAction.RETENTION_POLICY_CREATE,
    ("DELETE", "/retention/policies/{policy_id}"): AuditAction.RETENTION_POLICY_DELETE,
    ("POST", "/retention/policies/{policy_id}/enable"): AuditAction.RETENTION_POLICY_ENABLE,
    ("POST", "/retention/policies/{policy_id}/disable"): AuditAction.RETENTION_POLICY_DISABLE,
    ("POST", "/retention/policies/{policy_id}/runs"): AuditAction.RETENTION_RUN,
    ("POST", "/erasure/preview"): "api_erasure_preview",
    ("POST", "/erasure/requests"): AuditAction.ERASURE_REQUEST,
}
WRITES = sorted(route for route in ROUTES if route[0] not in SAFE)

pytestmark = pytest.mark.usefixtures("no_worker")


def test_every_changing_route_has_its_refusal_action():
    assert set(REFUSED_AS) == set(WRITES)


@pytest.mark.parametrize("route", WRITES, ids=lambda r: f"{r[0]} {r[1]}")
def test_a_refused_write_is_audited_under_its_own_action(route, seeded, make_token):
    """A token of the wrong scope: 403, one refused entry, named as the write's success is."""
    wrong = make_token("viewer" if ROUTES[route] == RUNTIME else "runtime")
    last = AuditEntry.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    answer = _call(ApiClient(wrong), route, seeded)
    assert answer.status == 403, answer.body
    refused = list(
        AuditEntry.objects.filter(pk__gt=last, outcome=AuditEntry.REFUSED).values_list(
            "action", flat=True
        )
    )
    assert refused == [REFUSED_AS[route]]


def test_invalid_input_to_a_write_is_audited_under_the_write(make_token):
    """An admin's own 422 on a path a read shares is the write's refusal too."""
    admin = ApiClient(make_token("admin"))
    for path, action in (
        ("holds", AuditAction.PLACE_HOLD),
        ("retention/policies", AuditAction.RETENTION_POLICY_CREATE),
    ):
        last = AuditEntry.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        assert admin.post(path, {"nonsense": 1}).status == 422
        refused = AuditEntry.objects.filter(pk__gt=last, outcome=AuditEntry.REFUSED)
        assert list(refused.values_list("action", flat=True)) == [action]
