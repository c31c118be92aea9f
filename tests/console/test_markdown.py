"""Message text rendered as Markdown on the session page: safe, and with a raw toggle."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from sessions_admin import core
from sessions_admin.console import markdown
from tests.console.pages import detail
from tests.console.test_detail import HX, link, message_ids, tag_block

RICH = (
    "Run `make test` first.\n\n"
    "```python\nprint('<b>hi</b>')\n```\n\n"
    "| name | count |\n|------|------:|\n| a | 1 |\n\n"
    "# A heading\n\n- one\n- **two**"
)

HOSTILE = (
    "<script>alert(1)</script>\n\n"
    "[click](javascript:alert(1)) [data](data:text/html;base64,PHNjcmlwdD4=)"
    " [vb](vbscript:msgbox(1))\n\n"
    '<img src=x onerror="alert(1)">\n\n'
    "![pic](https://example.com/x.png) ![inline](data:image/png;base64,AAAA)\n\n"
    "<div><b>unbalanced <i>tags\n\n"
    '<a href="javascript:alert(1)">raw link</a>\n\n'
    "<https://example.com/ok> <javascript:alert(1)>\n\n"
    '[t](https://example.com "a\\" onmouseover=\\"alert(1)")'
)


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, "", ""))
        self.found.extend((tag, name, value or "") for name, value in attrs)


def elements_in(markup: str) -> list[tuple[str, str, str]]:
    """(tag, attribute, value) of every element a browser would build from ``markup``."""
    parser = _Elements()
    parser.feed(markup)
    return parser.found


def text_blocks(body: str, message_id: int) -> str:
    return tag_block(body, f'id="m{message_id}"', "article")


def test_tables_fences_and_inline_code_render_as_elements(signed_in):
    ref = core.create_session(source="cli").session_id
    (message,) = core.append_message(session_id=ref, role="assistant", content=RICH).message_ids
    body = signed_in("viewer").get(detail(ref)).content.decode()
    article = text_blocks(body, message)
    assert '<div class="text md">' in article
    assert "<p>Run <code>make test</code> first.</p>" in article
    assert "<pre><code>print(&#39;&lt;b&gt;hi&lt;/b&gt;&#39;)" in article or (
        "<pre><code>print('&lt;b&gt;hi&lt;/b&gt;')" in article
    )
    assert re.search(r"<table>\s*<thead>\s*<tr>\s*<th>name</th>", article)
    assert "<td>1</td>" in article
    # A message's heading sits below the page's own (h2 transcript heading).
    assert "<h4>A heading</h4>" in article and "<h1>" not in article
    assert "<li><strong>two</strong></li>" in article
    # Nothing the page's CSP would report: no inline style (alignment columns make one).
    assert "style=" not in article


def test_hostile_markdown_stays_inert(signed_in):
    ref = core.create_session(source="cli").session_id
    (message,) = core.append_message(session_id=ref, role="user", content=HOSTILE).message_ids
    core.append_message(
        session_id=ref, role="assistant", content="ok", reasoning="<script>alert(2)</script>"
    )
    body = signed_in("viewer").get(detail(ref)).content.decode()
    article = text_blocks(body, message)
    assert "<script" not in article and "<img" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in article
    assert "&lt;img src=x onerror=" in article
    assert "&lt;div&gt;&lt;b&gt;unbalanced &lt;i&gt;tags" in article
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in body
    rendered = tag_block(article, '<div class="text md">', "div")  # the message's own markup
    elements = elements_in(rendered)[3:]  # after the wrapper's own (div, class)
    hrefs = [value for tag, name, value in elements if name == "href"]
    assert "https://example.com/ok" in hrefs, "an https link stays a link"
    for href in hrefs:
        assert href.startswith("https://"), href
    # Only the attributes the sanitiser allows, whatever the text smuggled into a value.
    assert {name for _tag, name, _value in elements} <= {"", "href", "rel", "title"}
    assert {tag for tag, _name, _value in elements} <= {"p", "a", "br"}
    # Image syntax is a link to the image (never an <img>), with rel set on every link.
    assert '<a href="https://example.com/x.png" rel="nofollow noopener noreferrer">pic</a>' in (
        article
    )
    for tag, name, value in elements:
        if tag == "a" and name == "rel":
            assert value == "nofollow noopener noreferrer"


def test_the_raw_toggle_shows_the_source_and_is_carried_by_every_link(signed_in):
    ref = core.create_session(source="cli").session_id
    ids = list(
        core.append_messages(
            session_id=ref,
            messages=[
                {"role": "user" if i % 2 == 0 else "assistant", "content": f"**m{i}**"}
                for i in range(150)
            ],
        ).message_ids
    )
    client = signed_in("viewer")
    body = client.get(detail(ref)).content.decode()
    assert "<strong>m0</strong>" in text_blocks(body, ids[0])
    toggle = link(body, "toggle text-toggle", "href")
    assert toggle == detail(ref) + "?text=raw"
    assert link(body, "toggle text-toggle", "hx-get") == toggle

    raw = client.get(toggle).content.decode()
    assert '<div class="text">**m0**</div>' in text_blocks(raw, ids[0])
    assert "<strong>m" not in raw and 'class="text md"' not in raw
    assert link(raw, "toggle text-toggle", "href") == detail(ref)
    # The other toggle keeps the raw view; load-more and the refresh URL carry it.
    assert link(raw, "toggle", "href") == detail(ref) + "?inactive=hide&text=raw"
    more = link(raw, "load-more", "hx-get")
    assert more.endswith("&text=raw")
    assert f'hx-get="{detail(ref)}?text=raw"' in raw  # the transcript's refresh
    later = client.get(more, headers=HX).content.decode()
    assert message_ids(later) == ids[100:]
    assert '<div class="text">**m149**</div>' in later
    # htmx: just the transcript section.
    fragment = client.get(toggle, headers=HX).content.decode()
    assert "<html" not in fragment and '<div class="text">**m0**</div>' in fragment


@pytest.mark.parametrize(
    "text",
    [
        "Hello world",
        "Hello\nworld\n\nsecond paragraph.  \n  indented a little ",
        "one\n\n\n\ntwo",
        "Quotes \"and\" 'apostrophes', dashes - and well-known words; 3.5 = ok?",
        "\n\n  \n",
        "#1 Show me the pods\n+1 from me\n-x is a flag\n1.5 kg",
    ],
)
def test_the_fast_path_renders_plain_text_as_the_parser_does(text):
    assert markdown.is_plain(text)
    assert markdown.render(text) == markdown.render_full(text).strip()


@pytest.mark.parametrize(
    "text",
    [
        "a *b*",
        "- item",
        "1. item",
        "2) item",
        "# h",
        "> q",
        "    code",
        "a | b",
        "x &amp; y",
        "a\n===",
    ],
)
def test_text_with_markdown_syntax_takes_the_parser(text):
    assert not markdown.is_plain(text)
