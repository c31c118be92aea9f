"""Reading the console's pages in tests: URLs of previews and the values their forms carry."""

from __future__ import annotations

import html
import re

from django.urls import reverse


def preview_url(ids, target: str | None = None) -> str:
    query = "&".join(f"ids={i}" for i in ids)
    if target:
        query += f"&target={target}"
    return reverse("merge_preview") + "?" + query


def fingerprint_of(body: str) -> str | None:
    found = re.search(r'name="fingerprint" value="([^"]*)"', body)
    return html.unescape(found.group(1)) if found else None
