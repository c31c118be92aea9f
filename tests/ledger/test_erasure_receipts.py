"""Erasure receipts that mean something: counts equal what the databases lost, hashes keyed
with the server's secret, a signature that one changed byte breaks, checked by
``manage.py verify_receipt`` and by the erasure page.
"""

from __future__ import annotations

import hashlib
import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.core.erasure import Subject, plan_erasure
from sessions_admin.ledger import actions, erasure
from sessions_admin.ledger.models import AuditEntry, ErasureRequest
from sessions_admin.routers import responses_alias, store_alias
from tests.builders import erasures_run_inline  # noqa: F401 - an autouse fixture

USER = "u-receipt-4471"
CHAT = "chat-receipt-2290"
SLUG = "slug-receipt-8813"

STORE_TABLES = (
    "sessions",
    "messages",
    "sessions_admin_switch_events",
    "sessions_admin_merges",
    "sessions_admin_undos",
    "sessions_admin_slug_history",
    "sessions_admin_holds",
    "sessions_admin_deletions",
)
OWN_TABLES = STORE_TABLES[2:]


def subject_with_slugs() -> dict[str, str]:
    """A subject with two conversations, each with a slug and stored responses."""
    root = core.create_session(
        source="api_server", user_id=USER, chat_id=CHAT, session_key=f"api:{CHAT}"
    ).session_id
    core.append_messages(
        session_id=root,
        messages=[{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}],
    )
    core.record_turn(response_id="resp-receipt-1", session_id=root, conversation=SLUG)
    core.record_turn(response_id="resp-receipt-2", session_id=root, conversation=SLUG)
    second = core.create_session(source="api_server", user_id=USER).session_id
    core.append_message(session_id=second, role="user", content="another chat")
    core.record_turn(response_id="resp-receipt-3", session_id=second, conversation=f"{SLUG}-b")
    hold = actions.place_hold(actor=None, kind="user", subject=USER, reason="a closed case")
    actions.release_hold(actor=None, hold_id=hold.id, reason="closed")
    colleague = core.create_session(source="cli", user_id="u-colleague-receipt").session_id
    core.append_messages(
        session_id=colleague,
        messages=[
            {"role": "user", "content": f"what did {USER} say?"},
            {"role": "assistant", "content": "I cannot say"},
        ],
    )
    other = core.create_session(source="cli", user_id="u-other-receipt").session_id
    core.append_message(session_id=other, role="user", content="unrelated")
    core.record_turn(response_id="resp-other-1", session_id=other, conversation="slug-other")
    return {"root": root, "second": second, "colleague": colleague, "other": other}


def _erase(subject: Subject, *, reference: str = "DSR-R-1") -> ErasureRequest:
    plan = erasure.plan(subject)
    request = actions.request_erasure(
        actor=None, subject=subject, reference=reference, expected_fingerprint=plan.fingerprint
    )
    assert actions.run_erasure(request_id=request.pk) is not None
    request.refresh_from_db()
    return request


def _counts() -> dict[str, int]:
    counts = {t: int(db.fetchone(f"SELECT COUNT(*) FROM {t}")[0]) for t in STORE_TABLES}
    for table in ("conversations", "responses"):
        counts[table] = int(
            db.fetchone(f"SELECT COUNT(*) FROM {table}", alias=responses_alias())[0]
        )
    return counts


def test_the_receipts_counts_are_what_the_databases_lost():
    subject_with_slugs()
    before = _counts()
    assert before["conversations"] >= 3 and before["responses"] >= 4

    request = _erase(Subject(user_id=USER, chat_ids=(CHAT,)))

    after = _counts()
    lost = {table: before[table] - after[table] for table in before}
    erased = request.receipt["erased"]
    assert erased["sessions"] == lost["sessions"] == 2
    # The colleague's message naming the subject is someone else's text: kept, and counted
    # as a kept mention, not as erased.
    assert erased["messages"] + erased["messages_in_other_sessions"] == lost["messages"] == 3
    assert erased["messages_in_other_sessions"] == 0
    assert erased["conversation_slugs"] == lost["conversations"] == 2
    assert erased["stored_responses"] == lost["responses"] == 3
    assert erased["own_table_rows"] == sum(lost[t] for t in OWN_TABLES) > 0
    # The other user's slug and response are still there.
    assert (
        db.fetchone(
            "SELECT COUNT(*) FROM conversations WHERE name = 'slug-other'",
            alias=responses_alias(),
        )[0]
        == 1
    )


def test_a_receipts_hashes_cannot_be_checked_without_the_servers_key(settings):
    ids = subject_with_slugs()
    plan = plan_erasure(subject=Subject(user_id=USER))
    request = _erase(Subject(user_id=USER))
    receipt = request.receipt
    text = erasure.receipt_text(receipt)

    assert request.salt not in text and "salt" not in receipt
    assert settings.SECRET_KEY not in text
    # The old scheme (sha256 of salt, NUL, id) gives none of the receipt's hashes ...
    for sid in plan.session_ids:
        plain = hashlib.sha256(f"{request.salt}\x00{sid}".encode()).hexdigest()
        assert plain not in text
        assert hashlib.sha256(sid.encode()).hexdigest() not in text
    # ... the server's keyed hash does, and another key does not.
    assert receipt["session_ids_sha256"] == sorted(
        erasure.hash_of(request.salt, sid) for sid in plan.session_ids
    )
    assert receipt["subject_sha256"] == erasure.hash_of(request.salt, USER)
    assert "HMAC-SHA256" in receipt["hashing"]
    settings.SESSIONS_ADMIN_ERASURE_KEY = "another-server-key-0123456789"
    assert erasure.hash_of(request.salt, ids["root"]) not in receipt["session_ids_sha256"]
    # The audit log's redaction tokens are keyed the same way.
    redacted = AuditEntry.objects.filter(action="release_hold").first()
    assert redacted is not None
    token = hashlib.sha256(f"{request.salt}\x00{USER}".encode()).hexdigest()[:16]
    assert USER not in json.dumps(redacted.before) + json.dumps(redacted.after)
    assert token not in json.dumps(redacted.before) + json.dumps(redacted.after) + redacted.reason


def _verify(path) -> str:
    out = io.StringIO()
    call_command("verify_receipt", str(path), stdout=out)
    return out.getvalue()


def _receipt_file(tmp_path) -> tuple[ErasureRequest, bytes]:
    subject_with_slugs()
    request = _erase(Subject(user_id=USER))
    data = erasure.receipt_text(request.receipt).encode()
    return request, data


def test_verify_receipt_passes_the_receipt_as_issued_and_fails_every_change(tmp_path):
    request, data = _receipt_file(tmp_path)
    original = tmp_path / "receipt.json"
    original.write_bytes(data)
    assert "Valid" in _verify(original)
    assert request.receipt["signature"]["algorithm"] == "HMAC-SHA256"
    # The download is that file, byte for byte.
    from django.contrib.auth.models import User
    from django.test import Client

    from sessions_admin.signin.roles import assign_role

    admin = User.objects.create_user("receipt-admin")
    assign_role(admin, "admin")
    client = Client()
    client.force_login(admin)
    assert client.get(f"/erasure/{request.pk}/receipt.json").content == data

    receipt = json.loads(data)
    mutations = {}
    count_at = data.index(b'"sessions": ') + len(b'"sessions": ')
    mutations["a count changed"] = data[:count_at] + b"7" + data[count_at + 1 :]
    digest_at = data.index(receipt["session_ids_sha256"][0].encode())
    flipped = b"0" if data[digest_at : digest_at + 1] != b"0" else b"1"
    mutations["a hash changed"] = data[:digest_at] + flipped + data[digest_at + 1 :]
    space_at = data.index(b'  "erased"')
    mutations["a space made a tab"] = data[:space_at] + b"\t" + data[space_at + 1 :]
    ref_at = data.index(b"DSR-R-1")
    mutations["the reference changed"] = data[:ref_at] + b"X" + data[ref_at + 1 :]
    unsigned = {k: v for k, v in receipt.items() if k != "signature"}
    mutations["no signature"] = erasure.receipt_text(unsigned).encode()
    mutations["keys reordered"] = (
        json.dumps(dict(reversed(list(receipt.items()))), indent=2) + "\n"
    ).encode()
    mutations["a key added"] = erasure.receipt_text({**receipt, "note": "fine"}).encode()
    mutations["a key repeated"] = data.replace(
        b'\n  "erased": {', b'\n  "erased": {"sessions": 0},\n  "erased": {', 1
    )
    for why, changed in mutations.items():
        assert changed != data, why
        path = tmp_path / "changed.json"
        path.write_bytes(changed)
        with pytest.raises(CommandError, match="Not verified") as refused:
            _verify(path)
        assert "Valid" not in str(refused.value), why
    # Every single-byte change at a sample of positions fails.
    for position in range(0, len(data), max(1, len(data) // 97)):
        changed = bytearray(data)
        changed[position] = (changed[position] + 1) % 128 or 1
        assert not erasure.verify_receipt(bytes(changed)).valid, position
    assert ErasureRequest.objects.get(pk=request.pk).receipt == receipt  # nothing changed


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"", "empty"),
        (b'["a", "list"]', "not an erasure receipt"),
        (b'{"hello": "world"}', "not an erasure receipt"),
        (b'{"erasure_request": 1,\x00 "erased": {}}', "NUL bytes"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "not"),
    ],
)
def test_verify_receipt_refuses_what_is_not_a_receipt_with_a_clear_message(
    tmp_path, content, message
):
    path = tmp_path / "receipt.json"
    path.write_bytes(content)
    with pytest.raises(CommandError, match=message):
        _verify(path)


def test_verify_receipt_refuses_a_huge_file_without_reading_it_all(tmp_path):
    path = tmp_path / "huge.json"
    with path.open("wb") as handle:
        handle.truncate(erasure.MAX_RECEIPT_BYTES + 10 * 1024 * 1024)  # sparse: no disk used
    with pytest.raises(CommandError, match="larger than any receipt"):
        _verify(path)
    with pytest.raises(CommandError, match="no such file"):
        _verify(tmp_path / "missing.json")


def test_an_old_salted_receipt_is_said_to_be_unverifiable(tmp_path):
    old = {
        "erasure_request": 3,
        "reference": "DSR-old",
        "subject_sha256": "ab" * 32,
        "hashing": "sha256(salt + NUL + value), hex; the salt is this request's own",
        "salt": "00" * 16,
        "erased": {"sessions": 1},
        "session_ids_sha256": ["cd" * 32],
    }
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old, indent=2, sort_keys=True))
    with pytest.raises(CommandError, match="Cannot be verified: this receipt was issued before"):
        _verify(path)


def test_the_erasure_page_verifies_an_uploaded_or_pasted_receipt(admin_client, tmp_path):
    request, data = _receipt_file(tmp_path)
    from django.core.files.uploadedfile import SimpleUploadedFile

    valid = admin_client.post(
        "/erasure/verify/",
        {"receipt_file": SimpleUploadedFile("r.json", data, content_type="application/json")},
    )
    assert valid.status_code == 200 and valid.context["verdict"].valid
    assert valid.context["verdict"].request_id == request.pk
    # Pasted into the page: the browser sends CRLF line ends.
    pasted = admin_client.post(
        "/erasure/verify/", {"receipt_text": data.decode().replace("\n", "\r\n")}
    )
    assert pasted.status_code == 200 and pasted.context["verdict"].valid
    at = data.index(b'"sessions": ') + len(b'"sessions": ')
    tampered = data[:at] + b"9" + data[at + 1 :]
    for post in (
        {"receipt_text": tampered.decode()},
        {"receipt_file": SimpleUploadedFile("r.json", tampered)},
        {"receipt_file": SimpleUploadedFile("r.json", b"\x00\x01binary")},
        {"receipt_text": "{"},
        {"receipt_text": ""},
    ):
        refused = admin_client.post("/erasure/verify/", post)
        assert refused.status_code == 400
        assert not refused.context["verdict"].valid
    assert ErasureRequest.objects.get(pk=request.pk).receipt == json.loads(data)


def test_a_receipt_updated_by_a_later_step_is_signed_again(tmp_path):
    """The receipt says whether the file rewrite ran; updating it keeps it verifiable."""
    subject_with_slugs()
    request = _erase(Subject(user_id=USER))
    receipt = request.receipt
    assert receipt["file_rewrite"]["state"] in ("pending", "done")
    if connections[store_alias()].vendor == "postgresql":
        # The operator's step on PostgreSQL (VACUUM FULL locks the tables).
        assert receipt["file_rewrite"] == {"state": "pending", "at": None}
        assert erasure.verify_receipt(erasure.receipt_text(receipt).encode()).valid
        call_command("erasure_rewrite", "--request", str(request.pk), stdout=io.StringIO())
        request.refresh_from_db()
    assert request.receipt["file_rewrite"]["state"] == "done"
    assert request.receipt["file_rewrite"]["at"]
    assert erasure.verify_receipt(erasure.receipt_text(request.receipt).encode()).valid
    assert AuditEntry.objects.filter(action="erasure_files_rewritten").count() == 1


def test_the_request_page_runs_a_pending_rewrite(admin_client, settings):
    settings.SESSIONS_ADMIN_ERASURE_REWRITE_AUTO = False  # as on PostgreSQL by default
    subject_with_slugs()
    request = _erase(Subject(user_id=USER))
    assert request.receipt["file_rewrite"]["state"] == "pending"
    page = admin_client.get(f"/erasure/{request.pk}/")
    assert b'data-file-rewrite="pending"' in page.content

    response = admin_client.post(f"/erasure/{request.pk}/rewrite/")

    assert response.status_code == 200
    request.refresh_from_db()
    assert request.receipt["file_rewrite"]["state"] == "done"
    entry = AuditEntry.objects.get(action="erasure_files_rewritten")
    assert entry.actor_name == "walking-admin" and entry.before == {"erasure_request": request.pk}
    assert erasure.verify_receipt(erasure.receipt_text(request.receipt).encode()).valid
