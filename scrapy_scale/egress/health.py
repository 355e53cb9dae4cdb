"""Health of one route key: a decayed score and the quarantine state machine.

A key is an egress (globally) or an (egress, domain) pair. Evidence comes from
outcomes only (the pool turns an outcome's blame into ``good``/``bad`` calls):

- the score is ``(good + 1) / (good + bad + 1)`` over exponentially decayed counts
  (half-life ``half_life`` seconds): 1.0 for a fresh key, falling as failures come in;
- a key whose decayed failures, or whose failures in a row (each within a half-life of
  the one before), reach ``min_failures`` while its score is below ``threshold`` is
  **quarantined** for ``base * 2^(level-1)`` seconds (capped at ``max_quarantine``) with
  jitter (the second half of the window is uniform random, so egresses quarantined
  together do not come back together);
- when that time is over the key is **probing** (half-open): at most ``probes``
  requests go through it at a time; the first good outcome restores it, a bad one
  quarantines it again for twice as long.

Plain Python: the clock and the randomness are passed in, so tests need no reactor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypedDict

from scrapy_scale.clock import Randomness

HEALTHY = "healthy"
QUARANTINED = "quarantined"
PROBING = "probing"
STATES = (HEALTHY, QUARANTINED, PROBING)


class HealthRecord(TypedDict, total=False):
    """One key's health as stored in shared state (Redis or egress.db, JSON; one-letter
    names keep the hash small). Written by :meth:`Health.to_record` only and read back by
    :meth:`Health.from_record` only (the one decoder: every reader, the pool's sync and the
    status rows, goes through it)."""

    g: float  # decayed good outcomes
    b: float  # decayed bad outcomes
    at: float  # when g and b were last decayed
    u: float  # quarantined until (0: healthy)
    l: int  # quarantine backoff level  # noqa: E741 - the stored name
    c: float  # last state change (quarantine or restore): shared state is merged by it
    r: float  # last restore
    s: float  # the score at the last quarantine (absent before any)


#: bounds of the values taken from shared state (a record is untrusted input)
MAX_LEVEL = 64
MAX_COUNT = 1e9


def _number(rec: dict[str, Any], key: str) -> float:
    """A finite number from a stored record (missing or null: 0); ValueError otherwise."""
    v = rec.get(key)
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{key} = {str(v)[:20]!r} is not a number")
    try:
        x = float(v)
    except OverflowError:
        raise ValueError(f"{key} is out of range") from None
    if not math.isfinite(x):
        raise ValueError(f"{key} = {x} is not finite")
    return x


def _score_at_eviction(rec: dict[str, Any]) -> float | None:
    """The record's score at its last quarantine (``s``): None when missing or not a
    number in [0, 1] (a display value: a bad one is dropped, see :func:`score_note`)."""
    v = rec.get("s")
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 <= v <= 1.0:
        return None
    return float(v)


def score_note(rec: Any) -> str | None:
    """Why :meth:`Health.from_record` drops this record's score at its quarantine (``s``
    present but not a number from 0 to 1), or None."""
    if not isinstance(rec, dict) or rec.get("s") is None or _score_at_eviction(rec) is not None:
        return None
    return f"its score at the quarantine (s = {str(rec['s'])[:20]!r}) is not a number from 0 to 1; not shown"


def clamp_note(rec: Any, now: float, longest: float) -> str | None:
    """Why :meth:`Health.from_record` shortens this record's quarantine, or None."""
    try:
        until = _number(rec, "u") if isinstance(rec, dict) else 0.0
    except ValueError:
        return None
    if until > now + longest:
        return f"its quarantine end ({until:g}) is more than SCALE_EGRESS_QUARANTINE_MAX ({longest:g} s) away"
    return None


@dataclass(frozen=True)
class HealthPolicy:
    min_failures: float = 3.0
    threshold: float = 0.5
    half_life: float = 60.0
    base: float = 30.0
    max_quarantine: float = 3600.0
    probes: int = 1
    #: a probe without an outcome after this long no longer holds its slot
    probe_timeout: float = 60.0

    def full(self, level: int) -> float:
        """The longest quarantine at backoff ``level`` (1 for the first)."""
        return min(self.max_quarantine, self.base * 2 ** max(0, level - 1))

    def duration(self, level: int, rng: Randomness) -> float:
        full = self.full(level)
        return full / 2 + rng.uniform(0, full / 2)


@dataclass
class Health:
    """Score and quarantine state of one key. ``changed`` is the time of its last state
    change (quarantine or restore): shared state is merged by it."""

    good: float = 0.0
    bad: float = 0.0
    at: float = 0.0
    until: float = 0.0
    level: int = 0
    changed: float = 0.0
    restored: float = 0.0
    #: failures in a row (since the last success, quarantine or restore; each within a
    #: half-life of the last). Decayed counts alone let ``min_failures`` failures spread over
    #: seconds add up to a little less, so a route that only ever failed stayed healthy.
    streak: int = 0
    #: when the last failure was recorded
    last_bad: float = 0.0
    probe_sent: list[float] = field(default_factory=list)
    #: the score when it was last quarantined (the counts start over then; shown while
    #: quarantined or probing), None before any quarantine
    evicted_score: float | None = None

    # ---- the score -------------------------------------------------------------

    def _decay(self, now: float, half_life: float) -> None:
        if now > self.at and self.at:
            f = math.pow(0.5, (now - self.at) / half_life)
            self.good *= f
            self.bad *= f
        self.at = now

    def score(self, now: float, policy: HealthPolicy) -> float:
        self._decay(now, policy.half_life)
        return (self.good + 1.0) / (self.good + self.bad + 1.0)

    # ---- the state -------------------------------------------------------------

    def state(self, now: float) -> str:
        if not self.until:
            return HEALTHY
        return QUARANTINED if now < self.until else PROBING

    def probe_allowed(self, now: float, policy: HealthPolicy) -> bool:
        """May one more request go through this key? (always, unless it is quarantined or
        probing with every probe slot taken)."""
        st = self.state(now)
        if st == HEALTHY:
            return True
        if st == QUARANTINED:
            return False
        self.probe_sent = [t for t in self.probe_sent if now - t < policy.probe_timeout]
        return len(self.probe_sent) < policy.probes

    def sent(self, now: float) -> bool:
        """A request goes through this key; True when it is a probe."""
        if self.state(now) == PROBING:
            self.probe_sent.append(now)
            return True
        return False

    def record(self, good: bool, now: float, policy: HealthPolicy, rng: Randomness) -> str | None:
        """Count one piece of evidence; the transition it caused (``quarantined``,
        ``requarantined``, ``restored``) or None."""
        st = self.state(now)
        if st == QUARANTINED:
            return None  # late answers of requests sent before the quarantine
        if self.streak and now - self.last_bad > policy.half_life:
            self.streak = 0  # the row is broken by time too: old failures fade
        self._decay(now, policy.half_life)
        if st == PROBING:
            if good:
                self.restore(now)
                return "restored"
            self.bad += 1.0  # the failed probe, in the score kept at the quarantine
            self.quarantine(now, policy, rng)
            return "requarantined"
        if good:
            self.good += 1.0
            self.streak = 0
            return None
        self.bad += 1.0
        self.streak += 1
        self.last_bad = now
        enough = self.bad >= policy.min_failures or self.streak >= policy.min_failures
        if enough and self.score(now, policy) < policy.threshold:
            self.quarantine(now, policy, rng)
            return "quarantined"
        return None

    def quarantine(self, now: float, policy: HealthPolicy, rng: Randomness) -> float:
        """Quarantine the key (its backoff level goes up one); the time it ends."""
        if self.restored and now - self.restored > 2 * policy.full(self.level):
            self.level = 0  # healthy long enough since the last quarantine: start the backoff over
        self.level += 1
        self.evicted_score = round((self.good + 1.0) / (self.good + self.bad + 1.0), 3)
        self.until = now + policy.duration(self.level, rng)
        self.changed = now
        self.probe_sent = []
        self.good = self.bad = 0.0
        self.streak = 0
        return self.until

    def restore(self, now: float) -> None:
        self.until = 0.0
        self.changed = self.restored = now
        self.probe_sent = []
        self.good, self.bad = 1.0, 0.0
        self.streak = 0

    # ---- shared state ----------------------------------------------------------

    def to_record(self) -> HealthRecord:
        """The record stored in shared state (the one encoder of :class:`HealthRecord`)."""
        rec = HealthRecord(
            g=round(self.good, 3),
            b=round(self.bad, 3),
            at=self.at,
            u=self.until,
            l=self.level,
            c=self.changed,
            r=self.restored,
        )
        if self.evicted_score is not None:
            rec["s"] = self.evicted_score
        return rec

    def shown_score(self, now: float) -> float | None:
        """The score a status row shows: the one the pool weighs a healthy key by (its
        counts as they stand, not decayed); for one quarantined or probing, the score it had
        when it was quarantined (its counts start over then, so the live figure would read
        1.00 for a dead proxy); None when the record did not say it."""
        if self.state(now) != HEALTHY:
            return self.evicted_score
        return round((self.good + 1) / (self.good + self.bad + 1), 3)

    @classmethod
    def from_record(cls, rec: Any, now: float | None = None, longest: float = math.inf) -> Health:
        """A stored record as health; ValueError when it does not decode (not a JSON
        object, a field that is not a finite number, a state change in the far future).
        A quarantine ending more than ``longest`` seconds after ``now`` ends then instead
        (see :func:`clamp_note`)."""
        if not isinstance(rec, dict):
            raise ValueError(f"not a record: {str(rec)[:40]!r}")
        num = {k: _number(rec, k) for k in ("g", "b", "at", "u", "l", "c", "r")}
        if now is not None:
            for k in ("at", "c", "r"):  # times of the past: one far ahead would win every merge
                if num[k] > now + longest:
                    raise ValueError(f"{k} = {num[k]:g} is far in the future")
        h = cls(
            good=min(max(num["g"], 0.0), MAX_COUNT),
            bad=min(max(num["b"], 0.0), MAX_COUNT),
            at=num["at"],
            until=num["u"],
            level=int(min(max(num["l"], 0.0), MAX_LEVEL)),
            changed=num["c"],
            restored=num["r"],
            evicted_score=_score_at_eviction(rec),
        )
        if now is not None and h.until > now + longest:
            h.until = now + longest
        return h

    def adopt(self, other: Health) -> None:
        """Take another worker's newer state change (its quarantine or its restore)."""
        self.until, self.level, self.changed, self.restored = other.until, other.level, other.changed, other.restored
        self.probe_sent = []
        self.good, self.bad, self.at = other.good, other.bad, other.at
        self.evicted_score = other.evicted_score
