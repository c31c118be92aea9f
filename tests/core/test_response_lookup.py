"""Finding the slugs whose stored responses name a session: on PostgreSQL a search of the raw
JSON text runs first (db.json_text_holds), so no id may be missed because a writer escaped
it in the JSON, nor another session's be found."""

from __future__ import annotations

import json

import pytest

from sessions_admin.core import db, rows
from sessions_admin.routers import responses_alias

# Ids with characters search patterns treat specially, and ids a JSON writer may escape.
IDS = ["s_1", "sX1", "s%1", "s%%1", "s\\1", "s/1", 'say "hi"', "sé1", "s\t1"]


def _response(response_id: str, text: str) -> None:
    db.execute(
        "INSERT INTO responses (response_id, data, accessed_at) VALUES (%s, %s, 1)",
        [response_id, text],
        alias=responses_alias(),
    )


@pytest.mark.django_db(databases=["default", "store"], transaction=True)
def test_each_session_gets_its_own_slugs_and_no_other():
    for n, session_id in enumerate(IDS):
        # As Python writes JSON (non-ASCII and control characters escaped)...
        _response(f"r{n}", json.dumps({"session_id": session_id, "conversation": f"c{n}"}))
        # ...and as a writer that escapes slashes and writes UTF-8 as is.
        raw = json.dumps({"session_id": session_id, "conversation": f"d{n}"}, ensure_ascii=False)
        _response(f"q{n}", raw.replace("/", "\\/"))
    for n, session_id in enumerate(IDS):
        found = [name for name, _session in rows.conversations_of_session(session_id)]
        assert found == [f"c{n}", f"d{n}"], session_id


@pytest.mark.django_db(databases=["default", "store"], transaction=True)
def test_the_first_test_is_only_for_plain_ids():
    assert db.json_text_holds("data", "20261104_084511_c479c492", alias=responses_alias())[0] == (
        "" if db.vendor(responses_alias()) == "sqlite" else " AND strpos(data, %s) > 0"
    )
    for session_id in ("s/1", "s\\1", 's"1', "sé1", "s\t1"):
        assert db.json_text_holds("data", session_id, alias=responses_alias()) == ("", [])
