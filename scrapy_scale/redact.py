"""Credentials out of URLs before they reach a log line, a stat, an error or a report.

One place for every component: ``redact_url`` for a URL, ``redact_text`` for a message
that may contain URLs (a setting's bad value, an error from a client library).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit

#: query parameters that may carry secrets in a URL (redis-py reads ``?password=``)
SECRET_WORDS = ("pass", "secret", "token", "key", "cred")

_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def is_secret(key: str) -> bool:
    return any(w in key.lower() for w in SECRET_WORDS)


def redact_url(url: str, userinfo: str = "") -> str:
    """``url`` without credentials: user and password replaced by ``userinfo`` (dropped by
    default; e.g. ``"***@"`` to show there were some), secret-looking query values masked."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    _, at, hostport = parts.netloc.rpartition("@")
    netloc = (userinfo if at else "") + hostport
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(is_secret(k) for k, _ in pairs):
            query = urlencode([(k, "***" if is_secret(k) else v) for k, v in pairs], safe="*/:")
    # built by hand: urlunsplit would turn sqlite:////abs/path into sqlite://abs/path
    if "://" not in url:
        return url.rpartition("@")[2]
    return (
        f"{parts.scheme}://{netloc}{parts.path}"
        + (f"?{query}" if query else "")
        + (f"#{parts.fragment}" if parts.fragment else "")
    )


def redact_text(text: str) -> str:
    """``text`` with every URL in it redacted (:func:`redact_url`)."""
    return _URL_RE.sub(lambda m: redact_url(m.group()), text)
