"""What a delete takes: the plan, its closure, and the conversations it keeps whole.

Destructive work has two phases. ``plan_cascade_delete`` says exactly what will go, grouped by
relation, with counts computed by SQL; execution (``batches.execute_cascade_delete``) checks
the plan's fingerprint so it deletes the set that was shown.

A delete of a previewed set (a job, a cascade) follows one rule in every batch, under the
store's lock: a conversation stays whole (``kept_whole``), so a session the runtime linked to
one being deleted after the preview, or a merge made meanwhile, keeps it instead of being cut off.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass

from sessions_admin.core import db, holds, lineage
from sessions_admin.core.errors import InvalidInput, SessionNotFound, StoreError
from sessions_admin.core.fingerprints import plan_fingerprint
from sessions_admin.core.merge import undoable_merges_of
from sessions_admin.core.rows import slugs_of_sessions
from sessions_admin.routers import responses_alias

# A delete this large asks the operator to type the number of sessions to confirm: one rule
# for a cascade and a bulk delete alike (``needs_typed_confirmation``).
TYPED_CONFIRMATION_SESSIONS = 20


TYPED_CONFIRMATION_MESSAGES = 1_000


CHUNK = 500


def needs_typed_confirmation(*, sessions: int, messages: int) -> bool:
    """Whether deleting this many sessions and messages needs the session count typed.

    The one rule: the cascade page and the bulk delete page (and their confirm
    steps) both ask it, so 48 sessions need the same confirmation either way.
    """
    return sessions >= TYPED_CONFIRMATION_SESSIONS or messages >= TYPED_CONFIRMATION_MESSAGES


def typed_count_problem(
    *, sessions: int, messages: int, typed: int | None, given: bool
) -> str | None:
    """Why ``typed`` does not confirm deleting this many (None: it does, or none is asked).

    The one refusal of every door (cascade, bulk delete and erasure pages, the API);
    ``given``: the operator typed something (a number that does not match, or not a number).
    A number given where none is asked must still match: a confirmation that contradicts the
    plan is a mistake (another plan's count, a stale script), never a yes.
    """
    if typed == sessions:
        return None
    if not given and not needs_typed_confirmation(sessions=sessions, messages=messages):
        return None
    return (
        f"To confirm, type the number of sessions this deletes ({sessions:,})"
        + ("; the number typed does not match." if given else ".")
        + " Nothing was deleted."
    )


@dataclass(frozen=True)
class DeletePlan:
    picked_ids: tuple[str, ...]
    session_ids: tuple[str, ...]  # children before parents
    relations: tuple[tuple[str, int], ...]  # (relation, sessions)
    # (session, relation) in session_ids' order, as the cascade page groups them: "picked"
    # for a first segment, else lineage.edge_kind of its link to its parent.
    session_relations: tuple[tuple[str, str], ...]
    kept_children: tuple[tuple[str, str], ...]  # (child, relation): kept, parent link cleared
    live_session_ids: tuple[str, ...]
    message_count: int
    conversation_names: tuple[str, ...]
    response_count: int
    include_branches: bool
    fingerprint: str
    # (session, the hold's words) for each session a legal hold covers: the plan cannot run.
    held: tuple[tuple[str, str], ...] = ()
    # (session, merge id, "target" or "absorbed") for each session a merge that can still be
    # undone needs (``merge.undoable_merges_of``): deleting it loses that undo, so the plan
    # runs only when the operator confirms that (``execute_cascade_delete(lose_undo=True)``).
    merges: tuple[tuple[str, int, str], ...] = ()

    @property
    def needs_typed_confirmation(self) -> bool:
        return needs_typed_confirmation(sessions=len(self.session_ids), messages=self.message_count)

    @property
    def lost_undos(self) -> tuple[int, ...]:
        """The merges whose undo this delete loses."""
        return tuple(sorted({merge_id for _sid, merge_id, _role in self.merges}))


@dataclass(frozen=True)
class DeleteResult:
    deleted_sessions: int
    deleted_messages: int
    trash_entry_ids: tuple[int, ...]  # one per batch, all of one operation
    operation: str = ""  # the trash operation they share: restored together
    # The merges whose undo this delete lost (confirmed by the operator): each needs a session
    # this delete put in the trash.
    lost_undos: tuple[int, ...] = ()


def _chunks(items: Sequence, size: int = CHUNK) -> Iterable[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def lineage_closure(roots: list[str], include_branches: bool) -> dict[str, str]:
    """session -> relation, for the roots and every descendant that goes with them."""
    kind = lineage.link_kind_sql("c", "p")
    followed = (
        ("compression", "delegate", "branch") if include_branches else ("compression", "delegate")
    )
    found: dict[str, str] = {root: "picked" for root in roots}
    for chunk in _chunks(roots):
        rows = db.fetchall(
            f"""
            WITH RECURSIVE closure(id, relation, depth) AS (
                SELECT id, 'picked', 0 FROM sessions WHERE id IN ({db.placeholders(chunk)})
                UNION
                SELECT c.id, {kind}, closure.depth + 1
                FROM closure
                JOIN sessions p ON p.id = closure.id
                JOIN sessions c ON c.parent_session_id = p.id
                WHERE closure.depth < %s AND {kind} IN ({db.placeholders(followed)})
            )
            SELECT id, relation FROM closure
            """,
            [*chunk, lineage.MAX_DEPTH, *followed],
        )
        for session_id, relation in rows:
            found.setdefault(session_id, relation)
    return found


def _parents_of(ids: list[str]) -> dict[str, str | None]:
    """session -> its parent, for the sessions among ``ids`` in the store."""
    return dict(
        db.fetchall_in("SELECT id, parent_session_id FROM sessions WHERE id IN ({marks})", ids)
    )


def ordered_children_first(ids: list[str]) -> list[str]:
    """Order a set so every session comes before its parent (if the parent is in the set)."""
    parents = _parents_of(ids)
    depth: dict[str, int] = {}

    def depth_of(sid: str) -> int:
        seen = []
        current = sid
        while current in parents and current not in depth and current not in seen:
            seen.append(current)
            current = parents[current]
        base = depth.get(current, -1) if current in parents else -1
        for offset, node in enumerate(reversed(seen), start=1):
            depth[node] = base + offset
        return depth.get(sid, 0)

    present = [sid for sid in ids if sid in parents]
    return sorted(present, key=lambda sid: (-depth_of(sid), sid))


def ordered_by_conversation(ids: list[str]) -> list[str]:
    """``ordered_children_first``, one conversation after another: the sessions of one tree
    (linked by parent links within the set) are next to each other, children before parents,
    the trees in the order of their first session in ``ids``. A job's batches then take a
    conversation in one transaction, unless it is larger than a batch."""
    parents = _parents_of(ids)
    rank = {sid: n for n, sid in reversed(list(enumerate(ids)))}

    def root_and_depth(sid: str) -> tuple[str, int]:
        seen = [sid]
        current = sid
        while parents.get(current) in parents and parents[current] not in seen:
            current = parents[current]
            seen.append(current)
        return current, len(seen) - 1

    keys = {}
    for sid in parents:
        root, depth = root_and_depth(sid)
        keys[sid] = (rank.get(root, len(ids)), root, -depth, sid)
    present = [sid for sid in dict.fromkeys(ids) if sid in parents]
    return sorted(present, key=keys.__getitem__)


# --- a delete keeps each conversation whole ---------------------------------------------


def _together_sql(child: str, parent: str, every_link: bool) -> str:
    """SQL: session ``child``'s link to its parent ``parent`` keeps them in one conversation.

    A compression continuation, a delegate and an API conversation's continuation
    (``_continued_from``) always do; a branch or an untyped child starts a conversation of
    its own (a delete keeps it, its link cleared) unless ``every_link`` (a retention run,
    whose conversations hold every parent link).
    """
    if every_link:
        return "1 = 1"
    kind = lineage.link_kind_sql(child, parent)
    return (
        f"({kind} IN ('compression', 'delegate') "
        f"OR ({kind} = 'child' AND {lineage.marker('_continued_from', child)} IS NOT NULL))"
    )


def _linked(ids: Sequence[str], *, every_link: bool) -> list[tuple[str, str]]:
    """(child, parent) for each link that keeps a conversation together and touches ``ids``."""
    together = _together_sql("c", "p", every_link)
    pairs: list[tuple[str, str]] = []
    for chunk in _chunks(list(ids)):
        marks = db.placeholders(chunk)
        pairs += db.fetchall(
            f"SELECT c.id, p.id FROM sessions c JOIN sessions p ON p.id = c.parent_session_id "
            f"WHERE (c.parent_session_id IN ({marks}) OR c.id IN ({marks})) AND {together}",
            [*chunk, *chunk],
        )
        if every_link:
            # A continuation the runtime marked ``_continued_from`` without a parent link.
            continued = lineage.marker("_continued_from", "c")
            pairs += db.fetchall(
                f"SELECT c.id, p.id FROM sessions c JOIN sessions p ON p.id = {continued} "
                "WHERE c.parent_session_id IS NULL AND c.model_config LIKE '%%_continued_from%%' "
                f"AND ({continued} IN ({marks}) OR c.id IN ({marks}))",
                [*chunk, *chunk],
            )
    return pairs


def _conversation_links(
    session_ids: Iterable[str], within: Container[str], *, every_link: bool
) -> tuple[set[str], list[tuple[str, str]]]:
    """``conversation_within``'s sessions, and the links between them it followed."""
    found = set(session_ids)
    links: list[tuple[str, str]] = []
    frontier = list(found)
    while frontier:
        step: list[str] = []
        for child, parent in _linked(frontier, every_link=every_link):
            if child in found or child in within:
                if parent in found or parent in within:
                    links.append((child, parent))
            for sid in (child, parent):
                if sid not in found and sid in within:
                    found.add(sid)
                    step.append(sid)
        frontier = step
    return found, links


def conversation_within(
    session_ids: Iterable[str], within: Container[str], *, every_link: bool = False
) -> set[str]:
    """``session_ids`` and every session of ``within`` linked to one of them, either way and
    through sessions of ``within`` only, by a link that keeps a conversation together."""
    return _conversation_links(session_ids, within, every_link=every_link)[0]


def conversation_groups(
    session_ids: Sequence[str], within: Container[str], *, every_link: bool = False
) -> list[list[str]]:
    """The conversations of ``session_ids``: each the sessions ``conversation_within`` finds
    for one of them (some may not be among ``session_ids``), in ``session_ids``' order and
    then sorted. Ordered by their last session in ``session_ids`` (one with a session not
    among them last): given children first, a conversation whose first session is a child
    of another's (a branch, linked by no link that keeps them together) comes first too."""
    found, links = _conversation_links(session_ids, within, every_link=every_link)
    parent = {sid: sid for sid in found}

    def root(sid: str) -> str:
        while parent[sid] != sid:
            parent[sid] = parent[parent[sid]]
            sid = parent[sid]
        return sid

    for child, up in links:
        if child in parent and up in parent:
            parent[root(child)] = root(up)
    rank = {sid: n for n, sid in reversed(list(enumerate(session_ids)))}
    groups: dict[str, list[str]] = {}
    for sid in sorted(found, key=lambda sid: (rank.get(sid, len(rank)), sid)):
        groups.setdefault(root(sid), []).append(sid)
    missing = len(rank)
    return sorted(
        groups.values(),
        key=lambda group: (max(rank.get(sid, missing) for sid in group), rank.get(group[0])),
    )


@dataclass(frozen=True)
class WholeConversations:
    """What a delete of a previewed set (a bulk delete job, a retention run) checks under the
    store's lock, batch by batch: ``remaining`` is what it still deletes, the batch included.

    A session of the batch stays, with every session of its conversation among
    ``remaining``, when that conversation has a session the delete does not take (a
    continuation, compression segment or delegate the runtime started after the preview,
    or one kept live or held: ``left_out``, or with ``every_link`` any session it continues)
    or when a merge that can still be undone needs one of them.
    """

    remaining: Container[str]
    every_link: bool = False
    # Sessions the plan showed as kept with their link cleared (a cascade's kept children).
    cut: Container[str] = frozenset()
    # Merges whose undo the operator confirmed losing (a cascade's ``lose_undo``).
    lose_undo_of: frozenset[int] = frozenset()
    # Sessions of the plan the delete left out when their turn came (live again, held): a
    # session continuing one of them stays too.
    left_out: Container[str] = frozenset()
    # A retention run's cutoff (a Unix time): a session of these conversations written to,
    # started or ended since is no longer quiet, and keeps its conversation.
    quiet_before: float | None = None


def kept_whole(
    session_ids: Sequence[str], plan: WholeConversations, *, lock: bool = False
) -> dict[str, str]:
    """The sessions of these conversations (within ``plan.remaining``) that must stay, each
    with why ("its conversation continued in s-9", "target of merge #5, which can still be
    undone", "with s-3, whose conversation continued in s-9"); empty: all of them may go.

    ``lock``: the conversations' sessions are locked first (PostgreSQL), so a runtime
    linking a session to one of them waits for the delete's commit.
    """
    members = conversation_within(session_ids, plan.remaining, every_link=plan.every_link)
    if not members:
        return {}
    if lock and db.vendor() == "postgresql":
        for chunk in _chunks(sorted(members)):
            db.fetchall(
                f"SELECT id FROM sessions WHERE id IN ({db.placeholders(chunk)}) ORDER BY id"
                + db.for_update(),
                list(chunk),
            )
    why: dict[str, str] = {}
    for child, parent in sorted(_linked(sorted(members), every_link=plan.every_link)):
        if (
            parent in members
            and child not in plan.remaining
            and child not in plan.cut
            and parent not in why
        ):
            why[parent] = f"its conversation continued in {child}"
        elif (
            child in members
            and parent not in plan.remaining
            and (plan.every_link or parent in plan.left_out)
            and child not in why
        ):
            why[child] = f"its conversation goes on in {parent}"
    for sid, merge in sorted(undoable_merges_of(members).items()):
        if merge.merge_id not in plan.lose_undo_of:
            why.setdefault(sid, merge.describe())
    if plan.quiet_before is not None:
        for sid in sorted(active_since(sorted(members), plan.quiet_before)):
            why.setdefault(sid, "active again since the run's preview")
    for flagged in sorted(why):
        for other in sorted(
            conversation_within([flagged], plan.remaining, every_link=plan.every_link)
        ):
            if other not in why:
                words = why[flagged].removeprefix("its conversation ")
                why[other] = (
                    f"with {flagged}, whose conversation {words}"
                    if words != why[flagged]
                    else f"with {flagged}, {why[flagged]}"
                )
    return why


def active_since(ids: Sequence[str], since: float) -> set[str]:
    """Which of ``ids`` started, ended or had a message stamped at or after ``since``."""
    active: set[str] = set()
    for chunk in _chunks(list(ids)):
        active.update(
            r[0]
            for r in db.fetchall(
                f"SELECT s.id FROM sessions s WHERE s.id IN ({db.placeholders(chunk)}) AND "
                "(s.started_at >= %s OR s.ended_at >= %s OR EXISTS (SELECT 1 FROM messages m "
                "WHERE m.session_id = s.id AND m.timestamp >= %s))",
                [*chunk, since, since, since],
            )
        )
    return active


class ConversationsKept(StoreError):
    """A delete of a previewed set found, under the store's lock, conversations it must keep
    whole (``kept_whole``): nothing of the batch was deleted."""

    def __init__(self, kept: dict[str, str]):
        self.kept = dict(kept)
        named = "; ".join(f"{sid}, {why}" for sid, why in sorted(self.kept.items())[:5])
        super().__init__(f"Kept whole: {named}. Nothing of the batch was deleted.")


def children_kept(ids: Sequence[str]) -> list[tuple[str, str]]:
    """(child, relation) of each session whose parent is one of ``ids`` and which is not among
    them: a delete of ``ids`` keeps it, its parent link cleared (a branch, an untyped child)."""
    id_set = set(ids)
    kind = lineage.link_kind_sql("c", "p")
    kept: list[tuple[str, str]] = []
    for chunk in _chunks(list(ids)):
        kept += [
            (r[0], r[1])
            for r in db.fetchall(
                f"SELECT c.id, {kind} FROM sessions c JOIN sessions p ON p.id = c.parent_session_id "
                f"WHERE c.parent_session_id IN ({db.placeholders(chunk)}) ORDER BY c.id",
                list(chunk),
            )
            if r[0] not in id_set
        ]
    return kept


def count_messages(ids: Sequence[str]) -> int:
    return messages_extent(ids)[0]


def messages_extent(ids: Sequence[str]) -> tuple[int, int]:
    """How many messages these sessions hold, and the highest message id among them (0 when
    none): a message written since changes one of the two, whatever else changed (an id is
    never given twice), so a plan's fingerprint made of them notices it."""
    count, last = 0, 0
    for chunk in _chunks(ids):
        row = db.fetchone(
            f"SELECT COUNT(*), MAX(id) FROM messages WHERE session_id IN ({db.placeholders(chunk)})",
            list(chunk),
        )
        count += int(row[0])
        last = max(last, int(row[1] or 0))
    return count, last


def selection_fingerprint(
    kind: str, session_ids: Iterable[str], *, messages: tuple[int, int], **more: object
) -> str:
    """The fingerprint of a set a job deletes (a bulk delete, a retention run): its sessions,
    whatever their order, and their messages as ``messages_extent`` counted them, with
    ``more`` of what the plan showed."""
    count, last_id = messages
    return plan_fingerprint(
        kind,
        {"sessions": sorted(session_ids), "messages": count, "last_message_id": last_id, **more},
    )


def conversation_names_of(
    ids: Sequence[str], *, response_ids: Sequence[str] | None = None
) -> list[str]:
    """Slugs that go with these sessions: recorded at one, or pointing at a response of one.

    Hermes leaves the session_id column NULL after each turn, and its own
    ``ResponseStore.delete`` never keeps a slug whose latest response is gone.
    """
    names = {name for name, _sid in slugs_of_sessions(list(ids))}
    if response_ids is None:
        response_ids = response_ids_of(ids)
    names.update(
        r[0]
        for r in db.fetchall_in(
            "SELECT name FROM conversations WHERE response_id IN ({marks})",
            response_ids,
            alias=responses_alias(),
        )
    )
    return sorted(names)


def response_ids_of(ids: Sequence[str]) -> list[str]:
    field = db.json_field("data", "session_id", alias=responses_alias())
    rows = db.fetchall_in(
        f"SELECT response_id FROM responses WHERE {field} IN ({{marks}})",
        ids,
        alias=responses_alias(),
    )
    return sorted(r[0] for r in rows)


def _fingerprint(payload: object) -> str:
    return plan_fingerprint("cascade", payload)


def plan_cascade_delete(
    *, session_ids: Sequence[str], include_branches: bool = False
) -> DeletePlan:
    """What deleting these sessions' conversations would remove.

    Each picked session is taken from the start of its compression chain; its
    compression continuations and delegates (recursively) always go with it;
    branches go only with ``include_branches``, else they stay as sessions of
    their own (their parent link cleared), as do untyped children.
    """
    picks = list(dict.fromkeys(s for s in session_ids if s))
    if not picks:
        raise InvalidInput("Pick at least one session to delete.")
    roots: list[str] = []
    for pick in picks:
        if lineage.session_row(pick) is None:
            raise SessionNotFound(pick)
        root = lineage.compression_chain(session_id=pick)[0]
        if root not in roots:
            roots.append(root)
    closure = lineage_closure(roots, include_branches)
    ids = list(closure)
    id_set = set(ids)
    kept = children_kept(ids)
    live: list[str] = []
    for chunk in _chunks(ids):
        live += [
            r[0]
            for r in db.fetchall(
                f"SELECT id FROM sessions WHERE ended_at IS NULL AND id IN ({db.placeholders(chunk)})",
                list(chunk),
            )
        ]
    # A session whose parent goes (or stays, as a kept child) is linked by the edge rule;
    # any other is where the conversation starts.
    linked = id_set | {child for child, _ in kept}
    session_relation: dict[str, str] = {}
    for chunk in _chunks(ids):
        for row in db.fetchdicts(
            "SELECT c.id, c.model_config, c.parent_session_id, p.end_reason AS parent_end_reason "
            "FROM sessions c LEFT JOIN sessions p ON p.id = c.parent_session_id "
            f"WHERE c.id IN ({db.placeholders(chunk)})",
            list(chunk),
        ):
            session_relation[row["id"]] = (
                lineage.edge_kind(row, row["parent_end_reason"])
                if row["parent_session_id"] in linked
                else "picked"
            )
    relations: dict[str, int] = {}
    for relation in closure.values():
        relations[relation] = relations.get(relation, 0) + 1
    ordered = ordered_children_first(ids)
    messages = count_messages(ordered)
    responses = response_ids_of(ordered)
    names = conversation_names_of(ordered, response_ids=responses)
    held = holds.holds_on(ordered)
    merges = undoable_merges_of(ordered)
    fingerprint = _fingerprint(
        [
            sorted(ordered),
            sorted(kept),
            sorted(live),
            messages,
            names,
            responses,
            sorted(held),
            sorted((sid, m.merge_id) for sid, m in merges.items()),
        ]
    )
    return DeletePlan(
        picked_ids=tuple(picks),
        session_ids=tuple(ordered),
        relations=tuple(sorted(relations.items())),
        session_relations=tuple((sid, session_relation.get(sid, "picked")) for sid in ordered),
        kept_children=tuple(kept),
        live_session_ids=tuple(sorted(live)),
        message_count=messages,
        conversation_names=tuple(names),
        response_count=len(responses),
        include_branches=include_branches,
        fingerprint=fingerprint,
        held=tuple((sid, held[sid].describe()) for sid in ordered if sid in held),
        merges=tuple(
            (sid, merges[sid].merge_id, merges[sid].role) for sid in ordered if sid in merges
        ),
    )


def lost_undo_words(plan: DeletePlan) -> str:
    """What a cascade plan's delete does to the merges it touches, in one sentence."""
    roles = {
        merge_id: sorted(
            f"{'its target' if role == 'target' else 'a session it absorbed'} {sid}"
            for sid, m, role in plan.merges
            if m == merge_id
        )
        for merge_id in plan.lost_undos
    }
    return (
        "This delete loses the undo of "
        + "; ".join(f"merge #{merge_id} ({', '.join(words)})" for merge_id, words in roles.items())
        + ": once deleted, the merge can no longer be undone unless the trash entry is restored."
    )
