"""What every console response gets whatever its view: HEAD answered as GET, and no caching.

HEAD: Django's method decorators answer HEAD with 405 on GET-only views although HTTP defines
it as GET without the body; rather than trusting every view to say ``require_safe``, a HEAD is
handled here as its GET and the body dropped on the way out (a POST-only view still says 405).

Caching: signed-in pages show store content and carry CSRF tokens, so neither a proxy nor the
browser may keep them (Back after sign-out must ask the server). A response without its own
``Cache-Control`` gets ``no-store``; static files (WhiteNoise, listed before) keep theirs, and
htmx's history snapshots are off (``historyCacheSize: 0`` in templates/base.html)."""

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
