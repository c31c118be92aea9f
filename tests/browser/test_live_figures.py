"""The overview's cached figures in a real browser: they say how old they are, and an
operator's change elsewhere shows when the overview comes back into view, without a reload."""

from __future__ import annotations

import re

from django.contrib.auth.models import User
from playwright.sync_api import expect

from sessions_admin import core
from sessions_admin.ledger import actions
from tests.builders import (
    forked_conversation,
    fresh_cache,  # noqa: F401 - an autouse fixture
)
from tests.helpers import session


def test_a_merge_in_another_tab_shows_on_the_overview_when_it_is_back_in_view(signed_in_page):
    ids = forked_conversation()
    page = signed_in_page("support")
    page.goto("/")
    forks = page.locator('#health-panel a[data-check="forks"] .check-count')
    expect(forks).to_have_text("3")
    ages = page.locator("time[data-ago]")
    expect(ages).to_have_count(2)
    for age in ages.all():
        assert re.fullmatch(r"just now|\d+ s ago", age.inner_text())
    panel_at = page.locator("#health-panel time[data-ago]").get_attribute("datetime")
    page.evaluate("window.sameDocument = true")

    # Another tab merges the forks (the same audited door the merge view uses).
    plan = core.plan_merge(session_ids=ids)
    actions.merge(
        actor=User.objects.get(username="operator"),
        session_ids=ids,
        target_id=None,
        expected_fingerprint=plan.fingerprint,
        reason="one customer",
    )
    assert [session(sid)["end_reason"] for sid in ids[1:]] == ["merged", "merged"]

    # The operator comes back to this tab.
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")

    expect(forks).to_have_text("0")
    expect(page.locator("#overview .by-status tr", has_text="merged into")).to_contain_text("2")
    assert page.locator("#health-panel time[data-ago]").get_attribute("datetime") > panel_at
    assert page.evaluate("window.sameDocument") is True  # swapped in by htmx, not reloaded
    assert page.script_errors == []
