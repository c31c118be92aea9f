"""The support actions panel on a session page takes one line until it is opened, and
whatever the page scrolls to (a search hit, the find bar's next match) is never under it."""

from __future__ import annotations

from playwright.sync_api import expect

from sessions_admin import core
from tests.builders import fresh_cache  # noqa: F401 - an autouse fixture


def fully_visible_below(page, locator, panel) -> None:
    """``locator`` is wholly inside the viewport and below the sticky panel and find bar,
    the find bar itself below the panel (both stuck to the top)."""
    box = locator.bounding_box()
    covered = panel.bounding_box()
    bar = page.locator(".find-bar").bounding_box()
    assert box is not None and covered is not None and bar is not None
    height = page.viewport_size["height"]
    assert bar["y"] >= covered["y"] + covered["height"] - 0.5, (bar, covered)
    assert box["y"] >= bar["y"] + bar["height"] - 0.5, (box, bar)
    assert box["y"] + box["height"] <= height + 0.5, (box, height)


def conversation(hits: int = 6, between: int = 25) -> tuple[str, list[int]]:
    sid = core.create_session(source="cli", started_at=1_700_000_000.0).session_id
    ids = []
    for n in range(hits):
        ids += core.append_messages(
            session_id=sid, messages=[{"role": "user", "content": f"where is parcel {n}?"}]
        ).message_ids
        core.append_messages(
            session_id=sid,
            messages=[
                {"role": "assistant" if k % 2 else "user", "content": f"line {n}.{k}"}
                for k in range(between)
            ],
        )
    return sid, ids


def test_a_search_hit_opens_fully_visible_below_the_closed_panel(signed_in_page):
    sid, ids = conversation()
    page = signed_in_page("support")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"/sessions/{sid}/?around={ids[3]}&q=parcel#m{ids[3]}")
    panel = page.locator("#session-actions")
    expect(page.locator(f"#m{ids[3]} mark.find.current")).to_have_count(1)
    # One line until it is used: its actions are not on screen.
    box = panel.bounding_box()
    assert box is not None and box["height"] <= 60, box
    expect(panel.get_by_text("Undo last turn…")).to_be_hidden()
    assert page.evaluate("window.scrollY") > 300  # the page did scroll to the hit
    panel_box = panel.bounding_box()
    assert panel_box is not None and 0 <= panel_box["y"] < 50  # pinned to the top
    fully_visible_below(page, page.locator(f"#m{ids[3]}"), panel)
    expect(page.locator(".find-bar [data-find-count]")).to_have_text("match 4 of 6")

    next_button = page.locator(".find-bar").get_by_role("button", name="Next")
    next_button.click()
    expect(page.locator(f"#m{ids[4]} mark.find.current")).to_have_count(1)
    fully_visible_below(page, page.locator(f"#m{ids[4]} mark.find.current"), panel)

    # Opened, it shows its actions; what the find bar scrolls to stays clear of it.
    panel.get_by_text("Support actions", exact=True).click()
    expect(panel.get_by_text("Undo last turn…")).to_be_visible()
    next_button.click()
    expect(page.locator(f"#m{ids[5]} mark.find.current")).to_have_count(1)
    fully_visible_below(page, page.locator(f"#m{ids[5]} mark.find.current"), panel)
    assert page.script_errors == []


def test_the_link_from_an_ended_segment_opens_the_panel(signed_in_page):
    ref = core.create_session(source="cli", session_key="cli:panel").session_id
    core.append_messages(
        session_id=ref,
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    )
    tip = core.rotate_for_compression(session_id=ref).new_session_id
    page = signed_in_page("support")
    page.goto(f"/sessions/{ref}/")
    panel = page.locator("#session-actions")
    expect(panel.locator(".sa-live-link")).to_be_hidden()
    panel.get_by_text("Support actions", exact=True).click()
    panel.locator(".sa-live-link").click()
    page.wait_for_url(f"**/sessions/{tip}/#session-actions")
    expect(page.locator("#sa-undo summary")).to_be_visible()
    assert page.script_errors == []
