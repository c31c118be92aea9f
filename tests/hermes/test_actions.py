"""Every page and action of the dashboard on a store hermes-agent 0.19 wrote, checked by Hermes.

The store is built with Hermes's own ``SessionDB`` and ``ResponseStore``
(tests/hermes/scenario.py); our aliases are pointed at the files; the pages
are rendered and every action runs through the console's views and the
audited action layer; then Hermes reopens the files and must find: the same
conversations, clean ``integrity_check``/``foreign_key_check``, both FTS
indexes in step with the messages (merged messages found where they went,
deleted ones gone), counters counting active rows, unique titles.
"""

from __future__ import annotations

import os

from django.urls import reverse

from sessions_admin import core
from sessions_admin.ledger import actions, jobs
from sessions_admin.ledger.models import TrashEntry
from tests.hermes import scenario
from tests.hermes.checks import assert_healthy, search, transcripts
from tests.hermes.conftest import call, sql

ALL_SESSIONS = [
    "tg-old",
    "tg-new",
    "dc-a",
    "dc-b",
    "cli-1",
    "cli-2",
    "sub-1",
    "sub-2",
    "br-1",
    "tui-1",
    "api-a",
    "api-other",
    "api-b",
]


def _pages(built: scenario.Scenario) -> list[str]:
    urls = [
        reverse("home"),
        reverse("health_panel"),
        reverse("session_list"),
        reverse("session_list") + "?q=aardvark",
        reverse("session_list") + "?source=telegram",
        reverse("fork_list"),
        reverse("conversation_list"),
        reverse("audit_log"),
        reverse("trash"),
        reverse("bulk_delete"),
        reverse("job_list"),
        reverse("merge_preview") + "?ids=api-a&ids=api-b",
    ]
    for sid in built.message_ids:
        urls += [
            reverse("session_detail", args=[sid]),
            reverse("session_transcript", args=[sid]) + "?after=0:0",
            reverse("session_resume", args=[sid]),
            reverse("cascade_delete", args=[sid]),
        ]
    return urls


def test_every_page_renders_on_a_hermes_store(hermes, attach, admin, client):
    built = scenario.build(hermes)
    attach()
    for url in _pages(built):
        response = client.get(url)
        assert response.status_code == 200, url
    # Hermes's gateway reset is a boundary, not a fork; its accidental agent_close is one.
    groups = core.find_fork_groups()
    assert [(g.kind, g.session_ids) for g in groups] == [("session_key", ("dc-a", "dc-b"))]


def test_attaching_and_reading_leave_hermes_seeing_the_same_conversations(
    hermes, attach, admin, client
):
    built = scenario.build(hermes)
    before = transcripts(hermes, ALL_SESSIONS)
    attach()
    for url in _pages(built):
        client.get(url)
    assert transcripts(hermes, ALL_SESSIONS) == before
    assert_healthy(hermes)


def test_every_action_keeps_hermes_rules(hermes, attach, admin, client, no_worker):
    built = scenario.build(hermes)
    inode = os.stat(hermes.state).st_ino
    untouched = ["api-other"]
    before = transcripts(hermes, ALL_SESSIONS)
    attach()

    # Merge the accidental key fork through the console, as previewed.
    preview = client.get(reverse("merge_preview") + "?ids=dc-a&ids=dc-b")
    fingerprint = preview.context["plan"].fingerprint
    response = client.post(
        reverse("merge_execute"),
        {"ids": ["dc-a", "dc-b"], "fingerprint": fingerprint, "reason": "one chat"},
    )
    assert response.status_code == 302
    # Merge the /v1/responses cold-start fork the operator found (its evidence was evicted).
    plan = core.plan_merge(session_ids=["api-a", "api-b"])
    actions.merge(
        actor=admin,
        session_ids=["api-a", "api-b"],
        target_id="api-a",
        expected_fingerprint=plan.fingerprint,
    )
    health = assert_healthy(hermes, counted={"dc-a", "dc-b", "api-a", "api-b"})
    found = search(hermes, "dromedary", "capybara", "mongoose", "lemur")
    assert found == {
        "dromedary": {"dc-a"},
        "capybara": {"dc-a"},
        "mongoose": {"api-a"},
        "lemur": {"api-a"},
    }
    assert [m[0] for m in transcripts(hermes, ["api-a"])["api-a"]] == sorted(
        built.message_ids["api-a"] + built.message_ids["api-b"]
    )
    assert health["counters"]["api-b"] == (0, 0)

    # Undo, redo and retry on the live gateway session.
    for action in ("undo", "redo", "retry"):
        response = client.post(reverse(f"session_{action}", args=["tg-new"]), {"reason": action})
        assert response.status_code in (200, 302), action
    assert_healthy(hermes, counted={"tg-new"})
    assert [m[1] for m in transcripts(hermes, ["tg-new"])["tg-new"]] == ["user"]

    # Resume the reset session: it is live again, the key's live session switched away.
    response = client.post(reverse("session_resume", args=["tg-old"]), {"reason": "asked"})
    assert response.status_code == 302
    rows = hermes.one(
        sql(
            "SELECT id, ended_at IS NULL, end_reason FROM sessions WHERE id IN ('tg-old', 'tg-new') ORDER BY id"
        )
    )
    assert rows == [["tg-new", 0, "session_switch"], ["tg-old", 1, None]]

    # Reset the key: a fresh session linked by _reset_from.
    response = client.post(reverse("session_reset", args=["tg-old"]), {"reason": "fresh"})
    assert response.status_code in (200, 302)
    fresh = hermes.one(
        sql(
            "SELECT id FROM sessions WHERE session_key = ? AND ended_at IS NULL",
            scenario.KEY,
        )
    )
    assert len(fresh) == 1 and fresh[0][0] not in {"tg-old", "tg-new"}

    # Cascade delete the compression chain: delegates go with it, the branch is orphaned.
    plan_page = client.get(reverse("cascade_delete", args=["cli-2"]))
    delete_plan = plan_page.context["plan"]
    assert set(delete_plan.session_ids) == {"cli-1", "cli-2", "sub-1", "sub-2"}
    response = client.post(
        reverse("cascade_delete_confirm", args=["cli-2"]),
        {"fingerprint": delete_plan.fingerprint, "reason": "cleanup"},
    )
    assert response.status_code == 302
    assert_healthy(hermes)
    assert search(hermes, "elephant", "gazelle", "hyena", "ibis") == {
        "elephant": set(),
        "gazelle": set(),
        "hyena": set(),
        "ibis": {"br-1"},
    }
    assert hermes.one(sql("SELECT parent_session_id FROM sessions WHERE id = 'br-1'")) == [[None]]

    # A bulk delete job for the rewound session, run to completion.
    job_id = actions.start_bulk_delete(
        actor=admin, session_ids=["tui-1"], include_live=True, reason="old"
    )
    assert jobs.run_job(job_id=job_id).state == "done"
    assert_healthy(hermes)
    assert search(hermes, "jackal", "koala") == {"jackal": set(), "koala": set()}

    # Restore the cascade delete from the trash: Hermes finds it all again.
    entry = TrashEntry.objects.filter(sessions__session_id="cli-1").get()
    response = client.post(reverse("trash_restore", args=[entry.pk]), {"reason": "oops"})
    assert response.status_code == 302
    assert_healthy(hermes)
    assert search(hermes, "elephant", "gazelle", "hyena") == {
        "elephant": {"cli-1", "cli-2"},
        "gazelle": {"sub-1"},
        "hyena": {"sub-2"},
    }
    after_restore = transcripts(hermes, ["cli-1", "cli-2", "sub-1", "sub-2"])
    assert after_restore == {sid: before[sid] for sid in after_restore}
    assert hermes.one(sql("SELECT parent_session_id FROM sessions WHERE id = 'br-1'")) == [
        ["cli-2"]
    ]

    # Undo the console merge: dc-b's messages go back, Hermes's search follows them.
    merge_id = core.merges_of_session(session_id="dc-b")[0].merge_id
    response = client.post(reverse("merge_undo", args=[merge_id]), {"reason": "undo"})
    assert response.status_code == 302
    assert_healthy(hermes, counted={"dc-a", "dc-b"})
    assert search(hermes, "dromedary", "capybara") == {
        "dromedary": {"dc-b"},
        "capybara": {"dc-a"},
    }
    assert transcripts(hermes, ["dc-a", "dc-b"]) == {s: before[s] for s in ("dc-a", "dc-b")}

    # Nothing else moved; the file is the same file (Hermes checks its inode).
    assert transcripts(hermes, untouched) == {s: before[s] for s in untouched}
    assert os.stat(hermes.state).st_ino == inode
    titles = hermes.one(
        sql(
            "SELECT title, COUNT(*) FROM sessions WHERE title IS NOT NULL GROUP BY title HAVING COUNT(*) > 1"
        )
    )
    assert titles == []


def test_hermes_keeps_writing_after_our_actions(hermes, attach, admin):
    """The runtime's own writes still work on the sessions our actions left behind."""
    scenario.build(hermes)
    attach()
    core.reset_session_key(session_key=scenario.KEY)
    fresh = core.live_session_for_key(scenario.KEY)
    core.undo_last_turn(session_id="tui-1")
    results = hermes.run(
        [
            call("state.append_message", fresh, "user", "hello quokka"),
            call("state.append_message", "tui-1", "user", "third raccoon turn"),
            call("state.delete_session", "dc-b"),
            call("state.set_session_title", fresh, "Refactor plan"),
        ],
        strict=False,
    )
    assert isinstance(results[0], int) and isinstance(results[1], int)
    assert results[2] is True
    # Titles stay unique: Hermes refuses the taken title.
    assert "error" in results[3] and "already in use" in results[3]["error"]
    assert search(hermes, "quokka", "raccoon") == {"quokka": {fresh}, "raccoon": {"tui-1"}}
    assert_healthy(hermes)
