"""The retention page: a policy is created disabled with its dry run shown, then enabled,
run now, disabled and deleted, each audited; bad input is a message and changes nothing."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from sessions_admin.ledger.models import AuditEntry, DeleteJob, RetentionPolicy
from tests.ledger.test_retention import old_session

pytestmark = pytest.mark.usefixtures("no_worker")

FORM = {
    "name": "Quiet Telegram chats",
    "source": "telegram",
    "older_than_days": "30",
    "status": "ended",
    "end_reason": "",
    "title": "any",
    "mode": "trash",
    "every_hours": "24",
    "reason": "data policy v2",
}


def test_an_admin_creates_checks_enables_and_runs_a_policy(signed_in):
    client = signed_in("admin")
    doomed = [old_session(source="telegram") for _ in range(3)]
    old_session(source="discord")
    old_session(source="telegram", days=2)
    response = client.post(reverse("retention_create"), FORM, follow=True)
    page = response.content.decode()
    policy = RetentionPolicy.objects.get()
    assert policy.enabled is False and policy.source == "telegram"
    dry_run = re.search(r"would delete <strong data-count>(\d+)</strong>", page)
    assert dry_run and int(dry_run.group(1)) == len(doomed)

    client.post(reverse("retention_switch", args=[policy.pk]), {"enable": "1"})
    policy.refresh_from_db()
    assert policy.enabled and policy.next_run_at is not None
    assert "Next run" in client.get(reverse("retention")).content.decode()

    page = client.get(reverse("retention_preview", args=[policy.pk])).content.decode()
    for sid in doomed:
        assert sid in page  # the preview lists the sessions, not only their number
    digest = re.search(r'name="digest" value="([^"]+)"', page).group(1)
    response = client.post(
        reverse("retention_run", args=[policy.pk]), {"digest": digest, "reason": "quarterly"}
    )
    job = DeleteJob.objects.get(policy=policy)
    assert response.status_code == 302 and response.url == reverse("job_detail", args=[job.pk])
    assert job.total == len(doomed)

    client.post(reverse("retention_switch", args=[policy.pk]), {})
    policy.refresh_from_db()
    assert not policy.enabled and policy.next_run_at is None
    client.post(reverse("retention_delete", args=[policy.pk]), {})
    assert not RetentionPolicy.objects.exists()
    assert DeleteJob.objects.filter(pk=job.pk).exists()  # its run stays on record
    assert list(
        AuditEntry.objects.filter(outcome="ok").order_by("pk").values_list("action", flat=True)
    ) == [
        "retention_policy_create",
        "retention_policy_enable",
        "retention_run",
        "retention_policy_disable",
        "retention_policy_delete",
    ]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"older_than_days": "-5"}, "between 1 and"),
        ({"older_than_days": "nan"}, "number of days"),
        ({"older_than_days": "1_0"}, "number of days"),  # float() reads it as 10
        ({"older_than_days": "١٠"}, "number of days"),  # Arabic-Indic digits: 10 to float()
        ({"every_hours": "0"}, "Run every"),
        ({"status": "live"}, "Status is ended or empty"),
        ({"mode": "shred"}, "trash or purges"),
        ({"name": "  "}, "Give a name"),
    ],
)
def test_a_bad_policy_is_a_message_and_nothing_is_created(signed_in, change, words):
    client = signed_in("admin")
    response = client.post(reverse("retention_create"), {**FORM, **change})
    assert response.status_code == 400
    assert words in response.content.decode()
    assert not RetentionPolicy.objects.exists()
