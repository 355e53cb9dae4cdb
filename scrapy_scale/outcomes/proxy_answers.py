"""Answers a proxy made for itself, told from the site's answers.

A proxy that cannot reach its upstream or the site answers the request itself: tinyproxy
``502 Unable to connect to upstream proxy`` (``500 Unable to connect`` for a site it
cannot reach), Squid's error pages (``X-Squid-Error: ERR_CONNECT_FAIL 111``), HAProxy's
``503 No server is available``, any proxy's ``Proxy-Status`` header with an ``error``
(RFC 9209). Without this, the status alone calls them the site's ``transient`` 5xx: the
egress is never blamed, every retry may go through it again and the site's pace pays.

:func:`proxy_answer` looks at an answer to a request that went through an egress (the
classifier asks only then) and returns a short reason when a proxy made it, else None.
Such answers are ``egress_failed`` with the blame ``egress_site``: against the egress
for that site, and everywhere once it answered so on several sites
(scrapy_scale/egress/suspects.py). Only answers of status 400 and up are looked at
(a proxy's own error pages; 407 is ``egress_failed`` by its status already).
Plain Python: headers and the start of the body, nothing else.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.http import Response

#: RFC 9209 error types (section 2.3): a proxy says it could not get an answer, or refused
PROXY_STATUS_ERRORS = frozenset(
    {
        "dns_timeout",
        "dns_error",
        "destination_not_found",
        "destination_unavailable",
        "destination_ip_prohibited",
        "destination_ip_unroutable",
        "connection_refused",
        "connection_terminated",
        "connection_timeout",
        "connection_read_timeout",
        "connection_write_timeout",
        "connection_limit_reached",
        "tls_protocol_error",
        "tls_certificate_error",
        "tls_alert_received",
        "http_request_error",
        "http_request_denied",
        "http_response_incomplete",
        "http_response_header_section_size",
        "http_response_header_size",
        "http_response_body_size",
        "http_response_trailer_section_size",
        "http_response_trailer_size",
        "http_response_transfer_coding",
        "http_response_content_coding",
        "http_response_timeout",
        "http_upgrade_failed",
        "http_protocol_error",
        "proxy_internal_response",
        "proxy_internal_error",
        "proxy_configuration_error",
        "proxy_loop_detected",
    }
)
#: ``error=<token>`` in a Proxy-Status member (a structured-field parameter)
_PS_ERROR = re.compile(r";\s*error\s*=\s*([a-z0-9_]+)", re.I)
#: a structured-field string (its text is no parameter)
_SF_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
#: the Squid error name (``ERR_CONNECT_FAIL 111``: the name, then errno)
_SQUID = re.compile(rb"^\s*(ERR_[A-Z0-9_]+)")
#: HAProxy's own error pages (its built-in bodies for 502, 503, 504)
_HAPROXY_BODIES = (
    (re.compile(rb"<h1>503 Service Unavailable</h1>\s*No server is available to handle this request"), "haproxy 503"),
    (re.compile(rb"<h1>502 Bad Gateway</h1>\s*The server returned an invalid or incomplete response"), "haproxy 502"),
    (re.compile(rb"<h1>504 Gateway Time-out</h1>\s*The server didn't respond in time"), "haproxy 504"),
)
#: the start of the body looked at (error pages are small)
BODY_PREFIX = 4096


def proxy_status_error(values: list[bytes]) -> str | None:
    """The first RFC 9209 error type named in ``Proxy-Status`` header values, or None
    (a member without ``error`` says the proxy forwarded the answer; an unknown type
    counts too: the proxy says it failed)."""
    for raw in values:
        text = raw.decode("latin-1")
        for member in _split_members(text):
            m = _PS_ERROR.search(_SF_STRING.sub('""', member))
            if m:
                err = m.group(1).lower()
                return err if err in PROXY_STATUS_ERRORS else "other"
    return None


def _split_members(text: str) -> list[str]:
    """The members of a structured-field list, commas inside quoted strings kept."""
    out: list[str] = []
    cur: list[str] = []
    quoted = escaped = False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\" and quoted:
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur))
    return out


def proxy_answer(response: Response) -> str | None:
    """A short reason when a proxy made this answer (status 400 and up), else None."""
    status = response.status
    if status < 400:
        return None
    headers = response.headers
    ps = headers.getlist(b"Proxy-Status")
    if ps and (err := proxy_status_error(ps)) is not None:
        return f"proxy answer: Proxy-Status {err}"
    squid = headers.get(b"X-Squid-Error")
    if squid is not None:
        m = _SQUID.match(squid)
        return f"proxy answer: squid {m.group(1).decode() if m else 'error'}"
    server = (headers.get(b"Server") or b"").lower()
    if server.startswith(b"tinyproxy/"):
        return f"proxy answer: tinyproxy {status}"
    if status in (502, 503, 504):
        body = response.body[:BODY_PREFIX]
        for sig, reason in _HAPROXY_BODIES:
            if sig.search(body):
                return f"proxy answer: {reason}"
    return None
