"""Template filters shared by every console page: registered here, written elsewhere.

The HTML and words come from ``console/html.py``, the times from ``core.clock``.
"""

from __future__ import annotations

from django import template

from sessions_admin.console import html
from sessions_admin.core.clock import moment_of

register = template.Library()

# A REAL unix-seconds column as an aware datetime (None for what is not a time).
register.filter("unixtime", moment_of)
register.filter("end_reason_words", html.end_reason_words)
register.filter("duration", html.duration_words)


# The session page's messages and lineage tree, built in Python (see console/html.py).
register.filter("message_html", html.message_html)
register.filter("lineage_html", html.lineage_html)
