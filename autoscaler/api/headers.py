"""Headers a browser obeys, on every answer: no page of ours inside another site's frame (clickjacking: the status
page, its sign-in answer), no answer sniffed into another type, and no authenticated answer kept by a cache (a
shared proxy's, or the browser's disk on an operator's laptop)."""
from __future__ import annotations

from flask import Response, g

ALWAYS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",  # older browsers; CSP's frame-ancestors supersedes it where both are understood
    "Content-Security-Policy": "frame-ancestors 'none'",
}


def browser_headers(resp: Response) -> Response:
    """Flask ``after_request``: the headers above, and ``Cache-Control: no-store`` once a credential was accepted
    (``require_auth`` set ``g.principal``, also when auth is disabled); the open probes keep their own."""
    present = {name.lower() for name in resp.headers.keys()}  # one pass, not one scan of the headers per name
    resp.headers.extend([(name, value) for name, value in ALWAYS.items() if name.lower() not in present])
    if "principal" in g:
        resp.headers["Cache-Control"] = "no-store"
    return resp
