"""One urls module per area of the console, and the path converters they share."""

from __future__ import annotations

from django.urls import register_converter

from sessions_admin.core import ids


class RowIdConverter:
    """A database row id: at most 18 digits, so it always fits a 64-bit integer column.

    Django's ``int`` converter takes any number of digits, and a larger number
    crashes the lookup (SQLite cannot bind it, PostgreSQL refuses it as a
    bigint) instead of answering 404.
    """

    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int | str) -> str:
        return str(value)


register_converter(RowIdConverter, "rowid")


class SessionIdConverter:
    """A session id in a URL: like ``str`` (no slash), and never a NUL character.

    No stored id holds a NUL, and PostgreSQL refuses to compare text with one,
    so ``/sessions/a%00b/`` is a 404 like any other unknown session. Which ids
    have a URL at all is ``core.ids.addressable`` (the rule imports apply too):
    ``.`` and ``..`` get none, since browsers resolve those segments away.
    """

    regex = ids.URL_PATTERN

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        if not ids.addressable(value):
            raise ValueError(f"no URL can carry the session id {value!r}")
        return value


register_converter(SessionIdConverter, "session_id")
