"""Hostile query strings, form fields and URL ids on every page and action.

Each GET page and POST form gets huge strings, RTL text and emoji, escaped and
invalid surrogates, NUL bytes, SQL and full-text-search syntax, malformed ids
and cursors, silly page sizes and dates, repeated and unknown parameters. The
answer must be a 4xx that says what is wrong or a normal page, never a 500;
a POST that is refused changes nothing (a change must be an action that
succeeded and was audited).

GET_PARAMS and POST_FIELDS name, per URL, the parameters its view reads; a URL
added without an entry fails ``test_it_knows_the_parameters_of_every_url``.
"""

from __future__ import annotations

import time
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import NoReverseMatch

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.ledger.models import AuditEntry
from tests.console import urlmap
from tests.console.test_access import ACCESS

LISTING = [
    "q",
    "source",
    "model",
    "user",
    "status",
    "from",
    "to",
    "title",
    "forks",
    "empty",
    "archived",
    "health",
    "scope",
    "sort",
    "dir",
    "per",
    "after",
]
GET_PARAMS: dict[str, list[str]] = {
    "login": ["next"],
    "home": [],
    "health_panel": [],
    "conversation_list": ["q", "forks", "after"],
    "session_list": LISTING,
    "session_export": LISTING,
    "session_detail": ["after", "before", "around", "inactive", "text", "part", "q", "at"],
    "session_transcript": ["after", "before", "around", "inactive", "text", "at"],
    "session_tail": ["after", "inactive", "text"],
    "session_activity": ["since", "list"],
    "fork_marks": [],
    "session_raw": ["message", "field"],
    "session_resume": ["ref"],
    "fork_list": [],
    "merge_preview": ["ids", "pick", "target"],
    "audit_log": ["action", "actor", "session", "outcome", "since", "until", "page"],
    "audit_export": ["action", "actor", "session", "outcome", "since", "until"],
    "signin_failures": ["page"],
    "session_history": [],
    "cascade_delete": ["include_branches"],
    "bulk_delete": ["preset", "days", "source", "selection", "include_live"],
    "job_list": [],
    "job_detail": ["part"],
    "trash": ["q", "after"],
    "holds": ["kind", "subject"],
    "retention": [],
    "retention_preview": [],
    "erasure": [],
    "erasure_detail": [],
    "erasure_receipt": [],
    "export_sessions": ["session", "lineage", "ids", "format", *LISTING],
    "export_session": ["scope", "format"],
    "stray_move_preview": [],
    "api_tokens": [],
    "healthz": [],
    "readyz": [],
    "metrics": [],
}
REASON = {"reason": "fuzzing the form"}
# name: (fields to fuzz, the rest of a plausible form)
POST_FIELDS: dict[str, tuple[list[str], dict[str, str]]] = {
    "login": (["username", "password", "next"], {"username": "nobody", "password": "x"}),
    "logout": (["next"], {}),
    "session_list": (["ids", "filter"], {}),
    "session_resume": (["target", "switch_from", "reason"], REASON),
    "session_reset": (["summary", "live", "reason"], REASON),
    "session_undo": (["reason", "fingerprint"], {}),
    "session_redo": (["reason", "fingerprint"], {}),
    "session_retry": (["reason", "fingerprint"], {}),
    "session_recount": (["reason"], {}),
    "merge_execute": (
        ["ids", "target", "fingerprint", "typed_count", "reason", "next", "continue_history"],
        REASON,
    ),
    "merge_undo": (["reason", "next"], {}),
    "cascade_delete_confirm": (
        ["include_branches", "fingerprint", "typed_count", "reason"],
        REASON,
    ),
    "bulk_delete_preview": (["ids", "all_matching", "filter"], {}),
    "bulk_delete_start": (
        [
            "selection",
            "preset",
            "days",
            "cutoff",
            "source",
            "include_live",
            "reason",
            "digest",
            "confirm_live",
            "typed_count",
        ],
        {"preset": "empty", **REASON},
    ),
    "job_cancel": (["reason"], {}),
    "job_resume": (["reason"], {}),
    "trash_restore": (["q"], {}),
    "trash_purge": (["scope", "reason", "q"], {"scope": "expired", **REASON}),
    "hold_place": (["kind", "subject", "reason"], {"kind": "user", "subject": "u-1", **REASON}),
    "hold_release": (["reason"], REASON),
    "api_token_create": (
        ["name", "scope", "sources", "expires_days"],
        {"name": "fuzz-token", "scope": "runtime"},
    ),
    "api_token_revoke": (["name", "confirm"], {"name": "fuzz-token", "confirm": "fuzz-token"}),
    "retention_create": (
        [
            "name",
            "source",
            "older_than_days",
            "status",
            "end_reason",
            "title",
            "mode",
            "every_hours",
            "reason",
        ],
        {
            "name": "p",
            "older_than_days": "30",
            "status": "ended",
            "title": "any",
            "mode": "trash",
            "every_hours": "24",
        },
    ),
    "erasure_preview": (
        ["user_id", "chat_ids", "session_keys", "reference"],
        {"user_id": "u-1"},
    ),
    "erasure_confirm": (
        ["user_id", "chat_ids", "session_keys", "reference", "fingerprint", "typed_count"],
        {"user_id": "u-1", "reference": "DSR-1"},
    ),
    "erasure_verify": (["receipt_text"], {}),
    "erasure_rewrite": ([], {}),
    "retention_switch": (["enable", "confirm_purge", "reason"], {}),
    "retention_run": (["digest", "typed_count", "confirm_purge", "reason"], REASON),
    "retention_delete": (["reason"], {}),
    "stray_move_execute": (["fingerprint", "reason"], REASON),
    "stray_move_undo": (["reason"], {}),
}

HUGE = "x" * 100_000
# The few values every single parameter gets on its own.
CORE = [
    HUGE,
    "a\x00b",
    "' OR 1=1 -- \"NEAR( AND OR NOT (( \u202egnp.exe\u202c مرحبا 🦘👩‍👩‍👧 %_\\",
]
# Every parameter of a URL at once gets each of these.
HOSTILE = [
    *CORE,
    "' OR 1=1 --",
    '"unbalanced NEAR( AND OR NOT ((',
    "\u202egnp.exe\u202c مرحبا 🦘👩‍👩‍👧",
    "-1",
    "99999999999999999999999999999",
    "\\ud800\\udfff",
    "%",
    "%_\\';--",
    "*",
    "NEAR(a b",
    "a) OR (b",
    "../../etc/passwd",
    "0",
    "1e309",
    "NaN",
    "-1:-1",
    "99999999999999999999:1",
    ":",
    "eyJub3QiOiAiYSBjdXJzb3IifQ==",
    "2024-13-45",
    "1969-12-31",
    "",
]
# Raw query strings the client would otherwise encode: invalid UTF-8, lone NULs, repeats,
# names without a value.
RAW_QUERIES = ["{p}=%ED%A0%80&{p}=%FF%FE%00", "{p}=%00&{p}=1&{p}=2", "{p}"]
# Session ids put into URLs (already URL-encoded).
BAD_SESSION_IDS = [
    "x" * 5000,
    quote("séssion-🦘\u202e"),
    "a%00b",
    "%00",
    "%ED%A0%80",
    quote("' OR 1=1 --", safe=""),
    "%25",
    "..",
]
BAD_NUMBERS = ["0", "99999999999999999999999999999", "9223372036854775808"]


pytestmark = pytest.mark.usefixtures("no_worker")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) < 80 else text[:77] + "..."


def _check(response, what: str) -> None:
    """Not a server error; a 4xx says why; a streamed body streams to the end."""
    status = response.status_code
    assert status < 500, f"{what}: {status}"
    body = b"".join(response) if getattr(response, "streaming", False) else response.content
    if status in (400, 422):
        assert body.strip(), f"{what}: a {status} without a message"


def _get(client: Client, url: str, what: str, data=None, **extra):
    try:
        response = client.get(url, data, **extra)
    except Exception as error:  # noqa: BLE001 - reported with the request that caused it
        pytest.fail(f"{what} raised {error.__class__.__name__}: {_short(str(error))}")
    _check(response, what)
    return response


def _post(client: Client, url: str, what: str, data, **extra):
    before = urlmap.state()
    audited = AuditEntry.objects.count()
    try:
        response = client.post(url, data, **extra)
    except Exception as error:  # noqa: BLE001 - reported with the request that caused it
        pytest.fail(f"{what} raised {error.__class__.__name__}: {_short(str(error))}")
    _check(response, what)
    after = urlmap.state()
    store_changed = any(
        before[key] != after[key] for key in before if key not in ("audit", "trash", "jobs")
    )
    if after != before:
        succeeded = AuditEntry.objects.order_by("pk")[audited:]
        assert any(entry.outcome == "ok" for entry in succeeded) or not store_changed, (
            f"{what} changed the store without a successful audited action"
        )
    return response


def test_it_knows_the_parameters_of_every_url():
    assert {name for name, (get, _) in ACCESS.items() if get} == set(GET_PARAMS)
    assert {name for name, (_, post) in ACCESS.items() if post} == set(POST_FIELDS)
    assert set(ACCESS) == urlmap.route_names()


@pytest.mark.parametrize("name", sorted(GET_PARAMS))
def test_it_answers_hostile_query_strings_without_a_server_error(name, seeded, admin_client):
    client = Client() if name == "login" else admin_client
    url = urlmap.route(name).url(seeded.url_args)
    params = GET_PARAMS[name]
    for n, value in enumerate(HOSTILE if params else []):
        headers = {"HTTP_HX_REQUEST": "true"} if n % 2 else {}
        _get(
            client, url, f"GET {name} all={_short(value)}", dict.fromkeys(params, value), **headers
        )
    for param in params:
        for value in CORE:
            _get(client, url, f"GET {name} {param}={_short(value)}", {param: value})
        _get(client, url, f"GET {name} {param} repeated", {param: [*CORE[1:], "", "1"]})
    for raw in RAW_QUERIES:
        query = "&".join(raw.format(p=param) for param in params)
        _get(client, f"{url}?{query}", f"GET {name} ?{_short(query)}")
    _get(client, url, f"GET {name} unknown parameters", {"zzz": HUGE, "sort": "nope"})


@pytest.mark.parametrize("name", sorted(POST_FIELDS))
def test_it_refuses_hostile_forms_without_changing_anything(name, seeded, admin_client):
    client = Client() if name == "login" else admin_client
    url = urlmap.route(name).url(seeded.url_args)
    fields, base = POST_FIELDS[name]
    for n, value in enumerate(HOSTILE):
        headers = {"HTTP_HX_REQUEST": "true"} if n % 2 else {}
        data = {**base, **dict.fromkeys(fields, value)}
        _post(client, url, f"POST {name} all={_short(value)}", data, **headers)
    for field in fields:
        for value in CORE:
            _post(client, url, f"POST {name} {field}={_short(value)}", {**base, field: value})
        repeated = {**base, field: [*CORE[1:], ""]}
        _post(client, url, f"POST {name} {field} repeated", repeated)
    if name == "logout":
        return
    raw = "&".join(f"{field}=%ED%A0%80&{field}=%00" for field in fields)
    _post(
        client,
        url,
        f"POST {name} invalid UTF-8",
        raw,
        content_type="application/x-www-form-urlencoded",
    )


def _with_session_id(route: urlmap.Route, seeded: urlmap.Seeded, encoded: str) -> str:
    marker = "session-id-marker"
    url = route.url({**seeded.url_args, "session_id": marker})
    return url.replace(marker, encoded)


SESSION_ROUTES = sorted(r.name for r in urlmap.routes() if "session_id" in r.params)
NUMBER_ROUTES = sorted(
    r.name for r in urlmap.routes() if set(r.params) & {"job_id", "merge_id", "entry_id"}
)


@pytest.mark.parametrize("name", SESSION_ROUTES)
def test_it_answers_hostile_session_ids_in_urls(name, seeded, admin_client):
    route = urlmap.route(name)
    for encoded in BAD_SESSION_IDS:
        url = _with_session_id(route, seeded, encoded)
        what = f"{name} at {_short(url)}"
        for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
            response = _get(admin_client, url, f"GET {what}", **headers)
            assert response.status_code != 200 or name == "session_history", what
            if name in POST_FIELDS:
                response = _post(admin_client, url, f"POST {what}", REASON, **headers)
                assert response.status_code in (400, 404), f"POST {what}"


@pytest.mark.parametrize("name", NUMBER_ROUTES)
def test_it_answers_ids_no_row_can_have(name, seeded, admin_client):
    route = urlmap.route(name)
    marker = "123456789"
    numbers = dict.fromkeys(("job_id", "merge_id", "entry_id"), marker)
    for number in BAD_NUMBERS:
        url = route.url({**seeded.url_args, **numbers}).replace(marker, number)
        _get(admin_client, url, f"GET {name} {number}")
        response = _post(admin_client, url, f"POST {name} {number}", REASON)
        assert response.status_code in (404, 405), f"POST {name} {number}"


def _cursors() -> list[tuple[dict[str, str], str]]:
    """Cursors the session list decodes as well formed, holding extreme values."""
    from sessions_admin.store.listing import MAX_INT, encode_cursor

    extremes = [MAX_INT, -MAX_INT, 0, 1e308, -1e308]
    found = []
    for sort in ("started", "messages", "tokens", "cost"):
        for direction in ("desc", "asc"):
            for value in extremes:
                for tie in ("' OR 1=1 --%_\\", "🦘" * 50):
                    params = {"sort": sort, "dir": direction}
                    found.append((params, encode_cursor(sort, direction, [value, tie])))
    for value in (MAX_INT, -MAX_INT, 0):
        found.append(({"q": "needle"}, encode_cursor("search", "desc", [value])))
        found.append(({"sort": "activity"}, encode_cursor("activity", "desc", ["m", value])))
    for value in extremes:
        cursor = encode_cursor("activity", "desc", ["e", value, "%"])
        found.append(({"sort": "activity"}, cursor))
    return found


def test_it_pages_from_any_well_formed_cursor(seeded, admin_client):
    url = urlmap.Route("session_list", ()).url({})
    export_url = urlmap.Route("export_sessions", ()).url({})
    for params, cursor in _cursors():
        what = f"GET session_list {params} after={cursor}"
        response = _get(admin_client, url, what, {**params, "after": cursor})
        assert response.status_code == 200, what
        export = _get(admin_client, export_url, f"export {what}", {**params, "after": cursor})
        assert export.status_code in (200, 400), f"export {what}"


@pytest.mark.parametrize("name", sorted(POST_FIELDS))
def test_it_refuses_oversized_forms_cleanly(name, seeded, admin_client):
    client = Client() if name == "login" else admin_client
    url = urlmap.route(name).url(seeded.url_args)
    too_many = "&".join(f"ids=s{n}" for n in range(25_000))
    too_big = "reason=" + "x" * 3_000_000
    for body, what in ((too_many, "25,000 fields"), (too_big, "a 3 MB body")):
        if name == "logout":  # the last request may have signed out
            client.force_login(User.objects.get(username="walking-admin"))
        response = _post(
            client,
            url,
            f"POST {name} {what}",
            body,
            content_type="application/x-www-form-urlencoded",
        )
        assert response.status_code == 400, f"POST {name} {what}: {response.status_code}"
    response = _get(client, f"{url}?{too_many}", f"GET {name} 25,000 parameters")
    assert response.status_code in (400, 405), f"GET {name}: {response.status_code}"


# Ids a runtime could have written with its own SQL (the core refuses most of them as new ids:
# ``core.ids.new_session_id_problem``; once stored, they are served and acted on all the same).
ODD_SESSION_IDS = [
    "a/b",
    "a?b#c&d=e",
    "ünïcödé 🦘 \u202eRTL",
    "x" * 200,
    "' OR 1=1 --",
    "%00%2F..",
    "<b>bold</b>",
    " leading and trailing ",
]


def test_it_serves_sessions_whose_ids_are_odd(seeded, admin_client):
    for n, session_id in enumerate(ODD_SESSION_IDS):
        db.execute(
            "INSERT INTO sessions (id, source, session_key, started_at) VALUES (%s, 'cli', %s, %s)",
            [session_id, f"odd:{n}", time.time()],
        )
        core.append_messages(
            session_id=session_id,
            messages=[
                {"role": "user", "content": f"odd question {n}"},
                {"role": "assistant", "content": "odd answer"},
            ],
        )
        core.record_turn(response_id=f"odd-{n}", session_id=session_id, conversation="odd-slug")
    for route in urlmap.routes():
        needed = ACCESS[route.name][0]
        if needed is None or route.name == "login":
            continue
        ids = ODD_SESSION_IDS if "session_id" in route.params else [seeded.tip]
        for session_id in ids:
            try:
                url = route.url({**seeded.url_args, "session_id": session_id})
            except NoReverseMatch:
                assert "/" in session_id, f"{route.name} cannot address {session_id!r}"
                continue
            response = _get(admin_client, url, f"GET {route.name} for {_short(session_id)}")
            if route.name in ("session_detail", "session_resume", "cascade_delete"):
                assert response.status_code == 200, (route.name, session_id)
    merge = urlmap.Route("merge_preview", ()).url({})
    response = _get(admin_client, merge, "merge preview of odd ids", {"ids": ODD_SESSION_IDS[:4]})
    assert response.status_code == 200
    export = urlmap.Route("export_sessions", ()).url({})
    response = _get(admin_client, export, "export of odd ids", {"ids": ODD_SESSION_IDS})
    assert response.status_code == 200
