"""What an erasure takes, found by SQL before anything is deleted, and its record.

The subject's sessions (by user id, chat id or whole session key), everything below them that is theirs or
nobody's, the sessions a merge moved their messages into and the copies a branch made of those,
their side rows in the store and the response store, holds naming them, and the sessions of other
people that merely mention them (listed, kept). A plan reaching another user's session is
refused. ``plan_record`` / ``plan_from_record`` carry a plan across a restart so a resumed run
deletes exactly what was planned."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from sessions_admin.core import being_deleted, db, holds, lineage
from sessions_admin.core.deletion import (
    claims,
    conversation_names_of,
    count_messages,
    lineage_closure,
    live_session_ids,
    ordered_children_first,
    response_ids_of,
)
from sessions_admin.core.erasure.subject import Subject, names_subject
from sessions_admin.core.errors import InvalidInput
from sessions_admin.core.fingerprints import plan_fingerprint
from sessions_admin.core.merge_moves import MergeMoves, merge_moves
from sessions_admin.core.schema import existing_tables
from sessions_admin.routers import store_alias

CHUNK = 500
# The other people's sessions listed as mentioning the subject (kept, for review) at most.
MENTIONS_LISTED = 200


@dataclass(frozen=True)
class ErasurePlan:
    subject: Subject
    session_ids: tuple[str, ...]  # children first
    live_session_ids: tuple[str, ...]
    message_count: int  # in those sessions
    # The subject's messages that a merge moved into a session that stays (message id, the
    # session it is in now): they go too.
    other_messages: tuple[tuple[int, str], ...]
    conversation_names: tuple[str, ...]
    response_ids: tuple[str, ...]
    held: tuple[tuple[str, str], ...]
    fingerprint: str
    side_rows: dict = field(default_factory=dict)  # own table -> rows that go
    # Merges that moved the subject's messages into a session that stays: the record stays,
    # emptied of the subject's rows and marked as no longer undoable.
    closed_merges: tuple[int, ...] = ()
    # Other people's sessions whose messages (content, reasoning, tool calls) or title name
    # the subject as a whole token: kept, listed for the operator to review.
    mentions: tuple[str, ...] = ()
    # Sessions that stay but whose rows the erasure changes (they hold the subject's moved
    # messages, or are the target of a closed merge): a hold on one stops the erasure too.
    touched_session_ids: tuple[str, ...] = ()
    # Other holds whose reason or release reason names the subject (as a whole token): the
    # hold stays, those words become ``[erased]``.
    redacted_holds: tuple[int, ...] = ()
    # Sessions a chat id or key of the subject's reaches that are kept: the target of a
    # merge, holding rows that are not the subject's; only the subject's moved rows go.
    kept_targets: tuple[str, ...] = ()
    # The chat ids and session keys of the sessions that go (not only the values given):
    # redacted from operator text like the subject's own (``redaction_subject``).
    erased_chat_ids: tuple[str, ...] = ()
    erased_session_keys: tuple[str, ...] = ()
    # Every merge record naming one of the sessions when the plan was made (undone or not);
    # None for a plan recorded before they were kept. Another merge found under the lock
    # while the erasure runs stops it (``MergedSincePlan``): its rows may be another
    # person's, or the subject's now in another person's session.
    known_merges: tuple[int, ...] | None = None

    @property
    def redaction_subject(self) -> Subject:
        """The subject with every chat id and key of the erased sessions: what is looked
        for in operator free text (audit, bulk delete, trash and hold reasons)."""
        return Subject(
            user_id=self.subject.user_id,
            chat_ids=tuple(dict.fromkeys([*self.subject.chat_ids, *self.erased_chat_ids])),
            session_keys=tuple(
                dict.fromkeys([*self.subject.session_keys, *self.erased_session_keys])
            ),
        )

    @property
    def held_scope(self) -> tuple[str, ...]:
        return (*self.session_ids, *self.touched_session_ids)

    @property
    def empty(self) -> bool:
        return not (
            self.session_ids or self.other_messages or self.conversation_names or self.response_ids
        )


def plan_record(plan: ErasurePlan) -> dict:
    """``plan`` as JSON, for the request that runs it to keep while it runs (``plan_from_record``).

    A resumed erasure carries out this record, not a new plan: the ids a killed run already
    deleted are still the ones whose switch events, trash and audit entries go.
    """
    return {
        "subject": asdict(plan.subject),
        "session_ids": list(plan.session_ids),
        "live_session_ids": list(plan.live_session_ids),
        "message_count": plan.message_count,
        "other_messages": [list(pair) for pair in plan.other_messages],
        "conversation_names": list(plan.conversation_names),
        "response_ids": list(plan.response_ids),
        "held": [list(pair) for pair in plan.held],
        "fingerprint": plan.fingerprint,
        "side_rows": plan.side_rows,
        "closed_merges": list(plan.closed_merges),
        "mentions": list(plan.mentions),
        "touched_session_ids": list(plan.touched_session_ids),
        "redacted_holds": list(plan.redacted_holds),
        "kept_targets": list(plan.kept_targets),
        "erased_chat_ids": list(plan.erased_chat_ids),
        "erased_session_keys": list(plan.erased_session_keys),
        "known_merges": None if plan.known_merges is None else list(plan.known_merges),
    }


def plan_from_record(record: dict) -> ErasurePlan:
    subject = record["subject"]
    return ErasurePlan(
        subject=Subject(
            user_id=subject["user_id"],
            chat_ids=tuple(subject.get("chat_ids", ())),
            session_keys=tuple(subject.get("session_keys", ())),
        ),
        session_ids=tuple(record["session_ids"]),
        live_session_ids=tuple(record["live_session_ids"]),
        message_count=int(record["message_count"]),
        other_messages=tuple((int(mid), sid) for mid, sid in record["other_messages"]),
        conversation_names=tuple(record["conversation_names"]),
        response_ids=tuple(record["response_ids"]),
        held=tuple((sid, words) for sid, words in record["held"]),
        fingerprint=record["fingerprint"],
        side_rows={
            table: [list(row) for row in rows] for table, rows in record["side_rows"].items()
        },
        closed_merges=tuple(int(m) for m in record["closed_merges"]),
        mentions=tuple(record["mentions"]),
        touched_session_ids=tuple(record["touched_session_ids"]),
        redacted_holds=tuple(int(h) for h in record["redacted_holds"]),
        kept_targets=tuple(record.get("kept_targets", ())),
        erased_chat_ids=tuple(record.get("erased_chat_ids", ())),
        erased_session_keys=tuple(record.get("erased_session_keys", ())),
        known_merges=(
            None
            if record.get("known_merges") is None
            else tuple(int(m) for m in record["known_merges"])
        ),
    )


def _chunks(items: Sequence, size: int = CHUNK) -> Iterable[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _first_values_in(sql: str, values: Sequence[str]) -> set[str]:
    """The first column of ``sql``'s rows, ``{marks}`` being an IN list of ``values``."""
    return {r[0] for r in db.fetchall_in(sql, values)}


def _merge_targets(ids: Sequence[str]) -> set[str]:
    """Those of ``ids`` that a merge (not undone) moved other sessions into."""
    return _first_values_in(
        "SELECT target_session_id FROM sessions_admin_merges WHERE undone_at IS NULL "
        "AND target_session_id IN ({marks})",
        ids,
    )


def _descendants(ids: Sequence[str]) -> set[str]:
    """Every session below ``ids`` by ``parent_session_id``, whatever the link's kind: a
    child, a branch or an API continuation the runtime left without a user id is the
    subject's conversation going on (another user's is refused by ``_refuse_other_users``)."""
    found: set[str] = set()
    for chunk in _chunks(list(ids)):
        found |= {
            r[0]
            for r in db.fetchall(
                f"""
                WITH RECURSIVE below(id, depth) AS (
                    SELECT id, 0 FROM sessions WHERE id IN ({db.placeholders(chunk)})
                    UNION
                    SELECT c.id, below.depth + 1 FROM below
                    JOIN sessions c ON c.parent_session_id = below.id
                    WHERE below.depth < %s
                )
                SELECT id FROM below
                """,
                [*chunk, lineage.MAX_DEPTH],
            )
        }
    return found


def merge_targets_of(merge_ids: Sequence) -> set[str]:
    """The target sessions of the merge records ``merge_ids``."""
    return _first_values_in(
        "SELECT target_session_id FROM sessions_admin_merges WHERE id IN ({marks})",
        list(merge_ids),
    )


def keyed_below_closed_merges(
    merge_ids: Sequence, keys: Sequence[str], erased: Sequence[str]
) -> set[str]:
    """Sessions below the targets of merges ``merge_ids`` (by parent links, the targets
    excluded) that hold one of ``keys`` and are not ``erased``."""
    if not merge_ids or not keys:
        return set()
    targets = merge_targets_of(merge_ids)
    below = _descendants(sorted(targets)) - targets - set(erased)
    rows = db.fetchall_in(
        "SELECT id FROM sessions WHERE id IN ({marks}) "
        f"AND session_key IN ({db.placeholders(keys)})",
        sorted(below),
        after=list(keys),
    )
    return {row[0] for row in rows}


def _theirs_or_nobodys(subject: Subject, ids: Sequence[str]) -> set[str]:
    """Those of ``ids`` in the store whose user id is the subject's or empty."""
    return {
        sid
        for sid, user_id in db.fetchall_in(
            "SELECT id, user_id FROM sessions WHERE id IN ({marks})", list(ids)
        )
        if not user_id or user_id == subject.user_id
    }


def _subject_sessions(
    subject: Subject, extra_roots: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """The sessions whose user id, chat id or session key is one of the subject's, each
    compared whole, and everything below them by ``parent_session_id`` (continuations,
    delegates, branches, children); and the sessions kept although a chat id or key of the
    subject's reaches them: targets of a merge with no user id, which held
    rows of their own (only the subject's moved rows go, see ``_moved_messages``)."""
    by_user = {
        r[0] for r in db.fetchall("SELECT id FROM sessions WHERE user_id = %s", [subject.user_id])
    }
    where: list[str] = []
    params: list = []
    if subject.chat_ids:
        where.append(f"chat_id IN ({db.placeholders(subject.chat_ids)})")
        params += list(subject.chat_ids)
    if subject.session_keys:
        where.append(f"session_key IN ({db.placeholders(subject.session_keys)})")
        params += list(subject.session_keys)
    by_value = (
        {r[0] for r in db.fetchall(f"SELECT id FROM sessions WHERE {' OR '.join(where)}", params)}
        - by_user
        if where
        else set()
    )
    # Another user's session stays among the roots: ``_refuse_other_users`` refuses it.
    no_user = _first_values_in(
        "SELECT id FROM sessions WHERE id IN ({marks}) AND (user_id IS NULL OR user_id = '')",
        sorted(by_value),
    )
    kept = sorted(_merge_targets(sorted(no_user)))
    roots = sorted(by_user | (by_value - set(kept)) | _theirs_or_nobodys(subject, extra_roots))
    if not roots:
        return [], kept
    found = set(lineage_closure(roots, include_branches=True)) | _descendants(roots)
    # Parts of their conversations no parent link reaches, until nothing more is found: only
    # the slugs of the sessions found so far by their own ids and links, never the slugs of a
    # session found through a slug (attack round 42: that crossed into other conversations).
    slugs = _slugs_recorded(found)
    moves = merge_moves()
    for _ in range(lineage.MAX_DEPTH):
        more = _unclaimed(subject, _conversation_parts(found, slugs) - found, found)
        # The children a merge moved from below one of theirs onto the target, whoever's the
        # target is (attack round 44: a delegate stayed behind once the merge put it below
        # another person's session); another user's child is refused, as a linked one is.
        more |= _moved_below_targets(found, moves) - found
        if not more:
            break
        found |= set(lineage_closure(sorted(more), include_branches=True)) | _descendants(
            sorted(more)
        )
    return sorted(found - set(kept)), kept


def _moved_below_targets(found: set[str], moves: MergeMoves) -> set[str]:
    """The sessions in the store that a merge not undone moved from below one of ``found``."""
    moved = sorted(child for child in moves.children if moves.original_parent(child) in found)
    return lineage.existing_session_ids(moved) if moved else set()


def _slugs_recorded(ids: set[str]) -> set[str]:
    """Every slug the slug history records for one of ``ids``."""
    if not ids or "sessions_admin_slug_history" not in existing_tables(store_alias()):
        return set()
    return _first_values_in(
        "SELECT slug FROM sessions_admin_slug_history WHERE session_id IN ({marks})", sorted(ids)
    )


def _conversation_parts(ids: set[str], slugs: set[str]) -> set[str]:
    """Sessions of the same conversations as ``ids`` that no parent link reaches: an API
    continuation naming one of them (``_continued_from``) where the runtime left
    ``parent_session_id`` empty, and every session the slug history records for one of
    ``slugs`` (a cold start put the conversation in a new, unlinked session)."""
    if not ids:
        return set()
    found = _first_values_in(
        f"SELECT id FROM sessions WHERE {lineage.marker('_continued_from')} IN ({{marks}})",
        sorted(ids),
    )
    if slugs:
        found |= _first_values_in(
            "SELECT session_id FROM sessions_admin_slug_history WHERE slug IN ({marks})",
            sorted(slugs),
        )
    return found


def _unclaimed(subject: Subject, candidates: set[str], found: set[str]) -> set[str]:
    """Those of ``candidates`` that are the subject's or nobody's and belong to no other
    lineage: no parent link, or a parent among ``found`` (a user-less child of another
    person's session is that person's conversation, whatever slug it answered)."""
    theirs = _theirs_or_nobodys(subject, sorted(candidates))
    return {
        sid
        for sid, parent in db.fetchall_in(
            "SELECT id, parent_session_id FROM sessions WHERE id IN ({marks})", sorted(theirs)
        )
        if not parent or parent in found
    }


def _user_ids_of(ids: Sequence[str]) -> set[str]:
    return _first_values_in(
        "SELECT DISTINCT user_id FROM sessions WHERE id IN ({marks}) "
        "AND user_id IS NOT NULL AND user_id <> ''",
        ids,
    )


def _refuse_other_users(subject: Subject, ids: Sequence[str], merged_in: Sequence[str]) -> None:
    """One person's erasure never takes another's sessions: refused when the sessions found
    (or sessions a merge moved into them) belong to more than this user id."""
    users = _user_ids_of([*ids, *merged_in])
    others = users - {subject.user_id}
    if others:
        total = len(users | {subject.user_id})
        raise InvalidInput(
            f"This subject would touch sessions of {total} users ({len(others)} besides the "
            "user id given): the chat ids and session keys must be this person's alone, "
            "a session another user's session was merged into must be unmerged first, and a "
            "session below theirs (parent_session_id) with another user id is not erased "
            "with them: review it first. "
            "Nothing was erased."
        )


def _merges_touching(id_set: set[str]) -> list[tuple[int, str, list[str], dict, object]]:
    """Merge records naming one of these sessions: (id, target, absorbed, prior state, undone_at)."""
    found = []
    for merge_id, target, absorbed, prior, undone_at in db.fetchall(
        "SELECT id, target_session_id, absorbed_session_ids, prior_state, undone_at "
        "FROM sessions_admin_merges ORDER BY id"
    ):
        absorbed_ids = json.loads(absorbed or "[]")
        if target in id_set or id_set & set(absorbed_ids):
            found.append(
                (int(merge_id), target, absorbed_ids, json.loads(prior or "{}"), undone_at)
            )
    return found


def _moved_messages(merges, id_set: set[str]) -> list[tuple[int, str]]:
    """The subject's messages a standing merge moved out of their sessions (by the message
    ids the merge recorded), wherever they are now, outside the sessions erased anyway."""
    found: dict[int, str] = {}
    for _merge_id, _target, absorbed, prior, undone_at in merges:
        if undone_at is not None:
            continue
        for session_id, ranges in (prior.get("messages") or {}).items():
            if session_id not in id_set or session_id not in absorbed:
                continue
            for start, end in ranges:
                for message_id, now_in in db.fetchall(
                    "SELECT id, session_id FROM messages WHERE id BETWEEN %s AND %s",
                    [int(start), int(end)],
                ):
                    if now_in not in id_set:
                        found[int(message_id)] = now_in
    return sorted(found.items())


# The columns a branch copies (``lifecycle.branch_session``) that tell a copy of a message
# from another message: the same words at the same instant, by the same role.
COPY_COLUMNS = ("role", "content", "timestamp", "tool_calls", "reasoning")


def _branch_copies(moved: Sequence[tuple[int, str]], id_set: set[str]) -> list[tuple[int, str]]:
    """Copies of the subject's moved messages that a branch of the session holding them made
    (a branch copies the active transcript, every written column as it is): rows of the
    sessions below it (``parent_session_id``, at any depth) with the same role, content,
    timestamp, tool calls and reasoning. (message id, session) of each, outside ``id_set``."""
    holders = sorted({sid for _mid, sid in moved})
    if not holders:
        return []
    below = sorted(_descendants(holders) - set(holders) - id_set)
    if not below:
        return []
    columns = ", ".join(COPY_COLUMNS)
    originals = {
        tuple(row)
        for row in db.fetchall_in(
            f"SELECT {columns} FROM messages WHERE id IN ({{marks}})", [m for m, _ in moved]
        )
    }
    stamps = sorted({row[2] for row in originals})
    found = []
    for chunk in _chunks(below):
        for message_id, session_id, *copied in db.fetchall_in(
            f"SELECT id, session_id, {columns} FROM messages WHERE timestamp IN ({{marks}}) "
            f"AND session_id IN ({db.placeholders(chunk)})",
            stamps,
            after=list(chunk),
        ):
            if tuple(copied) in originals:
                found.append((int(message_id), session_id))
    return found


def _moved_responses(merges, id_set: set[str]) -> set[str]:
    """Stored responses of the subject's sessions that a standing merge re-pointed elsewhere."""
    return {
        str(moved[0])
        for _merge_id, _target, _absorbed, prior, undone_at in merges
        if undone_at is None
        for moved in prior.get("responses") or []
        if len(moved) > 1 and moved[1] in id_set
    }


def _mentions(subject: Subject, id_set: set[str]) -> list[str]:
    """Other people's sessions whose messages or title name the subject as a whole token.

    A LIKE narrows the rows; the whole-token test (``names_subject``) decides, so "bob"
    never finds "bobcat". These are listed, never erased: the text is someone else's.
    """
    strings = subject.strings
    if not strings:
        return []
    found: set[str] = set()
    text = (
        "COALESCE(content, '') || ' ' || COALESCE(tool_calls, '') || ' ' || COALESCE(reasoning, '')"
    )
    where = " OR ".join(f"{text} LIKE %s ESCAPE '\\'" for _ in strings)
    patterns = [db.contains_pattern(s) for s in strings]
    for session_id, body in db.fetchall(
        f"SELECT session_id, {text} FROM messages WHERE {where}", patterns
    ):
        if session_id not in id_set and names_subject(body, subject):
            found.add(session_id)
    where = " OR ".join("title LIKE %s ESCAPE '\\'" for _ in strings)
    for session_id, title in db.fetchall(f"SELECT id, title FROM sessions WHERE {where}", patterns):
        if session_id not in id_set and names_subject(title, subject):
            found.add(session_id)
    return sorted(found)


def _side_rows(
    subject: Subject,
    ids: Sequence[str],
    names: Sequence[str],
    merges,
    *,
    trashed_ids: Sequence[str] = (),
    trashed_slugs: Sequence[str] = (),
) -> dict:
    """sessions_admin's own rows about the subject's sessions or slugs (what ``erase`` drops;
    the switch events are rewritten as tombstones instead, see ``_tombstone_switch_events``).
    ``trashed_ids``/``trashed_slugs``: the subject's sessions and slugs in the dashboard's trash
    (no longer in the store): the rows about them go too."""
    found: dict[str, list] = {}
    tables = existing_tables(store_alias())
    id_set = set(ids)

    def add(table: str, rows) -> None:
        if rows:
            found.setdefault(table, []).extend(rows)

    for chunk in _chunks(list(ids)):
        marks = db.placeholders(chunk)
        add(
            "sessions_admin_switch_events",
            db.fetchall(
                "SELECT seq FROM sessions_admin_switch_events WHERE new_session_id IN "
                f"({marks}) OR previous_session_id IN ({marks}) OR parent_session_id IN ({marks}) "
                "ORDER BY seq",
                [*chunk, *chunk, *chunk],
            ),
        )
        add(
            "sessions_admin_undos",
            db.fetchall(
                f"SELECT id FROM sessions_admin_undos WHERE session_id IN ({marks})", chunk
            ),
        )
        if "compression_locks" in tables:
            add(
                "compression_locks",
                db.fetchall(
                    f"SELECT session_id FROM compression_locks WHERE session_id IN ({marks})",
                    chunk,
                ),
            )
        if "async_delegations" in tables:
            add(
                "async_delegations",
                db.fetchall(
                    "SELECT delegation_id FROM async_delegations WHERE origin_session IN "
                    f"({marks}) OR parent_session_id IN ({marks})",
                    [*chunk, *chunk],
                ),
            )
        if "gateway_routing" in tables:
            routed = db.json_field("entry_json", "session_id")
            add(
                "gateway_routing",
                db.fetchall(
                    f"SELECT scope, session_key FROM gateway_routing WHERE {routed} IN ({marks})",
                    chunk,
                ),
            )
    if "gateway_routing" in tables and subject.session_keys:
        keys = list(subject.session_keys)
        routed_keys = db.fetchall(
            "SELECT scope, session_key FROM gateway_routing WHERE session_key IN "
            f"({db.placeholders(keys)})",
            keys,
        )
        add(
            "gateway_routing", [r for r in routed_keys if r not in found.get("gateway_routing", [])]
        )
    # A merge wholly among the subject's sessions goes; one with another session is closed.
    add(
        "sessions_admin_merges",
        [
            (merge_id,)
            for merge_id, target, absorbed, _prior, _undone in merges
            if {target, *absorbed} <= id_set
        ],
    )
    names_set = set(names) | set(trashed_slugs)
    gone_ids = sorted(set(ids) | set(trashed_ids))
    history = [
        (r[0],)
        for chunk in _chunks(gone_ids or [""])
        for r in db.fetchall(
            "SELECT id, slug, session_id FROM sessions_admin_slug_history WHERE session_id IN "
            f"({db.placeholders(chunk)})",
            list(chunk),
        )
    ]
    for chunk in _chunks(sorted(names_set)):
        history += [
            (r[0],)
            for r in db.fetchall(
                "SELECT id FROM sessions_admin_slug_history WHERE slug IN "
                f"({db.placeholders(chunk)})",
                list(chunk),
            )
        ]
    add("sessions_admin_slug_history", sorted(set(history)))
    # Where the core ended their sessions (core.rows.mark_end).
    add(
        "sessions_admin_end_marks",
        [
            (r[0],)
            for chunk in _chunks(gone_ids)
            for r in db.fetchall(
                "SELECT session_id FROM sessions_admin_end_marks WHERE session_id IN "
                f"({db.placeholders(chunk)})",
                list(chunk),
            )
        ]
        if "sessions_admin_end_marks" in tables
        else [],
    )
    # A delete in parts killed midway left the subject's session marked (core.being_deleted).
    add("sessions_admin_deletions", [(sid,) for sid in being_deleted.marks_on(list(ids))])
    # A runtime's appends to the subject's sessions left their idempotency keys and answers.
    if "sessions_admin_idempotency" in tables:
        for chunk in _chunks(gone_ids):
            add(
                "sessions_admin_idempotency",
                db.fetchall(
                    "SELECT scope, key FROM sessions_admin_idempotency WHERE session_id IN "
                    f"({db.placeholders(chunk)})",
                    list(chunk),
                ),
            )
    # A cascade of the subject's sessions, running or stopped, claimed them by id: its whole
    # claim goes, also on the sessions it already deleted (they are in the trash the ledger
    # erases, no longer in the store).
    add(
        "sessions_admin_delete_claims",
        [(operation,) for operation in claims.operations_claiming(gone_ids)],
    )
    # Released holds on the subject or their sessions, matched exactly (a standing one
    # refuses the erasure). Other holds whose reason names them are redacted by the ledger.
    add(
        "sessions_admin_holds",
        [
            (r[0],)
            for r in db.fetchall(
                "SELECT id, kind, subject FROM sessions_admin_holds WHERE released_at IS NOT NULL "
                "ORDER BY id"
            )
            if (r[1] == "user" and r[2] == subject.user_id)
            or (r[1] == "session" and r[2] in id_set)
        ],
    )
    return found


def _holds_naming(redaction: Subject, gone_holds: set) -> list[int]:
    """Holds (other than ``gone_holds``) whose reason or release reason names the subject as a
    whole token: they stay, those words are redacted."""
    return sorted(
        int(r[0])
        for r in db.fetchall("SELECT id, reason, release_reason FROM sessions_admin_holds")
        if r[0] not in gone_holds
        and (names_subject(r[1], redaction) or names_subject(r[2] or "", redaction))
    )


def _identifiers_of(ids: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The distinct chat ids and session keys of these sessions."""
    chats: set[str] = set()
    keys: set[str] = set()
    for chunk in _chunks(list(ids)):
        for chat_id, key in db.fetchall(
            f"SELECT chat_id, session_key FROM sessions WHERE id IN ({db.placeholders(chunk)})",
            list(chunk),
        ):
            if chat_id:
                chats.add(str(chat_id))
            if key:
                keys.add(str(key))
    return tuple(sorted(chats)), tuple(sorted(keys))


def plan_erasure(
    *,
    subject: Subject,
    trashed_ids: Sequence[str] = (),
    trashed_slugs: Sequence[str] = (),
    cut_children: Sequence[str] = (),
) -> ErasurePlan:
    """Everything ``erase`` would remove for ``subject`` (nothing changes). ``trashed_ids`` and
    ``trashed_slugs``: the subject's sessions and slugs the dashboard's trash holds, whose
    rows in the store's own tables (slug history, ...) go too. ``cut_children``: sessions a
    delete of one of the subject's sessions kept with their parent link cleared (the trash
    records the link): those with no user id (or the subject's) are the subject's
    conversation going on, erased with everything below them as a linked child would be.

    Refused (``InvalidInput``) for a value that cannot be matched exactly, or when the
    sessions found belong to more than one user id.
    """
    subject.check()
    found, kept = _subject_sessions(subject, cut_children)
    ids = ordered_children_first(found)
    id_set = set(ids)
    merges = _merges_touching(id_set)
    # Sessions merged into one of the subject's: their messages are in the subject's now.
    merged_in = sorted(
        {
            sid
            for _merge_id, target, absorbed, _prior, undone_at in merges
            if undone_at is None and target in id_set
            for sid in absorbed
            if sid not in id_set
        }
    )
    _refuse_other_users(subject, ids, merged_in)
    live = sorted(live_session_ids(ids))
    moved = _moved_messages(merges, id_set)
    moved = sorted({*moved, *_branch_copies(moved, id_set)})
    responses = set(response_ids_of(ids)) if ids else set()
    responses |= _moved_responses(merges, id_set)
    names = set(conversation_names_of(ids, response_ids=sorted(responses))) if ids else set()
    closed = sorted(
        merge_id
        for merge_id, target, absorbed, _prior, _undone in merges
        if not {target, *absorbed} <= id_set
    )
    # Holds win: a hold on a session whose messages, responses or merge record this
    # erasure touches stops it, whoever's session that is.
    erased_chat_ids, erased_keys = _identifiers_of(ids)
    # Sessions below a closed merge's target holding an erased session's key (the merge
    # copied it onto the target, a branch inherited it): the run takes it off them.
    keyed = keyed_below_closed_merges(closed, sorted({*erased_keys, *subject.session_keys}), ids)
    touched = sorted(
        ({sid for _mid, sid in moved} | {t for m, t, *_ in merges if m in closed} | keyed) - id_set
    )
    held_map = holds.holds_on([*ids, *touched])
    redaction = Subject(
        user_id=subject.user_id,
        chat_ids=tuple(dict.fromkeys([*subject.chat_ids, *erased_chat_ids])),
        session_keys=tuple(dict.fromkeys([*subject.session_keys, *erased_keys])),
    )
    side = _side_rows(
        subject,
        ids,
        sorted(names),
        merges,
        trashed_ids=trashed_ids,
        trashed_slugs=trashed_slugs,
    )
    messages = count_messages(ids) if ids else 0
    mentions = _mentions(subject, id_set)
    side_rows = {table: [list(row) for row in rows] for table, rows in side.items()}
    gone_holds = {row[0] for row in side_rows.get("sessions_admin_holds", [])}
    redacted_holds = _holds_naming(redaction, gone_holds)
    fingerprint = plan_fingerprint(
        "erasure",
        [
            ids,
            live,
            moved,
            sorted(names),
            sorted(responses),
            sorted((sid, hold.id) for sid, hold in held_map.items()),
            messages,
            side_rows,
            closed,
            redacted_holds,
            kept,
        ],
    )
    return ErasurePlan(
        subject=subject,
        session_ids=tuple(ids),
        live_session_ids=tuple(live),
        message_count=messages,
        other_messages=tuple(moved),
        conversation_names=tuple(sorted(names)),
        response_ids=tuple(sorted(responses)),
        held=tuple(sorted((sid, hold.describe()) for sid, hold in held_map.items())),
        fingerprint=fingerprint,
        side_rows=side_rows,
        closed_merges=tuple(closed),
        mentions=tuple(mentions[:MENTIONS_LISTED]),
        touched_session_ids=tuple(touched),
        redacted_holds=tuple(redacted_holds),
        kept_targets=tuple(kept),
        erased_chat_ids=erased_chat_ids,
        erased_session_keys=erased_keys,
        known_merges=tuple(merge_id for merge_id, *_ in merges),
    )
