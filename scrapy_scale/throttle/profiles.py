"""Domain profiles: which pacing rules apply to a host, and which hosts share one pace.

``SCALE_DOMAIN_PROFILES`` maps a pattern to a profile (a dict of the fields of
:class:`Profile`). Patterns, most specific first:

1. an exact host: ``shop.example.com`` (a name with labels below its registrable
   domain, an IP address, or a name without a public suffix such as ``localhost``);
2. ``*.example.com``: every host below ``example.com`` (not ``example.com`` itself);
   of several, the longest suffix wins;
3. a registrable domain: ``example.com``, ``example.co.uk`` -- the site, i.e. that
   host and every host below it. Its hosts share ONE pace (one delay, one rate
   limit, one pause): they are one site;
4. ``default``: every other host.

A host matched by an exact or wildcard pattern, or by ``default``, is paced on its
own (as Scrapy's downloader slots are, per host name). The registrable domain comes
from tldextract with its bundled public suffix list; nothing is fetched over the
network.

Fields a profile leaves out come from the ``default`` profile, then from the built-in
defaults (:data:`BUILTIN`). Everything here is plain data: no Scrapy, no clock.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any

import tldextract

from scrapy_scale.errors import ScaleError

DEFAULT = "default"

_LABEL = r"(?!-)[a-z0-9_-]{1,63}(?<!-)"
_HOST = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")

_extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


class ProfileError(ScaleError, ValueError):
    """A profile or pattern of ``SCALE_DOMAIN_PROFILES`` cannot be used."""


@dataclass(frozen=True, slots=True)
class Profile:
    """How one site is paced. Seconds everywhere; ``None`` = no limit of that kind."""

    #: requests in flight to the site at once (None: Scrapy's CONCURRENT_REQUESTS_PER_DOMAIN)
    concurrency: int | None = None
    #: a floor no delay undercuts (also robots.txt Crawl-delay, unless a profile sets it)
    min_delay: float = 0.0
    #: the delay before anything is learned about the site
    start_delay: float = 0.25
    #: the ceiling of the adaptive delay (a Retry-After pause is capped apart)
    max_delay: float = 60.0
    #: as AutoThrottle's AUTOTHROTTLE_TARGET_CONCURRENCY: delay -> latency / this
    target_concurrency: float = 1.0
    #: requests per second to the site, all workers together (None: no ceiling)
    max_rate: float | None = None
    #: honour Retry-After (pause the whole site until then)
    retry_after: bool = True
    #: factor the delay is multiplied by on a rate-limited answer (429, 503)
    slowdown: float = 2.0
    #: fraction of the way down to its goal the delay moves per successful response
    recovery: float = 0.3

    @property
    def interval(self) -> float:
        """The smallest spacing between two requests this profile allows."""
        floor = self.min_delay
        if self.max_rate:
            floor = max(floor, 1.0 / self.max_rate)
        return floor


BUILTIN = Profile()
FIELD_NAMES = tuple(f.name for f in fields(Profile))


def _num(name: str, v: Any, *, lo: float, lo_open: bool = False, hi: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ProfileError(f"{name} must be a number of seconds or a rate, got {v!r}")
    x = float(v)
    if x != x or x in (float("inf"), float("-inf")):
        raise ProfileError(f"{name} must be a finite number, got {v!r}")
    if x < lo or (lo_open and x == lo):
        raise ProfileError(f"{name} must be {'>' if lo_open else '>='} {lo:g}, got {v!r}")
    if hi is not None and x > hi:
        raise ProfileError(f"{name} must be <= {hi:g}, got {v!r}")
    return x


def _field(name: str, v: Any) -> Any:
    if name == "concurrency":
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ProfileError(f"concurrency must be an integer >= 1, got {v!r}")
        return v
    if name == "max_rate":
        return None if v is None else _num(name, v, lo=0.0, lo_open=True)
    if name == "retry_after":
        if not isinstance(v, bool):
            raise ProfileError(f"retry_after must be true or false, got {v!r}")
        return v
    if name in ("min_delay", "start_delay"):
        return _num(name, v, lo=0.0)
    if name in ("max_delay", "target_concurrency"):
        return _num(name, v, lo=0.0, lo_open=True)
    if name == "slowdown":
        return _num(name, v, lo=1.0)
    if name == "recovery":
        return _num(name, v, lo=0.0, lo_open=True, hi=1.0)
    raise ProfileError(f"unknown field {name!r}; fields: {', '.join(FIELD_NAMES)}")  # pragma: no cover


def make_profile(raw: Any, base: Profile = BUILTIN, *, where: str = "profile") -> tuple[Profile, frozenset[str]]:
    """A profile from its dict, fields it leaves out taken from ``base``; and the names it set."""
    if not isinstance(raw, Mapping):
        raise ProfileError(f"{where}: a profile is a dict of fields, got {raw!r}")
    unknown = [k for k in raw if k not in FIELD_NAMES]
    if unknown:
        raise ProfileError(f"{where}: unknown field {unknown[0]!r}; fields: {', '.join(FIELD_NAMES)}")
    try:
        values = {k: _field(k, v) for k, v in raw.items()}
    except ProfileError as e:
        raise ProfileError(f"{where}: {e}") from None
    p = replace(base, **values)
    if p.min_delay > p.max_delay:
        raise ProfileError(f"{where}: min_delay {p.min_delay:g} is above max_delay {p.max_delay:g}")
    if p.start_delay > p.max_delay:
        raise ProfileError(f"{where}: start_delay {p.start_delay:g} is above max_delay {p.max_delay:g}")
    return p, frozenset(values)


def registrable_domain(host: str) -> str | None:
    """``example.co.uk`` for ``a.b.example.co.uk``; None for an IP, ``localhost``,
    or a name without a known public suffix (bundled list, no network)."""
    if _is_ip(host):
        return None
    return _extract(host).top_domain_under_public_suffix or None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Pattern:
    text: str
    #: "host", "wildcard", "site" or "default"
    kind: str
    #: the host, the suffix after ``*.``, or the registrable domain
    name: str


def parse_pattern(text: Any) -> Pattern:
    if not isinstance(text, str):
        raise ProfileError(f"pattern {text!r} is not a string")
    t = text.strip().lower().rstrip(".")
    if t == DEFAULT:
        return Pattern(t, "default", "")
    wildcard = t.startswith("*.")
    name = t[2:] if wildcard else t
    if not (_is_ip(name) and not wildcard) and not _HOST.match(name):
        raise ProfileError(
            f"pattern {text!r} is not a host: use a host (shop.example.com), *.example.com, "
            "a registrable domain (example.com) or default; no scheme, port, path or other wildcard"
        )
    if wildcard:
        return Pattern(t, "wildcard", name)
    if registrable_domain(name) == name:
        return Pattern(t, "site", name)
    return Pattern(t, "host", name)


@dataclass(frozen=True, slots=True)
class Match:
    #: the pacing unit: hosts with one key share one delay, rate limit and pause
    key: str
    profile: Profile
    #: the pattern that matched ("default" when only the default did)
    pattern: str
    #: fields a profile set explicitly (a robots.txt Crawl-delay does not override min_delay)
    explicit: frozenset[str]


class Profiles:
    """Resolves a host to its :class:`Match`; build with :meth:`parse`."""

    def __init__(
        self,
        default: Profile,
        default_explicit: frozenset[str],
        entries: dict[str, tuple[Pattern, Profile, frozenset[str]]],
    ):
        self.default = default
        self.raw: dict[str, Any] = {}
        self._default_explicit = default_explicit
        self._hosts = {p.name: (p, pr, ex) for p, pr, ex in entries.values() if p.kind == "host"}
        self._sites = {p.name: (p, pr, ex) for p, pr, ex in entries.values() if p.kind == "site"}
        self._wild = sorted(
            ((p, pr, ex) for p, pr, ex in entries.values() if p.kind == "wildcard"), key=lambda e: -len(e[0].name)
        )
        self.match = lru_cache(maxsize=65_536)(self._match)  # type: ignore[method-assign]

    @property
    def default_explicit(self) -> frozenset[str]:
        """Fields the ``default`` profile sets itself."""
        return self._default_explicit

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None, base: Profile = BUILTIN) -> Profiles:
        """Profiles from the setting's dict; ``base`` supplies what ``default`` leaves out."""
        raw = dict(raw or {})
        patterns = {}
        for text in raw:
            p = parse_pattern(text)
            if p.text in patterns:
                raise ProfileError(f"pattern {text!r} is given twice")
            patterns[p.text] = (p, raw[text])
        default, dex = base, frozenset[str]()
        if DEFAULT in patterns:
            default, dex = make_profile(patterns[DEFAULT][1], base, where=DEFAULT)
        entries = {}
        for t, (p, body) in patterns.items():
            if p.kind == "default":
                continue
            prof, ex = make_profile(body, default, where=repr(p.text))
            entries[t] = (p, prof, ex | dex)
        out = cls(default, dex, entries)
        out.raw = raw
        return out

    def with_base(self, base: Profile) -> Profiles:
        """The same profiles over another built-in base (e.g. DOWNLOAD_DELAY as min_delay)."""
        return Profiles.parse(self.raw, base)

    def _match(self, host: str) -> Match:
        host = host.lower().rstrip(".")
        hit = self._hosts.get(host)
        if hit is not None:
            return Match(host, hit[1], hit[0].text, hit[2])
        for p, prof, ex in self._wild:
            if host.endswith("." + p.name):
                return Match(host, prof, p.text, ex)
        site = registrable_domain(host)
        if site is not None and site in self._sites:
            p, prof, ex = self._sites[site]
            return Match(site, prof, p.text, ex)
        return Match(host, self.default, DEFAULT, self._default_explicit)
