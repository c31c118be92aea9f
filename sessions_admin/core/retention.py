"""What a retention policy selects: whole, quiet, ended conversations, never what must stay.

A rule names sessions by source, status (ended, or ended and empty), end reason, title
(with / without / either) and how long they have been quiet: no message stamped and no
end or start within ``older_than_days``. What it selects is then narrowed so that a
run deletes whole conversations only:

- never a live session, nor a session under a legal hold (``core.holds``; the bulk
  delete preview and the delete itself check that again), nor the husk or the target
  of a merge that can still be undone (an unmerge needs both);
- never a session whose compression continuation or delegate is not selected too
  (an old first segment of a conversation that is still going stays), nor a
  continuation or delegate whose parent stays (a conversation never loses its middle).
  Branches are conversations of their own: they stay when their parent goes (the
  delete clears their parent link) and go on their own rule.

The dashboard's retention policies (``ledger/retention.py``) run this selection as a
bulk delete job; a runtime can call it too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sessions_admin.core import db, lineage
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.merge import undoable_merges_of

STATUSES = {"ended": "ended (any reason)", "empty": "ended with no messages"}
TITLES = {"any": "with or without a title", "with": "with a title", "without": "without a title"}
MAX_DAYS = 36_500
CHUNK = 500
# Links along which a conversation continues (the rest start conversations of their own).
CONTINUING = ("compression", "delegate")


@dataclass(frozen=True)
class RetentionRule:
    older_than_days: float
    source: str = ""
    status: str = "ended"
    end_reason: str = ""
    title: str = "any"

    def check(self) -> None:
        if not isinstance(self.older_than_days, int | float) or not (
            0 <= float(self.older_than_days) <= MAX_DAYS
        ):
            raise InvalidInput(f"Keep sessions between 0 and {MAX_DAYS} days.")
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
        parts.append(f"quiet for {self.older_than_days:g} days")
        return ", ".join(parts)


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


def select_sessions(rule: RetentionRule, *, now: float | None = None) -> list[str]:
    """The sessions a run of ``rule`` deletes now, oldest first (whole conversations only)."""
    rule.check()
    now = time.time() if now is None else now
    cutoff = now - float(rule.older_than_days) * 86400
    where, params = _where(rule, cutoff)
    merged = undoable_merges_of()
    picked = [
        r[0]
        for r in db.fetchall(
            f"SELECT s.id FROM sessions s WHERE {where} ORDER BY s.started_at, s.id", params
        )
        if r[0] not in merged
    ]
    return _whole_conversations(picked)


def _whole_conversations(picked: list[str]) -> list[str]:
    """Those of ``picked`` whose conversation goes whole (see the module's docstring)."""
    chosen = set(picked)
    kind = lineage.link_kind_sql("c", "p")
    continuing_children: dict[str, list[str]] = {}
    continuing_parent: dict[str, str] = {}
    for start in range(0, len(picked), CHUNK):
        chunk = picked[start : start + CHUNK]
        marks = db.placeholders(chunk)
        for parent, child, link in db.fetchall(
            f"SELECT p.id, c.id, {kind} FROM sessions p JOIN sessions c "
            f"ON c.parent_session_id = p.id WHERE p.id IN ({marks})",
            chunk,
        ):
            if link in CONTINUING:
                continuing_children.setdefault(parent, []).append(child)
        for child, parent, link in db.fetchall(
            f"SELECT c.id, p.id, {kind} FROM sessions c JOIN sessions p "
            f"ON p.id = c.parent_session_id WHERE c.id IN ({marks})",
            chunk,
        ):
            if link in CONTINUING:
                continuing_parent[child] = parent
    changed = True
    while changed:
        changed = False
        for sid in list(chosen):
            parent = continuing_parent.get(sid)
            if parent is not None and parent not in chosen:
                chosen.discard(sid)
                changed = True
            elif any(child not in chosen for child in continuing_children.get(sid, ())):
                chosen.discard(sid)
                changed = True
    return [sid for sid in picked if sid in chosen]
