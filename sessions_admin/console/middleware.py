"""What every console response gets whatever its view: HEAD answered as GET, and no caching.

HEAD: every page is GET-only (``require_GET`` in the views), and Django's
method decorators answer HEAD with 405 although HTTP defines it as GET
without the body. Rather than trusting each view (present and future) to
say ``require_safe``, a HEAD request is handled here as the GET it stands
for, and the body is dropped on the way out. A view that only takes POST
still answers 405 (to the GET it was given), as it would to HEAD.

Caching: signed-in pages show store content (transcripts, user ids) and
carry CSRF tokens; nothing may keep them, neither a shared proxy nor the
browser's cache (Back after sign-out must ask the server, which asks for a
sign-in). Every response without a ``Cache-Control`` of its own gets
``no-store``; static files (WhiteNoise, listed before this middleware)
keep their own caching. htmx's history snapshots are switched off apart
(``historyCacheSize: 0`` in templates/base.html's htmx-config).
"""

from __future__ import annotations

from django.utils.cache import add_never_cache_headers


class PageResponseMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        is_head = request.method == "HEAD"
        if is_head:
            request.method = "GET"
        response = self.get_response(request)
        if not response.has_header("Cache-Control"):
            add_never_cache_headers(response)
        if is_head:
            request.method = "HEAD"
            _drop_body(response)
        return response


def _drop_body(response) -> None:
    """The headers of the GET answer without its body (and without producing a streamed one)."""
    if response.streaming:
        # Never run an export generator just to throw it away: the server's
        # response.close() still closes it (Django keeps its closer).
        response.streaming_content = []
        return
    if not response.has_header("Content-Length"):
        response["Content-Length"] = str(len(response.content))
    response.content = b""
