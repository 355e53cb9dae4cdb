"""Plain URL seeds as records, fast: exactly what :func:`codec.new_request` makes of a URL
string, without building a ``scrapy.Request`` (and its fingerprint cache, its
``to_dict`` and its JSON encoding) for each one.

``scrapy scale seed`` and the Redis feed (a message that is a JSON string) seed plain
URLs: GET, no headers, no body, the spider's default callback. Their record differs only
by the URL, so :class:`UrlSeeds` does per URL only what depends on it:

- the request URL: ``w3lib.url.safe_url_string`` (what ``Request.__init__`` does);
- the fingerprint: Scrapy's default (``RequestFingerprinter``): SHA1 of the sorted JSON of
  method, ``canonicalize_url`` of the URL, body and headers;
- the data: the record of a probe request (``codec.encode``) with the probe's URL
  replaced, so the format stays the codec's (same fields, same order, same escaping);
- the domain, and the checks ``codec.check_url`` makes, from a match of :data:`_PLAIN`.

A URL the shortcut cannot vouch for (not printable ASCII up to its host, brackets in the
host, a scheme the rules refuse...) goes through :func:`codec.new_request` itself, so it
is stored, or refused with the same error, as before. tests/crawl/test_frontier_seeding.py
compares both on tricky URLs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable
from json.encoder import encode_basestring_ascii
from urllib.parse import urlsplit

from scrapy import Request
from w3lib.url import canonicalize_url, safe_url_string

from scrapy_scale.frontier.records import codec
from scrapy_scale.frontier.store import NewRequest

#: a URL whose scheme and host urlsplit() reads as written: a scheme, "://", then a host
#: of printable ASCII without brackets, up to the end, a "/", "?" or "#"
_PLAIN = r"(?:{schemes})://([!-~]+?)(?:[/?#]|\Z)"
_HOST_CHARS = re.compile(r"[^\[\]/?#]*")
#: a URL that ``safe_url_string`` and ``canonicalize_url`` return as it is: a lower-case
#: scheme and host (DNS labels, the last one starting with a letter: no IP address; no
#: port, no user), and a path of unreserved characters in non-empty segments that do not
#: start with a dot; no query, no fragment. Checked against w3lib when UrlSeeds starts
_CANONICAL = (
    r"(?:{schemes})://((?:[a-z0-9](?:[a-z0-9-]{{0,61}}[a-z0-9])?\.)*[a-z](?:[a-z0-9-]{{0,61}}[a-z0-9])?)"
    r"(?:(?:/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)+/?|/)\Z"
)
#: URLs the shortcut takes (checked when UrlSeeds starts)
_CANONICAL_PROBES = (
    "http://a.test/",
    "https://shop1.example.com/item/1",
    "http://a-b.c9.test/x/y_z~1.html/",
    "https://www.example.co.uk/A/b.c/D-e_f~g",
)
#: what Scrapy's default fingerprinter hashes, around the canonical URL (json.dumps, sort_keys)
_FP_HEAD = '{"body": "", "headers": {}, "method": "GET", "url": '
_PROBE = "http://probe.scrapy-scale.invalid/p"


class UrlSeeds:
    """Records for plain URL seeds under ``rules``, with ``priority`` (None: the request's, 0)."""

    def __init__(self, rules: codec.RecordRules, priority: int | None = None):
        self.rules = rules
        self.priority = priority
        schemes = "|".join(re.escape(s) for s in sorted(rules.schemes))
        self._plain = re.compile(_PLAIN.format(schemes=schemes), re.ASCII | re.IGNORECASE)
        self._canonical = re.compile(_CANONICAL.format(schemes=schemes), re.ASCII)
        # taken only while w3lib leaves such URLs as they are (another w3lib might not)
        self._as_is = all(
            self._canonical.match(u) is not None and safe_url_string(u, "utf-8") == u == canonicalize_url(u)
            for u in _CANONICAL_PROBES
        )
        probe = Request(_PROBE)
        # the probe's scheme is allowed for the template only (the checks are per URL)
        template = codec.encode(probe, None, dataclasses.replace(rules, schemes=frozenset({"http"})))
        head, tail = template.split(encode_basestring_ascii(_PROBE))
        self._head, self._tail = head, tail
        # the shortcut is only taken while it gives what the codec gives (checked once)
        assert self._fingerprint(_PROBE) == codec.default_fingerprint(probe)

    @property
    def shortcut_on(self) -> bool:
        """Is the shortcut for canonical URLs on (w3lib leaves such URLs as they are)?"""
        return self._as_is

    def canonical(self, url: str) -> bool:
        """Is ``url`` of the canonical form the shortcut takes as it is (when on)?"""
        return self._canonical.match(url) is not None

    def valid(self, url: str) -> bool:
        """What ``scrapy scale seed`` accepts: an absolute URL of an allowed scheme (with a host)."""
        if self._host(url) is not None:
            return True
        parts = urlsplit(url)
        return parts.scheme.lower() in self.rules.schemes and bool(parts.netloc)

    def record(self, url: str) -> NewRequest:
        """``codec.new_request(url, priority=self.priority, rules=self.rules)``."""
        nr = self._fast(url)
        return nr if nr is not None else codec.new_request(url, priority=self.priority, rules=self.rules)

    def _fast(self, url: str) -> NewRequest | None:
        m = self._canonical.match(url) if self._as_is else None
        if m is not None and "--" not in m.group(1):  # safe and canonical as it is
            prio = 0 if self.priority is None else self.priority
            data = self._head + encode_basestring_ascii(url) + self._tail
            fp = hashlib.sha1((_FP_HEAD + encode_basestring_ascii(url) + "}").encode()).hexdigest()  # noqa: S324
            return NewRequest(fp, data, m.group(1), prio, tail=True)
        safe = safe_url_string(url, "utf-8")
        host = self._host(safe)
        if host is None:
            return None
        return NewRequest(
            self._fingerprint(safe),
            self._head + encode_basestring_ascii(safe) + self._tail,
            host,
            0 if self.priority is None else self.priority,
            tail=True,
        )

    def from_feed(self, message: str | bytes) -> NewRequest | None:
        """The record of a feed message that is a plain URL (a JSON string) of an allowed
        scheme, as the scheduler made it from ``codec.request_from_feed``; None for any
        other message (the scheduler reads it the long way, and refuses it if it must)."""
        if not message or message[0] not in ('"', 34):  # not a JSON string: an object, or not JSON
            return None
        try:
            url = json.loads(message)
        except (ValueError, TypeError):
            return None
        if not isinstance(url, str) or self._host(url) is None:
            return None  # the long way says why (or takes it: a URL the shortcut does not read)
        try:
            return self._fast(url)
        except ValueError:  # w3lib refuses it (a port out of range): the long way says why
            return None

    def records(self, urls: Iterable[str]) -> list[NewRequest]:
        return [self.record(u) for u in urls]

    def _host(self, url: str) -> str | None:
        """The lower-case host (``domain_of``) of a URL of an allowed scheme whose scheme and
        host the shortcut reads as urlsplit() does; None when it cannot tell."""
        m = self._plain.match(url)
        if m is None:
            return None
        netloc = m.group(1)
        if _HOST_CHARS.fullmatch(netloc) is None:
            return None
        return netloc.rpartition("@")[2].partition(":")[0].lower()

    @staticmethod
    def _fingerprint(safe: str) -> str:
        data = _FP_HEAD + encode_basestring_ascii(canonicalize_url(safe)) + "}"
        return hashlib.sha1(data.encode()).hexdigest()  # noqa: S324 - Scrapy's fingerprint
