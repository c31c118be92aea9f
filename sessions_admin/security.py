"""Response headers Django has no setting for: the Content-Security-Policy.

Every page is our own templates plus our own static files (htmx is vendored), so
the policy allows scripts, styles, images and requests from this origin only.
No 'unsafe-inline' and no 'unsafe-eval': templates carry no inline script,
event-handler attribute or style attribute, and htmx is told not to evaluate
anything (``allowEval``/``allowScriptTags`` off, its indicator styles in our
stylesheet; see the htmx-config meta tag in templates/base.html). A payload that
slipped past escaping could therefore still not run.
"""

from __future__ import annotations

CONTENT_SECURITY_POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self'",
    "font-src": "'self'",
    "connect-src": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
    "base-uri": "'none'",
    "object-src": "'none'",
}


def content_security_policy() -> str:
    return "; ".join(f"{name} {value}" for name, value in CONTENT_SECURITY_POLICY.items())


class ContentSecurityPolicyMiddleware:
    """Sets the policy on every response that does not carry one already."""

    def __init__(self, get_response):
        self.get_response = get_response
        self.header = content_security_policy()

    def __call__(self, request):
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = self.header
        return response
