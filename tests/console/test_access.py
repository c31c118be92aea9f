"""Who may do what, on every URL: signed out, each role, and POSTs without a CSRF token.

ACCESS is the specification: for each URL name, the weakest role allowed to
GET it and to POST to it (``None``: the method is not allowed at all,
``ANYONE``: no sign-in needed). A URL added without an entry fails
``test_it_has_an_access_rule_for_every_url``.

A refused request must change nothing: each check compares the store, the
responses and the ledger before and after.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from sessions_admin.signin.roles import ROLES, assign_role
from tests.console import urlmap

ANYONE = "anyone"
VIEWER, SUPPORT, ADMIN = "viewer", "support", "admin"
# No role is enough: only the metrics token or network (tests/console/test_probes.py).
TOKEN = "token"

# name: (weakest role allowed to GET, weakest role allowed to POST)
ACCESS: dict[str, tuple[str | None, str | None]] = {
    "login": (ANYONE, ANYONE),
    "logout": (None, ANYONE),
    "home": (VIEWER, None),
    "health_panel": (VIEWER, None),
    "conversation_list": (VIEWER, None),
    "session_list": (VIEWER, VIEWER),  # POST: "Merge selected…" redirects to the preview
    "session_detail": (VIEWER, None),
    "session_transcript": (VIEWER, None),
    "session_tail": (VIEWER, None),
    "session_activity": (VIEWER, None),
    "fork_marks": (VIEWER, None),
    "session_raw": (VIEWER, None),
    "session_resume": (VIEWER, SUPPORT),
    "session_reset": (None, SUPPORT),
    "session_undo": (None, SUPPORT),
    "session_redo": (None, SUPPORT),
    "session_retry": (None, SUPPORT),
    "session_recount": (None, SUPPORT),
    "fork_list": (VIEWER, None),
    "merge_preview": (VIEWER, None),
    "merge_execute": (None, SUPPORT),
    "merge_undo": (None, SUPPORT),
    "audit_log": (VIEWER, None),
    "audit_export": (VIEWER, None),
    "signin_failures": (ADMIN, None),
    "session_history": (VIEWER, None),
    "cascade_delete": (ADMIN, None),
    "cascade_delete_confirm": (None, ADMIN),
    "bulk_delete": (ADMIN, None),
    "bulk_delete_preview": (None, ADMIN),
    "bulk_delete_start": (None, ADMIN),
    "job_list": (ADMIN, None),
    "job_detail": (ADMIN, None),
    "job_cancel": (None, ADMIN),
    "job_resume": (None, ADMIN),
    "trash": (ADMIN, None),
    "trash_restore": (None, ADMIN),
    "trash_purge": (None, ADMIN),
    "holds": (SUPPORT, None),
    "hold_place": (None, SUPPORT),
    "hold_release": (None, SUPPORT),
    "retention": (ADMIN, None),
    "retention_create": (None, ADMIN),
    "retention_switch": (None, ADMIN),
    "retention_preview": (ADMIN, None),
    "retention_run": (None, ADMIN),
    "retention_delete": (None, ADMIN),
    "erasure": (ADMIN, None),
    "erasure_preview": (None, ADMIN),
    "erasure_confirm": (None, ADMIN),
    "erasure_detail": (ADMIN, None),
    "erasure_receipt": (ADMIN, None),
    "erasure_verify": (None, ADMIN),
    "erasure_rewrite": (None, ADMIN),
    "export_sessions": (VIEWER, None),
    "session_export": (VIEWER, None),
    "export_session": (VIEWER, None),
    "stray_move_preview": (VIEWER, None),
    "stray_move_execute": (None, SUPPORT),
    "stray_move_undo": (None, SUPPORT),
    "api_tokens": (ADMIN, None),
    "api_token_create": (None, ADMIN),
    "api_token_revoke": (None, ADMIN),
    # For load balancers and Prometheus (console/views/probes.py).
    "healthz": (ANYONE, None),
    "readyz": (ANYONE, None),
    "metrics": (TOKEN, None),
}
PUBLIC = {name for name, (get, post) in ACCESS.items() if ANYONE in (get, post)}
# Admin pages about the dashboard itself, not the store: still readable while the store is
# attached read-only.
NOT_ABOUT_THE_STORE = {"signin_failures", "api_tokens", "api_token_create", "api_token_revoke"}
# None: signed in without a role.
ACTORS = (None, *ROLES)


def _rank(role: str | None) -> int:
    return -1 if role is None else ROLES.index(role)


def _allowed(actor: str | None, needed: str | None) -> bool:
    return needed == ANYONE or (needed in ROLES and _rank(actor) >= _rank(needed))


pytestmark = pytest.mark.usefixtures("no_worker")


def _client_for(actor: str | None, **kwargs) -> Client:
    client = Client(**kwargs)
    user = User.objects.create_user(f"op-{actor or 'none'}-{User.objects.count()}")
    if actor:
        assign_role(user, actor)
    client.force_login(user)
    return client


def _request(client: Client, method: str, url: str, **extra):
    return client.get(url, **extra) if method == "GET" else client.post(url, **extra)


def test_it_has_an_access_rule_for_every_url():
    assert urlmap.route_names() == set(ACCESS)


@pytest.mark.parametrize("name", sorted(ACCESS))
def test_it_sends_visitors_who_are_not_signed_in_to_sign_in(name, seeded):
    url = urlmap.route(name).url(seeded.url_args)
    before = urlmap.state()
    for method in ("GET", "POST"):
        for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
            response = _request(Client(), method, url, **headers)
            body = b"".join(response) if response.streaming else response.content
            if name in PUBLIC:
                assert response.status_code in (200, 302, 405), (method, response.status_code)
            elif ACCESS[name][0] == TOKEN:  # refused as it is, never sent to sign in
                assert response.status_code == (403 if method == "GET" else 405), method
            else:
                assert response.status_code in (302, 403), (method, response.status_code)
                if response.status_code == 302:
                    assert response["Location"].startswith("/login/"), response["Location"]
            text = body.decode(errors="replace")
            for secret in seeded.secrets:
                assert secret not in text, (method, secret)
    assert urlmap.state() == before


@pytest.mark.parametrize("name", sorted(ACCESS))
def test_it_allows_each_role_exactly_what_the_table_says(name, seeded):
    route = urlmap.route(name)
    needed = dict(zip(("GET", "POST"), ACCESS[name], strict=True))
    # Refused roles first: each of their requests must leave everything as it was.
    for actor in ACTORS:
        client = _client_for(actor)
        url = route.url(seeded.url_args)
        for method in ("GET", "POST"):
            before = urlmap.state()
            response = _request(client, method, url)
            status = response.status_code
            if needed[method] is None:
                assert status == 405, (actor, method, status)
                assert urlmap.state() == before, (actor, method)
            elif _allowed(actor, needed[method]):
                assert status not in (403, 405) and status < 500, (actor, method, status)
            else:
                assert status == 403, (actor, method, status)
                assert urlmap.state() == before, (actor, method)


@pytest.mark.parametrize("name", sorted(ACCESS))
def test_it_refuses_every_post_without_a_csrf_token(name, seeded):
    client = _client_for(ADMIN, enforce_csrf_checks=True)
    url = urlmap.route(name).url(seeded.url_args)
    before = urlmap.state()
    for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
        response = client.post(url, {"reason": "no token", "scope": "all"}, **headers)
        assert response.status_code == 403, response.status_code
        assert b"CSRF" in response.content
    assert urlmap.state() == before


@pytest.mark.parametrize("name", sorted(ACCESS))
def test_it_refuses_every_action_while_the_store_is_attached_read_only(name, seeded, settings):
    settings.SESSIONS_ADMIN_READ_ONLY = True
    route = urlmap.route(name)
    admin = _client_for(ADMIN)
    superuser = Client()
    superuser.force_login(User.objects.create_superuser("root-read-only"))
    for client in (admin, superuser):
        url = route.url(seeded.url_args)
        for method, needed in zip(("GET", "POST"), ACCESS[name], strict=True):
            before = urlmap.state()
            status = _request(client, method, url).status_code
            if needed in (SUPPORT, ADMIN) and name not in NOT_ABOUT_THE_STORE:
                assert status == 403, (method, status)
                assert urlmap.state() == before, method
            elif needed == TOKEN:
                assert status == 403, (method, status)
            elif needed is not None:
                assert status not in (403, 405) and status < 500, (method, status)
