"""Message text as Markdown, rendered to HTML that is safe to put in a page.

Message text is untrusted (a user, a model, a tool wrote it). It is parsed as
CommonMark with markdown-it-py, raw HTML off (a ``<script>`` in a message is
text, shown as typed), then the result goes through nh3 with an allowlist: a
parser bug or an option turned on later cannot let a tag, an attribute or a
URL scheme through that the list does not name. No ``<img>`` ever (a picture
fetches a URL when the page opens): image syntax becomes a link to the image,
its alt text as the words. Headings are demoted to h4-h6, below the page's own.

Most messages are plain prose without a Markdown character; ``render`` turns
those into escaped paragraphs without the parser (the session page renders a
hundred messages a chunk; bench/run.py).
"""

from __future__ import annotations

import functools
import html
import re

import nh3
from markdown_it import MarkdownIt
from markdown_it.token import Token

ALLOWED_TAGS = frozenset(
    {
        "p", "br", "hr", "em", "strong", "del", "s", "code", "pre", "blockquote",
        "ul", "ol", "li", "h4", "h5", "h6",
        "table", "thead", "tbody", "tr", "th", "td",
        "a",
    }
)  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}}
URL_SCHEMES = frozenset({"http", "https", "mailto"})
LINK_REL = "nofollow noopener noreferrer"

# A message's h1 is a page's h4: the page's own headings stay above the message's.
DEMOTED = {"h1": "h4", "h2": "h5", "h3": "h6", "h4": "h6", "h5": "h6", "h6": "h6"}

# Characters that can start Markdown anywhere in a line (emphasis, code, links, autolinks,
# entities, escapes, strikethrough, tables), and what can start it at a line's beginning
# (lists, headings, quotes, rules, setext underlines, indented code).
_INLINE_SYNTAX = re.compile(r"[`*_\[\]<>&\\~|]")
_LINE_SYNTAX = re.compile(
    r"^(?: {4}|\t| {0,3}(?:>|[-+*](?:[ \t]|$)|--|=+[ \t]*$|#{1,6}(?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)))",
    re.MULTILINE,
)
_BLANK_LINES = re.compile(r"\n[ \t]*\n[\s]*")


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "breaks": True, "linkify": False})
    md.enable(["table", "strikethrough"])
    md.renderer.rules["image"] = _image_as_link
    return md


def _image_as_link(tokens: list[Token], idx: int, options, env) -> str:
    """``![alt](src)`` as ``<a href="src">alt</a>`` (nh3 then drops a scheme it does not allow)."""
    token = tokens[idx]
    alt = html.escape(token.content or "image")
    src = token.attrGet("src")
    if not src:
        return alt
    return f'<a href="{html.escape(str(src), quote=True)}">{alt}</a>'


_MD = _parser()


def is_plain(text: str) -> bool:
    """Text in which no Markdown can start: its rendering is its escaped paragraphs."""
    return _INLINE_SYNTAX.search(text) is None and _LINE_SYNTAX.search(text) is None


def _plain_html(text: str) -> str:
    """What the parser makes of plain text: paragraphs at blank lines, a <br> at each newline."""
    out = []
    for paragraph in _BLANK_LINES.split(text.strip()):
        lines = [line.strip() for line in paragraph.split("\n")]
        out.append(
            "<p>" + "<br>\n".join(html.escape(line, quote=False) for line in lines if line) + "</p>"
        )
    return "\n".join(p for p in out if p != "<p></p>")


def _demote_headings(tokens: list[Token]) -> None:
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = DEMOTED.get(token.tag, token.tag)


def sanitise(markup: str) -> str:
    return nh3.clean(
        markup,
        tags=set(ALLOWED_TAGS),
        attributes={tag: set(names) for tag, names in ALLOWED_ATTRIBUTES.items()},
        url_schemes=set(URL_SCHEMES),
        link_rel=LINK_REL,
        strip_comments=True,
    )


# Rendered texts kept (per process): a chunk is re-rendered on every "Load more", refresh
# after an action and live update, and parsing is most of a Markdown-rich chunk's time
# (bench/run.py). Longer texts are rendered each time, so the cache stays a few megabytes.
CACHED_TEXTS = 1024
CACHED_LENGTH = 4000


def render_full(text: str) -> str:
    """Through the parser and the sanitiser, whatever the text (``render`` skips both when it can)."""
    if len(text) <= CACHED_LENGTH:
        return _render_cached(text)
    return _render(text)


@functools.lru_cache(maxsize=CACHED_TEXTS)
def _render_cached(text: str) -> str:
    return _render(text)


def _render(text: str) -> str:
    env: dict = {}
    tokens = _MD.parse(text, env)
    _demote_headings(tokens)
    return sanitise(_MD.renderer.render(tokens, _MD.options, env))


def render(text: str | None) -> str:
    """Message text as safe HTML: block elements (paragraphs, lists, tables, code), no wrapper."""
    if not text:
        return ""
    if is_plain(text):
        return _plain_html(text)
    return render_full(text)
