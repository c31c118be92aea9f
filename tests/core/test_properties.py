"""Properties of the core over random lineages, built through the core itself.

hypothesis draws a list of operations (new conversations, messages, turns
recorded under a few slugs, compression, branches, delegates, untyped
children, ends at chosen ages, undo/retry) and replays them through the core,
so every lineage is one a runtime could have written. Then:

- a merge followed by its unmerge gives back the store exactly;
- a cascade plan is exactly the closure its rules describe (computed here
  again, in Python, from the rows), and executing it removes exactly that set;
- undo then redo gives back the active transcript;
- a bulk delete by preset deletes exactly the matching sessions and what goes
  with them.

The store is wiped at the start of every example (the database fixture is per
test, the examples are many).
"""

from __future__ import annotations

import json
import time

from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from sessions_admin import core
from sessions_admin.core import clock, db, forks
from sessions_admin.ledger import jobs
from sessions_admin.routers import responses_alias
from tests.conftest import _wipe
from tests.helpers import session_ids

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SOURCES = ("cli", "telegram", "cron")
DAY = 86400.0

node = st.integers(min_value=0, max_value=40)
operation = st.one_of(
    st.tuples(st.just("root"), st.sampled_from(SOURCES), st.integers(0, 2)),
    st.tuples(st.just("say"), node, st.sampled_from(["user", "assistant"]), st.text(max_size=8)),
    st.tuples(st.just("turn"), node, st.integers(0, 2)),
    st.tuples(st.just("compress"), node),
    st.tuples(st.just("branch"), node),
    st.tuples(st.just("delegate"), node),
    st.tuples(st.just("child"), node),
    st.tuples(st.just("end"), node, st.integers(0, 60)),
    st.tuples(st.just("undo"), node),
    st.tuples(st.just("retry"), node),
)
lineages = st.lists(operation, min_size=1, max_size=14)


def build(operations) -> list[str]:
    """Replay the operations through the core; returns the session ids in creation order.

    An operation the core refuses (appending to an ended session, nothing to
    undo) is simply skipped: the store stays as the core left it.
    """
    _wipe()
    ids = [
        core.create_session(source="cli", session_key="key0", started_at=1000.0).session_id,
        core.create_session(source="telegram", session_key="key1", started_at=1001.0).session_id,
    ]
    responses = 0
    for op in operations:
        kind, target = op[0], ids[op[1] % len(ids)] if isinstance(op[1], int) else None
        try:
            if kind == "root":
                ids.append(
                    core.create_session(
                        source=op[1], session_key=f"key{op[2]}", started_at=1000.0 + len(ids)
                    ).session_id
                )
            elif kind == "say":
                core.append_message(session_id=target, role=op[2], content=op[3] or "hello")
            elif kind == "turn":
                responses += 1
                core.record_turn(
                    response_id=f"resp-{responses}", session_id=target, conversation=f"slug{op[2]}"
                )
            elif kind == "compress":
                ids.append(core.rotate_for_compression(session_id=target).new_session_id)
            elif kind == "branch":
                ids.append(core.branch_session(session_id=target).new_session_id)
            elif kind == "delegate":
                config = {"_delegate_from": target}
                ids.append(
                    core.create_session(
                        source="tool", parent_session_id=target, model_config=config
                    ).session_id
                )
            elif kind == "child":
                ids.append(core.create_session(source="cli", parent_session_id=target).session_id)
            elif kind == "end":
                ended_at = time.time() - op[2] * DAY - 60
                with clock.use_clock(lambda at=ended_at: at):
                    core.end_session(session_id=target, end_reason="user_exit")
            elif kind == "undo":
                core.undo_last_turn(session_id=target)
            elif kind == "retry":
                core.retry_last_turn(session_id=target)
        except core.StoreError:
            pass
    return ids


def store_snapshot() -> dict:
    """Sessions, messages (ids, content, order, owners), conversations, responses, FTS rows."""
    snapshot = {
        "sessions": db.fetchall("SELECT * FROM sessions ORDER BY id"),
        "messages": db.fetchall("SELECT * FROM messages ORDER BY id"),
        "conversations": db.fetchall(
            "SELECT * FROM conversations ORDER BY name", alias=responses_alias()
        ),
        "responses": db.fetchall(
            "SELECT * FROM responses ORDER BY response_id", alias=responses_alias()
        ),
    }
    if db.vendor() == "sqlite":
        snapshot["fts"] = db.fetchall("SELECT rowid, content FROM messages_fts ORDER BY rowid")
    return snapshot


# ---------------------------------------------------------------------------
# The closure a cascade takes, computed again from the rows


def _rows() -> dict[str, dict]:
    found = {}
    for sid, parent, config, end_reason, ended_at in db.fetchall(
        "SELECT id, parent_session_id, model_config, end_reason, ended_at FROM sessions"
    ):
        markers = json.loads(config) if config else {}
        found[sid] = {
            "parent": parent,
            "delegate": bool(markers.get("_delegate_from")),
            "branch": bool(markers.get("_branched_from")),
            "continued": bool(markers.get("_continued_from")),
            "end_reason": end_reason,
            "live": ended_at is None,
        }
    return found


def _kind(rows: dict[str, dict], child: str) -> str:
    row = rows[child]
    if row["delegate"]:
        return "delegate"
    if row["branch"]:
        return "branch"
    return "compression" if rows[row["parent"]]["end_reason"] == "compression" else "child"


def _continues(rows: dict[str, dict], child: str) -> bool:
    parent = rows[child]["parent"]
    return parent in rows and _kind(rows, child) == "compression"


def _goes_with(rows: dict[str, dict], starts, followed: set[str]) -> set[str]:
    """The starts and, recursively, their children linked by a followed kind."""
    children: dict[str, list[str]] = {}
    for sid, row in rows.items():
        if row["parent"] in rows:
            children.setdefault(row["parent"], []).append(sid)
    found = set(starts)
    stack = list(starts)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found and _kind(rows, child) in followed:
                found.add(child)
                stack.append(child)
    return found


def _kept_whole(rows: dict[str, dict], going: set[str]) -> set[str]:
    """``going`` less every conversation of it (sessions linked within it by a compression,
    delegate or slug-continuation link, or one API conversation) that goes on in a session
    not in it (a child, a live parent, a session of its API conversation): a bulk delete
    never splits one."""

    def together(child: str) -> bool:
        kind = _kind(rows, child)
        return kind in ("compression", "delegate") or (kind == "child" and rows[child]["continued"])

    links = [
        (sid, row["parent"]) for sid, row in rows.items() if row["parent"] in rows and together(sid)
    ]
    stays = {parent for child, parent in links if parent in going and child not in going}
    # A continuation never goes without the session it continues (attack round 45, T/U),
    # and a delegate whose parent is live and not taken goes on there too.
    stays |= {
        child
        for child, parent in links
        if child in going
        and parent not in going
        and (rows[parent]["live"] or _kind(rows, child) != "delegate")
    }
    # One /v1/responses conversation (a slug's sessions, a response chain: the evidence
    # fork detection reads) with a session not taken keeps the rest of it.
    groups = [group for group in forks.api_conversations() if group & going]
    grown = True
    while grown:
        grown = False
        for group in groups:
            inside = (group & going) - stays
            if inside and group & (set(rows) - (going - stays)):
                stays |= inside
                grown = True
        for child, parent in links:
            if child in going and parent in going and (child in stays) != (parent in stays):
                stays |= {child, parent}
                grown = True
    return going - stays


def expected_cascade(pick: str, include_branches: bool) -> set[str]:
    rows = _rows()
    start = pick
    seen = {start}
    while _continues(rows, start) and rows[start]["parent"] not in seen:
        start = rows[start]["parent"]
        seen.add(start)
    followed = {"compression", "delegate"} | ({"branch"} if include_branches else set())
    return _goes_with(rows, [start], followed)


def _kept_rows(gone: set[str]) -> dict:
    """What must survive a delete of ``gone`` untouched: other sessions' messages, their FTS rows."""
    kept = {
        "messages": [
            row for row in db.fetchall("SELECT * FROM messages ORDER BY id") if row[1] not in gone
        ],
    }
    if db.vendor() == "sqlite":
        ids = {row[1] for row in kept["messages"]}
        kept["fts"] = [
            row
            for row in db.fetchall("SELECT rowid, content FROM messages_fts ORDER BY rowid")
            if row[0] in ids
        ]
    return kept


def _orphans() -> list:
    return db.fetchall("SELECT id FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)")


# ---------------------------------------------------------------------------
# Properties


@SETTINGS
@given(operations=lineages, picks=st.lists(node, min_size=2, max_size=4), data=st.data())
def test_it_undoes_any_merge_exactly(operations, picks, data):
    ids = build(operations)
    chosen = list(dict.fromkeys(ids[p % len(ids)] for p in picks))
    assume(len(chosen) >= 2)
    target = data.draw(st.sampled_from([None, *chosen]))
    before = store_snapshot()
    try:
        plan = core.plan_merge(session_ids=chosen, target_id=target)
        result = core.merge_sessions(
            session_ids=chosen, target_id=target, expected_fingerprint=plan.fingerprint
        )
    except core.StoreError as refused:
        event(f"merge refused: {refused.__class__.__name__}")
        assert store_snapshot() == before  # a refused merge changes nothing
        return
    event("merged")
    assert core.active_transcript(session_id=result.target_id) is not None
    core.unmerge(merge_id=result.merge_id)
    assert store_snapshot() == before


@SETTINGS
@given(operations=lineages, pick=node, include_branches=st.booleans())
def test_it_plans_and_deletes_exactly_the_cascade_closure(operations, pick, include_branches):
    ids = build(operations)
    picked = ids[pick % len(ids)]
    expected = expected_cascade(picked, include_branches)
    event(f"cascade of {min(len(expected), 4)}+ sessions")
    everything = session_ids()
    survivors = _kept_rows(expected)
    plan = core.plan_cascade_delete(session_ids=[picked], include_branches=include_branches)
    assert set(plan.session_ids) == expected
    assert len(plan.session_ids) == len(expected)
    order = list(plan.session_ids)
    rows = _rows()
    for sid in order:  # children before their parents
        parent = rows[sid]["parent"]
        if parent in expected:
            assert order.index(sid) < order.index(parent)
    kept = {child for child, _relation in plan.kept_children}
    assert kept == {
        sid for sid, row in rows.items() if row["parent"] in expected and sid not in expected
    }
    core.execute_cascade_delete(
        session_ids=[picked],
        include_branches=include_branches,
        expected_fingerprint=plan.fingerprint,
        actor="hypothesis",
        reason="property",
    )
    assert session_ids() == everything - expected
    assert _kept_rows(expected) == survivors
    assert _orphans() == []
    left = _rows()
    assert all(left[sid]["parent"] is None for sid in kept)


history = st.lists(
    st.tuples(
        st.sampled_from(["user", "assistant", "tool"]),
        st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=6),
    ),
    max_size=12,
)


@SETTINGS
@given(messages=history, undos=st.integers(1, 4))
def test_it_redoes_exactly_what_undos_took_away(messages, undos):
    """k undos then k redos: each redo gives back the transcript before the matching undo."""
    _wipe()
    session_id = core.create_session(source="cli").session_id
    for role, content in messages:
        core.append_message(session_id=session_id, role=role, content=content or "hello")
    seen = [core.active_transcript(session_id=session_id)]
    for _ in range(undos):
        try:
            core.undo_last_turn(session_id=session_id)
        except core.NothingToUndo:
            assert core.active_transcript(session_id=session_id) == seen[-1]
            break
        now = core.active_transcript(session_id=session_id)
        assert now != seen[-1] and now == seen[-1][: len(now)]
        seen.append(now)
    event(f"{len(seen) - 1} undos")
    while len(seen) > 1:
        seen.pop()
        core.redo_turn(session_id=session_id)
        assert core.active_transcript(session_id=session_id) == seen[-1]


def _contents(session_id: str) -> list[str]:
    return [m["content"] for m in core.active_transcript(session_id=session_id)]


def test_it_redoes_a_retried_turn_without_the_reply_the_retry_dropped():
    session_id = core.create_session(source="cli").session_id
    core.append_message(session_id=session_id, role="user", content="question")
    core.append_message(session_id=session_id, role="assistant", content="first reply")
    core.retry_last_turn(session_id=session_id)
    core.append_message(session_id=session_id, role="assistant", content="second reply")
    core.undo_last_turn(session_id=session_id)
    core.redo_turn(session_id=session_id)
    assert _contents(session_id) == ["question", "second reply"]


def test_it_redoes_the_turn_undone_last():
    session_id = core.create_session(source="cli").session_id
    core.append_message(session_id=session_id, role="user", content="one")
    core.append_message(session_id=session_id, role="assistant", content="reply one")
    core.undo_last_turn(session_id=session_id)
    core.append_message(session_id=session_id, role="user", content="two")
    core.undo_last_turn(session_id=session_id)
    core.redo_turn(session_id=session_id)
    assert _contents(session_id) == ["two"]


presets = st.one_of(
    st.tuples(st.just("ended_older_than"), st.integers(0, 60)),
    st.tuples(st.just("empty"), st.none()),
    st.tuples(st.just("by_source"), st.sampled_from(SOURCES)),
)


def expected_preset(preset: str, argument) -> set[str]:
    now = time.time()
    matching = set()
    for sid, source, ended_at, messages in db.fetchall(
        "SELECT s.id, s.source, s.ended_at, "
        "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) FROM sessions s"
    ):
        if preset == "ended_older_than":
            hit = ended_at is not None and ended_at < now - argument * DAY
        elif preset == "empty":
            hit = messages == 0 and ended_at is not None  # a live empty session: by id only
        else:
            hit = source == argument
        if hit:
            matching.add(sid)
    return matching


@SETTINGS
@given(operations=lineages, preset=presets, include_live=st.booleans())
# A continuation that matches, of a root that does not (the model once let it go alone).
@example(
    operations=[("root", "cli", 0), ("compress", 1), ("end", 3, 1)],
    preset=("ended_older_than", 1),
    include_live=False,
)
def test_it_bulk_deletes_exactly_the_matching_set(operations, preset, include_live):
    build(operations)
    name, argument = preset
    matching = expected_preset(name, argument)
    rows = _rows()
    going = _goes_with(rows, matching, {"compression", "delegate"})
    going = _kept_whole(
        rows, going if include_live else {sid for sid in going if not rows[sid]["live"]}
    )
    everything = session_ids()
    survivors = _kept_rows(going)
    selected = core.preset_session_ids(
        preset=name,
        days=argument if name == "ended_older_than" else None,
        source=argument if name == "by_source" else None,
    )
    assert set(selected) == matching
    preview = core.preview_bulk_delete(session_ids=selected, include_live=include_live)
    assert set(preview.session_ids) == going
    event(f"bulk delete of {min(len(going), 4)}+ sessions")
    if not going:
        return
    job_id = jobs.create_bulk_delete_job(
        session_ids=selected, include_live=include_live, actor="hypothesis", reason="property"
    )
    progress = jobs.run_job(job_id=job_id, batch_sessions=3)
    assert progress.state == "done"
    assert progress.deleted == len(going)
    assert session_ids() == everything - going
    assert _kept_rows(going) == survivors
    assert _orphans() == []
