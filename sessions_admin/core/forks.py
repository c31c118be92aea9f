"""Fork detection: sessions that belong to one logical conversation but are not linked.

A runtime that loses track of a conversation mints a new, unlinked session for it
(hermes-agent #16517: a ``/v1/responses`` cold start after the response was evicted). Two
kinds of evidence find them. **conversation**: one slug recorded on sessions that share no
lineage (its ``conversations`` row, responses naming it, the ``previous_response_id`` chain,
and the slug history: hermes-agent 0.19 deletes the slug's row on eviction and writes no slug
into its responses, so on its stores that history is the evidence). **session_key**:
consecutive sessions of one key where the earlier ended without an intentional boundary and
the next started with no parent link and no reset marker. Sessions a merge absorbed are not
forks."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

from sessions_admin.core import db, lineage
from sessions_admin.core.slug_history import SlugObservation, slug_histories
from sessions_admin.routers import responses_alias

ACCIDENTAL_END_REASONS = ("agent_close", "ws_orphan_reap", "lru_evict")


@dataclass(frozen=True)
class ForkGroup:
    kind: str  # "conversation" or "session_key"
    key: str
    session_ids: tuple[str, ...]  # oldest first
    evidence: tuple[str, ...]
    # The slug's recorded history (conversation groups): which response named which session, when.
    history: tuple[SlugObservation, ...] = ()

    @property
    def group_id(self) -> str:
        return f"{self.kind}:{self.key}"


def _responses_by_id() -> dict[str, tuple[str | None, str | None, str | None]]:
    alias = responses_alias()
    session = db.json_field("data", "session_id", alias=alias)
    slug = db.json_field("data", "conversation", alias=alias)
    # Hermes nests the response under ``response``; a flat response (the demo's seeder, other
    # runtimes) has ``previous_response_id`` at the top: either names the previous turn.
    if db.vendor(alias) == "postgresql":
        previous = (
            "(CASE WHEN data LIKE '{%%' THEN COALESCE(data::jsonb -> 'response' ->> "
            "'previous_response_id', data::jsonb ->> 'previous_response_id') END)"
        )
    else:
        previous = (
            "(CASE WHEN json_valid(data) THEN COALESCE(json_extract(data, "
            "'$.response.previous_response_id'), json_extract(data, '$.previous_response_id')) END)"
        )
    return {
        r[0]: (r[1], r[2], r[3])
        for r in db.fetchall(
            f"SELECT response_id, {session}, {previous}, {slug} FROM responses", alias=alias
        )
    }


def _history_reason(seen: SlugObservation) -> str:
    when = seen.response_created_at if seen.response_created_at is not None else seen.observed_at
    stamp = datetime.fromtimestamp(when, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"slug history: response {seen.response_id} named it ({stamp} UTC)"


def _conversation_evidence(
    histories: dict[str, list[SlugObservation]],
) -> dict[str, dict[str, list[str]]]:
    """slug -> session id -> the reasons it is recorded for that slug."""
    responses = _responses_by_id()
    found: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for slug, entries in histories.items():
        for seen in entries:
            if seen.session_id:
                found[slug][seen.session_id].append(_history_reason(seen))
    for response_id, (session_id, _previous, slug) in responses.items():
        if slug and session_id:
            found[slug][session_id].append(f"response {response_id} names it")
    for name, response_id, session_id in db.fetchall(
        "SELECT name, response_id, session_id FROM conversations", alias=responses_alias()
    ):
        if session_id:
            found[name][session_id].append("the conversation row records it")
        seen: set[str] = set()
        current = response_id
        while current and current in responses and current not in seen:
            seen.add(current)
            session_id, previous, _slug = responses[current]
            if session_id:
                found[name][session_id].append(f"response {current} in the slug's chain")
            current = previous
    return found


def _first_reasons(reasons: list[str], shown: int = 3) -> list[str]:
    """The first few distinct reasons in the order found (the slug history's come in time order)."""
    distinct = list(dict.fromkeys(reasons))
    more = len(distinct) - shown
    return distinct[:shown] + ([f"and {more} more"] if more > 0 else [])


def _session_rows(ids: set[str]) -> dict[str, dict]:
    return {
        row["id"]: row
        for row in db.fetchdicts_in(
            "SELECT id, started_at, end_reason FROM sessions WHERE id IN ({marks})", sorted(ids)
        )
    }


def _conversation_groups() -> list[ForkGroup]:
    histories = slug_histories(min_sessions=2)
    evidence = _conversation_evidence(histories)
    rows = _session_rows({sid for sessions in evidence.values() for sid in sessions})
    candidates = {
        slug: [sid for sid in sessions if sid in rows and rows[sid]["end_reason"] != "merged"]
        for slug, sessions in evidence.items()
    }
    candidates = {slug: present for slug, present in candidates.items() if len(present) >= 2}
    roots = lineage.roots_of([sid for present in candidates.values() for sid in present])
    groups = []
    for slug, present in sorted(candidates.items()):
        sessions = evidence[slug]
        # Sessions already linked by lineage are one conversation, not forks.
        by_root: dict[str, str] = {}
        for sid in sorted(present, key=lambda s: (rows[s]["started_at"], s)):
            by_root.setdefault(roots.get(sid, sid), sid)
        if len(by_root) < 2:
            continue
        members = tuple(sorted(by_root.values(), key=lambda s: (rows[s]["started_at"], s)))
        reasons = tuple(f"{sid}: {'; '.join(_first_reasons(sessions[sid]))}" for sid in members)
        history = tuple(histories.get(slug, ()))
        groups.append(ForkGroup("conversation", slug, members, reasons, history))
    return groups


def _session_key_groups() -> list[ForkGroup]:
    reset_from = lineage.marker("_reset_from")
    accidental = ", ".join(f"'{reason}'" for reason in ACCIDENTAL_END_REASONS)
    pairs = db.fetchall(
        f"""
        SELECT session_key, previous_id, previous_end_reason, id FROM (
            SELECT id, session_key, parent_session_id, {reset_from} AS reset_from,
                   LAG(id) OVER by_key AS previous_id,
                   LAG(end_reason) OVER by_key AS previous_end_reason,
                   LAG(ended_at) OVER by_key AS previous_ended_at
            FROM sessions
            WHERE session_key IS NOT NULL AND parent_session_id IS NULL
              AND COALESCE(end_reason, '') <> 'merged'
            WINDOW by_key AS (PARTITION BY session_key ORDER BY started_at, id)
        ) consecutive
        WHERE previous_id IS NOT NULL AND parent_session_id IS NULL AND reset_from IS NULL
          AND (previous_ended_at IS NULL OR previous_end_reason IS NULL
               OR previous_end_reason IN ({accidental}))
        ORDER BY session_key
        """
    )
    chains: dict[str, list[tuple[str, str | None, str]]] = defaultdict(list)
    for key, previous_id, previous_reason, session_id in pairs:
        chains[key].append((previous_id, previous_reason, session_id))
    groups = []
    for key, links in chains.items():
        # Consecutive links of one key chain into groups: a-b, b-c -> (a, b, c).
        current: list[str] = []
        reasons: list[str] = []
        for previous_id, previous_reason, session_id in links:
            if current and current[-1] != previous_id:
                groups.append(ForkGroup("session_key", key, tuple(current), tuple(reasons)))
                current, reasons = [], []
            if not current:
                current = [previous_id]
            current.append(session_id)
            how = (
                f"ended {previous_reason}"
                if previous_reason
                else "never ended or ended with no reason"
            )
            reasons.append(f"{previous_id} {how}; {session_id} started with no parent link")
        if current:
            groups.append(ForkGroup("session_key", key, tuple(current), tuple(reasons)))
    return groups


def find_fork_groups() -> list[ForkGroup]:
    """Every fork group in the store, conversation evidence first."""
    return _conversation_groups() + _session_key_groups()


def fork_group(*, group_id: str) -> ForkGroup | None:
    for group in find_fork_groups():
        if group.group_id == group_id:
            return group
    return None


def fork_session_ids() -> set[str]:
    return {sid for group in find_fork_groups() for sid in group.session_ids}


def fork_groups_of_session(*, session_id: str) -> list[ForkGroup]:
    return [g for g in find_fork_groups() if session_id in g.session_ids]


def api_conversations() -> list[set[str]]:
    """The sessions of each ``/v1/responses`` conversation, linked or not: those one slug
    names (the evidence fork detection reads), and two sessions a stored response chains
    across (its ``previous_response_id`` names a response of the other session)."""
    groups = [set(sessions) for sessions in _conversation_evidence(slug_histories()).values()]
    responses = _responses_by_id()
    for session_id, previous, _slug in responses.values():
        before = responses[previous][0] if previous in responses else None
        if session_id and before and before != session_id:
            groups.append({session_id, before})
    return [group for group in groups if len(group) > 1]
