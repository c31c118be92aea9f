"""Erasure: everything the store and the response store hold about one person, purged.

Subject values are compared whole, with their case, never ``LIKE``; a plan reaching another
user's session is refused, sessions merely mentioning the subject are listed and kept, and held
sessions are never changed. ``erase`` deletes exactly the plan, with no trash copy, after
re-checking its fingerprint or from a recorded plan (a resumed run; every step is idempotent),
then clears what deleted rows leave (``rewrite_store_files`` for what only a rewrite frees).
Counts are what the databases lost; an unwritable database raises ``ErasureStopped``. Operators:
docs/retention.md ("Erasure requests"); the dashboard's side: ``ledger/erasure.py``.

Over 800 lines on purpose: the plan, the batched delete, the index merge and the byte checks of
one erasure share the subject's matching rules and its plan; apart, each would reach into the
others.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from django.db import OperationalError, connections, transaction

from sessions_admin.core import being_deleted, db, events, faults, holds, lineage
from sessions_admin.core.db import store_operation
from sessions_admin.core.deletion import (
    NO_TRASH,
    GoneRows,
    PlanChanged,
    as_sentence,
    claims,
    conversation_names_of,
    count_messages,
    database_words,
    delete_in_batches,
    failed_database,
    lineage_closure,
    live_session_ids,
    ordered_children_first,
    response_ids_of,
)
from sessions_admin.core.errors import InvalidInput, StoreError
from sessions_admin.core.merge import CLOSED_BY_ERASURE
from sessions_admin.core.rows import recompute_counters
from sessions_admin.core.schema import OWN_TABLES, existing_tables
from sessions_admin.core.text import exact_id_problem
from sessions_admin.routers import responses_alias, store_alias

# Values shorter than this are not looked for in other people's text (listed as mentions):
# a short id is a word of ordinary speech ("bob" in "bob's", "42" in any number).
MIN_MENTION = 4
MAX_VALUES = 50
CHUNK = 500
CHECKPOINT_SECONDS = 30.0
PASSIVE_ROUNDS = 5
# The other people's sessions listed as mentioning the subject (kept, for review) at most.
MENTIONS_LISTED = 200


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
    """A value as a whole token: not inside a longer word or id ("bob" not in "bobcat" or
    "bob-2"), with the case it has."""
    if not values:
        return None
    alternatives = "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True))
    return re.compile(rf"(?<![\w\-.:@])(?:{alternatives})(?![\w\-:@]|\.\w)")


def names_subject(text: object, subject: Subject) -> bool:
    """Whether ``text`` names the subject as a whole token (see ``_token_pattern``)."""
    pattern = _token_pattern(subject.strings)
    return bool(pattern and isinstance(text, str) and pattern.search(text))


def redact_text(text: str, replacements: dict[str, str]) -> str:
    """``text`` with each whole-token occurrence of a key replaced by its value."""
    pattern = _token_pattern(list(replacements))
    if pattern is None or not isinstance(text, str):
        return text
    return pattern.sub(lambda m: replacements[m.group(0)], text)


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


@dataclass(frozen=True)
class RowsPresent:
    """How many of a plan's rows the databases hold: its sessions and their messages, the
    messages a merge moved elsewhere, its slugs, responses and own-table rows.

    The receipt's counts are what the databases lost: this before the erasure's first run
    minus this after its last (the request keeps the first, ``as_record``). Counting each
    delete statement's rows instead counted 0 slugs and responses, since the sessions' own
    deletes (``delete_in_batches``) had already removed them, missed the own-table rows that
    go with a session (its delete-in-parts mark), and forgot what a killed run deleted.
    """

    sessions: int
    messages: int
    other_messages: int
    conversations: int
    responses: int
    side_rows: int

    def as_record(self) -> dict:
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict) -> RowsPresent:
        return cls(**{name: int(record[name]) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class ErasureResult(RowsPresent):
    """What one run erased (the counts ``RowsPresent`` names) and how it left no byte."""

    storage: tuple[str, ...]  # what was done so no deleted byte is left
    # False while a full-text index still has segments written before the deletes (SQLite:
    # a runtime writing all along kept the merge from finishing); ``merge_search_indexes``
    # is run again later until it is True.
    index_merged: bool = True
    # The plan as carried out: the recorded one, with the sessions a runtime started below
    # the subject's while it ran (``LateRows``). None only where no erasure ran.
    plan: ErasurePlan | None = None


@dataclass(frozen=True)
class LateRows:
    """What an erasure deleted that was not there when its rows were counted (``before``),
    so the receipt counts it too.

    ``added``: the sessions a runtime started below the subject's while it ran, put in the
    plan (and recorded) before they are deleted; like the plan's own, they count as erased
    once they are no longer in the store. ``messages``: those deleted so far, across every
    run, that a runtime appended with its own SQL after the count (ids above ``mark``, the
    store's highest message id then; None for a run recorded before marks were kept: they
    are not told apart). Each run records them after every batch that deleted some, so only
    a run killed between a batch's commit and that record leaves that batch's out.
    ``conversations``, ``responses``, ``side_rows``: the slugs, stored responses and own-table
    rows (slug history, a released hold) written about the subject meanwhile, put in the plan (and
    recorded with these counts) before they are deleted (``_written_meanwhile``).
    """

    mark: int | None
    added: tuple[str, ...] = ()
    # Sessions of the plan a runtime wrote again (same id) after their delete, deleted again.
    recreated: int = 0
    messages: int = 0
    conversations: int = 0
    responses: int = 0
    side_rows: int = 0

    def as_record(self) -> dict:
        return {**asdict(self), "added": list(self.added)}

    @classmethod
    def from_record(cls, record: dict | None) -> LateRows:
        if not record:
            return cls(mark=None)
        mark = record.get("mark")
        return cls(
            mark=None if mark is None else int(mark),
            added=tuple(record.get("added", ())),
            recreated=int(record.get("recreated", 0)),
            messages=int(record.get("messages", 0)),
            conversations=int(record.get("conversations", 0)),
            responses=int(record.get("responses", 0)),
            side_rows=int(record.get("side_rows", 0)),
        )


@dataclass(frozen=True)
class IndexMerge:
    finished: bool
    notes: tuple[str, ...]


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
    return sorted(found - set(kept)), kept


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
    touched = sorted(
        ({sid for _mid, sid in moved} | {t for m, t, *_ in merges if m in closed}) - id_set
    )
    held_map = holds.holds_on([*ids, *touched])
    erased_chat_ids, erased_keys = _identifiers_of(ids)
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
    fingerprint = hashlib.sha256(
        json.dumps(
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
            default=str,
            sort_keys=True,
        ).encode()
    ).hexdigest()[:32]
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


class MergedSincePlan(StoreError):
    """A merge made after the erasure's plan names one of the sessions it is deleting: nothing
    of that batch is deleted (another person's messages may be in the subject's session now,
    or the subject's in another person's)."""

    def __init__(self, merges: Sequence[tuple[int, str, list[str]]]):
        self.merge_ids = tuple(m[0] for m in merges)
        said = "; ".join(
            f"merge #{merge_id} (into {target}, of {', '.join(absorbed)})"
            for merge_id, target, absorbed in merges
        )
        super().__init__(
            f"The store changed since the erasure was planned: {said} now joins one of the "
            "subject's sessions with other sessions. Nothing more was erased: undo that merge "
            "(support can, from the session's page), and the erasure finishes when it runs "
            "again."
        )


def _merges_since(plan: ErasurePlan, batch: Sequence[str]) -> StoreError | None:
    """Under the delete's lock: a standing merge naming a session of ``batch`` that the plan
    did not know, as the refusal that stops the batch."""
    if plan.known_merges is None:
        return None
    known = set(plan.known_merges)
    found = [
        (merge_id, target, absorbed)
        for merge_id, target, absorbed, _prior, undone_at in _merges_touching(set(batch))
        if undone_at is None and merge_id not in known
    ]
    return MergedSincePlan(found) if found else None


class ChildrenSincePlan(StoreError):
    """Under a delete batch's lock: sessions a runtime started below the batch's after the plan
    (a delegate, a compression), with the subject's user id or none. Nothing of the batch was
    deleted, so their links still stand: ``erase`` adds them to its plan (``_grown``) and goes
    on, children first. Another user's child is not among them: it stays, unlinked."""

    def __init__(self, session_ids: Sequence[str]):
        self.session_ids = tuple(session_ids)
        super().__init__(
            f"{len(self.session_ids)} sessions were started below the subject's while the "
            f"erasure ran ({', '.join(self.session_ids[:5])})."
        )


def _children_since(plan: ErasurePlan, batch: Sequence[str]) -> StoreError | None:
    """Under the delete's lock: the subject's (or nobody's) children of ``batch`` that the
    plan does not name, as ``ChildrenSincePlan``."""
    planned = {*plan.session_ids, *plan.kept_targets}
    found = sorted(
        sid
        for sid, user_id in db.fetchall(
            f"SELECT id, user_id FROM sessions WHERE parent_session_id IN "
            f"({db.placeholders(batch)})",
            list(batch),
        )
        if sid not in planned and (not user_id or user_id == plan.subject.user_id)
    )
    return ChildrenSincePlan(found) if found else None


def _grown(plan: ErasurePlan, started: Sequence[str]) -> tuple[ErasurePlan, tuple[str, ...]]:
    """``plan`` with the sessions a runtime started below it while it ran, and everything below
    those that is the subject's or nobody's (children first, before the rest); and the
    sessions added. Their rows in sessions_admin's own tables are found, and counted, with
    the rest written meanwhile (``_written_meanwhile``, after the sessions are gone)."""
    below = _descendants(started)
    added = tuple(
        sid
        for sid in ordered_children_first(sorted(_theirs_or_nobodys(plan.subject, sorted(below))))
        if sid not in set(plan.session_ids) | set(plan.kept_targets)
    )
    chats, keys = _identifiers_of(added)
    return (
        replace(
            plan,
            session_ids=(*added, *plan.session_ids),
            erased_chat_ids=tuple(dict.fromkeys([*plan.erased_chat_ids, *chats])),
            erased_session_keys=tuple(dict.fromkeys([*plan.erased_session_keys, *keys])),
        ),
        added,
    )


# A runtime that keeps starting children below the subject's sessions (or writing erased ones
# again) makes the erasure go round again and again; after this many rounds it stops.
MAX_GROWTH_ROUNDS = 50


class RuntimeOutpacedErasure(StoreError):
    """A runtime kept starting sessions below the subject's, or writing erased sessions again,
    round after round: what was erased stays erased, the rest waits for a run once it stops."""

    def __init__(self, rounds: int):
        super().__init__(
            f"A runtime kept starting sessions below the subject's, or writing erased sessions "
            f"again, through {rounds} rounds of the erasure: what it erased stays erased. Stop "
            "the runtime (or reset the subject's sessions), then run the erasure again: it "
            "finishes from where it stopped."
        )


def _present(ids: Sequence[str]) -> set[str]:
    return _first_values_in("SELECT id FROM sessions WHERE id IN ({marks})", list(ids))


def _written_meanwhile(
    plan: ErasurePlan, late: LateRows, trashed_ids: Sequence[str]
) -> tuple[ErasurePlan, LateRows]:
    """``plan`` with what was written about the subject while the erasure ran (or between a
    failed run and its retry) that it did not list, after its sessions are gone: the slugs
    and stored responses a runtime's turn wrote for an erased session, the slug history the
    poller recorded of it, a hold on the subject placed and released meanwhile, and the
    other rows of sessions_admin's own tables naming an erased session (``_side_rows``,
    again); and the holds whose reason names the subject (redacted). They go with the plan's
    own, and ``late`` counts them (the receipt hashes the slugs and responses too)."""
    ids = list(plan.session_ids)
    responses = sorted(set(response_ids_of(ids)) - set(plan.response_ids))
    names = sorted(
        set(conversation_names_of(ids, response_ids=responses)) - set(plan.conversation_names)
    )
    side = _side_rows(
        plan.subject,
        ids,
        sorted({*plan.conversation_names, *names}),
        [],
        trashed_ids=trashed_ids,
    )
    side_rows = {table: [list(row) for row in rows] for table, rows in plan.side_rows.items()}
    fresh = 0
    for table, rows in side.items():
        listed = {tuple(row) for row in side_rows.get(table, [])}
        added = [list(row) for row in rows if tuple(row) not in listed]
        if added:
            side_rows.setdefault(table, []).extend(added)
            # Switch events are tombstoned, not deleted: not counted as lost.
            fresh += 0 if table == "sessions_admin_switch_events" else len(added)
    gone_holds = {row[0] for row in side_rows.get("sessions_admin_holds", [])}
    redacted = sorted(
        set(plan.redacted_holds) | set(_holds_naming(plan.redaction_subject, gone_holds))
    )
    grown = replace(
        plan,
        conversation_names=(*plan.conversation_names, *names),
        response_ids=(*plan.response_ids, *responses),
        side_rows=side_rows,
        redacted_holds=tuple(redacted),
    )
    if grown == plan:
        return plan, late
    return grown, replace(
        late,
        conversations=late.conversations + len(names),
        responses=late.responses + len(responses),
        side_rows=late.side_rows + fresh,
    )


def _secure_delete(on: bool) -> list[str]:
    """SQLite: zero what deletes free, on every connection this erasure writes through."""
    done = []
    for alias in dict.fromkeys([store_alias(), responses_alias()]):
        connection = connections[alias]
        if connection.vendor == "sqlite":
            with connection.cursor() as cursor:
                cursor.execute(f"PRAGMA secure_delete = {'ON' if on else 'OFF'}")
            done.append(alias)
    return done


@store_operation
def _delete_other_messages(message_ids: Sequence[int]) -> int:
    sessions = {
        r[0]
        for r in db.fetchall(
            f"SELECT DISTINCT session_id FROM messages WHERE id IN ({db.placeholders(message_ids)})",
            list(message_ids),
        )
    }
    removed = db.execute(
        f"DELETE FROM messages WHERE id IN ({db.placeholders(message_ids)})", list(message_ids)
    )
    for session_id in sessions:
        recompute_counters(session_id)
    return removed


@store_operation
def _delete_side_rows(side_rows: dict) -> int:
    removed = 0
    for table, rows in side_rows.items():
        if table == "sessions_admin_switch_events":
            # Tombstoned, not deleted: the rows stay (they are not counted as lost).
            _tombstone_switch_events([row[0] for row in rows])
            continue
        columns = SIDE_ROW_KEYS[table]
        for row in rows:
            where = " AND ".join(f"{c} = %s" for c in columns)
            removed += db.execute(f"DELETE FROM {table} WHERE {where}", list(row[: len(columns)]))
    return removed


# What an erased session's switch events become: the numbering a follower's cursor relies on
# stays whole (core.events), and nothing in the row names the session, its chat or its key.
ERASED_SESSION = ""


def _tombstone_switch_events(seqs: Sequence[int]) -> int:
    """Empty the erased sessions' switch events of every id and key, keeping their ``seq``.

    The log is numbered 1, 2, 3... without a gap so that a follower's cursor (``seq``) never
    skips an event; deleting these rows would leave gaps. A tombstone keeps its ``seq``,
    time and reason, names no session (``new_session_id`` empty, the rest NULL) and has the
    history origin, so a follower reading it tells no listener.

    An event whose new session is another person's, still in the store (a group chat's key
    reset from the subject's session to theirs), stays theirs: only the fields naming a
    session no longer in the store (the subject's, erased) are emptied, so that person's
    listeners still hear their session switch.
    """
    changed = 0
    for chunk in _chunks(list(seqs)):
        rows = db.fetchall(
            "SELECT seq, new_session_id, previous_session_id, parent_session_id FROM "
            f"sessions_admin_switch_events WHERE seq IN ({db.placeholders(chunk)})",
            list(chunk),
        )
        kept = _present([sid for row in rows for sid in row[1:] if sid])
        whole = [row[0] for row in rows if row[1] not in kept]
        if whole:
            changed += db.execute(
                "UPDATE sessions_admin_switch_events SET new_session_id = %s, "
                "previous_session_id = NULL, parent_session_id = NULL, session_key = NULL, "
                f"source = NULL, origin = %s WHERE seq IN ({db.placeholders(whole)})",
                [ERASED_SESSION, events.HISTORY_ORIGIN, *whole],
            )
        for seq, _new, previous, parent in rows:
            if seq in whole:
                continue
            changed += db.execute(
                "UPDATE sessions_admin_switch_events SET previous_session_id = %s, "
                "parent_session_id = %s WHERE seq = %s",
                [
                    previous if previous in kept else None,
                    parent if parent in kept else None,
                    seq,
                ],
            )
    return changed


def switch_events_of(*, session_ids: Sequence[str]) -> tuple[int, ...]:
    """The ``seq`` of every switch event naming one of ``session_ids`` (reads only): for
    sessions no longer in the store (the trash's), whose events ``plan_erasure`` cannot list."""
    seqs: set[int] = set()
    for chunk in _chunks(list(session_ids)):
        marks = db.placeholders(chunk)
        seqs |= {
            int(r[0])
            for r in db.fetchall(
                "SELECT seq FROM sessions_admin_switch_events WHERE new_session_id IN "
                f"({marks}) OR previous_session_id IN ({marks}) OR parent_session_id IN ({marks})",
                [*chunk, *chunk, *chunk],
            )
        }
    return tuple(sorted(seqs))


ERASED_WORDS = "[erased]"


@store_operation
def _redact_holds(hold_ids: Sequence[int], subject: Subject) -> int:
    """The subject's identifiers in these holds' reasons become ``[erased]`` (whole tokens)."""
    replacements = dict.fromkeys(subject.strings, ERASED_WORDS)
    changed = 0
    for hold_id, reason, release_reason in db.fetchall(
        "SELECT id, reason, release_reason FROM sessions_admin_holds WHERE id IN "
        f"({db.placeholders(hold_ids)})",
        list(hold_ids),
    ):
        changed += db.execute(
            "UPDATE sessions_admin_holds SET reason = %s, release_reason = %s WHERE id = %s",
            [
                redact_text(reason, replacements),
                None if release_reason is None else redact_text(release_reason, replacements),
                hold_id,
            ],
        )
    return changed


@store_operation
def _close_merges(merge_ids: Sequence[int], erased: Sequence[str]) -> int:
    """Merge records that moved the subject's rows into a session that stays: their saved
    prior state (the subject's rows) goes, the erased sessions leave the absorbed list, and
    the record says it can no longer be undone (``core.merge.unmerge`` refuses it). A key
    the merge copied from an erased session onto the target (it had none) is taken back:
    the target gets its own prior value again, while it still holds the copied one."""
    erased_set = set(erased)
    closed = 0
    for merge_id in merge_ids:
        row = db.fetchone(
            "SELECT target_session_id, absorbed_session_ids, prior_state "
            "FROM sessions_admin_merges WHERE id = %s",
            [merge_id],
        )
        if row is None:
            continue
        target, absorbed, prior = row[0], json.loads(row[1] or "[]"), json.loads(row[2] or "{}")
        saved = prior.get("sessions") or {}
        own = (saved.get(target) or {}).get("session_key")
        copied = (prior.get("target_after") or {}).get("session_key")
        erased_keys = {
            (saved.get(sid) or {}).get("session_key") for sid in absorbed if sid in erased_set
        }
        if copied and copied != own and copied in erased_keys:
            db.execute(
                "UPDATE sessions SET session_key = %s WHERE id = %s AND session_key = %s",
                [own, target, copied],
            )
        kept = [sid for sid in absorbed if sid not in erased_set]
        closed += db.execute(
            "UPDATE sessions_admin_merges SET absorbed_session_ids = %s, prior_state = %s "
            "WHERE id = %s",
            [db.dumps(kept), db.dumps(CLOSED_BY_ERASURE), merge_id],
        )
    return closed


def _delete_slug_rows(names: Sequence[str], response_ids: Sequence[str]) -> None:
    """What the sessions' deletes left: slugs and responses found by the subject's strings."""
    alias = responses_alias()
    for chunk in _chunks(list(names)):
        db.execute(
            f"DELETE FROM conversations WHERE name IN ({db.placeholders(chunk)})",
            list(chunk),
            alias=alias,
        )
    for chunk in _chunks(list(response_ids)):
        db.execute(
            f"DELETE FROM responses WHERE response_id IN ({db.placeholders(chunk)})",
            list(chunk),
            alias=alias,
        )


# The key columns of each own table ``_side_rows`` lists rows of.
SIDE_ROW_KEYS = {
    "sessions_admin_switch_events": ("seq",),
    "sessions_admin_undos": ("id",),
    "sessions_admin_merges": ("id",),
    "sessions_admin_slug_history": ("id",),
    "sessions_admin_holds": ("id",),
    "sessions_admin_deletions": ("session_id",),
    "sessions_admin_delete_claims": ("operation",),
    "sessions_admin_idempotency": ("scope", "key"),
    "compression_locks": ("session_id",),
    "async_delegations": ("delegation_id",),
    "gateway_routing": ("scope", "session_key"),
}


def _count_in(table: str, column: str, values: Sequence, *, alias: str | None = None) -> int:
    return sum(
        int(
            db.fetchone(
                f"SELECT COUNT(*) FROM {table} WHERE {column} IN ({db.placeholders(chunk)})",
                list(chunk),
                alias=alias,
            )[0]
        )
        for chunk in _chunks(list(values))
    )


def rows_present(*, plan: ErasurePlan) -> RowsPresent:
    """How many of ``plan``'s rows are in the store and the response store now."""
    alias = responses_alias()
    side = 0
    for table, rows in plan.side_rows.items():
        columns = SIDE_ROW_KEYS[table]
        where = " AND ".join(f"{c} = %s" for c in columns)
        for row in rows:
            side += int(
                db.fetchone(
                    f"SELECT COUNT(*) FROM {table} WHERE {where}", list(row[: len(columns)])
                )[0]
            )
    return RowsPresent(
        sessions=_count_in("sessions", "id", plan.session_ids),
        messages=_count_in("messages", "session_id", plan.session_ids),
        other_messages=_count_in("messages", "id", [m for m, _ in plan.other_messages]),
        conversations=_count_in("conversations", "name", plan.conversation_names, alias=alias),
        responses=_count_in("responses", "response_id", plan.response_ids, alias=alias),
        side_rows=side,
    )


def counted_before(*, plan: ErasurePlan) -> tuple[RowsPresent, LateRows]:
    """``rows_present`` before an erasure's first run, and the store's highest message id as
    of the same count (one snapshot): a message above it was appended afterwards
    (``LateRows``). Messages ids only grow (AUTOINCREMENT on SQLite, a sequence on
    PostgreSQL)."""
    outer = connections[store_alias()].in_atomic_block  # a caller's transaction: its snapshot
    with transaction.atomic(using=store_alias()):
        if db.vendor() == "postgresql" and not outer:
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        mark = int(db.fetchone("SELECT COALESCE(MAX(id), 0) FROM messages")[0])
        before = rows_present(plan=plan)
    return before, LateRows(mark=mark)


def _checkpoint(alias: str) -> str:
    return checkpoint_wal(alias)[1]


def checkpoint_wal(alias: str, *, seconds: float = CHECKPOINT_SECONDS) -> tuple[bool, str]:
    """Merge the WAL into the file and truncate it, retrying while a reader holds it;
    whether it was truncated, and a note saying so.

    The erasure's deletes and index merges can leave a WAL of gigabytes; a TRUNCATE
    checkpoint holds the runtime's writers while it copies. So PASSIVE checkpoints (which
    never block a writer) copy it first, and the TRUNCATE that follows has little left.
    """
    deadline = time.monotonic() + seconds
    with connections[alias].cursor() as cursor:
        for _ in range(PASSIVE_ROUNDS):
            cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
            _busy, log, done = cursor.fetchone()
            if log <= 0 or done >= log:
                break
        while True:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            busy, _log, _done = cursor.fetchone()
            if not busy:
                return True, f"{alias}: WAL checkpointed and truncated"
            if time.monotonic() >= deadline:
                return False, (
                    f"{alias}: WAL checkpoint still blocked by a reader after {seconds:g} s"
                )
            time.sleep(0.2)


# Pages of index one merge step rewrites: a step is one short store transaction, so the
# runtime's writers wait for it tens of milliseconds, never for the whole index.
FTS_MERGE_PAGES = 64
FTS_MERGE_SECONDS = 30.0


@store_operation
def _fts_merge_step(fts: str) -> bool:
    """One bounded step of merging ``fts`` into a single segment; whether it did any work.

    FTS5 keeps a deleted message's terms in older segments (with a delete marker) until
    they are merged; ``'optimize'`` merges the whole index in one transaction, which held
    the runtime's writers for seconds on a 100k store (bench/retention.py). A negative
    ``'merge'`` merges every segment whatever its level, ``FTS_MERGE_PAGES`` pages at a
    time; FTS5 says it is finished when a step changes fewer than two rows.
    """
    raw = connections[store_alias()].connection
    before = raw.total_changes
    with connections[store_alias()].cursor() as cursor:
        cursor.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('merge', %s)", [-FTS_MERGE_PAGES])
    return raw.total_changes - before >= 2


def _merge_fts(fts: str, seconds: float) -> tuple[bool, str]:
    """Merge ``fts`` into one segment in short steps, within ``seconds``; whether it finished.

    While the runtime keeps writing, each of its inserts adds a segment and the merge
    starts over (bench/retention.py: on a 100k store with 20 appends a second it never
    finished, rewriting the index again and again). So the merge stops at its time budget,
    and the erasure's receipt says the index's older segments may still hold deleted terms
    until a later ``merge_search_indexes`` finishes (the dashboard retries it in its
    scheduler). SQLite 3.42's FTS5 'secure-delete' option removes terms at delete time;
    this store's SQLite may be older.
    """
    deadline = time.monotonic() + seconds
    steps = 1
    while _fts_merge_step(fts):
        steps += 1
        if time.monotonic() >= deadline:
            return False, (
                f"{fts}: merge stopped after {steps} steps ({seconds:g} s) while the runtime "
                "wrote; deleted terms may stay in older index segments until a later merge "
                "finishes"
            )
    return True, f"{fts}: merged into one segment in {steps} steps (deleted terms dropped)"


def _search_index_merges(seconds: float) -> IndexMerge:
    store = connections[store_alias()]
    if store.vendor != "sqlite":
        return IndexMerge(True, ())  # PostgreSQL's index entries go with VACUUM
    tables = existing_tables(store_alias())
    finished, notes = True, []
    for fts in ("messages_fts", "messages_fts_trigram"):
        if fts in tables:
            done, note = _merge_fts(fts, seconds)
            finished = finished and done
            notes.append(note)
    return IndexMerge(finished, tuple(notes))


def merge_search_indexes(*, seconds: float = FTS_MERGE_SECONDS) -> IndexMerge:
    """Finish what an erasure's index merge could not: merge each full-text index into one
    segment (``seconds`` a index at most), zeroing freed pages, then truncate the WAL.

    ``finished`` is True once every index was merged whole after the erasure's deletes:
    no older segment is left to hold a deleted term.
    """
    _secure_delete(True)
    try:
        merge = _search_index_merges(seconds)
        if connections[store_alias()].vendor == "sqlite":
            merge = IndexMerge(merge.finished, (*merge.notes, _checkpoint(store_alias())))
    finally:
        _secure_delete(False)
    return merge


def _purge_leftovers() -> tuple[bool, list[str]]:
    """What deleted rows leave in the files (SQLite) or as dead tuples (PostgreSQL)."""
    merge = _search_index_merges(FTS_MERGE_SECONDS)
    done = list(merge.notes)
    for alias in dict.fromkeys([store_alias(), responses_alias()]):
        connection = connections[alias]
        if connection.vendor == "sqlite":
            done.append(_checkpoint(alias))
        else:
            tables = (
                ["sessions", "messages", "sessions_admin_switch_events", "sessions_admin_merges"]
                if alias == store_alias()
                else []
            )
            if alias == responses_alias():
                tables += ["conversations", "responses"]
            with connection.cursor() as cursor:
                for table in dict.fromkeys(tables):
                    cursor.execute(f"VACUUM {table}")
            done.append(f"{alias}: VACUUM {', '.join(dict.fromkeys(tables))}")
    return merge.finished, done


def _erased(before: RowsPresent, now: RowsPresent, late: LateRows) -> dict[str, int]:
    """The counts gone: the plan's rows counted ``before`` minus those left ``now``, and the
    rows written after that count which the erasure deleted (``late``)."""
    gone = {
        name: getattr(before, name) - getattr(now, name)
        for name in RowsPresent.__dataclass_fields__
    }
    # ``now`` counts the added sessions still there (the plan holds them), ``before`` none.
    gone["sessions"] += len(late.added) + late.recreated
    for name in ("messages", "conversations", "responses", "side_rows"):
        gone[name] += getattr(late, name)
    return gone


def _erased_so_far(plan: ErasurePlan, before: RowsPresent, late: LateRows) -> RowsPresent | None:
    """The rows gone since ``before`` (every run's), or None if the store cannot be read."""
    try:
        now = rows_present(plan=plan)
    except Exception:
        return None
    return RowsPresent(**_erased(before, now, late))


class HeldMidway(holds.SessionsHeld):
    """A legal hold placed while the erasure ran stopped it after it had erased some of the
    plan: the held sessions and the rest wait, nothing of them changed. Once the hold is
    released, running the request again finishes it."""

    def __init__(self, held: holds.SessionsHeld, *, erased: RowsPresent, planned: RowsPresent):
        super().__init__(
            held.held,
            outcome=(
                f"It was placed while the erasure ran: {erased.sessions} of "
                f"{planned.sessions} sessions ({erased.messages} messages) were erased "
                "before it; the rest waits. Once the hold is released, run the erasure "
                "again: it finishes from where it stopped."
            ),
        )
        self.erased_so_far = erased
        self.planned = planned


class ErasureStopped(Exception):
    """An erasure stopped because a database could not be written (a full disk, a read-only
    file): the store (``database`` "store") or the dashboard's (``deletion.TRASH_DATABASE``,
    tagged on the error where the dashboard writes: the lease renewed between batches, its
    side of the erasure).

    Not a ``StoreError`` (those mean nothing changed): what it erased before stays erased
    (nothing of an erasure is restorable), and running the request again finishes it from
    the plan it recorded. ``erased``: the plan's rows gone so far, across every run (None
    when they could not be counted), of ``planned`` (counted before the first run);
    ``store_done``: the store's side was finished and the dashboard's rolled back.
    """

    def __init__(
        self,
        *,
        error: BaseException,
        erased: RowsPresent | None,
        planned: RowsPresent | None = None,
        store_done: bool = False,
    ):
        self.error = error
        self.storage = db.storage_failure(error) or "unwritable"
        self.database = failed_database(error)
        self.erased = erased
        self.planned = planned
        self.store_done = store_done
        if erased is None:
            what = "what it erased before it stopped could not be counted"
        elif store_done:
            what = (
                f"the store's side is erased ({erased.sessions} sessions, {erased.messages} "
                "messages); the dashboard's side (its trash, the audit log's redaction, the "
                "receipt) rolled back, nothing of it changed"
            )
        else:
            of = planned or erased
            what = (
                f"{erased.sessions} of {of.sessions} sessions ({erased.messages} of "
                f"{of.messages} messages) were erased before it stopped; the trash, the audit "
                "log and the receipt are not changed yet"
            )
        space = "free space on its disk" + (
            "" if self.storage == "full" else " or make it writable"
        )
        super().__init__(
            as_sentence(f"{database_words(self.database, self.storage)}: {what}. ")
            + as_sentence(
                f"{space}, then run the erasure again (its page, or manage.py erase_subject "
                "--yes): it finishes from where it stopped."
            )
        )

    @property
    def erased_any(self) -> bool:
        """Whether anything of the plan is gone (this run's or an earlier one's)."""
        return self.erased is None or self.store_done or any(asdict(self.erased).values())


def erase(
    *,
    subject: Subject,
    expected_fingerprint: str | None = None,
    plan: ErasurePlan | None = None,
    before: RowsPresent | None = None,
    late: LateRows | None = None,
    progress: Callable[[ErasurePlan, LateRows], None] | None = None,
    between_batches: Callable[[], None] | None = None,
    switch_events: Sequence[int] = (),
    trashed_ids: Sequence[str] = (),
) -> ErasureResult:
    """Purge everything ``plan_erasure`` lists for ``subject`` (no trash; nothing restorable).

    ``expected_fingerprint``: refuse if the plan changed since it was shown (None: erase
    what the plan is now). ``plan``: carry out this plan as it was recorded instead (a
    resumed erasure: its earlier run changed the store, so no fingerprint is compared);
    every step is idempotent, so what a killed run did is not done twice and what it left
    is done. ``before`` and ``late``: the plan's rows counted before its first run and what
    was deleted since that the count did not see (``counted_before``, ``LateRows``), so the
    counts are what the databases lost across every run. ``progress`` is called with the
    plan and ``LateRows`` whenever either changed (after a batch that deleted late rows, or
    once sessions a runtime started meanwhile were added to the plan), for the caller to
    record before going on;
    ``between_batches`` after each committed delete batch (the caller renews its lease
    there). ``switch_events``: more events to tombstone, those of the subject's sessions
    that are no longer in the store (the trash's: ``switch_events_of``). ``trashed_ids``:
    the subject's sessions the dashboard's trash holds (a runtime writing one of them again
    meanwhile has it erased too). Refused while a hold stands.

    A session a runtime starts below one of the subject's while this runs (the subject's
    user id, or none) is erased with it and counted (``ChildrenSincePlan``); so is a message
    a runtime appends to one of them with its own SQL (the core's writers are refused).
    A refusal met midway (a ``StoreError``: a hold placed, a merge made, a runtime that
    kept writing) after some of the plan was erased carries ``erased_so_far`` and
    ``planned`` (a hold's is ``HeldMidway``).
    """
    if plan is None:
        plan = plan_erasure(subject=subject)
        if expected_fingerprint is not None and plan.fingerprint != expected_fingerprint:
            raise PlanChanged("erasure")
    holds.refuse_held(plan.held_scope)
    if before is None:
        before, late = counted_before(plan=plan)
    tally = [late or LateRows(mark=None)]
    recorded = list(tally)  # what ``progress`` was last told (the record holds the plan too)

    def gone(rows: GoneRows) -> None:
        # Slugs and responses the plan did not list were written after it: late too.
        now, mark = tally[0], tally[0].mark
        tally[0] = replace(
            now,
            messages=now.messages
            + (0 if mark is None else sum(1 for mid in rows.message_ids if mid > mark)),
            conversations=now.conversations
            + len(set(rows.conversation_names) - set(plan.conversation_names)),
            responses=now.responses + len(set(rows.response_ids) - set(plan.response_ids)),
        )

    def refuse(batch: Sequence[str]) -> StoreError | None:
        return _merges_since(plan, batch) or _children_since(plan, batch)

    rounds = [0]

    def another_round() -> None:
        rounds[0] += 1
        if rounds[0] > MAX_GROWTH_ROUNDS:
            raise RuntimeOutpacedErasure(MAX_GROWTH_ROUNDS)

    def record() -> None:
        if progress is not None:
            progress(plan, tally[0])
            recorded[0] = tally[0]

    def written_again() -> tuple[list[str], list[str]]:
        """The plan's sessions a runtime still holding their ids wrote again after their
        delete (Hermes's API server re-creates the session a slug's stored response names),
        and the subject's sessions in the trash written again: they go too."""
        back = sorted(_present(plan.session_ids))
        reborn = sorted(_theirs_or_nobodys(plan.subject, sorted(set(trashed_ids) - set(back))))
        return back, reborn

    def take_written_again() -> list[str] | None:
        """``written_again``'s sessions, put in the plan (and recorded) to go in another round;
        None when there are none."""
        nonlocal plan
        back, reborn = written_again()
        if not (back or reborn):
            return None
        another_round()
        plan, added = _grown(plan, reborn) if reborn else (plan, ())
        tally[0] = replace(
            tally[0],
            added=(*tally[0].added, *added),
            recreated=tally[0].recreated + len(back),
        )
        record()  # before they go, as the children started are
        return back

    def delete_sessions() -> None:
        nonlocal plan
        done: set[str] = set()
        while True:
            try:
                for batch, *_counts in delete_in_batches(
                    [sid for sid in plan.session_ids if sid not in done],
                    actor="erasure",
                    reason="erasure",
                    trash=NO_TRASH,
                    refuse=refuse,
                    gone=gone,
                ):
                    done.update(batch)
                    # A batch committed, the next not begun: a kill here is resumed from the plan.
                    faults.checkpoint("erasure.between_batches")
                    if tally[0] != recorded[0]:
                        record()
                    if between_batches is not None:
                        between_batches()
                back = take_written_again()
                if back is None:
                    return
                done -= set(back)
            except ChildrenSincePlan as started:
                another_round()
                plan, added = _grown(plan, started.session_ids)
                tally[0] = replace(tally[0], added=(*tally[0].added, *added))
                # Recorded before they are deleted: a resumed run erases and counts them too.
                record()

    _secure_delete(True)
    try:
        while True:
            delete_sessions()
            grown_plan, tally[0] = _written_meanwhile(plan, tally[0], trashed_ids)
            if grown_plan is not plan:
                plan = grown_plan
                record()  # before they go, as added sessions are
            ids = [message_id for message_id, _ in plan.other_messages]
            for chunk in _chunks(ids):
                _delete_other_messages(list(chunk))
            _delete_slug_rows(plan.conversation_names, plan.response_ids)
            if plan.side_rows:
                _delete_side_rows(plan.side_rows)
            if switch_events:
                _delete_side_rows(
                    {"sessions_admin_switch_events": [[seq] for seq in switch_events]}
                )
            if plan.closed_merges:
                _close_merges(plan.closed_merges, plan.session_ids)
            if plan.redacted_holds:
                _redact_holds(plan.redacted_holds, plan.redaction_subject)
            after = rows_present(plan=plan)
            index_merged, storage = _purge_leftovers()
            # Once more, after all of it: what a runtime wrote meanwhile goes in another round.
            if take_written_again() is None:
                if not set(response_ids_of(list(plan.session_ids))) - set(plan.response_ids):
                    break
                another_round()
    except StoreError as stopped:
        # Refused midway (a hold placed, a merge made, a runtime that kept writing): what was
        # erased before stays erased; the error carries how much (``erased_so_far``), for the
        # request and its audit entry (``partial``).
        erased = _erased_so_far(plan, before, tally[0])
        if erased is None or not any(asdict(erased).values()):
            raise
        if isinstance(stopped, holds.SessionsHeld):
            raise HeldMidway(stopped, erased=erased, planned=before) from stopped
        stopped.erased_so_far = erased
        stopped.planned = before
        raise
    except Exception as error:
        if db.storage_failure(error):
            raise ErasureStopped(
                error=error, planned=before, erased=_erased_so_far(plan, before, tally[0])
            ) from error
        raise
    finally:
        _secure_delete(False)
    return ErasureResult(
        **_erased(before, after, tally[0]),
        storage=tuple(storage),
        index_merged=index_merged,
        plan=plan,
    )


# The file rewrite: what takes the bytes out of space freed before the erasure.
#
# ``secure_delete`` zeroes only what the erasure's own deletes free. Space freed earlier
# (a merge that moved the subject's messages, an FTS segment merge, the runtime's deletes,
# all on connections whose SQLite has ``secure_delete`` off, as python.org's, macOS's and
# Homebrew's builds do) keeps the old bytes in free blocks and freelist pages; only
# rewriting the file removes them. SQLite: VACUUM, which holds the runtime's writers for
# its length, so it starts only after a quiet window (no other connection committed) and
# waits for the write lock at most ``busy_ms``; a busy store makes it wait for a later
# try. ``auto_vacuum = INCREMENTAL`` would not do: ``incremental_vacuum`` only gives back
# freelist pages at the end of the file, never a page's free blocks. PostgreSQL: VACUUM
# FULL of the tables an erasure touches (rebuilding their indexes) under a short
# ``lock_timeout``; it takes an ACCESS EXCLUSIVE lock for its length, so it is a step the
# operator runs (``manage.py erasure_rewrite`` or the request's page).

REWRITE_BUSY_MS = 250
REWRITE_QUIET_SECONDS = 1.0
REWRITE_TRIES = 3
# PostgreSQL: how long a rewrite waits for the transactions that began before it.
REWRITE_OLD_SNAPSHOT_WAIT_SECONDS = 10.0

# The tables whose rows an erasure deletes or rewrites, by database.
# A follower's cursor (switch_cursors) names no session: the rest of our tables may.
STORE_REWRITE_TABLES = (
    "sessions",
    "messages",
    *(table for table in OWN_TABLES if table != "sessions_admin_switch_cursors"),
)
RESPONSE_REWRITE_TABLES = ("conversations", "responses")


@dataclass(frozen=True)
class FileRewrite:
    done: bool
    notes: tuple[str, ...]
    # The longest time one rewrite statement held its lock (the runtime's writers waited).
    longest_lock_seconds: float = 0.0


def _quiet(alias: str, seconds: float) -> bool:
    """No other connection committed to ``alias`` in the last ``seconds`` (SQLite)."""
    with connections[alias].cursor() as cursor:
        cursor.execute("PRAGMA data_version")
        before = cursor.fetchone()[0]
        time.sleep(seconds)
        cursor.execute("PRAGMA data_version")
        return cursor.fetchone()[0] == before


def _too_large(name: str, size: int, max_bytes: int | None) -> str | None:
    if max_bytes is None or size <= max_bytes:
        return None
    return (
        f"{name}: not rewritten automatically ({size / 1e6:,.0f} MB, over "
        f"{max_bytes / 1e6:,.0f} MB: the rewrite would hold the runtime out for long); "
        "run manage.py erasure_rewrite at a quiet hour"
    )


def vacuum_sqlite(
    alias: str,
    *,
    quiet_seconds: float = REWRITE_QUIET_SECONDS,
    busy_ms: int = REWRITE_BUSY_MS,
    max_bytes: int | None = None,
) -> tuple[bool, str, float]:
    """VACUUM one SQLite database when quiet, then truncate its WAL.

    ``max_bytes``: leave a larger file alone (a VACUUM's length grows with the file).
    Returns whether no freed byte is left, a note, and how long the VACUUM held the lock.
    """
    connection = connections[alias]
    connection.ensure_connection()
    name = Path(str(connection.settings_dict["NAME"])).name
    if connection.in_atomic_block:
        raise RuntimeError("A file rewrite cannot run inside a transaction.")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA page_count")
        pages = int(cursor.fetchone()[0])
        cursor.execute("PRAGMA page_size")
        size = pages * int(cursor.fetchone()[0])
    if too_large := _too_large(name, size, max_bytes):
        return False, too_large, 0.0
    if not _quiet(alias, quiet_seconds):
        return (
            False,
            f"{name}: not rewritten, another connection was writing; tried again later",
            0.0,
        )
    took = 0.0
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        previous = int(cursor.fetchone()[0])
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
        try:
            started = time.monotonic()
            cursor.execute("VACUUM")
            took = time.monotonic() - started
        except OperationalError as error:
            if not db.is_busy_error(error):
                raise
            return False, f"{name}: not rewritten, the write lock was taken; tried again later", 0.0
        finally:
            cursor.execute(f"PRAGMA busy_timeout = {previous}")
    # The VACUUM wrote the whole file into the WAL; the TRUNCATE checkpoint that copies it
    # back holds the writers too, so the lock reported counts it (an upper bound: its
    # PASSIVE rounds do not block them).
    started = time.monotonic()
    truncated, note = checkpoint_wal(alias)
    took += time.monotonic() - started
    if not truncated:
        return False, f"{name}: rewritten (VACUUM, {took:.2f} s) but {note}", took
    return (
        True,
        f"{name}: rewritten (VACUUM and WAL checkpoint, writers held up to {took:.2f} s); "
        "WAL truncated",
        took,
    )


def vacuum_full_postgresql(
    alias: str,
    tables: Sequence[str],
    *,
    lock_ms: int = REWRITE_BUSY_MS,
    tries: int = REWRITE_TRIES,
    max_bytes: int | None = None,
) -> tuple[bool, str, float]:
    """VACUUM FULL each table (and so its indexes and TOAST table), waiting for its lock at
    most ``lock_ms`` a try; whether all were rewritten, a note, the longest lock held."""
    connection = connections[alias]
    connection.ensure_connection()
    if connection.in_atomic_block:
        raise RuntimeError("A file rewrite cannot run inside a transaction.")
    present = existing_tables(alias)
    rewritten, longest, left = [], 0.0, []
    with connection.cursor() as cursor:
        if max_bytes is not None:
            names = [t for t in tables if t in present]
            cursor.execute(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relname = ANY(%s)",
                [names],
            )
            if too_large := _too_large(alias, int(cursor.fetchone()[0]), max_bytes):
                return False, too_large, 0.0
        if holders := _wait_for_older_snapshots(cursor, REWRITE_OLD_SNAPSHOT_WAIT_SECONDS):
            return (
                False,
                f"{alias}: not rewritten: a transaction older than the rewrite still sees the "
                f"erased rows, and VACUUM FULL would copy them ({'; '.join(holders)}); "
                "tried again later",
                0.0,
            )
        cursor.execute(f"SET lock_timeout = {int(lock_ms)}")
        try:
            for table in tables:
                if table not in present:
                    continue
                for attempt in range(tries):
                    started = time.monotonic()
                    try:
                        cursor.execute(f"VACUUM (FULL) {connection.ops.quote_name(table)}")
                    except Exception as error:  # noqa: BLE001 - only a lock timeout is retried
                        if not db.is_busy_error(error) or attempt == tries - 1:
                            if not db.is_busy_error(error):
                                raise
                            left.append(table)
                            break
                        time.sleep(0.5)
                        continue
                    took = time.monotonic() - started
                    longest = max(longest, took)
                    rewritten.append(f"{table} {took:.2f} s")
                    break
            if not left:
                statistics = _refresh_statistics(cursor, [t for t in tables if t in present])
        finally:
            cursor.execute("RESET lock_timeout")
    note = f"{alias}: VACUUM FULL {', '.join(rewritten) or 'nothing'}"
    if left:
        return False, f"{note}; not rewritten (the runtime held them): {', '.join(left)}", longest
    return statistics[0], f"{note}; {statistics[1]}", longest


def _older_snapshot_holders(cursor, horizon: str) -> list[str]:
    """What keeps row versions older than ``horizon`` (an xid) visible on this database:
    other backends' snapshots and transaction ids, prepared transactions, replication
    slots. ``age()`` compares xids modulo wraparound: older means a larger age."""
    cursor.execute(
        "SELECT format('pid %%s (%%s, %%s since %%s)', pid, "
        "COALESCE(NULLIF(application_name, ''), backend_type), state, "
        "to_char(xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')) "
        "FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
        "AND datname = current_database() "
        "AND (age(backend_xmin) > age(%s::xid) OR age(backend_xid) > age(%s::xid)) "
        # A plain (lazy) VACUUM's snapshot does not hold rows back (PROC_IN_VACUUM).
        "AND NOT (backend_type = 'autovacuum worker' AND query LIKE 'autovacuum: VACUUM %%' "
        "AND query NOT LIKE '%%ANALYZE%%') "
        "UNION ALL SELECT format('prepared transaction %%L', gid) FROM pg_prepared_xacts "
        "WHERE database = current_database() AND age(transaction) > age(%s::xid) "
        "UNION ALL SELECT format('replication slot %%L', slot_name) FROM pg_replication_slots "
        "WHERE age(xmin) > age(%s::xid) OR age(catalog_xmin) > age(%s::xid)",
        [horizon] * 5,
    )
    return [row[0] for row in cursor.fetchall()]


def _wait_for_older_snapshots(cursor, seconds: float) -> list[str]:
    """Wait at most ``seconds`` until no transaction that began before now can still see a
    row the erasure deleted; what still does then (nothing: go on).

    VACUUM FULL copies every row version some running transaction may still see (it keeps
    them "recently dead"), so an erasure's rows would come through the rewrite into the
    new files while, say, a report's transaction or an ANALYZE from before it is open.
    Every transaction begun after now sees them deleted; waiting for the older ones to end
    is what makes a rewrite that says done true.
    """
    cursor.execute("SELECT xid(pg_snapshot_xmax(pg_current_snapshot()))::text")
    horizon = cursor.fetchone()[0]
    deadline = time.monotonic() + seconds
    while holders := _older_snapshot_holders(cursor, horizon):
        if time.monotonic() >= deadline:
            return holders
        time.sleep(0.1)
    return []


def _needs_privilege(error: Exception) -> bool:
    """PostgreSQL refused a step only a superuser (or the owner) may take."""
    text = str(error).lower()
    return "permission" in text or "must be" in text


def _refresh_statistics(cursor, tables: Sequence[str]) -> tuple[bool, str]:
    """ANALYZE keeps sample values of each column (``pg_statistic``: a user id common enough
    is one): re-analyze the tables from what is left, then rewrite ``pg_statistic`` so
    the old samples' dead tuples go too (superuser only; otherwise they stay until
    autovacuum reuses their space, and the note says so)."""
    if not tables:
        return True, "no statistics to refresh"
    cursor.execute("ANALYZE " + ", ".join(tables))
    # ANALYZE of an empty table leaves its statistics as they were (it has no sample to
    # replace them with): an erasure that emptied a table (the one person's responses) kept
    # that person's values there, live, through the rewrite. Those rows are deleted.
    empty = []
    for table in tables:
        cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {table})")
        if not cursor.fetchone()[0]:
            empty.append(table)
    if empty:
        try:
            cursor.execute(
                "DELETE FROM pg_catalog.pg_statistic WHERE starelid IN ("
                "SELECT unnest(%s::regclass[])::oid "
                "UNION SELECT indexrelid FROM pg_catalog.pg_index "
                "WHERE indrelid = ANY(%s::regclass[]))",
                [empty, empty],
            )
        except Exception as error:  # noqa: BLE001 - a missing privilege is reported, not raised
            if not _needs_privilege(error):
                raise
            return False, (
                "statistics re-analyzed; the old statistics of the tables it emptied "
                f"({', '.join(empty)}) not deleted (needs a superuser)"
            )
    # The old samples are dead from the ANALYZE on; a snapshot older than it still sees them.
    if holders := _wait_for_older_snapshots(cursor, REWRITE_OLD_SNAPSHOT_WAIT_SECONDS):
        return False, (
            "statistics re-analyzed; pg_statistic not rewritten: a transaction older than "
            f"the ANALYZE still sees the old samples ({'; '.join(holders)})"
        )
    try:
        cursor.execute("VACUUM (FULL) pg_catalog.pg_statistic")
    except Exception as error:  # noqa: BLE001 - a missing privilege is reported, not raised
        if db.is_busy_error(error):
            return False, "statistics re-analyzed; pg_statistic busy, not rewritten"
        if not _needs_privilege(error):
            raise
        return False, (
            "statistics re-analyzed; pg_statistic not rewritten (needs a superuser): its old "
            "sample values stay until autovacuum reuses their space"
        )
    return True, "statistics re-analyzed and pg_statistic rewritten"


def rewrite_store_files(
    *,
    quiet_seconds: float = REWRITE_QUIET_SECONDS,
    busy_ms: int = REWRITE_BUSY_MS,
    max_bytes: int | None = None,
) -> FileRewrite:
    """Rewrite the store's and the response store's files so no freed byte is left.

    Run it after the search index merge finished (a rewrite copies the index's segments as
    they are). SQLite: VACUUM each file in a quiet moment; PostgreSQL: VACUUM FULL of the
    tables an erasure touches. ``done`` is False when the runtime kept one from running,
    or a database is larger than ``max_bytes`` (automatic runs: the operator runs those).
    """
    done, notes, longest = True, [], 0.0
    for alias in dict.fromkeys([store_alias(), responses_alias()]):
        if connections[alias].vendor == "sqlite":
            ok, note, took = vacuum_sqlite(
                alias, quiet_seconds=quiet_seconds, busy_ms=busy_ms, max_bytes=max_bytes
            )
        else:
            tables = [
                *(STORE_REWRITE_TABLES if alias == store_alias() else ()),
                *(RESPONSE_REWRITE_TABLES if alias == responses_alias() else ()),
            ]
            ok, note, took = vacuum_full_postgresql(
                alias, tables, lock_ms=busy_ms, max_bytes=max_bytes
            )
        done = done and ok
        notes.append(note)
        longest = max(longest, took)
    return FileRewrite(done, tuple(notes), longest)
