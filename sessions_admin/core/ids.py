"""Session ids: which ones the console can address, and which a new id from outside may be.

Two rules, kept here so the URL converter and every importer agree. ``addressable``: no
``/`` (a path segment ends there), no NUL (PostgreSQL cannot compare with one), not ``.`` or
``..`` (browsers resolve those away); ids a runtime wrote outside it stay in the store and the
list, their pages simply have no URL. ``new_session_id_problem``: an id from outside (an import
file) must also render as itself, so it cannot pass for another session in the list, the audit
log or a link (no edge or odd whitespace, controls, format characters, unassigned code points,
surrogates, non-NFC text). Ids the runtime already wrote are never re-checked. Homoglyphs
across scripts are allowed: most fonts tell them apart and non-Latin ids need them."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from sessions_admin.core.text import storability_problem

# The URL converter's pattern: one path segment without NUL ("." and ".." are refused
# by ``addressable``; a converter cannot refuse them without a 404 for a stored id).
URL_PATTERN = "[^/\x00]+"
UNADDRESSABLE_SEGMENTS = frozenset({".", ".."})
NEW_ID_MAX = 200  # what core.create_session accepts for a new id

# Unicode categories that never render as themselves: controls (newlines, tabs),
# format characters (zero-width, bidi overrides, soft hyphen), surrogates,
# unassigned code points, line and paragraph separators.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Cn", "Zl", "Zp"})
_URL_RE = re.compile(URL_PATTERN)


def addressable(session_id: Any) -> bool:
    """Whether the console can carry ``session_id`` in a URL and get the same id back."""
    return (
        isinstance(session_id, str)
        and _URL_RE.fullmatch(session_id) is not None
        and session_id not in UNADDRESSABLE_SEGMENTS
    )


def new_session_id_problem(value: Any, *, max_length: int = NEW_ID_MAX) -> str | None:
    """Why ``value`` cannot be a new session id from outside (an import), or None.

    The text completes "the id ...", e.g. "the id 'a\\u202eb' contains U+202E ...".
    """
    if not isinstance(value, str):
        return f"must be text, not {type(value).__name__}"
    if not value or not value.strip():
        return "is empty"
    if len(value) > max_length:
        return f"is longer than {max_length} characters"
    problem = storability_problem(value)
    if problem:
        return problem
    if not addressable(value):
        return "cannot be addressed by a console URL (it contains '/' or is '.' or '..')"
    if value != value.strip():
        return "starts or ends with whitespace (it would look like the id without it)"
    for char in value:
        category = unicodedata.category(char)
        if category in _INVISIBLE_CATEGORIES:
            name = unicodedata.name(char, "a control character")
            return (
                f"contains U+{ord(char):04X} ({name}), which does not render as itself "
                "(the id could pass for another)"
            )
        if char.isspace() and char != " ":
            return f"contains U+{ord(char):04X}, whitespace other than a plain space"
    if "  " in value:
        return "contains a run of spaces (a page shows it as one)"
    if not unicodedata.is_normalized("NFC", value):
        return "is not in Unicode NFC form (it would look like its composed form)"
    return None


def shown(value: Any, *, limit: int = 60) -> str:
    """An id as a message shows it: quoted, invisible characters escaped, cut to ``limit``."""
    if not isinstance(value, str):
        return repr(value)
    escaped = "".join(
        f"\\u{ord(char):04x}"
        if ord(char) <= 0xFFFF and _invisible(char)
        else f"\\U{ord(char):08x}"
        if _invisible(char)
        else char
        for char in value[:limit]
    )
    return f"'{escaped}'" + ("..." if len(value) > limit else "")


def _invisible(char: str) -> bool:
    return unicodedata.category(char) in _INVISIBLE_CATEGORIES or (char.isspace() and char != " ")
