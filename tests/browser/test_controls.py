"""Small controls in a real browser: tap targets of at least 24x24 CSS px (WCAG 2.5.8), and a
button whose text stays readable on its own background."""

from __future__ import annotations

import pytest
from django.urls import reverse

from sessions_admin import core
from sessions_admin.core import erasure as erasure_core
from sessions_admin.ledger import actions, erasure
from tests.builders import erasures_run_inline  # noqa: F401 - an autouse fixture

MIN_TARGET = 24


@pytest.mark.parametrize("width", [1280, 390])
def test_copy_link_and_export_buttons_are_24_px_targets(signed_in_page, width):
    sid = core.create_session(source="cli").session_id
    core.append_message(session_id=sid, role="user", content="hello")
    page = signed_in_page("viewer")
    page.set_viewport_size({"width": width, "height": 800})
    page.goto(f"/sessions/{sid}/")
    controls = page.locator("button.copy-link, .exports a.button")
    controls.first.wait_for(state="visible")
    sizes = [controls.nth(n).bounding_box() for n in range(controls.count())]
    assert len(sizes) >= 5  # one Copy link, four exports
    small = [box for box in sizes if box["width"] < MIN_TARGET or box["height"] < MIN_TARGET]
    assert small == []


READ_COLOURS = """(el) => {
  const style = getComputedStyle(el);
  return [style.color, style.backgroundColor];
}"""


def test_the_receipt_download_button_is_not_blue_on_blue(signed_in_page):
    sid = core.create_session(source="cli", user_id="u-receipt").session_id
    core.append_message(session_id=sid, role="user", content="hello")
    plan = erasure.plan(erasure_core.Subject(user_id="u-receipt"))
    queued = actions.request_erasure(
        actor=None,
        subject=plan.store.subject,
        reference="DSR-colour",
        expected_fingerprint=plan.fingerprint,
    )
    actions.run_erasure(request_id=queued.pk)
    page = signed_in_page("admin")
    page.goto(reverse("erasure_detail", args=[queued.pk]))
    button = page.get_by_role("link", name="Download the receipt (JSON)")
    colour, background = button.evaluate(READ_COLOURS)
    assert colour != background
    assert colour == "rgb(255, 255, 255)"  # the filled button's white text
