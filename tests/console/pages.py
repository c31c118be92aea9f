"""Reading the console's pages in tests: URLs of previews and the values their forms carry."""

from __future__ import annotations

import html
import re

from django.contrib.messages import get_messages
from django.urls import reverse


def preview_url(ids, target: str | None = None) -> str:
    query = "&".join(f"ids={i}" for i in ids)
    if target:
        query += f"&target={target}"
    return reverse("merge_preview") + "?" + query


def fingerprint_of(body: str) -> str | None:
    found = re.search(r'name="fingerprint" value="([^"]*)"', body)
    return html.unescape(found.group(1)) if found else None


def detail(session_id: str) -> str:
    return reverse("session_detail", args=[session_id])


def hidden(body: str, name: str) -> str | None:
    """The value of the page's hidden input ``name`` (None if it has none)."""
    found = re.search(rf'<input type="hidden" name="{name}" value="([^"]*)"', body)
    return html.unescape(found.group(1)) if found else None


def flashed(response) -> list[str]:
    """The messages the request queued (shown on the page or waiting for the next one)."""
    return [str(m) for m in get_messages(response.wsgi_request)]


def messages_shown(response) -> list[str]:
    """The messages the rendered page shows (none for a redirect)."""
    return [str(m) for m in response.context["messages"]] if response.context else []
