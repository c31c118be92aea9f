"""The retention page against an adversary (issue 25, items 11 and 12): a bad number of
days is refused by the form with nothing stored; "Run now" is a delete that looks like
one (the list of sessions first, then a reason, the number typed from 20 sessions, the
preview's fingerprint, and for a purge its own tick); a purge job's page offers no trash.
Every check reads the databases."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.urls import reverse

from sessions_admin.core import holds
from sessions_admin.ledger import jobs
from sessions_admin.ledger.models import AuditEntry, DeleteJob, RetentionPolicy, TrashEntry
from tests.console.test_retention_views import FORM
from tests.helpers import session_ids
from tests.ledger.test_retention import old_session

pytestmark = pytest.mark.usefixtures("no_worker")


def _policy(**fields) -> RetentionPolicy:
    return RetentionPolicy.objects.create(
        name="quiet", older_than_days=30, created_by="t", **fields
    )


def _preview(client, policy) -> tuple[str, str]:
    page = client.get(reverse("retention_preview", args=[policy.pk])).content.decode()
    found = re.search(r'name="digest" value="([^"]+)"', page)
    return page, found.group(1) if found else ""


@pytest.mark.parametrize(
    "days", ["0", "-1", "-0.5", "nan", "NaN", "inf", "-inf", "1e400", "36501", "abc", "true", ""]
)
def test_the_form_refuses_a_bad_number_of_days_and_stores_nothing(signed_in, days):
    client = signed_in("admin")
    sessions = {old_session(days=0.001), old_session(days=100)}
    response = client.post(reverse("retention_create"), {**FORM, "older_than_days": days})
    assert response.status_code == 400
    assert "between 1 and 36500 days" in response.content.decode()
    assert not RetentionPolicy.objects.exists()
    assert not AuditEntry.objects.filter(action="retention_policy_create", outcome="ok").exists()
    assert session_ids() == sessions


def test_run_now_lists_the_sessions_and_needs_a_reason_and_the_typed_count(signed_in):
    client = signed_in("admin")
    doomed = [old_session(title=f"chat {n}") for n in range(20)]
    policy = _policy()
    page, digest = _preview(client, policy)
    for sid in doomed:
        assert sid in page
    assert 'name="typed_count"' in page
    run = reverse("retention_run", args=[policy.pk])

    for fields in (
        {},  # what "Run now" posted before: no preview, no reason
        {"digest": digest},  # no reason
        {"digest": digest, "reason": "quarterly"},  # 20 sessions: the number is typed
        {"digest": digest, "reason": "quarterly", "typed_count": "19"},
        {"digest": digest, "reason": "   ", "typed_count": "20"},
        {"digest": "0" * 32, "reason": "quarterly", "typed_count": "20"},
    ):
        response = client.post(run, fields)
        assert response.status_code == 400, fields
        assert not DeleteJob.objects.exists(), fields
    assert session_ids() >= set(doomed)
    assert AuditEntry.objects.filter(action="retention_run", outcome="refused").count() == 6

    response = client.post(run, {"digest": digest, "reason": "quarterly", "typed_count": "20"})
    job = DeleteJob.objects.get(policy=policy)
    assert response.status_code == 302 and job.total == 20 and not job.purge
    assert "quarterly" in job.reason
    entry = AuditEntry.objects.get(action="retention_run", outcome="ok")
    assert entry.reason == "quarterly" and set(entry.session_ids) == set(doomed)
    jobs.run_job(job_id=job.pk)
    assert not set(doomed) & session_ids()


def test_run_now_refuses_a_selection_that_changed_since_its_preview(signed_in):
    client = signed_in("admin")
    shown = old_session()
    policy = _policy()
    _, digest = _preview(client, policy)
    late = old_session()
    response = client.post(
        reverse("retention_run", args=[policy.pk]), {"digest": digest, "reason": "r"}
    )
    assert response.status_code == 400
    assert not DeleteJob.objects.exists() and {shown, late} <= session_ids()


def test_a_purge_says_permanently_needs_its_own_tick_and_its_job_offers_no_trash(signed_in):
    client = signed_in("admin")
    doomed = [old_session() for _ in range(2)]
    policy = _policy(mode="purge")
    page, digest = _preview(client, policy)
    assert "permanently" in page and 'name="confirm_purge"' in page
    run = reverse("retention_run", args=[policy.pk])

    response = client.post(run, {"digest": digest, "reason": "data policy"})
    assert response.status_code == 400
    assert not DeleteJob.objects.exists() and set(doomed) <= session_ids()

    response = client.post(run, {"digest": digest, "reason": "data policy", "confirm_purge": "1"})
    job = DeleteJob.objects.get(policy=policy)
    assert job.purge and response.url == reverse("job_detail", args=[job.pk])
    jobs.run_job(job_id=job.pk)
    assert not set(doomed) & session_ids()
    assert not TrashEntry.objects.exists()

    actions = client.get(
        reverse("job_detail", args=[job.pk]) + "?part=actions", HTTP_HX_REQUEST="true"
    ).content.decode()
    assert reverse("trash") not in actions and "cannot be restored" in actions
    page = client.get(reverse("job_detail", args=[job.pk])).content.decode()
    assert "purged permanently" in page


def test_run_now_names_the_holds_that_keep_sessions(signed_in):
    client = signed_in("admin")
    held = old_session(user_id="u-held")
    doomed = old_session()
    hold = holds.place_hold(kind="user", subject="u-held", reason="case 9", actor="ada")
    policy = _policy()
    page, digest = _preview(client, policy)
    assert held in page and f"hold #{hold.id}" in page
    client.post(reverse("retention_run", args=[policy.pk]), {"digest": digest, "reason": "r"})
    job = DeleteJob.objects.get(policy=policy)
    jobs.run_job(job_id=job.pk)
    assert held in session_ids() and doomed not in session_ids()


def test_a_stored_policy_with_bad_days_is_shown_and_never_runs(signed_in):
    client = signed_in("admin")
    fresh = old_session(days=0.001)
    policy = _policy()
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {RetentionPolicy._meta.db_table} SET older_than_days = 0 WHERE id = %s",
            [policy.pk],
        )
    assert "cannot run" in client.get(reverse("retention")).content.decode()
    page, digest = _preview(client, policy)
    assert "cannot run" in page and digest == ""
    response = client.post(
        reverse("retention_run", args=[policy.pk]),
        {"digest": "x", "reason": "r", "typed_count": "1"},
    )
    assert response.status_code == 400
    response = client.post(reverse("retention_switch", args=[policy.pk]), {"enable": "1"})
    policy.refresh_from_db()
    assert not policy.enabled
    assert not DeleteJob.objects.exists() and fresh in session_ids()


def test_enabling_a_policy_that_purges_needs_its_tick(signed_in):
    client = signed_in("admin")
    policy = _policy(mode="purge")
    switch = reverse("retention_switch", args=[policy.pk])
    client.post(switch, {"enable": "1"})
    policy.refresh_from_db()
    assert not policy.enabled and policy.next_run_at is None
    assert AuditEntry.objects.get(action="retention_policy_enable").outcome == "refused"
    client.post(switch, {"enable": "1", "confirm_purge": "1"})
    policy.refresh_from_db()
    assert policy.enabled and policy.next_run_at is not None
