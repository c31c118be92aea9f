"""One erasure request per person at a time, and none left holding their id once erased.

Attack 40 confirmed one erasure preview three times at once over the API: all three were
queued. On SQLite one erased, one found nothing, and the third failed (the plan had changed)
keeping the person's user id in plain text in the dashboard's database after the receipt
said they were erased; on PostgreSQL all three ran and each receipt counted the redactions.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connections

from sessions_admin import core
from sessions_admin.core.erasure import Subject
from sessions_admin.ledger import actions, erasure
from sessions_admin.ledger.models import AuditEntry, ErasureRequest
from tests.builders import erasures_run_inline  # noqa: F401 - an autouse fixture
from tests.helpers import child_env, file_bytes, session

REPO = Path(__file__).resolve().parents[2]
USER = "cust-77413-erase"

CONFIRM = """
import os, sys, time, django
django.setup()
from sessions_admin.core.erasure import Subject
from sessions_admin.ledger import actions
go, fingerprint = sys.argv[1], sys.argv[2]
open(f"{go}.ready-{os.getpid()}", "w").close()
while not os.path.exists(go):
    time.sleep(0.002)
try:
    request = actions.request_erasure(
        actor=None, subject=Subject(user_id=sys.argv[3]), reference="DSR-77",
        expected_fingerprint=fingerprint, start=False,
    )
    print("queued", request.pk)
except Exception as error:
    print("refused", type(error).__name__, error)
"""


def person_with_a_chat() -> str:
    sid = core.create_session(source="telegram", user_id=USER, session_key=f"tg:{USER}").session_id
    core.append_message(session_id=sid, role="user", content="please forget me")
    core.end_session(session_id=sid, end_reason="user_exit")
    return sid


def test_one_preview_confirmed_from_four_processes_at_once_queues_one_request(tmp_path):
    person_with_a_chat()
    fingerprint = erasure.plan(Subject(user_id=USER)).fingerprint
    go = tmp_path / "go"
    connections.close_all()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CONFIRM, str(go), fingerprint, USER],
            cwd=REPO,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    # Every child imported Django and waits for the file (it says so with a file of its own).
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("go.ready-*"))) < len(children):
        assert all(child.poll() is None for child in children), [c.communicate() for c in children]
        assert time.monotonic() < deadline, "the children never got ready"
        time.sleep(0.02)
    go.touch()
    said = [child.communicate(timeout=120) for child in children]
    outcomes = [out.strip().splitlines()[-1] if out.strip() else err[-400:] for out, err in said]
    queued = [line for line in outcomes if line.startswith("queued")]
    assert len(queued) == 1, outcomes
    request_id = int(queued[0].split()[1])
    for line in outcomes:
        if not line.startswith("queued"):
            assert line.startswith("refused InvalidInput"), outcomes
            assert f"#{request_id}" in line and "Nothing new was queued" in line
    assert list(ErasureRequest.objects.values_list("pk", flat=True)) == [request_id]
    assert AuditEntry.objects.filter(action="erasure_request").count() == 1


def test_a_second_request_for_the_same_user_id_with_other_chat_ids_is_refused_while_one_waits():
    person_with_a_chat()
    first = actions.request_erasure(
        actor=None,
        subject=Subject(user_id=USER),
        reference="DSR-1",
        expected_fingerprint=erasure.plan(Subject(user_id=USER)).fingerprint,
        start=False,
    )
    other = Subject(user_id=USER, chat_ids=("chat-9",))
    with pytest.raises(core.InvalidInput, match=f"#{first.pk} for this person"):
        actions.request_erasure(
            actor=None,
            subject=other,
            reference="DSR-2",
            expected_fingerprint=erasure.plan(other).fingerprint,
            start=False,
        )
    assert ErasureRequest.objects.count() == 1


def _dashboard_files() -> list[Path]:
    name = Path(connections["default"].settings_dict["NAME"])
    return sorted(p for p in name.parent.glob(name.name + "*") if p.is_file())


def test_a_request_refused_at_its_first_run_keeps_no_user_id_once_another_erases_the_person(
    caplog,
):
    sid = person_with_a_chat()
    subject = Subject(user_id=USER)
    stale = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-1",
        expected_fingerprint=erasure.plan(subject).fingerprint,
        start=False,
    )
    # The runtime writes for her between the confirmation and the run: refused, not retried.
    core.create_session(source="telegram", user_id=USER)
    with caplog.at_level(logging.WARNING, logger="sessions_admin.ledger.actions.erasure"):
        assert actions.resume_interrupted_erasures() == []
    stale.refresh_from_db()
    assert stale.state == ErasureRequest.FAILED and USER in stale.subject
    refusal = [r for r in caplog.records if f"erasure request {stale.pk}" in r.getMessage()]
    assert refusal and all(r.levelname == "WARNING" and not r.exc_info for r in refusal)

    # The operator previews again: a new request erases her.
    fresh = actions.request_erasure(
        actor=None,
        subject=subject,
        reference="DSR-2",
        expected_fingerprint=erasure.plan(subject).fingerprint,
        start=False,
    )
    assert actions.run_erasure(request_id=fresh.pk) is not None
    assert session(sid) is None

    stale.refresh_from_db()
    assert stale.subject == ""
    assert stale.state == ErasureRequest.FAILED
    assert f"erasure request #{fresh.pk} erased this person" in stale.error
    # Run again (its page, the scheduler): nothing happens.
    assert actions.run_erasure(request_id=stale.pk) is None
    stale.refresh_from_db()
    assert stale.subject == "" and stale.state == ErasureRequest.FAILED
    assert not [
        row for row in ErasureRequest.objects.values_list("subject", "error") if USER in str(row)
    ]
    if connections["default"].vendor == "sqlite":
        connections.close_all()
        assert not [p.name for p in _dashboard_files() if USER.encode() in file_bytes(p)]
