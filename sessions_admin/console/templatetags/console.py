"""Template filters shared by every console page: registered here, written elsewhere.

The HTML comes from ``console/html.py``, the words from ``console/words.py``, the times
from ``core.clock``.
"""

from __future__ import annotations

from django import template

from sessions_admin.console import html, words
from sessions_admin.core.clock import moment_of

register = template.Library()

# A REAL unix-seconds column as an aware datetime (None for what is not a time).
register.filter("unixtime", moment_of)
register.filter("end_reason_words", words.end_reason_words)
register.filter("duration", words.duration_words)


# The session page's messages and lineage tree and the list's rows, built in Python
# (see console/html.py).
register.filter("message_html", html.message_html)
register.filter("lineage_html", html.lineage_html)
register.filter("session_row_html", html.session_row_html)
