"""Who an erasure is about, and how one of their values is found in text.

A subject's values are compared whole and with their case, never with ``LIKE``: ``u1`` is not
``u10``, ``U1`` or ``u1 ``. In free text (titles, reasons, other people's messages) a value is
found only as a whole token and only when it is long enough (``MIN_MENTION``) not to be a word
of ordinary speech."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.text import exact_id_problem

# Values shorter than this are not looked for in other people's text (listed as mentions):
# a short id is a word of ordinary speech ("bob" in "bob's", "42" in any number).
MIN_MENTION = 4
MAX_VALUES = 50


@dataclass(frozen=True)
class Subject:
    """A person: their user id, and the chat ids and whole session keys that are theirs.

    Every value is compared whole and with its case (``sessions.user_id = ...``, never a
    substring or a pattern); a session key is the full key the store holds.
    """

    user_id: str
    chat_ids: tuple[str, ...] = ()
    session_keys: tuple[str, ...] = ()

    def check(self) -> None:
        if problem := exact_id_problem(self.user_id, "user id"):
            raise InvalidInput(problem)
        if len(self.chat_ids) + len(self.session_keys) > MAX_VALUES:
            raise InvalidInput(f"Give at most {MAX_VALUES} chat ids and session keys.")
        for values, what in ((self.chat_ids, "chat id"), (self.session_keys, "session key")):
            for value in values:
                if problem := exact_id_problem(value, what):
                    raise InvalidInput(problem)

    @property
    def values(self) -> tuple[str, ...]:
        """Every identifier of the subject, each distinct value once."""
        return tuple(dict.fromkeys([self.user_id, *self.chat_ids, *self.session_keys]))

    @property
    def strings(self) -> tuple[str, ...]:
        """What is looked for as a whole token in free text (others' messages, operator text):
        the identifiers long enough not to be ordinary words."""
        return tuple(v for v in self.values if len(v) >= MIN_MENTION)


def _token_pattern(values: Sequence[str]) -> re.Pattern | None:
    """A value as a whole token: not inside a longer word or id ("bob" not in "bobcat",
    "bob-2", "x.bob" or "bob.net"), with the case it has. ``:`` and ``@`` end a token: an
    address (``bob@example.com``), a mention (``@bob``) and a composite key (``dm:bob``,
    ``bob:order-7``) name the person (attack round 41: a reason ``mail bob@example.com``
    kept the id through an erasure), and so does Markdown's ``_bob_``: an underscore that
    is itself at a word's edge."""
    if not values:
        return None
    alternatives = "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True))
    starts = r"(?:(?<![\w\-.])|(?<=(?<![\w\-.])_))"
    ends = r"(?:(?![\w\-]|\.\w)|(?=_(?![\w\-])))"
    return re.compile(rf"{starts}(?:{alternatives}){ends}")


def names_subject(text: object, subject: Subject) -> bool:
    """Whether ``text`` names the subject as a whole token (see ``_token_pattern``)."""
    pattern = _token_pattern(subject.strings)
    return bool(pattern and isinstance(text, str) and pattern.search(text))


# What a token joined to the value by ``:``, ``@``, ``/`` or ``#`` may hold (``dm:bob``,
# ``bob@example.com``, ``bob:order-7``, ``users/bob``, ``bob#2``): it goes with the value, whole.
_JOINED_BEFORE = r"(?:\w(?:[\w\-.]*\w)?[:@/#])*"
_JOINED_AFTER = r"(?:[:@/#]\w(?:[\w\-.]*\w)?)*"


def redact_text(text: str, replacements: dict[str, str]) -> str:
    """``text`` with each whole-token occurrence of a key replaced by its value. A compound
    the key is part of (joined by ``:``, ``@``, ``/`` or ``#``: ``dm:bob``,
    ``bob@example.com``, ``bob:7``, ``bob/7``) is replaced whole: left half done, ``[erased]:7`` beside another person's
    ``bob:7`` elsewhere would give the erased value back (attack round 42)."""
    pattern = _token_pattern(list(replacements))
    if pattern is None or not isinstance(text, str):
        return text
    compound = re.compile(rf"{_JOINED_BEFORE}(?P<value>{pattern.pattern}){_JOINED_AFTER}")
    return compound.sub(lambda m: replacements[m.group("value")], text)
