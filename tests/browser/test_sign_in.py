from __future__ import annotations

from sessions_admin import core


def test_it_signs_in_and_shows_a_script_title_as_text(signed_in_page):
    core.create_session(source="telegram", title="<script>window.pwned = 1</script>")
    page = signed_in_page("viewer", "vera")
    assert "signed in as" in page.inner_text("header")
    assert page.get_by_text("<script>window.pwned = 1</script>").count() == 1
    assert page.evaluate("window.pwned") is None
    assert page.script_errors == []
