"""Store scenarios and snapshots several test modules share: one home for each.

Test modules import builders from here (or ``tests/helpers.py`` for row readers), never a
private builder from another test module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from django.core.cache import cache

from sessions_admin import core
from sessions_admin.core import db, faults
from sessions_admin.core.clock import use_clock
from sessions_admin.core.slug_history import TABLE as SLUG_HISTORY_TABLE
from sessions_admin.ledger import actions
from sessions_admin.ledger.models import TrashEntry
from sessions_admin.routers import responses_alias

# What a snapshot can hold, by name: the query and the database it runs on.
SNAPSHOT_QUERIES: dict[str, tuple[str, str]] = {
    "sessions": ("SELECT * FROM sessions ORDER BY id", "store"),
    "messages": ("SELECT * FROM messages ORDER BY id", "store"),
    "conversations": ("SELECT * FROM conversations ORDER BY name", "responses"),
    "responses": ("SELECT * FROM responses ORDER BY response_id", "responses"),
    "merges": ("SELECT id, undone_at FROM sessions_admin_merges ORDER BY id", "store"),
    "fts": ("SELECT rowid, content FROM messages_fts ORDER BY rowid", "store"),
}


def store_snapshot(*parts: str) -> dict:
    """The named parts of the store (default: sessions, messages, conversations), to compare
    before and after an action. ``fts`` is SQLite's index only (skipped on PostgreSQL)."""
    snapshot = {}
    for part in parts or ("sessions", "messages", "conversations"):
        if part == "fts" and db.vendor() != "sqlite":
            continue
        sql, database = SNAPSHOT_QUERIES[part]
        alias = responses_alias() if database == "responses" else None
        snapshot[part] = db.fetchall(sql, alias=alias) if alias else db.fetchall(sql)
    return snapshot


def forked_conversation(
    slug: str = "sidekick-v",
    *,
    title: str | None = None,
    started_at: float = 1000.0,
    question: str = "question {n}",
    answer: str = "answer {n}",
    response_id: str = "resp-{slug}-{n}",
    with_usage: bool = False,
) -> list[str]:
    """Three cold-start forks of one slug (the runtime lost the slug twice), oldest first.

    The middle fork has an undone turn and the last one a delegate child; the first two
    ended accidentally (``lru_evict``), the last is live.
    """
    ids = []
    for n in range(3):
        sid = core.create_session(
            source="api_server",
            user_id="u1",
            started_at=started_at + n,
            title=title if n == 0 else None,
        ).session_id
        core.append_messages(
            session_id=sid,
            messages=[
                {"role": "user", "content": question.format(n=n)},
                {"role": "assistant", "content": answer.format(n=n)},
            ],
        )
        if with_usage:
            core.add_usage(session_id=sid, input_tokens=10 * (n + 1), output_tokens=n, cost_usd=0.1)
        core.record_turn(
            response_id=response_id.format(slug=slug, n=n), session_id=sid, conversation=slug
        )
        ids.append(sid)
    core.undo_last_turn(session_id=ids[1])
    core.create_session(
        source="tool", parent_session_id=ids[2], model_config={"_delegate_from": ids[2]}
    )
    for sid in ids[:2]:
        core.end_session(session_id=sid, end_reason="lru_evict")
    return ids


def two_turns(
    key: str = "cli:plan",
    *,
    source: str = "cli",
    texts: tuple[str, str, str, str] = ("q1", "a1", "q2", "a2"),
    **fields,
) -> tuple[str, list[int]]:
    """A live keyed session with two user/assistant turns: (its id, the four message ids)."""
    ref = core.create_session(source=source, session_key=key, **fields).session_id
    ids = core.append_messages(
        session_id=ref,
        messages=[
            {"role": role, "content": text}
            for role, text in zip(("user", "assistant", "user", "assistant"), texts, strict=True)
        ],
    ).message_ids
    return ref, list(ids)


def store_forked_conversation(slug: str = "sidekick-m") -> list[str]:
    """The store tests' forks: short texts, usage on each, early start times."""
    return forked_conversation(
        slug,
        started_at=100.0,
        question="q{n}",
        answer="a{n}",
        response_id="r{n}",
        with_usage=True,
    )


def cascade_lineage() -> tuple[str, str, str, str, str, str, str]:
    """A conversation: root -> compression -> tip, a delegate (with its own delegate), a branch,
    an untyped child of the tip, and an unrelated session. Returns
    (root, delegate, grand_delegate, tip, branch, child, other)."""
    root = core.create_session(source="cli", session_key="cli:d", started_at=1.0).session_id
    core.append_messages(
        session_id=root,
        messages=[
            {"role": "user", "content": "alpha needle"},
            {"role": "assistant", "content": "beta"},
        ],
    )
    delegate = core.create_session(
        source="tool", parent_session_id=root, model_config={"_delegate_from": root}
    ).session_id
    core.append_message(session_id=delegate, role="assistant", content="sub-agent work")
    grand_delegate = core.create_session(
        source="tool", parent_session_id=delegate, model_config={"_delegate_from": delegate}
    ).session_id
    tip = core.rotate_for_compression(session_id=root, summary="summary").new_session_id
    core.record_turn(response_id="resp-d", session_id=tip, conversation="slug-d")
    branch = core.branch_session(session_id=tip).new_session_id
    child = core.create_session(source="cli", parent_session_id=tip).session_id
    other = core.create_session(source="cli", session_key="cli:other").session_id
    core.append_message(session_id=other, role="user", content="unrelated needle")
    return root, delegate, grand_delegate, tip, branch, child, other


def refund_lineage() -> dict[str, str]:
    """A support chat compressed once (with a delegate of its root), a turn on its tip's slug and
    a branch of the tip: {"root", "tip", "branch"}."""
    root = core.create_session(source="telegram", title="Refund for order #8812").session_id
    core.append_messages(
        session_id=root,
        messages=[
            {"role": "user", "content": "I was charged twice"},
            {"role": "assistant", "content": "Let me look"},
        ],
    )
    core.create_session(
        source="tool", parent_session_id=root, model_config={"_delegate_from": root}
    )
    tip = core.rotate_for_compression(session_id=root, summary="double charge").new_session_id
    core.append_message(session_id=tip, role="user", content="thanks")
    core.record_turn(response_id="resp-1", session_id=tip, conversation="refund-8812")
    branch = core.branch_session(session_id=tip, title="What-if").new_session_id
    return {"root": root, "tip": tip, "branch": branch}


@contextlib.contextmanager
def foreign_keys_off() -> Iterator[None]:
    """What a runtime without foreign keys can leave behind."""
    if db.vendor() == "sqlite":
        db.execute("PRAGMA foreign_keys = OFF")
        try:
            yield
        finally:
            db.execute("PRAGMA foreign_keys = ON")
    else:
        db.execute("SET session_replication_role = replica")
        try:
            yield
        finally:
            db.execute("SET session_replication_role = DEFAULT")


class DiskFull(Exception):
    """The store's disk filled between two batches of a cascade."""


def linked_conversation() -> dict[str, str]:
    """A compression chain root -> tip, a delegate with its own delegate, a branch and a child of
    the tip, the child compressed once more with a delegate of its own: eight linked sessions."""
    root, delegate, grand, tip, branch, child, _other = cascade_lineage()
    core.append_message(session_id=child, role="user", content="more")
    last = core.rotate_for_compression(session_id=child, summary="again").new_session_id
    late_delegate = core.create_session(
        source="tool", parent_session_id=last, model_config={"_delegate_from": last}
    ).session_id
    return {
        "root": root,
        "delegate": delegate,
        "grand": grand,
        "tip": tip,
        "branch": branch,
        "child": child,
        "last": last,
        "late_delegate": late_delegate,
    }


def cascade_split_by_a_fault(monkeypatch, start: str) -> tuple[str, str]:
    """A cascade of ``start``'s conversation the store's disk stopped after its first batch,
    then run again to the end: its two trash operations' first entries (older, newer)."""
    real_checkpoint = faults.checkpoint
    hits = []

    def disk_fills(name: str) -> None:
        real_checkpoint(name)
        if name == "cascade.between_batches":
            hits.append(name)
            if len(hits) == 1:
                raise DiskFull("database or disk is full")

    monkeypatch.setattr(faults, "checkpoint", disk_fills)
    plan = core.plan_cascade_delete(session_ids=[start], include_branches=True)
    # The core says what the batch before the fault committed (DeletePartlyApplied).
    with pytest.raises(core.DeletePartlyApplied):
        core.execute_cascade_delete(
            session_ids=[start],
            include_branches=True,
            expected_fingerprint=plan.fingerprint,
            actor="ada",
            reason="customer asked",
        )
    monkeypatch.setattr(faults, "checkpoint", real_checkpoint)
    assert db.fetchone("SELECT 1 FROM sessions WHERE id = %s", [start])  # children go first
    again = core.plan_cascade_delete(session_ids=[start], include_branches=True)
    core.execute_cascade_delete(
        session_ids=[start],
        include_branches=True,
        expected_fingerprint=again.fingerprint,
        actor="ada",
        reason="customer asked, again",
    )
    operations = list(
        dict.fromkeys(TrashEntry.objects.order_by("pk").values_list("operation", flat=True))
    )
    assert len(operations) == 2
    older, newer = (
        TrashEntry.objects.filter(operation=o).order_by("pk").first().pk for o in operations
    )
    return older, newer


# --- autouse fixtures: a test module that imports one turns it on for its tests -------------


@pytest.fixture(autouse=True)
def fresh_cache():
    """The console caches fork ids, dropdown choices and the overview's counts for a few
    seconds: the test starts and leaves with an empty cache."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def erasures_run_inline(monkeypatch):
    """The test runs queued erasure requests itself (no background thread): the request page's
    call (``actions.start_erasures``) and ``request_erasure``'s own, in the module it lives in."""
    monkeypatch.setattr(actions, "start_erasures", lambda: None)
    monkeypatch.setattr(actions.erasure, "start_erasures", lambda: None)


@pytest.fixture(autouse=True)
def empty_slug_history():
    """The slug-history table lives outside the test transaction: emptied after the test."""
    yield
    db.execute(f"DELETE FROM {SLUG_HISTORY_TABLE}")


# --- sessions -------------------------------------------------------------------------------


def cold_start_fork(slug: str, forks: int = 2, *, said: bool = True) -> list[str]:
    """What a runtime without slug continuity writes: a new unlinked session per cold start,
    each with a turn of ``slug`` (and, if ``said``, one user message)."""
    ids = []
    for n in range(forks):
        sid = core.create_session(
            source="api_server", user_id="u1", started_at=1000.0 + n
        ).session_id
        if said:
            core.append_message(session_id=sid, role="user", content=f"turn {n}")
        core.record_turn(response_id=f"{slug}-r{n}", session_id=sid, conversation=slug)
        ids.append(sid)
    return ids


def old_sessions(
    n: int,
    *,
    messages: int | None = None,
    sources: tuple[str, ...] = ("cli",),
    ended_at: float | None = None,
) -> list[str]:
    """``n`` sessions the user ended, started at 1000, 1001, ...: session i comes from
    ``sources[i % len(sources)]`` and holds ``messages`` user messages (default i % 3 + 1, so
    batches differ in size); ``ended_at`` backdates their end."""
    ids = []
    for i in range(n):
        sid = core.create_session(
            source=sources[i % len(sources)], started_at=1000.0 + i
        ).session_id
        count = i % 3 + 1 if messages is None else messages
        if count:
            core.append_messages(
                session_id=sid,
                messages=[{"role": "user", "content": f"m{i}-{k}"} for k in range(count)],
            )
        core.end_session(session_id=sid, end_reason="user_exit")
        ids.append(sid)
    if ended_at is not None:
        db.execute(
            f"UPDATE sessions SET ended_at = %s WHERE id IN ({db.placeholders(ids)})",
            [ended_at, *ids],
        )
    return ids


def dangling_compression() -> str:
    """A session ended by compression whose continuation was never written."""
    sid = core.create_session(source="cli").session_id
    core.append_message(session_id=sid, role="user", content="hi")
    core.end_session(session_id=sid, end_reason="compression")
    return sid


def api_turn(slug: str, response_id: str, at: float, *, end: bool) -> str:
    """One /v1/responses turn of ``slug`` at ``at`` (its session ended after it if ``end``)."""
    with use_clock(lambda: at):
        sid = core.resolve_conversation(conversation=slug, source="api_server").session_id
        core.append_messages(
            session_id=sid,
            messages=[
                {"role": "user", "content": f"q {response_id}", "timestamp": at},
                {"role": "assistant", "content": f"a {response_id}", "timestamp": at},
            ],
        )
        core.record_turn(response_id=response_id, session_id=sid, conversation=slug)
        if end:
            core.end_session(session_id=sid, end_reason="idle_timeout")
    return sid


def cascade_into_trash(session_id: str, *, reason: str = "ticket 5") -> int:
    """End ``session_id`` (user_exit) and cascade-delete it into the trash, as confirmed by an
    operator; the trash entry holding it."""
    core.end_session(session_id=session_id, end_reason="user_exit")
    plan = core.plan_cascade_delete(session_ids=[session_id])
    actions.cascade_delete(
        actor=None,
        session_ids=[session_id],
        include_branches=False,
        expected_fingerprint=plan.fingerprint,
        reason=reason,
    )
    return TrashEntry.objects.get(sessions__session_id=session_id).pk
