"""The one rule for text an operator types (a reason, a reset summary, a resume reference).

Operator text ends up in the store and in the audit log, and neither backend holds every
Python string (PostgreSQL refuses NUL; no UTF-8 database encodes a lone surrogate). So it is
checked once, before anything is written, and refused with ``InvalidInput`` naming the field:
refused by the database after the store change committed, the change would have no audit
entry. ``operator_text`` is free text (stripped, bounded); ``operator_identifier`` names a
thing, taken as given apart from storability; ``exact_id_problem`` is stricter, for an id
matched whole for good (a hold's or erasure's subject): one that only looks like an id would
protect or erase nothing. ``ledger.actions`` applies them to every argument of every action;
views may call them earlier to show the message by the form."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Any

from sessions_admin.core.errors import InvalidInput

REASON_MAX = 2000  # an audit reason
SUMMARY_MAX = 20_000  # a reset summary (the new session's first message)
DESCRIPTION_MAX = 4000  # a bulk delete's description of its selection
REFERENCE_MAX = 500  # a resume reference: an id, a title or an id prefix
IDENTIFIER_MAX = 4000  # a session id or key to look up (stored ids may be long)
# Characters that make a LIKE or glob pattern: a value made only of them is a wildcard
# someone hoped would work, never an id (ids are compared whole, so it would match nothing).
WILDCARD_CHARACTERS = frozenset("%_*?")
# Unicode categories no id is written with and no one can see: controls, format characters
# (zero-width space and joiners, the byte order mark, bidi controls: Cf), line and paragraph
# separators.
INVISIBLE_CATEGORIES = ("Cc", "Cf", "Zl", "Zp")


def storability_problem(value: str) -> str | None:
    """Why neither backend could store ``value``, or None if both can."""
    if "\x00" in value:
        return "cannot contain a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid text (it holds a lone surrogate character)"
    return None


def operator_text(
    value: Any, *, field: str, max_length: int = REASON_MAX, required: bool = False
) -> str:
    """``value`` stripped (line breaks as ``\\n``), or ``InvalidInput`` saying what is wrong.

    ``None`` is the empty text. ``required`` refuses empty or blank text (destructive
    actions); the message then starts with "Give a {field}", which the forms show as is.
    """
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise InvalidInput(f"The {field} must be text, not {type(value).__name__}.")
    # A browser posts a textarea's line breaks as CRLF: count and keep them as one character.
    value = value.replace("\r\n", "\n").strip()
    problem = storability_problem(value)
    if problem:
        raise InvalidInput(f"The {field} {problem}.")
    if len(value) > max_length:
        raise InvalidInput(
            f"The {field} is {len(value):,} characters long; keep it under {max_length:,}."
        )
    if required and not says_something(value):
        raise InvalidInput(f"Give a {field}: it is required for destructive actions.")
    return value


def says_something(value: str) -> bool:
    """Whether ``value`` holds a character a reader sees: a reason made only of spaces,
    zero-width or other invisible format characters (U+200B, U+FEFF...) is none."""
    return any(
        not ch.isspace() and unicodedata.category(ch) not in ("Cf", "Cc", "Zs", "Zl", "Zp")
        for ch in value
    )


def operator_identifier(
    value: Any, *, field: str, max_length: int = IDENTIFIER_MAX, required: bool = True
) -> str | None:
    """``value`` unchanged if it can name something in either database, else ``InvalidInput``.

    Not stripped: an id is compared exactly. ``None`` (or "" when not required) is None.
    """
    if value is None or (value == "" and not required):
        if required:
            raise InvalidInput(f"Give a {field}.")
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"The {field} must be text, not {type(value).__name__}.")
    if not value:
        raise InvalidInput(f"Give a {field}.")
    problem = storability_problem(value)
    if problem:
        raise InvalidInput(f"The {field} {value[:40]!r} {problem}.")
    if len(value) > max_length:
        raise InvalidInput(f"The {field} is longer than {max_length:,} characters.")
    return value


def shown_back(value: Any, *, max_length: int = REASON_MAX) -> str:
    """Refused text as a form may show it again for correction: storable, cut to the bound."""
    if not isinstance(value, str):
        return ""
    value = value.replace("\x00", "").encode("utf-8", "ignore").decode("utf-8")
    return value.strip()[:max_length]


def operator_identifiers(values: Iterable[Any], *, field: str = "session id") -> list[str]:
    """Every value through ``operator_identifier`` (a list of picked session ids)."""
    if isinstance(values, str | bytes):
        raise InvalidInput(f"Give a list of {field}s, not a single string.")
    return [operator_identifier(v, field=field) for v in values]


def exact_id_problem(value: object, what: str) -> str | None:
    """Why ``value`` cannot be matched whole and exactly as a ``what`` (None: it can).

    Blank, not storable (NUL, a lone surrogate), longer than ``IDENTIFIER_MAX``, padded
    with spaces, holding an invisible or control character (``"alice\u200b"``
    reads as ``alice`` and names nobody) or made only of wildcard characters.
    """
    if not isinstance(value, str) or not value.strip():
        return f"Give the {what}: a blank one names nobody."
    # Checked before anything looks the value up: a lone surrogate cannot be sent to either
    # database, and an id longer than any stored one would only make the lookups fail.
    if problem := storability_problem(value):
        return f"The {what} {shown_back(value, max_length=40)!r} {problem}."
    if len(value) > IDENTIFIER_MAX:
        return f"The {what} is longer than {IDENTIFIER_MAX:,} characters; no id is that long."
    if value != value.strip():
        return (
            f"The {what} {value.strip()[:40]!r} has spaces before or after it; "
            "ids are compared exactly."
        )
    hidden = [ch for ch in value if unicodedata.category(ch) in INVISIBLE_CATEGORIES]
    if hidden:
        return (
            f"The {what} {value[:40]!r} holds an invisible or control character "
            f"(U+{ord(hidden[0]):04X}); type the id itself."
        )
    if set(value) <= WILDCARD_CHARACTERS:
        return (
            f"The {what} {value!r} is a wildcard: ids are compared whole and exactly, "
            "so give the id itself."
        )
    return None
