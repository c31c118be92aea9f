"""A bulk delete's selection: what a preset selects, and the dry run of deleting it.

The job that works through it in the background is the ledger's (``sessions_admin.ledger.jobs``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sessions_admin.core import db, forks, holds, lineage, slug_history
from sessions_admin.core.deletion.plan import (
    WholeConversations,
    _chunks,
    _linked,
    _together_sql,
    children_kept,
    conversation_names_of,
    conversation_within,
    kept_whole,
    lineage_closure,
    messages_extent,
    response_ids_of,
    selection_fingerprint,
)
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.merge import undoable_merges_of

# Sessions a dry run shows as a sample of what goes.
SAMPLE_SIZE = 10
# Sessions one bulk delete takes by id (picked in the list, or sent to the API).
SELECTION_MAX = 10_000
# The "by source" preset's source name, at most this long.
SOURCE_MAX_LENGTH = 500
# The "ended more than N days ago" preset's bounds, and how old its dry run may be when the
# job is confirmed (the confirmation carries the dry run's cutoff instant).
PRESET_MAX_DAYS = 36_500
DRY_RUN_MAX_AGE_SECONDS = 86_400
# A dry run's cutoff may be this far ahead of the confirmation's clock (another host's clock).
CLOCK_SKEW_SECONDS = 60
PRESETS = {
    "ended_older_than": "Ended more than N days ago",
    "empty": "Empty sessions (no messages)",
    "by_source": "By source",
}
# The presets that select sessions by how old or how empty they are: a conversation goes only
# when every session of it matches, as in a retention run. The continuation or delegate that
# goes with a match but ended since (or holds messages) keeps its whole conversation, instead
# of being deleted with it (attack round 45: "ended more than 90 days ago" took a continuation
# written yesterday). "By source" takes a conversation of that source with its delegates,
# whatever theirs.
WHOLE_MATCH_PRESETS = frozenset({"ended_older_than", "empty"})


def days_text(days: float) -> str:
    """Exact (it round-trips through a confirmation), without a needless ".0"."""
    return str(int(days)) if float(days).is_integer() else repr(float(days))


def plural_days(days: float | None) -> str:
    """``"1 day"``, ``"0.5 days"``."""
    value = float(days or 0)
    return f"{days_text(value)} day" if value == 1 else f"{days_text(value)} days"


def preset_description(preset: str, *, days: float | None = None, source: str | None = None) -> str:
    """What a preset selects, in words (a job's description, the dry run's heading)."""
    if preset == "ended_older_than":
        return f"Sessions that ended more than {plural_days(days)} ago"
    if preset == "empty":
        return PRESETS["empty"]
    return f"Sessions from source “{source}”"


def takes_live(*, preset: str | None, include_live: bool) -> bool:
    """Whether a bulk delete of this selection takes live sessions: only when asked, and never
    for the "empty" preset (an empty live session is a chat's current one, a reset made a
    moment ago; deleting one is a pick by id). The job keeps the answer for every batch, so a
    session resumed after the dry run is left out again."""
    return bool(include_live) and preset != "empty"


def confirmed_cutoff(*, days: float, shown_cutoff: float | None, now: float) -> float | None:
    """The instant the confirmed dry run of "ended more than ``days`` ago" used, or None when
    it is missing or older than ``DRY_RUN_MAX_AGE_SECONDS`` (the operator reviews a fresh one)."""
    fresh = now - days * 86400
    if shown_cutoff is None:
        return None
    age = fresh - shown_cutoff
    if not -CLOCK_SKEW_SECONDS <= age <= DRY_RUN_MAX_AGE_SECONDS:
        return None
    return shown_cutoff


def days_before(cutoff: float, *, now: float) -> float:
    """The preset's age in days that selects what ended before ``cutoff``."""
    return min(float(PRESET_MAX_DAYS), max(0.0, (now - cutoff) / 86400))


@dataclass(frozen=True)
class BulkDeletePreview:
    session_ids: tuple[str, ...]  # what would go (live ones excluded unless asked)
    live_excluded: int
    message_count: int
    sample: tuple[dict, ...]
    # Sessions left out because a legal hold covers them, and the holds in words.
    held_excluded: int = 0
    holds: tuple[str, ...] = ()
    # Sessions left out because a merge that can still be undone needs them, each with why
    # ("kept: target of merge #5, which can still be undone"), and how many more sessions of
    # their conversations stay with them (a conversation is never split).
    merge_kept: tuple[tuple[str, str], ...] = ()
    merge_kept_with: int = 0
    # Sessions left out because their conversation goes on in a session this delete does not
    # take (a live continuation, one not picked), each with why (``kept_whole``).
    conversation_kept: tuple[tuple[str, str], ...] = ()
    # The highest message id among the sessions: with ``message_count``, what the digest
    # holds of their messages (a runtime writing into one since changes it).
    last_message_id: int = 0
    # (child, relation) of the sessions below them the delete keeps, their parent link
    # cleared (branches, untyped children), as a cascade's plan names them.
    kept_children: tuple[tuple[str, str], ...] = ()

    @property
    def merge_excluded(self) -> int:
        return len(self.merge_kept) + self.merge_kept_with

    @property
    def digest(self) -> str:
        """What the job's confirmation carries: the set the dry run showed, whatever its order,
        and their messages as counted (the job is created only if the dry run run again finds
        the same digest). Keyed (``core.fingerprints``): only a dry run the server made gives one."""
        return selection_fingerprint(
            "bulk-delete",
            self.session_ids,
            messages=(self.message_count, self.last_message_id),
            kept_children=sorted(child for child, _ in self.kept_children),
        )


def preset_session_ids(
    *, preset: str, days: float | None = None, source: str | None = None
) -> list[str]:
    """Sessions matching one of the bulk-delete presets, oldest first.

    "empty" never selects a live session (an empty live session is a chat's
    current one, often what a reset started a moment ago): a live session is
    deleted only by picking it. The dry run (``preview_bulk_delete``) then
    leaves out what a merge that can still be undone needs, saying why.
    """
    if preset == "ended_older_than":
        if days is None or days < 0 or days > 36500:
            raise InvalidInput("Give a number of days between 0 and 36500.")
        cutoff = time.time() - float(days) * 86400
        sql, params = "ended_at IS NOT NULL AND ended_at < %s", [cutoff]
    elif preset == "empty":
        sql, params = (
            "ended_at IS NOT NULL "
            "AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = sessions.id)",
            [],
        )
    elif preset == "by_source":
        if not source:
            raise InvalidInput("Pick a source.")
        sql, params = "source = %s", [source]
    else:
        raise InvalidInput(f"Unknown preset {preset!r}.")
    return [
        r[0]
        for r in db.fetchall(f"SELECT id FROM sessions WHERE {sql} ORDER BY started_at, id", params)
    ]


def _with_downstream(ids: list[str]) -> list[str]:
    """The ids plus what always goes with them in a delete: compression continuations and
    delegates, recursively (a conversation's later segments never outlive its start)."""
    found = list(dict.fromkeys(ids))
    picked = set(found)
    closure = lineage_closure(found, include_branches=False)
    return found + [sid for sid in closure if sid not in picked]


def not_all_matched(ids: Sequence[str], matched: set[str]) -> dict[str, str]:
    """Of ``ids`` (what a preset matched, with what goes with it), the sessions whose
    conversation has a session the preset did not match, each with why: one of ``ids`` that
    is not in ``matched``, or a session outside them it is linked to (its parent, say). The
    links are those a delete keeps together (``_together_sql``)."""
    neighbours: dict[str, set[str]] = {}
    for child, parent in _linked(list(ids), every_link=False):
        neighbours.setdefault(child, set()).add(parent)
        neighbours.setdefault(parent, set()).add(child)
    why: dict[str, str] = {}
    seen: set[str] = set()
    for start in ids:
        if start in seen:
            continue
        seen.add(start)
        component, pending = [], [start]
        while pending:
            sid = pending.pop()
            component.append(sid)
            for other in neighbours.get(sid, ()):
                if other not in seen:
                    seen.add(other)
                    pending.append(other)
        strangers = sorted(sid for sid in component if sid not in matched)
        if strangers:
            for sid in component:
                why[sid] = (
                    f"its conversation goes on in {strangers[0]}, which the preset does not select"
                )
    return why


def _continuation_links(ids: Sequence[str]) -> list[tuple[str, str]]:
    """(continuation, the session it continues) touching ``ids``: compression links, parent
    links of a ``_continued_from`` session, and ``_continued_from`` markers themselves (a
    runtime may leave ``parent_session_id`` empty: the marker is the only link then)."""
    kind = lineage.link_kind_sql("c", "p")
    continued = lineage.marker("_continued_from", "c")
    marked = f"SELECT c.id, {continued} FROM sessions c WHERE {continued} IS NOT NULL"
    pairs: list[tuple[str, str]] = []
    starts: list[float] = []
    for chunk in _chunks(list(ids)):
        marks = db.placeholders(chunk)
        pairs += db.fetchall(
            f"SELECT c.id, p.id FROM sessions c JOIN sessions p ON p.id = c.parent_session_id "
            f"WHERE (c.id IN ({marks}) OR p.id IN ({marks})) AND ({kind} = 'compression' "
            f"OR ({kind} = 'child' AND {continued} IS NOT NULL))",
            [*chunk, *chunk],
        )
        pairs += db.fetchall(f"{marked} AND c.id IN ({marks})", list(chunk))
        (start,) = db.fetchone(
            f"SELECT MIN(started_at) FROM sessions WHERE id IN ({marks})", list(chunk)
        )
        if start is not None:
            starts.append(float(start))
    # What continues one of them by its marker alone started after it (a day's leeway for a
    # runtime's clock): one pass over the sessions started since the first of them, through
    # the start-time index, not over the whole store.
    wanted = set(ids)
    if starts:
        pairs += [
            (child, str(parent))
            for child, parent in db.fetchall(
                f"{marked} AND c.started_at >= %s", [min(starts) - 86400]
            )
            if str(parent) in wanted
        ]
    return pairs


def continuing_outside(ids: Sequence[str]) -> dict[str, str]:
    """Those of ``ids`` in one conversation with a session the delete does not take by a
    continuation link (``_continuation_links``): one that continues a session left out, or is
    continued in one, with every session of ``ids`` in that conversation, each with why. A
    conversation never loses its start, its middle or its end (attack round 45: "by source"
    took a telegram continuation of a discord conversation, its root left ended by
    "compression"; a pick took the middle of an API conversation linked by markers only)."""
    wanted = set(ids)
    pairs = _continuation_links(ids)
    outside = {sid for pair in pairs for sid in pair if sid not in wanted}
    existing = set(lineage.existing_session_ids(sorted(outside))) if outside else set()
    why: dict[str, str] = {}
    inner: dict[str, set[str]] = {}
    for child, parent in sorted(set(pairs)):
        if child in wanted and parent in existing:
            why.setdefault(
                child, f"its conversation began in {parent}, which this delete does not take"
            )
        elif parent in wanted and child in existing:
            # As ``kept_whole`` words it (a job's batch says the same).
            why.setdefault(parent, f"its conversation continued in {child}")
        elif child in wanted and parent in wanted:
            inner.setdefault(child, set()).add(parent)
            inner.setdefault(parent, set()).add(child)
    # The rest of each such conversation among ``ids`` stays with it: over parent links
    # (compression, delegates) and over the continuation links between them.
    kept = set(why)
    while True:
        grown = _conversations_around(list(ids), kept) if kept else set()
        grown |= {other for sid in grown | kept for other in inner.get(sid, ())}
        if grown <= kept:
            break
        kept |= grown
    for sid in sorted(kept - why.keys()):
        why[sid] = "with a session whose conversation goes on in one this delete does not take"
    return why


def live_session_ids(ids: Sequence[str]) -> set[str]:
    """Those of the sessions that are live (not ended)."""
    live: set[str] = set()
    for chunk in _chunks(list(ids)):
        live |= {
            r[0]
            for r in db.fetchall(
                f"SELECT id FROM sessions WHERE ended_at IS NULL AND id IN ({db.placeholders(chunk)})",
                list(chunk),
            )
        }
    return live


def _conversations_around(ids: Sequence[str], members: Iterable[str]) -> set[str]:
    """``members`` and every session of ``ids`` linked to one of them by a compression or
    delegate link (either way, within ``ids``): what stays so that none of those
    conversations loses its start, middle or end."""
    linked: dict[str, set[str]] = {}
    kind = lineage.link_kind_sql("c", "p")
    for chunk in _chunks(list(ids)):
        for child, parent, link in db.fetchall(
            f"SELECT c.id, p.id, {kind} FROM sessions c JOIN sessions p "
            f"ON p.id = c.parent_session_id WHERE c.id IN ({db.placeholders(chunk)})",
            list(chunk),
        ):
            if link in ("compression", "delegate"):
                linked.setdefault(child, set()).add(parent)
                linked.setdefault(parent, set()).add(child)
    wanted = set(ids)
    found = set(members)
    pending = list(found)
    while pending:
        for other in linked.get(pending.pop(), ()):
            if other in wanted and other not in found:
                found.add(other)
                pending.append(other)
    return found


def _api_footprint(ids: Sequence[str]) -> bool:
    """Whether any of ``ids`` has a stored response, a slug or a slug-history entry: only then
    is every ``/v1/responses`` conversation read (a scan of the stored responses)."""
    if response_ids_of(ids) or conversation_names_of(ids):
        return True
    if not slug_history.history_table_exists():
        return False
    return bool(
        db.fetchall_in(
            f"SELECT 1 FROM {slug_history.TABLE} WHERE session_id IN ({{marks}})", list(ids)
        )
    )


def going_on_outside(ids: Sequence[str], *, taken: Iterable[str] | None = None) -> dict[str, str]:
    """Those of ``ids`` whose conversation goes on in a session the delete does not take
    (``taken``: what it still deletes, ``ids`` by default), by a link ``kept_whole`` does not
    follow for a bulk delete, each with why, and every session of ``taken`` in one
    conversation with them: a delegate or continuation whose parent is live, and the
    sessions of one ``/v1/responses`` conversation (one slug, or stored responses chained
    across sessions, ``forks.api_conversations``) that has a session left out. The dry run
    asks it of its selection, a job of each batch before deleting it.

    Taking the ended half of such a conversation left the live half's next turn chained to a
    deleted response, or a live chat's delegate gone from under it (attack round 41)."""
    taken = set(ids) if taken is None else set(taken)
    why: dict[str, str] = {}
    together = _together_sql("c", "p", False)
    for chunk in _chunks(list(ids)):
        for child, parent in db.fetchall(
            f"SELECT c.id, p.id FROM sessions c JOIN sessions p ON p.id = c.parent_session_id "
            f"WHERE c.id IN ({db.placeholders(chunk)}) AND p.ended_at IS NULL AND {together}",
            list(chunk),
        ):
            if parent not in taken:
                why[child] = f"its conversation goes on in {parent}, which is live"
    groups = (
        [group for group in forks.api_conversations() if group & taken]
        if _api_footprint(list(ids))
        else []
    )
    left = set(lineage.existing_session_ids(sorted({sid for g in groups for sid in g} - taken)))
    # Until nothing more stays: a session kept keeps its conversation's other sessions, and
    # an API conversation with a session kept keeps the rest of it.
    grew = True
    while grew:
        grew = False
        for flagged in sorted(why):
            for other in sorted(conversation_within([flagged], taken) - why.keys()):
                why[other] = f"with {flagged}, {why[flagged]}"
                grew = True
        for group in groups:
            others = sorted((group & left) | (group & why.keys()))
            for sid in sorted(group & taken - why.keys()) if others else ():
                why[sid] = f"its API conversation goes on in {others[0]}"
                grew = True
    return why


def preview_bulk_delete(
    *, session_ids: Sequence[str], include_live: bool = False, preset: str | None = None
) -> BulkDeletePreview:
    """The dry run: the exact set, its size, how many live sessions were left out, a sample.

    Left out, each with why: live sessions (unless ``include_live``), held ones, and the
    sessions a merge that can still be undone needs (``merge.undoable_merges_of``) with the
    rest of their conversations: deleting them would lose the undo silently (a cascade
    delete of the conversation says so and asks). So is a conversation that goes on in a
    session the delete does not take (``kept_whole``: a live continuation, say): the job
    checks the same again under the lock, batch by batch. ``preset``: the preset that
    selected ``session_ids``; for one of ``WHOLE_MATCH_PRESETS`` a conversation with a session
    it did not match stays whole (``not_all_matched``).
    """
    picked = [s for s in session_ids if s]
    ids = _with_downstream(picked)
    unmatched: dict[str, str] = {}
    if preset in WHOLE_MATCH_PRESETS:
        unmatched = not_all_matched(ids, set(picked))
        ids = [sid for sid in ids if sid not in unmatched]
    if ids:
        unmatched.update(continuing_outside(ids))
        ids = [sid for sid in ids if sid not in unmatched]
    live = live_session_ids(ids)
    held = holds.holds_on(ids)
    merges = undoable_merges_of(ids)
    for_merges = _conversations_around(ids, merges) if merges else set()
    kept = [
        sid
        for sid in ids
        if (include_live or sid not in live) and sid not in held and sid not in for_merges
    ]
    found = lineage.existing_session_ids(kept)
    existing = [sid for sid in kept if sid in found]
    whole = kept_whole(existing, WholeConversations(remaining=set(existing))) if existing else {}
    existing = [sid for sid in existing if sid not in whole]
    if existing:
        outside = going_on_outside(existing)
        whole.update(outside)
        existing = [sid for sid in existing if sid not in outside]
    sample = (
        tuple(
            db.fetchdicts(
                "SELECT id, source, title, started_at, ended_at, end_reason, message_count "
                f"FROM sessions WHERE id IN ({db.placeholders(existing[:SAMPLE_SIZE])})",
                existing[:SAMPLE_SIZE],
            )
        )
        if existing
        else ()
    )
    message_count, last_message_id = messages_extent(existing) if existing else (0, 0)
    return BulkDeletePreview(
        session_ids=tuple(existing),
        live_excluded=0 if include_live else len([s for s in ids if s in live]),
        message_count=message_count,
        last_message_id=last_message_id,
        kept_children=tuple(children_kept(existing)) if existing else (),
        sample=sample,
        held_excluded=len(held),
        holds=tuple(sorted({hold.describe() for hold in held.values()})),
        merge_kept=tuple((sid, merges[sid].describe()) for sid in ids if sid in merges),
        merge_kept_with=len(for_merges - set(merges)),
        conversation_kept=(
            tuple((sid, unmatched[sid]) for sid in picked if sid in unmatched)
            + tuple((sid, whole[sid]) for sid in ids if sid in whole)
        ),
    )
