"""Lineage helpers: parent, children, root, whole tree with edge kinds, compression tip."""

from __future__ import annotations

from sessions_admin import core
from sessions_admin.core import db


def _conversation():
    root = core.create_session(source="telegram", session_key="tg:L").session_id
    core.append_message(session_id=root, role="user", content="hi")
    delegate = core.create_session(
        source="tool", parent_session_id=root, model_config={"_delegate_from": root}
    ).session_id
    compressed = core.rotate_for_compression(session_id=root).new_session_id
    core.append_message(session_id=compressed, role="user", content="more")
    branch = core.branch_session(session_id=compressed).new_session_id
    reset = core.reset_session_key(session_key="tg:L").new_session_id
    return root, delegate, compressed, branch, reset


def test_parent_children_and_root():
    root, delegate, compressed, branch, reset = _conversation()
    assert core.parent_of(session_id=compressed) == root
    assert core.parent_of(session_id=root) is None
    assert set(core.children_of(session_id=root)) == {delegate, compressed}
    for member in (root, delegate, compressed, branch, reset):
        assert core.root_of(session_id=member) == root


def test_the_tree_labels_every_edge_and_marks_live_sessions():
    root, delegate, compressed, branch, reset = _conversation()
    tree = core.lineage_tree(session_id=branch)
    edges = {n.session_id: (n.lineage_parent_id, n.edge_kind) for n in tree}
    assert edges == {
        root: (None, None),
        delegate: (root, "delegate"),
        compressed: (root, "compression"),
        branch: (compressed, "branch"),
        reset: (branch, "reset"),
    }
    assert [n.session_id for n in tree if n.is_live] == [delegate, reset]
    # Depth-first: each node comes after its parent.
    order = [n.session_id for n in tree]
    for node in tree:
        if node.lineage_parent_id:
            assert order.index(node.lineage_parent_id) < order.index(node.session_id)


def test_a_cycle_written_by_a_broken_runtime_does_not_hang():
    a = core.create_session(source="cli").session_id
    b = core.create_session(source="cli", parent_session_id=a).session_id
    db.execute("UPDATE sessions SET parent_session_id = %s WHERE id = %s", [b, a])
    tree = core.lineage_tree(session_id=a)
    assert {n.session_id for n in tree} <= {a, b}
    assert core.root_of(session_id=a) in {a, b}


def test_a_compression_cycle_gives_each_segment_once_in_chain_order():
    a = core.create_session(source="cli").session_id
    b = core.rotate_for_compression(session_id=a).new_session_id
    c = core.rotate_for_compression(session_id=b).new_session_id
    # A broken runtime closes the loop: c ended by compression and continued by a.
    db.execute("UPDATE sessions SET end_reason = 'compression', ended_at = 1 WHERE id = %s", [c])
    db.execute("UPDATE sessions SET parent_session_id = %s WHERE id = %s", [c, a])
    for start in (a, b, c):
        chain = core.compression_chain(session_id=start)
        assert sorted(chain) == sorted([a, b, c])
        assert start in chain
        # Consecutive segments are parent and continuation, as the store links them.
        parents = dict(
            db.fetchall(
                "SELECT id, parent_session_id FROM sessions WHERE id IN (%s, %s, %s)", [a, b, c]
            )
        )
        assert all(
            parents[later] == earlier for earlier, later in zip(chain, chain[1:], strict=False)
        )


def test_the_tip_prefers_the_continuation_over_a_stale_sibling():
    root = core.create_session(source="cli").session_id
    tip = core.rotate_for_compression(session_id=root).new_session_id
    stale = core.create_session(source="cli", parent_session_id=root).session_id
    core.end_session(session_id=stale, end_reason="ws_orphan_reap")
    assert core.compression_tip(session_id=root) == tip


def test_roots_of_many_sessions_agrees_with_root_of_each():
    members = _conversation()
    loner = core.create_session(source="cli").session_id
    roots = core.lineage.roots_of([*members, loner])
    assert roots == {sid: core.root_of(session_id=sid) for sid in [*members, loner]}
    assert set(roots.values()) == {members[0], loner}


def _every_link_kind():
    """One child of each link kind, plus a slug continuation of a compression-ended parent."""
    root, delegate, compressed, branch, reset = _conversation()
    plain = core.create_session(source="cli", parent_session_id=compressed).session_id
    both = core.create_session(
        source="tool",
        parent_session_id=root,
        model_config={"_delegate_from": root, "_branched_from": root},
    ).session_id
    continued = core.create_session(
        source="api_server", parent_session_id=root, model_config={"_continued_from": root}
    ).session_id
    return root, [delegate, compressed, branch, plain, both, continued]


def test_the_sql_edge_rule_agrees_with_edge_kind():
    root, children = _every_link_kind()
    kinds = {
        row["id"]: row
        for row in db.fetchdicts(
            f"SELECT c.id, c.model_config, c.parent_session_id, p.end_reason AS parent_end, "
            f"{core.lineage.link_kind_sql('c', 'p')} AS link_kind, "
            f"CASE WHEN {core.lineage.is_branch_sql('c')} THEN 1 ELSE 0 END AS is_branch, "
            f"CASE WHEN {core.lineage.continues_parent_sql('c')} THEN 1 ELSE 0 END AS continues "
            "FROM sessions c JOIN sessions p ON p.id = c.parent_session_id"
        )
    }
    assert set(children) <= set(kinds)
    seen = set()
    for row in kinds.values():
        kind = core.lineage.edge_kind(row, row["parent_end"])
        # A slug continuation counts in SQL as what its parent's end makes it.
        if kind == "continuation":
            kind = "compression" if row["parent_end"] == "compression" else "child"
        assert row["link_kind"] == kind
        assert row["is_branch"] == (kind == "branch")
        assert row["continues"] == (kind in ("compression", "child"))
        seen.add(kind)
    assert seen == {"delegate", "branch", "compression", "child"}


def test_forward_chains_of_many_sessions_agree_with_the_chain_of_each():
    root, children = _every_link_kind()
    a = core.create_session(source="cli").session_id
    b = core.rotate_for_compression(session_id=a).new_session_id
    c = core.rotate_for_compression(session_id=b).new_session_id
    starts = [root, *children, a, b, c]
    chains = core.lineage.forward_chains(starts)
    assert chains == {sid: core.compression_chain(session_id=sid, upward=False) for sid in starts}
    assert chains[a] == [a, b, c]
    assert core.lineage.forward_chains(["no-such-session"]) == {}
