"""Browser page-load failures (scrapy-playwright) as failure classes.

A page load through Chromium fails with Playwright's ``Error`` whose message names the
network error (``net::ERR_PROXY_CONNECTION_FAILED at http://...``), or with its
``TimeoutError``. Scrapy's exception classes never appear, so the default rules would
call them ``fatal`` and lose the page. Here, checked after your ``SCALE_FAILURE_RULES``
and before the defaults: a proxy that cannot be reached or refuses the tunnel is
``egress_failed`` (retried through another egress; the egress pool counts it against
the proxy: starting a browser context does not connect to it, the page load does); an
empty, malformed or cut answer, a reset or a timeout is ``transient`` (through an egress,
the pool blames it when the site answers through another egress, and the retry avoids
it). Playwright is not imported: the error is recognised by its module and message.
"""

from __future__ import annotations

import re

from scrapy_scale.outcomes.model import FailureClass

C = FailureClass

#: Chromium's net errors that say the proxy failed
EGRESS_CODES = frozenset(
    {
        "ERR_PROXY_CONNECTION_FAILED",
        "ERR_TUNNEL_CONNECTION_FAILED",
        "ERR_PROXY_AUTH_UNSUPPORTED",
        "ERR_PROXY_AUTH_REQUESTED",
        "ERR_PROXY_CERTIFICATE_INVALID",
        "ERR_NO_SUPPORTED_PROXIES",
        "ERR_MANDATORY_PROXY_CONFIGURATION_FAILED",
        "ERR_PROXY_HTTP_1_1_REQUIRED",
        "ERR_SOCKS_CONNECTION_FAILED",
    }
)
#: Chromium's net errors of a passing failure (the site's or, through an egress, maybe the egress's)
TRANSIENT_CODES = frozenset(
    {
        "ERR_EMPTY_RESPONSE",
        "ERR_INVALID_HTTP_RESPONSE",
        "ERR_INVALID_RESPONSE",
        "ERR_RESPONSE_HEADERS_TRUNCATED",
        "ERR_CONTENT_LENGTH_MISMATCH",
        "ERR_INCOMPLETE_CHUNKED_ENCODING",
        "ERR_CONNECTION_CLOSED",
        "ERR_CONNECTION_RESET",
        "ERR_CONNECTION_ABORTED",
        "ERR_CONNECTION_REFUSED",
        "ERR_CONNECTION_FAILED",
        "ERR_CONNECTION_TIMED_OUT",
        "ERR_TIMED_OUT",
        "ERR_NETWORK_CHANGED",
        "ERR_ADDRESS_UNREACHABLE",
        "ERR_NAME_NOT_RESOLVED",
        "ERR_HTTP2_PROTOCOL_ERROR",
        # the navigation was cut (a timeout, a context closed under it): nothing says it must fail again
        "ERR_ABORTED",
    }
)
_NET = re.compile(r"net::(ERR_[A-Z0-9_]+)")


def browser_verdict(exc: BaseException) -> tuple[FailureClass, str] | None:
    """(class, reason) of a Playwright page-load error, None for any other exception."""
    if not type(exc).__module__.startswith("playwright"):
        return None
    if type(exc).__name__ == "TimeoutError":
        return C.TRANSIENT, "browser timeout"
    m = _NET.search(str(exc))
    if m is None:
        return None
    code = m.group(1)
    if code in EGRESS_CODES:
        return C.EGRESS_FAILED, f"browser {code}"
    if code in TRANSIENT_CODES:
        return C.TRANSIENT, f"browser {code}"
    return None
