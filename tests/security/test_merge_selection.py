"""The session list's "Merge selected…" posts its form; the token never reaches a URL."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from django.contrib.auth.models import User
from django.test import Client

from sessions_admin import core
from sessions_admin.signin.roles import assign_role


def _support() -> Client:
    client = Client(enforce_csrf_checks=True)
    user = User.objects.create_user("merge-picker")
    assign_role(user, "support")
    client.force_login(user)
    return client


def test_the_merge_button_posts_and_is_redirected_to_the_preview_with_ids_only():
    ids = [core.create_session(source="cli", started_at=1000.0 + n).session_id for n in range(2)]
    client = _support()
    page = client.get("/sessions/?scope=all")
    html = page.content.decode()
    assert 'formmethod="get"' not in html
    token = page.cookies["csrftoken"].value
    response = client.post(
        "/sessions/",
        {"csrfmiddlewaretoken": token, "ids": ids, "filter": "scope=all", "all_matching": ""},
    )
    assert response.status_code == 303
    target = urlparse(response["Location"])
    assert target.path == "/merge/preview/"
    assert parse_qs(target.query) == {"ids": ids}
    preview = client.get(response["Location"])
    assert preview.status_code == 200 and ids[0] in preview.content.decode()


def test_a_selection_too_long_for_a_url_goes_back_to_the_list_with_a_message():
    client = _support()
    client.get("/sessions/")
    ids = [f"{'x' * 150}-{n}" for n in range(40)]
    response = client.post(
        "/sessions/",
        {
            "csrfmiddlewaretoken": client.cookies["csrftoken"].value,
            "ids": ids,
            "filter": "source=cli&bogus=1",
        },
    )
    assert response.status_code == 303
    assert response["Location"] == "/sessions/?source=cli"
    assert "too many" in client.get(response["Location"]).content.decode()


def test_a_post_without_the_token_is_refused():
    response = _support().post("/sessions/", {"ids": ["a", "b"]})
    assert response.status_code == 403
