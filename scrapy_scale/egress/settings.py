"""SCALE_EGRESS* settings (declared in the registry, see scrapy_scale.config)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from scrapy_scale.config import as_choice, as_float, as_int, as_json_value, declare
from scrapy_scale.egress.identity import Egress, EgressURLError, parse_egresses, parse_lines

COMPONENT = "egress"
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


@dataclass(frozen=True)
class Source:
    """Where the egresses come from: ``static`` (a list or groups), ``file`` (re-read on
    change) or ``provider`` (a class whose ``fetch()`` returns what ``SCALE_EGRESSES`` takes)."""

    kind: str
    egresses: tuple[Egress, ...] = ()
    path: str = ""
    provider: Any = None

    def __repr__(self) -> str:
        return f"Source({self.kind}, {len(self.egresses)} egress(es), {self.path or self.provider!r})"


def as_egresses(v: Any, read: bool = True) -> Source:
    """A list of proxy URLs (or a comma-separated string), a dict of named groups, a file
    path, or a provider class (or its dotted path). ``read=False`` (commands that only
    read state): a file is not read nor a provider class loaded."""
    if isinstance(v, type):
        return _provider(v)
    if isinstance(v, str):
        text = v.strip()
        if text.startswith(("[", "{")):
            v = as_json_value(text)
        elif "://" in text or text == "direct" or "," in text:
            v = [p.strip() for p in text.split(",") if p.strip()]
        elif os.sep in text or os.path.exists(text):
            return _file(text) if read else Source("file", path=text)
        elif _DOTTED.fullmatch(text):
            if not read:
                return Source("provider", provider=text)
            from scrapy.utils.misc import load_object

            try:
                return _provider(load_object(text))
            except (ImportError, NameError, AttributeError, ValueError) as e:
                raise ValueError(f"cannot load the provider class {text!r}: {e}") from None
        else:
            raise ValueError("expected proxy URLs, a dict of groups, a file path or a provider class")
    try:
        egresses = parse_egresses(v)
    except EgressURLError as e:
        raise ValueError(str(e)) from None
    if not egresses:
        raise ValueError("set but empty: list at least one proxy URL (or 'direct'), or leave it unset")
    return Source("static", tuple(egresses))


def read_egress_file(path: str) -> list[Egress]:
    """The egresses an egress file lists (at startup, and each time it changes);
    ValueError naming the file when it cannot be read, has a bad line or lists none."""
    try:
        with open(path, encoding="utf-8") as f:
            egresses = parse_lines(f.read())
    except OSError as e:
        raise ValueError(f"cannot read the egress file {path!r}: {e.strerror}") from None
    except EgressURLError as e:
        raise ValueError(f"{path}: {e}") from None
    if not egresses:
        raise ValueError(f"the egress file {path!r} lists no proxy URL")
    return egresses


def _file(path: str) -> Source:
    return Source("file", tuple(read_egress_file(path)), path=path)


def _provider(cls: Any) -> Source:
    if not callable(getattr(cls, "fetch", None)):
        raise ValueError(f"provider {getattr(cls, '__qualname__', cls)!r} has no fetch() method")
    return Source("provider", provider=cls)


EGRESSES = declare(
    "SCALE_EGRESSES",
    None,
    as_egresses,
    "The egress pool: proxy URLs (`http://user:pass@host:port`, `direct` = no proxy), a dict of named groups "
    "of them, a file (one URL a line, re-read on change) or a provider class. Unset: no pool.",
    COMPONENT,
    shallow=lambda v: as_egresses(v, read=False),
)
MIN_FAILURES = declare(
    "SCALE_EGRESS_MIN_FAILURES",
    3.0,
    as_float(1.0),
    "Failures (decayed, or in a row) an egress (or an egress for one domain) must have before it can be quarantined.",
    COMPONENT,
)
THRESHOLD = declare(
    "SCALE_EGRESS_THRESHOLD",
    0.5,
    as_float(0.0, 1.0),
    "Score (decayed (good+1)/(good+bad+1)) below which such an egress is quarantined.",
    COMPONENT,
)
HALF_LIFE = declare(
    "SCALE_EGRESS_HALF_LIFE",
    60.0,
    as_float(0.1),
    "Half-life in seconds of the evidence behind a score.",
    COMPONENT,
)
QUARANTINE = declare(
    "SCALE_EGRESS_QUARANTINE",
    30.0,
    as_float(0.01),
    "First quarantine in seconds (jittered: half of it to all of it); each failed re-probe doubles it.",
    COMPONENT,
)
QUARANTINE_MAX = declare(
    "SCALE_EGRESS_QUARANTINE_MAX",
    3600.0,
    as_float(0.01),
    "Longest quarantine in seconds; a quarantine read from the shared state that ends later is clamped to now + this.",
    COMPONENT,
)
PROBES = declare(
    "SCALE_EGRESS_PROBES",
    1,
    as_int(1, 1000),
    "Requests in flight at a time through an egress whose quarantine ended (the half-open probe).",
    COMPONENT,
)
FIRST_BYTE_TIMEOUT = declare(
    "SCALE_EGRESS_FIRST_BYTE_TIMEOUT",
    30.0,
    as_float(0.0),
    "Seconds an attempt through an egress may wait for the response headers before it is cancelled "
    "(a timeout that counts against the egress when the site answers through another one); "
    "DOWNLOAD_TIMEOUT stays the bound of the whole answer. 0 = off. Browser requests keep the browser's timeout.",
    COMPONENT,
)
STICKY_USES = declare(
    "SCALE_EGRESS_STICKY_USES",
    0,
    as_int(0),
    "Keep one egress per domain for this many requests (0 = no stickiness).",
    COMPONENT,
)
STICKY_AGE = declare(
    "SCALE_EGRESS_STICKY_AGE",
    60.0,
    as_float(0.0),
    "Longest time in seconds a domain sticks to one egress.",
    COMPONENT,
)
ROUTE_RATE = declare(
    "SCALE_EGRESS_ROUTE_RATE",
    0.0,
    as_float(0.0),
    "Maximum requests/s per (egress, domain) over all workers (0 = no cap); when every route to a domain "
    "is at its cap, that domain's requests wait.",
    COMPONENT,
)
GROUP_RETIRE = declare(
    "SCALE_EGRESS_GROUP_RETIRE",
    0.5,
    as_float(0.0, 1.0),
    "Fraction of a group's members quarantined at once that retires the whole group.",
    COMPONENT,
)
EXHAUSTED = declare(
    "SCALE_EGRESS_EXHAUSTED",
    "wait",
    as_choice("wait", "close"),
    "When every egress is quarantined for a domain: `wait` (that domain waits, others go on) or `close` "
    "(close the spider, reason `egress_exhausted`).",
    COMPONENT,
)
SYNC = declare(
    "SCALE_EGRESS_SYNC",
    1.0,
    as_float(0.05),
    "Seconds between writes of the pool's health to its shared state (Redis or SQLite) and reads of "
    "other workers' changes.",
    COMPONENT,
)
REFRESH = declare(
    "SCALE_EGRESS_REFRESH",
    60.0,
    as_float(0.1),
    "Seconds between checks of an egress file for changes, or calls of a provider's fetch().",
    COMPONENT,
)
PROVIDER_TIMEOUT = declare(
    "SCALE_EGRESS_PROVIDER_TIMEOUT",
    30.0,
    as_float(0.1),
    "Seconds the crawl's start waits for a provider's first fetch(); then it starts with an empty pool "
    "(requests wait) and the call's result is taken whenever it returns. A pool still empty after 10 times "
    "this (once with SCALE_EGRESS_EXHAUSTED = close) closes the spider, reason `egress_unavailable`.",
    COMPONENT,
)
STATS_TOP = declare(
    "SCALE_EGRESS_STATS_TOP",
    20,
    as_int(1, 10_000),
    "Egresses with their own stats keys (the busiest); the rest are summed under `other`.",
    COMPONENT,
)
CONTEXT_PAGES = declare(
    "SCALE_EGRESS_CONTEXT_PAGES",
    100,
    as_int(0),
    "Browser requests (scrapy-playwright) per egress context before it is replaced by a new one (0 = no limit).",
    COMPONENT,
)
CONTEXT_AGE = declare(
    "SCALE_EGRESS_CONTEXT_AGE",
    600.0,
    as_float(0.0),
    "Longest life in seconds of an egress's browser context before it is replaced (0 = no limit).",
    COMPONENT,
)
