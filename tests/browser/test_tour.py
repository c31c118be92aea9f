"""The README's tour: screenshots of the main pages, taken from a seeded demo store.

The pictures in README.md's "Tour" section are the files this test writes, so they show
the console as it is. Each page must load (200, its heading visible) before it is taken.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

from django.contrib.auth.models import User
from playwright.sync_api import expect

from sessions_admin import core
from sessions_admin.core import db
from sessions_admin.demo import seeder
from sessions_admin.ledger import actions

TOUR = Path(__file__).resolve().parents[2] / "docs" / "tour"
VIEWPORT = {"width": 1280, "height": 800}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# A screenshot of one viewport; more would bloat the repository.
MAX_BYTES = 400_000


def seed_small_store() -> None:
    """The demo's showcase (lineages, resets, branches, delegates, API forks) and a few chats."""
    asked = seeder.request(sessions=40, long_transcript=0)
    seeder.seed(asked, stdout=io.StringIO())


def three_segment_chain() -> str:
    """The tip of a compression chain: the showcase's telegram chat, compressed twice."""
    (tip,) = db.fetchall(
        """
        SELECT child.id FROM sessions child
        JOIN sessions parent ON child.parent_session_id = parent.id
        JOIN sessions root ON parent.parent_session_id = root.id
        WHERE child.source = 'telegram' AND root.parent_session_id IS NULL
        ORDER BY child.started_at DESC LIMIT 1
        """
    )[0]
    return tip


def a_cli_branch() -> str:
    """The root of the showcase's CLI session that was branched."""
    (root,) = db.fetchall(
        """
        SELECT parent.id FROM sessions child
        JOIN sessions parent ON child.parent_session_id = parent.id
        WHERE parent.source = 'cli' AND parent.parent_session_id IS NULL
        ORDER BY parent.started_at LIMIT 1
        """
    )[0]
    return root


def operator_history(actor: User) -> None:
    """What a support day leaves in the trash and the audit log: a delete, a reset, a merge."""
    doomed = a_cli_branch()
    plan = core.plan_cascade_delete(session_ids=[doomed], include_branches=True)
    actions.cascade_delete(
        actor=actor,
        session_ids=[doomed],
        include_branches=True,
        expected_fingerprint=plan.fingerprint,
        reason="customer asked to be forgotten (ticket 4127)",
    )
    (key,) = db.fetchall(
        "SELECT session_key FROM sessions WHERE source = 'discord' AND ended_at IS NULL"
        " AND session_key IS NOT NULL ORDER BY started_at DESC LIMIT 1"
    )[0]
    actions.reset(actor=actor, session_key=key, reason="stuck on an old instruction")
    # Merge the last fork group; the others stay for the forks page and the preview.
    group = core.find_fork_groups()[-1]
    merge_plan = core.plan_merge(session_ids=list(group.session_ids))
    actions.merge(
        actor=actor,
        session_ids=list(group.session_ids),
        target_id=None,
        expected_fingerprint=merge_plan.fingerprint,
        reason="cold-start forks of one slug",
        differences={d.label: list(d.values) for d in merge_plan.differences} or None,
    )


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_the_tour_screenshots(signed_in_page):
    seed_small_store()
    page = signed_in_page("admin")
    actor = User.objects.get(username="operator")
    chain_tip = three_segment_chain()
    operator_history(actor)
    assert core.find_fork_groups(), "the seed has no fork group left to preview"
    page.set_viewport_size(VIEWPORT)
    TOUR.mkdir(parents=True, exist_ok=True)
    taken: list[Path] = []

    def visit(name: str, url: str, heading: str, ready: str | None = None) -> None:
        response = page.goto(url)
        assert response is not None and response.status == 200, f"{url}: {response}"
        expect(page.get_by_role("heading", level=1)).to_be_visible()
        expect(page.get_by_role("heading", level=1)).to_contain_text(heading)
        if ready:
            expect(page.locator(ready).first).to_be_visible()
        path = TOUR / f"{name}.png"
        page.screenshot(path=str(path))
        taken.append(path)

    visit("overview", "/", "Overview")
    visit("sessions", "/sessions/", "Sessions", "table tbody tr")
    # A session's heading is its title, else "Session <id>".
    visit("session", f"/sessions/{chain_tip}/", "", "#lineage .lineage-tree")
    expect(page.locator("#lineage-heading")).to_contain_text("3 sessions")
    visit("forks", "/forks/", "Forks", "article.fork-group")
    preview = page.locator("article.fork-group a.preview-merge").first.get_attribute("href")
    visit("merge-preview", preview, "Merge preview", ".merged-transcript")
    visit("cascade-delete", f"/sessions/{chain_tip}/delete/", "Delete a conversation", ".group")
    visit("trash", "/trash/", "Trash", "li.entry")
    visit("audit", "/audit/", "Audit log")
    expect(page.get_by_text("ticket 4127").first).to_be_visible()

    for path in taken:
        assert png_size(path) == (VIEWPORT["width"], VIEWPORT["height"]), path.name
        assert path.stat().st_size < MAX_BYTES, f"{path.name}: {path.stat().st_size} bytes"
    assert page.script_errors == []
