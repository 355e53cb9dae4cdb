"""Late retries (``SCALE_RETRY_LATE``): after the quick retries of a passing failure are
spent, the request comes back later (seconds, then minutes, doubling), a few times, before it
is given up.

Quick retries (the class's budget, seconds apart) are right for a reset; a site whose
entry page fails for a few seconds or minutes (a deploy, a burst of overload) needs a
later try, or the whole site behind that page is lost. The k-th late retry (k from 1)
waits ``window * (1/2 + uniform(0, 1/2))`` with ``window = min(cap, base * 2**(k-1))``:
minutes, doubling, jittered so that pages that failed together do not come back
together. None is scheduled past ``deadline`` seconds after the chain's first failure.
``not_found``, ``parse_failed`` and ``fatal`` are never retried, late or not.

Plain Python: the time and the randomness are given by the caller
(:class:`~scrapy_scale.outcomes.policy.RetryPolicy`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from scrapy_scale.outcomes.model import FailureClass

C = FailureClass

#: classes that may get late retries (the others are done, or cannot be fixed by waiting)
LATE_CLASSES = frozenset({C.TRANSIENT, C.RATE_LIMITED, C.EGRESS_FAILED, C.BLOCKED})


@dataclass(frozen=True, slots=True)
class LatePolicy:
    """``retries`` late retries (0 = none), ``base``/``cap`` seconds of the doubling
    window, ``deadline`` seconds after the chain's first failure (0 = none), for the
    failure ``classes``."""

    #: the defaults continue the quick retries' doubling (they end 1-3 s after the first
    #: failure) without a gap: 1.25-2.5 s, then 2.5-5 s, ... up to 80-160 s, about the same
    #: five minutes in all as the 5 from 5-10 s they replace. An entry page that fails for a
    #: few seconds is tried again as the burst ends, not 5-10 s later with its whole site
    #: waiting behind it (the chaos benchmark's host 4: its 120 pages started 3-7 s after its
    #: 6 s burst had ended); a page of a site down for minutes is tried twice more, each try
    #: spaced by the doubling
    retries: int = 7
    base: float = 2.5
    cap: float = 600.0
    deadline: float = 3600.0
    classes: frozenset[FailureClass] = frozenset({C.TRANSIENT, C.EGRESS_FAILED})

    def window(self, k: int) -> float:
        """Upper bound of the wait before late retry number ``k`` (1-based)."""
        return min(self.cap, self.base * 2.0 ** min(max(k, 1) - 1, 60))

    def delay(self, k: int, u: float, calm: float = 0.0) -> float:
        """The wait before late retry ``k``, ``u`` uniform in [0, 1). ``calm`` > 0: the site
        answers well otherwise, so the window doubles from ``calm`` instead of ``base``
        (never above the usual window): a page whose quick retries met noise comes back in
        seconds, not minutes."""
        w = self.window(k)
        if calm > 0:
            w = min(w, calm * 2.0 ** min(max(k, 1) - 1, 60))
        return w / 2 + w / 2 * u

    def applies(self, cls: FailureClass, done: int) -> bool:
        return cls in self.classes and done < self.retries


NO_LATE = LatePolicy(retries=0)

_KEYS = {f.name for f in fields(LatePolicy)}
#: the longest wait or deadline accepted (30 days): a late retry held longer keeps the
#: crawl open as good as forever
MAX_SECONDS = 30 * 86400.0
#: what turns late retries off, as text (``-s SCALE_RETRY_LATE=0`` on the command line)
_OFF_WORDS = ("0", "false", "no", "off", "none", "")


def _seconds(key: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{key}: expected a number of seconds >= 0, got {v!r}")
    if v > MAX_SECONDS:
        raise ValueError(f"{key}: at most {MAX_SECONDS:g} s (30 days), got {v!r}")
    return float(v)


def parse_late(value: Any) -> LatePolicy:
    """Validate ``SCALE_RETRY_LATE``: a dict of ``retries``, ``base``, ``cap``, ``deadline``,
    ``classes``; missing keys keep their defaults; ``0``/``False``/``None`` (or, as text,
    ``"0"``, ``"false"``, ``"off"``, ...) = no late retries."""
    from scrapy_scale.config import as_dict

    if value is None or value is False or value == 0:
        return NO_LATE
    if isinstance(value, str) and value.strip().lower() in _OFF_WORDS:
        return NO_LATE
    raw = as_dict(value)
    unknown = set(raw) - _KEYS
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(sorted(map(str, unknown)))}; known: {', '.join(sorted(_KEYS))}")
    out: dict[str, Any] = {}
    for key, v in raw.items():
        if key == "retries":
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"retries: expected an integer >= 0, got {v!r}")
            out[key] = v
        elif key == "classes":
            items = [v] if isinstance(v, str) else v
            if not isinstance(items, list | tuple | set | frozenset):
                raise ValueError(f"classes: expected a list of failure classes, got {v!r}")
            classes = frozenset(FailureClass.parse(str(x)) for x in items)
            bad = classes - LATE_CLASSES
            if bad:
                raise ValueError(
                    f"classes: {', '.join(sorted(c.value for c in bad))} cannot be retried late; "
                    f"allowed: {', '.join(sorted(c.value for c in LATE_CLASSES))}"
                )
            out[key] = classes
        else:
            out[key] = _seconds(key, v)
    policy = LatePolicy(**out)
    if policy.retries and policy.base <= 0:
        raise ValueError("base: late retries need a wait > 0 (or retries 0 for none)")
    if policy.cap < policy.base:
        raise ValueError(f"cap ({policy.cap:g}) is below base ({policy.base:g})")
    return policy
