"""Egresses and their identity: a proxy URL (credentials included) shown by a stable id.

An egress's identity is its full URL, credentials included: two gateway entries that
differ only in their username (sticky sessions) are two egresses. It is shown
everywhere (logs, stats, status, the frontier, outcomes) by :func:`egress_id`:
``host:port`` for a proxy without credentials, ``host:port~HASH`` with them, where
``HASH`` is a short salted PBKDF2 digest of the URL (stable across workers and
restarts, never the password, and slow to test guesses against). ``direct`` (no proxy)
is an egress too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from scrapy_scale.errors import ScaleError
from scrapy_scale.redact import redact_url

DIRECT = "direct"
#: schemes Scrapy's download handlers can send through (SOCKS needs a handler Scrapy lacks)
SCHEMES = ("http", "https")
_SALT = b"scrapy-scale egress id"
_ROUNDS = 20_000


class EgressURLError(ScaleError, ValueError):
    """A proxy URL that cannot be an egress; the message never holds its password."""


@dataclass(frozen=True)
class Egress:
    id: str
    #: the full proxy URL (credentials included); None for ``direct``
    url: str | None
    group: str | None = None

    @property
    def direct(self) -> bool:
        return self.url is None

    @property
    def proxy_url(self) -> str | None:
        """The URL without credentials (what goes into ``meta["proxy"]``)."""
        if self.url is None:
            return None
        u = urlsplit(self.url)
        return f"{u.scheme}://{u.hostname}:{u.port}"

    @property
    def credentials(self) -> tuple[str, str] | None:
        if self.url is None:
            return None
        u = urlsplit(self.url)
        if u.username is None:
            return None
        return unquote(u.username), unquote(u.password or "")

    def __repr__(self) -> str:  # never the password, whatever prints it
        return f"Egress({self.id!r}, group={self.group!r})"


def egress_id(url: str) -> str:
    """The stable, credential-free id of a proxy URL (see the module doc)."""
    u = urlsplit(url)
    base = f"{u.hostname}:{u.port}"
    if u.scheme != "http":
        base = f"{u.scheme}://{base}"
    if u.username is None and u.password is None:
        return base
    digest = hashlib.pbkdf2_hmac("sha256", url.encode(), _SALT, _ROUNDS).hex()[:8]
    return f"{base}~{digest}"


def parse_egress(value: Any, group: str | None = None) -> Egress:
    """One egress from a proxy URL or ``direct``; :class:`EgressURLError` when malformed."""
    if not isinstance(value, str) or not value.strip():
        raise EgressURLError(f"expected a proxy URL or {DIRECT!r}, got {type(value).__name__}")
    text = value.strip()
    if text == DIRECT:
        return Egress(DIRECT, None, group)
    shown = redact_url(text)
    if "://" not in text:
        raise EgressURLError(f"{shown!r} is not a proxy URL (scheme://host:port)")
    try:
        u = urlsplit(text)
        port = u.port
    except ValueError as e:
        raise EgressURLError(f"{shown!r}: {e}") from None
    if u.scheme not in SCHEMES:
        hint = " (Scrapy's download handlers cannot send through SOCKS)" if u.scheme.startswith("socks") else ""
        raise EgressURLError(f"{shown!r}: unsupported proxy scheme {u.scheme!r}{hint}; use {', '.join(SCHEMES)}")
    if not u.hostname:
        raise EgressURLError(f"{shown!r}: no host")
    if port is None:
        raise EgressURLError(f"{shown!r}: no port")
    if u.path not in ("", "/") or u.query or u.fragment:
        raise EgressURLError(f"{shown!r}: a proxy URL has no path, query or fragment")
    url = text.rstrip("/")
    return Egress(egress_id(url), url, group)


def parse_egresses(value: Any) -> list[Egress]:
    """A list of URLs, or a dict of named groups of them, as egresses (in order, no duplicates)."""
    out: list[Egress] = []
    if isinstance(value, Mapping):
        for name, members in value.items():
            if not isinstance(members, list | tuple):
                raise EgressURLError(f"group {name!r}: expected a list of proxy URLs")
            if not members:
                raise EgressURLError(f"group {name!r} is empty")
            out += [parse_egress(m, str(name)) for m in members]
    elif isinstance(value, list | tuple):
        out = [parse_egress(m) for m in value]
    else:
        raise EgressURLError("expected a list of proxy URLs or a dict of named groups of them")
    return _unique(out)


def parse_lines(text: str) -> list[Egress]:
    """Egresses of a file: one URL a line; blank lines and ``#`` comments skipped."""
    urls = [line.strip() for line in text.splitlines()]
    out = []
    for n, url in enumerate(urls, 1):
        if url and not url.startswith("#"):
            try:
                out.append(parse_egress(url))
            except EgressURLError as e:
                raise EgressURLError(f"line {n}: {e}") from None
    return _unique(out)


def _unique(egresses: Iterable[Egress]) -> list[Egress]:
    seen: dict[str, Egress] = {}
    for e in egresses:
        seen.setdefault(e.id, e)
    return list(seen.values())
