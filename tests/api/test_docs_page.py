"""The API's docs page: served from vendored assets (no CDN), within the console's CSP."""

from __future__ import annotations

import re

from django.test import Client

from sessions_admin.security import content_security_policy


def test_the_docs_page_loads_only_its_own_assets_under_the_csp():
    client = Client()
    page = client.get("/api/v1/docs")
    assert page.status_code == 200
    assert page["Content-Security-Policy"] == content_security_policy()
    html = page.content.decode()
    assets = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', html)
    assert assets, html
    for url in assets:
        assert url.startswith("/static/"), url  # nothing from another origin
        assert client.get(url).status_code == 200, url
    # No script runs inline: the only inline block is the settings' JSON, which is data.
    for attributes, _body in re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S):
        assert "src=" in attributes or 'type="application/json"' in attributes, attributes
    assert "/api/v1/openapi.json" in html
