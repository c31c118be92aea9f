"""What a retention policy selects: whole, quiet, ended conversations, never what must stay.

A rule names sessions by source, status, end reason, title and quiet days (``check_days`` is
the one rule for the form, the command and the stored policy). A run deletes whole
conversations only: every session linked to another by a parent link of any kind,
``_continued_from``, a merge, or one ``/v1/responses`` conversation
(``forks.api_conversations``); a reset is the one link that starts a new conversation. A
conversation goes only when all of it matches; a session that is live, recently active,
unmatched, held (``core.holds``) or part of a merge that can still be undone keeps all of it,
and ``RetentionPlan.held`` names which hold kept what. docs/retention.md is the operator's
account; ``ledger/retention.py`` runs this selection as a bulk delete job."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sessions_admin.core import db, forks, holds, lineage
from sessions_admin.core.deletion.plan import messages_extent, selection_fingerprint
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.merge import undoable_merges_of
from sessions_admin.core.text import exact_id_problem

STATUSES = {"ended": "ended (any reason)", "empty": "ended with no messages"}
TITLES = {"any": "with or without a title", "with": "with a title", "without": "without a title"}
MIN_DAYS = 1
MAX_DAYS = 36_500
CHUNK = 500


def shown(value: Any) -> str:
    """A value as a refusal quotes it (bounded: it may be anything a caller passed)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def number_problem(value: Any, *, low: float, high: float) -> str | None:
    """Why ``value`` is not a number from ``low`` to ``high`` (None: it is).

    A boolean is not a number here (``True`` would read as 1), nor is text, NaN
    or an infinity (both fail the range); an int too large for a float fails the
    range too, without converting it.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{shown(value)} is not a number"
    if not low <= value <= high:
        return f"{shown(value)} is out of range"
    return None


def check_days(value: Any) -> float:
    """``older_than_days`` as a float, or ``InvalidInput`` saying what is allowed."""
    problem = number_problem(value, low=MIN_DAYS, high=MAX_DAYS)
    if problem:
        raise InvalidInput(
            f"Keep sessions between {MIN_DAYS} and {MAX_DAYS} days of quiet ({problem}); "
            "nothing was stored or deleted."
        )
    return float(value)


@dataclass(frozen=True)
class RetentionRule:
    older_than_days: float
    source: str = ""
    status: str = "ended"
    end_reason: str = ""
    title: str = "any"

    def check(self) -> None:
        check_days(self.older_than_days)
        for name in ("source", "end_reason"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise InvalidInput(f"The {name.replace('_', ' ')} must be text.")
            # Empty is "any"; anything else is compared whole, so a blank or padded value
            # would name no session and the policy would silently never apply.
            if value and (problem := exact_id_problem(value, name.replace("_", " "))):
                raise InvalidInput(problem)
        if self.status not in STATUSES:
            raise InvalidInput(f"Status must be one of {', '.join(STATUSES)}.")
        if self.title not in TITLES:
            raise InvalidInput(f"Title must be one of {', '.join(TITLES)}.")

    def describe(self) -> str:
        parts = [STATUSES[self.status]]
        if self.source:
            parts.append(f"from {self.source}")
        if self.end_reason:
            parts.append(f"ended by {self.end_reason}")
        if self.title != "any":
            parts.append(TITLES[self.title])
        parts.append(f"quiet for {float(self.older_than_days):g} days")
        return ", ".join(parts)


@dataclass(frozen=True)
class HeldSkip:
    """A session the rule matched that stays because a legal hold covers its conversation."""

    session_id: str
    hold_id: int
    hold: str  # the hold in words (``Hold.describe``)
    held_session_id: str  # the session the hold covers (this one, or one of its conversation)

    def describe(self) -> str:
        via = "" if self.held_session_id == self.session_id else f" (with {self.held_session_id})"
        return f"{self.session_id}{via}: hold #{self.hold_id}"


@dataclass(frozen=True)
class RetentionPlan:
    session_ids: tuple[str, ...]  # what a run deletes, oldest first (whole conversations)
    held: tuple[HeldSkip, ...]  # matched, kept by a hold (by session id)
    matched: int  # sessions the rule's filters matched, before whole conversations
    message_count: int  # the messages of ``session_ids``
    # Of ``session_ids`` and their messages (``core.fingerprints``): a run checks it to delete
    # what was shown, a message written into one of them since included.
    fingerprint: str


def _where(rule: RetentionRule, cutoff: float) -> tuple[str, list]:
    where = [
        "s.ended_at IS NOT NULL",
        "s.ended_at < %s",
        "s.started_at < %s",
        "NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id AND m.timestamp >= %s)",
    ]
    params: list = [cutoff, cutoff, cutoff]
    if rule.source:
        where.append("s.source = %s")
        params.append(rule.source)
    if rule.status == "empty":
        where.append("NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id)")
    if rule.end_reason:
        where.append("s.end_reason = %s")
        params.append(rule.end_reason)
    if rule.title == "with":
        where.append("s.title IS NOT NULL AND s.title <> ''")
    elif rule.title == "without":
        where.append("(s.title IS NULL OR s.title = '')")
    return " AND ".join(where), params


def plan_retention(rule: RetentionRule, *, now: float | None = None) -> RetentionPlan:
    """What a run of ``rule`` deletes now, and which holds keep what it matched."""
    rule.check()
    now = time.time() if now is None else now
    cutoff = now - float(rule.older_than_days) * 86400
    where, params = _where(rule, cutoff)
    matched = [
        r[0]
        for r in db.fetchall(
            f"SELECT s.id FROM sessions s WHERE {where} ORDER BY s.started_at, s.id", params
        )
    ]
    merge_parts = undoable_merges_of(matched)
    held = holds.holds_on(matched)
    components = _Components(matched)
    components.link(matched)
    for sid in matched:
        if sid in merge_parts or sid in held:
            components.keep(sid)
    chosen = [sid for sid in matched if not components.kept(sid)]
    skips = []
    for sid in matched:
        holder = held.get(sid)
        via = sid
        if holder is None:
            via = next((other for other in components.members(sid) if other in held), "")
            holder = held.get(via)
        if holder is not None:
            skips.append(HeldSkip(sid, holder.id, holder.describe(), via))
    extent = messages_extent(chosen) if chosen else (0, 0)
    return RetentionPlan(
        session_ids=tuple(chosen),
        held=tuple(skips),
        matched=len(matched),
        message_count=extent[0],
        fingerprint=selection_fingerprint("retention", chosen, messages=extent),
    )


def select_sessions(rule: RetentionRule, *, now: float | None = None) -> list[str]:
    """The sessions a run of ``rule`` deletes now, oldest first (whole conversations only)."""
    return list(plan_retention(rule, now=now).session_ids)


class _Components:
    """The matched sessions grouped into their conversations (union-find over every link).

    Only links that touch a matched session are read. A group with a link to a session
    that exists but was not matched is kept whole: that session belongs to its
    conversation and stays, so all of it stays.
    """

    def __init__(self, matched: list[str]):
        self.matched = set(matched)
        self.parent = {sid: sid for sid in matched}
        self.outside: set[str] = set()  # matched sessions linked to a staying session
        self._members: dict[str, list[str]] | None = None
        self._kept_roots: set[str] = set()

    def find(self, sid: str) -> str:
        root = sid
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[sid] != root:
            self.parent[sid], sid = root, self.parent[sid]
        return root

    def keep(self, sid: str) -> None:
        self.outside.add(sid)

    def _join(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Link each pair; a pair with one side unmatched keeps the other (if that side exists)."""
        unmatched: dict[str, set[str]] = {}
        for a, b in pairs:
            if not a or not b or a == b:
                continue
            if a in self.matched and b in self.matched:
                self.parent[self.find(a)] = self.find(b)
            elif a in self.matched:
                unmatched.setdefault(b, set()).add(a)
            elif b in self.matched:
                unmatched.setdefault(a, set()).add(b)
        for other in lineage.existing_session_ids(unmatched):
            self.outside.update(unmatched[other])

    def link(self, matched: list[str]) -> None:
        pairs: list[tuple[str, str]] = []
        for start in range(0, len(matched), CHUNK):
            chunk = matched[start : start + CHUNK]
            marks = db.placeholders(chunk)
            pairs += db.fetchall(
                "SELECT id, parent_session_id FROM sessions "
                f"WHERE id IN ({marks}) AND parent_session_id IS NOT NULL",
                chunk,
            )
            pairs += db.fetchall(
                f"SELECT id, parent_session_id FROM sessions WHERE parent_session_id IN ({marks})",
                chunk,
            )
        # A continuation names the session it went on from even where the runtime left
        # ``parent_session_id`` empty.
        continued_from = lineage.marker("_continued_from")
        pairs += db.fetchall(
            f"SELECT id, {continued_from} FROM sessions WHERE {continued_from} IS NOT NULL"
        )
        merged_into = lineage.marker("_merged_into")
        pairs += db.fetchall(
            f"SELECT id, {merged_into} FROM sessions WHERE {merged_into} IS NOT NULL"
        )
        for target, absorbed in db.fetchall(
            "SELECT target_session_id, absorbed_session_ids FROM sessions_admin_merges "
            "WHERE undone_at IS NULL"
        ):
            pairs += [(target, husk) for husk in json.loads(absorbed or "[]")]
        for group in forks.api_conversations():
            hub = next((sid for sid in sorted(group) if sid in self.matched), None)
            if hub is not None:
                pairs += [(hub, other) for other in group]
        self._join(pairs)

    def members(self, sid: str) -> list[str]:
        """The matched sessions of ``sid``'s conversation (call after every ``keep``)."""
        if self._members is None:
            self._members = {}
            for other in sorted(self.matched):
                self._members.setdefault(self.find(other), []).append(other)
            self._kept_roots = {self.find(other) for other in self.outside}
        return self._members[self.find(sid)]

    def kept(self, sid: str) -> bool:
        self.members(sid)
        return self.find(sid) in self._kept_roots
