"""axe-core finds no violation of the WCAG 2.1 A and AA rules on any console page (issue 29).

Every page a role may open (the URL resolver's, through tests/console/urlmap and the
access table, so a new page cannot slip past), signed out and as each role, at a
desktop and a phone width, after its htmx fragments have arrived, with every disclosure
(<details>) opened so that the forms they hold are checked too.

axe's script is put in every document by Playwright's ``add_init_script`` (the DevTools
protocol's Page.addScriptToEvaluateOnNewDocument) and run with ``page.evaluate``
(Runtime.evaluate), which the page's Content-Security-Policy does not govern: the
policy stays as strict as in production (no inline script, no eval) and the ``page``
fixture still fails the test on any violation the browser reports.
"""

from __future__ import annotations

import json
import time

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.contrib.auth.models import User
from playwright.sync_api import Error as PlaywrightError

from sessions_admin import core
from sessions_admin.signin.roles import ROLES, assign_role
from tests.browser.conftest import HTMX_SETTLED, PASSWORD
from tests.console import urlmap
from tests.console.test_access import ACCESS, ANYONE

WCAG_21_A_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
AXE_OPTIONS = {
    "runOnly": {"type": "tag", "values": WCAG_21_A_AA},
    "resultTypes": ["violations"],
}
WIDTHS = {"desktop": (1280, 800), "phone": (390, 844)}


pytestmark = pytest.mark.usefixtures("no_worker")


def _rank(role: str) -> int:
    return ROLES.index(role)


def _pages_for(role: str | None, seeded: urlmap.Seeded) -> list[str]:
    """The URLs of every GET route the visitor may open, plus a few states of them."""
    urls = []
    for name, (get, _post) in sorted(ACCESS.items()):
        if get == ANYONE:
            pass
        elif get not in ROLES or role is None or _rank(role) < _rank(get):
            continue  # not this visitor's (or no operator's: a POST-only or token-only URL)
        urls.append(urlmap.route(name).url(seeded.url_args))
    if role is not None:
        urls += [
            "/sessions/?scope=all&q=question",
            f"/sessions/{seeded.root}/",
            f"/sessions/{seeded.branch}/",  # live, with what scrolls
            f"/sessions/{seeded.tip}/?q=question",
            f"/merge/preview/?ids={seeded.fork_a}&ids={seeded.fork_b}",
            "/no-such-page/",
        ]
        if role != "admin":
            urls.append("/trash/")  # the page that refuses them
        else:
            urls.append("/bulk-delete/?preset=empty")
    return urls


def _violations(page) -> list[str]:
    # axe.run as axe_playwright_python's Axe.run calls it, axe-core being in every document
    # already (``add_init_script`` below), or sent now to a page of another test.
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(Axe().axe_script)
    results = page.evaluate(f"axe.run({json.dumps(AXE_OPTIONS)})")["violations"]
    found = []
    for violation in results:
        for node in violation["nodes"]:
            found.append(
                f"{violation['id']}: {node['target']} {node['html'][:160]} "
                f"({node.get('failureSummary', '').splitlines()[-1:]})"
            )
    return found


DOWNLOAD = object()


def _goto(page, url: str):
    """``page.goto``'s response, or ``DOWNLOAD`` for a URL the browser downloads instead of
    opening (asked once per visitor: a separate GET of every URL first cost more)."""
    try:
        return page.goto(url)
    except PlaywrightError as error:
        if "Download is starting" not in error.message:
            raise
        return DOWNLOAD


def _sign_in(page, role: str) -> None:
    user = User.objects.create_user(f"axe-{role}", password=PASSWORD)
    assign_role(user, role)
    page.goto("/login/")
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url)


def test_no_page_violates_wcag_21_a_or_aa(page, seeded):
    # What scrolls inside a page: a long tool output and a wide Markdown table.
    core.append_messages(
        session_id=seeded.branch,
        messages=[
            {"role": "tool", "content": "\n".join(f"line {n} " + "x" * 200 for n in range(80))},
            {
                "role": "assistant",
                "content": "| "
                + " | ".join(f"column {n}" for n in range(30))
                + " |\n|"
                + "---|" * 30
                + "\n| "
                + " | ".join("a long cell value" for _ in range(30))
                + " |",
            },
            {"role": "user", "content": "a question whose turn is undone"},
            {"role": "assistant", "content": "an answer undone with it"},
        ],
    )
    # Undone messages are shown set apart; faded, they failed the contrast rule (attack 41).
    core.undo_last_turn(session_id=seeded.branch)
    # axe-core (570 kB) goes into every document the page opens, sent to the browser once
    # rather than with each check.
    page.context.add_init_script(Axe().axe_script)
    started = time.monotonic()
    found: dict[str, list[str]] = {}
    checked = 0

    def check(where: str) -> None:
        nonlocal checked
        # What disclosures hide is checked too (axe skips hidden content).
        page.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")
        checked += 1
        for violation in _violations(page):
            found.setdefault(violation, []).append(where)

    for role in (None, *ROLES):
        if role is not None:
            page.context.clear_cookies()
            page.set_viewport_size({"width": 1280, "height": 800})
            _sign_in(page, role)
        urls = _pages_for(role, seeded)
        not_pages: set[str] = set()  # downloads (CSV, JSON): no document to check
        for width_name, (width, height) in WIDTHS.items():
            page.set_viewport_size({"width": width, "height": height})
            seen: set[str] = set()
            for url in urls:
                if url in not_pages:
                    continue
                response = _goto(page, url)
                if response is DOWNLOAD or "text/html" not in response.headers.get(
                    "content-type", ""
                ):
                    not_pages.add(url)
                    continue
                page.wait_for_function(HTMX_SETTLED)
                last_page = page.url
                if page.url in seen or page.locator("body > main").count() != 1:
                    continue  # a redirect to a page checked already, or a lone htmx fragment
                seen.add(page.url)
                check(f"{role or 'signed out'} {width_name} {url}")
            if role is None:  # the sign-in form refusing a wrong password
                if page.url != last_page:  # the last URL was a download: back to the last page
                    page.goto(last_page)
                page.fill("input[name=username]", "nobody")
                page.fill("input[name=password]", "wrong")
                page.click("button[type=submit]")
                page.locator(".signin-error").wait_for()
                check(f"signed out {width_name} failed sign-in")
    # What it costs CI (shown with -s): 138 pages took 199-287 s here, on 2 cores shared by a
    # load of 12-18; the browser tests of a quiet machine run several times faster.
    print(f"axe: {checked} pages checked in {time.monotonic() - started:.0f} s")
    report = "\n".join(f"{v}\n    on {', '.join(where[:4])}" for v, where in found.items())
    assert not found, f"{len(found)} axe violations:\n{report}"
    assert checked > 100, checked  # every page was reached, not just the sign-in form
    assert page.script_errors == []
