"""Faults and proxy specs: what the testbed does wrong, where, and how often.

A :class:`Fault` selects requests by host, path glob, egress and item number, then
fires by plan (``nth``, ``first``) and/or by probability (``p``). Every decision is a
pure function of (seed, fault index, host, path, ordinal of this request to that
host and path), so the same seed and the same requests give the same faults, in any
order of arrival across paths.

Text form (CLI ``--faults``, :func:`parse_faults`): faults separated by ``;``, each
``KIND[@HOSTS][:PATH][,key=value]...``, for example::

    429:/item/*,p=0.1,retry_after=2 ; reset,p=0.02 ; 503@1+2:/list/*,first=1
    layout:/item/*,after=50,variant=missing ; 403,egresses=p2 ; hang:/item/7,nth=1
    503@1:/,until=5

HOSTS and tuple values are joined with ``+``; hosts are names or numbers (1-based).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field, fields
from typing import Any

from scrapy_scale.testbed.catalog import unit

#: every fault kind the testbed knows
KINDS = (
    "429",  # Too Many Requests, with Retry-After when retry_after is set
    "503",  # Service Unavailable, with Retry-After when retry_after is set
    "500",  # Internal Server Error
    "reset",  # the connection is reset (TCP RST) instead of an answer
    "slow",  # the normal answer, after `delay` seconds
    "hang",  # no answer at all; the connection stays open
    "404",  # Not Found
    "410",  # Gone
    "block",  # 200 with a challenge page instead of the content
    "403",  # Forbidden (usually with egresses=...)
    "layout",  # detail pages with renamed or missing fields (variant=renamed|missing)
    "empty",  # 200 with an empty body
)

_NUM_RE = re.compile(r"/(\d+)$")


@dataclass(frozen=True)
class Fault:
    """One fault rule. The first rule (in list order) that fires answers the request."""

    kind: str
    path: str = "*"
    hosts: tuple[str | int, ...] | None = None
    p: float | None = None
    nth: tuple[int, ...] = ()
    first: int = 0
    sticky: bool = False
    after: int | None = None
    egresses: tuple[str, ...] | None = None
    retry_after: int | str | None = None
    delay: float = 2.0
    variant: str = "renamed"
    #: fire only within this many seconds after the first request the rule selected
    until: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; known: {', '.join(KINDS)}")
        if self.p is not None and not 0 <= self.p <= 1:
            raise ValueError(f"fault {self.kind}: p must be in [0, 1]")
        if self.until is not None and not self.until >= 0:
            raise ValueError(f"fault {self.kind}: until must be a number of seconds >= 0")
        if self.variant not in ("renamed", "missing"):
            raise ValueError(f"fault {self.kind}: variant must be renamed or missing")
        ra = self.retry_after
        if isinstance(ra, str) and not re.fullmatch(r"date:\d+", ra):
            raise ValueError(f"fault {self.kind}: retry_after is seconds or 'date:SECONDS'")
        for name in ("hosts", "nth", "egresses"):
            v = getattr(self, name)
            if isinstance(v, list):
                object.__setattr__(self, name, tuple(v))

    # ---- selection --------------------------------------------------------------

    def selects(self, host: str, host_no: int, path: str, egress: str | None) -> bool:
        """Whether this rule applies to the request at all (before plan/probability)."""
        if (
            self.hosts is not None
            and host not in self.hosts
            and host_no not in self.hosts
            and str(host_no) not in self.hosts
        ):
            return False
        if path == "/robots.txt" and "robots" not in self.path:
            return False
        if not fnmatch.fnmatchcase(path, self.path):
            return False
        if self.egresses is not None and (egress or "direct") not in self.egresses:
            return False
        if self.after is not None:
            m = _NUM_RE.search(path)
            if not m or int(m.group(1)) <= self.after:
                return False
        return True

    def active(self, since: float, now: float) -> bool:
        """Within the rule's time window (``until``), ``since`` its first selected request."""
        return self.until is None or now - since < self.until

    def fires(self, seed: int, index: int, host: str, path: str, ordinal: int) -> bool:
        """Whether the rule fires for the ``ordinal``-th request (1-based) to host+path."""
        planned = bool(self.nth or self.first)
        if planned and (ordinal in self.nth or ordinal <= self.first):
            return True
        if self.p is None:
            return not planned
        key = (seed, "fault", index, host, path) if self.sticky else (seed, "fault", index, host, path, ordinal)
        return unit(*key) < self.p


#: every proxy mode: see the module docstring of ``scrapy_scale.testbed.proxy``
PROXY_MODES = ("healthy", "dead", "slow", "jitter", "flaky", "auth", "blackhole", "garbage", "midclose", "trickle")


@dataclass(frozen=True)
class ProxySpec:
    """One forward proxy (an egress). Targets see it by its own source address."""

    id: str
    mode: str = "healthy"
    delay: float = 1.0
    p: float = 0.3
    user: str = "user"
    password: str = "secret"
    banned_by: tuple[str | int, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.mode not in PROXY_MODES:
            raise ValueError(f"proxy {self.id}: unknown mode {self.mode!r}; known: {', '.join(PROXY_MODES)}")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.id):
            raise ValueError(f"proxy id {self.id!r}: letters, digits, _ . - only")
        if isinstance(self.banned_by, list):
            object.__setattr__(self, "banned_by", tuple(self.banned_by))


# ---- text form -----------------------------------------------------------------


def _convert(cls: type, name: str, raw: str) -> Any:
    types = {f.name: str(f.type) for f in fields(cls)}
    if name not in types:
        raise ValueError(f"{cls.__name__}: unknown key {name!r}")
    t = types[name]
    if name == "retry_after":
        return raw if raw.startswith("date:") else int(raw)
    if name in ("nth",):
        return tuple(int(x) for x in raw.split("+") if x)
    if name in ("hosts", "banned_by"):
        return tuple(int(x) if x.isdigit() else x for x in raw.split("+") if x)
    if name == "egresses":
        return tuple(x for x in raw.split("+") if x)
    if name == "sticky":
        return raw.lower() in ("1", "true", "yes")
    if t.startswith("float"):
        return float(raw)
    if t.startswith("int"):
        return int(raw)
    return raw


def _pairs(cls: type, parts: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        if not part.strip():
            continue
        if "=" not in part:
            raise ValueError(f"expected key=value, got {part!r}")
        k, v = part.split("=", 1)
        out[k.strip()] = _convert(cls, k.strip(), v.strip())
    return out


def parse_faults(spec: str) -> list[Fault]:
    """``"429:/item/*,p=0.1,retry_after=2; reset,p=0.01"`` -> [Fault, Fault]."""
    faults = []
    for chunk in spec.split(";"):
        chunk = chunk.strip()
        if not chunk:
            continue
        head, *rest = chunk.split(",")
        head = head.strip()
        kw: dict[str, Any] = {}
        if ":" in head:
            head, kw["path"] = head.split(":", 1)
        if "@" in head:
            head, hosts = head.split("@", 1)
            kw["hosts"] = _convert(Fault, "hosts", hosts)
        kw.update(_pairs(Fault, rest))
        faults.append(Fault(kind=head, **kw))
    return faults


def parse_proxy(spec: str) -> ProxySpec:
    """``"p1:flaky,p=0.5"`` or ``"p2:healthy,banned_by=1+2"`` -> ProxySpec."""
    head, *rest = spec.strip().split(",")
    kw: dict[str, Any] = {}
    if ":" in head:
        head, kw["mode"] = head.split(":", 1)
    kw.update(_pairs(ProxySpec, rest))
    return ProxySpec(id=head.strip(), **kw)
