"""The probe's policy: the staircase, the stop rules, the bisection, the recommendation.

Plain Python with an injectable clock; the load generator (:mod:`scrapy_scale.probe.load`)
only runs the steps this decides and hands back their answers.

- **ramp**: concurrency 1, 2, 4, 8, ... up to ``cap``; each step is held until it has
  ``min_answers`` answers after its warm-up, lasted ``min_seconds`` and is steady (as
  many answers in the second half as in the first, within ``steady``), or ``max_seconds``
  passed; it stops at once on a refusal (a 429, a 503 with ``Retry-After``);
- **judge** (:func:`judge`): a step is *bad* with no answer at all, on a refusal (429, 503 + ``Retry-After``), blocks above 1%,
  success below 98%, p95 latency above twice step 1's, or goodput lower than the last
  good step's; it is *client-bound* when the probe, not the site, was the limit (requests
  in flight well below the step's concurrency, the probe's process saturated, its event
  loop late by a good share of the latency measured, or a lower goodput at the latency of
  the last good step, within ``flat_latency``: a site past its knee answers later): that is
  never taken for the site's knee; the step is tried once more and, bound again, the
  probe ends there;
- a step bad only by its latency or goodput (no error said so) is run once more, and is
  bad when the second run is bad too;
- **bisection** between the last good and the first bad step, until they are one apart or
  within ``resolution`` of each other; never more load than twice the last good step;
- **below one request at a time**: when concurrency 1 is already rate limited (a 429 or
  ``Retry-After``), one request at a time under a rate ceiling: half the rate step 1 sent,
  halved again until good (not below ``min_rate``), then bisected between the good and
  the bad rate, to within ``resolution``;
- **recommendation**: the knee (the last good step) times ``margin``, as a
  ``SCALE_DOMAIN_PROFILES`` entry (``concurrency`` and ``max_rate``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from scrapy_scale.clock import Clock, wall
from scrapy_scale.probe.figures import RATE_LIMITED, StepFigures

GOOD, BAD, CLIENT_BOUND = "good", "bad", "client_bound"
#: the reason a soft-bad step is run again
CONFIRM = "run again to confirm"
#: the longest Retry-After the probe waits out before going on; a longer one ends it
MAX_WAIT = 60.0
#: the phases of a step
RAMP, BISECT, RATE = "ramp", "bisect", "rate"


@dataclass(frozen=True)
class Limits:
    """The probe's knobs (``scrapy scale probe`` options)."""

    cap: int = 64
    min_answers: int = 40
    min_seconds: float = 3.0
    max_seconds: float = 15.0
    #: seconds of a step's start whose requests are not judged
    warmup: float = 0.5
    #: steady: the answers of the two halves of a step differ by this share at most
    steady: float = 0.2
    max_requests: int = 5000
    max_time: float = 300.0
    #: stop rules
    max_block_share: float = 0.01
    min_success: float = 0.98
    latency_factor: float = 2.0
    #: latency below step 1's p95 plus this many seconds is never "too slow" (timer noise)
    latency_slack: float = 0.02
    #: goodput may dip this share under the last good step's before it counts as lower
    goodput_slack: float = 0.03
    #: a lower goodput at a p95 at most this many seconds above the last good step's is the
    #: probe's limit, not the site's: a site past its knee answers later (Little's law)
    flat_latency: float = 0.005
    #: client-bound: in flight under this share of the step, or the process busier than this
    min_in_flight_share: float = 0.75
    #: a run confirming a slowdown that comes out good with fewer in flight than this share
    #: of the run it confirms did not repeat it (a loaded probe): the slowdown stands
    confirm_fill: float = 0.9
    max_busy: float = 0.9
    #: client-bound: the event loop's p95 lateness above this and above this share of p95 latency
    max_loop_lag: float = 0.02
    max_loop_lag_share: float = 0.25
    #: bisection stops when the good and bad steps are within this share of each other
    resolution: float = 0.1
    #: the recommendation is the knee times this
    margin: float = 0.8
    #: below one request at a time: the lowest rate tried (requests/s)
    min_rate: float = 0.05

    def __post_init__(self) -> None:
        for name, v in vars(self).items():
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise ValueError(f"probe: {name} must be a finite number >= 0, not {v!r}")
        if self.cap < 1 or self.min_answers < 1 or self.max_requests < 1:
            raise ValueError("probe: cap, min answers and max requests must be at least 1")
        if self.min_rate <= 0:
            raise ValueError("probe: min_rate must be above 0")
        if not 0 < self.margin <= 1:
            raise ValueError(f"probe: margin must be in (0, 1], not {self.margin}")


def judge(fig: StepFigures, baseline_p95: float | None, last_good: StepFigures | None, lim: Limits) -> StepFigures:
    """Set ``fig.verdict`` and ``fig.reasons`` (and return it)."""
    site: list[str] = []
    if fig.answers == 0:  # every request still in flight: a site that hangs is no knee to climb on
        site.append(f"no answer in {fig.seconds:.1f} s")
    if fig.rate_limited:
        site.append("429 / Retry-After")
    if fig.block_share > lim.max_block_share:
        site.append(f"blocks {fig.block_share:.1%}")
    if fig.success < lim.min_success:
        worst = max((c for c in fig.classes if c not in ("ok", "not_found")), key=lambda c: fig.classes[c], default="")
        site.append(f"success {fig.success:.1%}" + (f" ({worst})" if worst else ""))
    client: list[str] = []
    # fewer in flight than the step is the probe's doing, unless its rate ceiling held them back
    ceiling_held = fig.rate_ceiling is not None and fig.offered >= 0.85 * fig.rate_ceiling
    if fig.in_flight < lim.min_in_flight_share * fig.concurrency and not ceiling_held:
        client.append(f"in flight {fig.in_flight:.1f} of {fig.concurrency}")
    if fig.busy > lim.max_busy:
        client.append(f"probe process busy {fig.busy:.0%}")
    if fig.loop_lag > max(lim.max_loop_lag, lim.max_loop_lag_share * fig.p95):
        client.append(f"probe's event loop {fig.loop_lag * 1000:.0f} ms late")
    slow: list[str] = []
    if baseline_p95 is not None and fig.p95 > max(lim.latency_factor * baseline_p95, baseline_p95 + lim.latency_slack):
        slow.append(f"p95 {fig.p95 * 1000:.0f} ms > {lim.latency_factor:g}x step 1")
    if last_good is not None and fig.goodput < last_good.goodput * (1 - lim.goodput_slack):
        lower = f"goodput {fig.goodput:.1f}/s < {last_good.goodput:.1f}/s at {last_good.concurrency}"
        if not slow and fig.p95 <= last_good.p95 + lim.flat_latency:
            # fewer answers at the same latency: fewer were sent, so the probe was the limit
            client.append(f"{lower} at the same p95 ({fig.p95 * 1000:.0f} ms)")
        else:
            slow.append(lower)
    if site:
        fig.verdict, fig.reasons = BAD, site + slow
    elif client:
        # the latency and goodput of a step the probe could not drive say nothing of the site
        fig.verdict, fig.reasons = CLIENT_BOUND, client + slow
    elif slow:
        fig.verdict, fig.reasons, fig.soft = BAD, slow, True
    else:
        fig.verdict, fig.reasons = GOOD, []
    return fig


def step_done(started: float, now: float, done_times: Sequence[float], cut: float | None, lim: Limits) -> bool:
    """Has a step held long enough? ``done_times``: when its answers after the warm-up
    (which ended at ``cut``) came. It needs ``min_answers`` of them, ``min_seconds`` and to
    be steady: as many answers in the second half of that window as in the first, within
    ``steady`` (else it holds on, up to ``max_seconds``)."""
    held = now - started
    if held >= lim.max_seconds:
        return True
    if cut is None or held < lim.min_seconds + lim.warmup or len(done_times) < lim.min_answers:
        return False
    mid = (cut + now) / 2
    first = sum(1 for t in done_times if t < mid)
    second = len(done_times) - first
    return abs(second - first) <= lim.steady * max(first, second)


@dataclass
class Result:
    steps: list[StepFigures] = field(default_factory=list)
    knee: StepFigures | None = None
    first_bad: StepFigures | None = None
    #: the probe, not the site, was the limit where it ended
    client_bound: bool = False
    #: why the probe ended
    ended: str = ""

    def recommendation(self, host: str, margin: float) -> dict[str, dict[str, Any]] | None:
        """The ``SCALE_DOMAIN_PROFILES`` entry for ``host``, or None without a knee."""
        if self.knee is None:
            return None
        k = self.knee
        entry: dict[str, Any] = {"concurrency": max(1, math.floor(k.concurrency * margin))}
        if k.goodput > 0:
            entry["max_rate"] = round(max(0.01, k.goodput * margin), 2)
        return {host: entry}

    def as_dict(self) -> dict[str, Any]:
        return {
            "steps": [s.as_dict() for s in self.steps],
            "knee": self.knee.concurrency if self.knee else None,
            "knee_goodput": self.knee.goodput if self.knee else None,
            "first_bad": self.first_bad.concurrency if self.first_bad else None,
            "client_bound": self.client_bound,
            "ended": self.ended,
        }


class Plan:
    """Which step comes next: ``next_step()`` -> (concurrency, phase, max rate) or None; then
    ``record(figures)`` of that step. ``clock`` and the budget decide when time is up."""

    def __init__(self, lim: Limits, clock: Clock = wall):
        self.lim = lim
        self.clock = clock
        self.started = clock()
        self.result = Result()
        self.requests = 0
        self._baseline: float | None = None
        self._good: StepFigures | None = None  # the last good step (the knee so far)
        self._bad: StepFigures | None = None  # the first bad step above it
        self._retried: int | None = None  # concurrency of a client-bound step tried again
        self._confirmed: dict[tuple[int, float], StepFigures] = {}  # soft-bad steps run again
        self._next: tuple[int, str] | None = (1, RAMP)
        # below one request at a time: the rate of the next step, the best good and worst bad rates
        self._rate = 0.0
        self._rate_good: float | None = None
        self._rate_bad = 0.0

    @property
    def last_good(self) -> StepFigures | None:
        return self._good

    def budget_left(self) -> bool:
        return self.requests < self.lim.max_requests and self.clock() - self.started < self.lim.max_time

    def time_left(self) -> float:
        """Seconds of ``max_time`` left (a step is cut there, a rest is no longer)."""
        return max(0.0, self.lim.max_time - (self.clock() - self.started))

    def max_rate(self) -> float | None:
        """Never more than twice the load of the last good step (None before one)."""
        return 2 * self._good.goodput if self._good is not None and self._good.goodput > 0 else None

    def next_step(self) -> tuple[int, str, float | None] | None:
        if self._next is None:
            return None
        if not self.budget_left():
            self.end("budget (max requests or max time) used up")
            return None
        c, phase = self._next
        return c, phase, self._rate if phase == RATE else self.max_rate()

    def record(self, fig: StepFigures) -> StepFigures:
        self._record(fig)
        if not fig.retry_after <= MAX_WAIT:  # also NaN: a longer pause than a probe waits out
            self.end(f"the site asked to wait {fig.retry_after:g} s (Retry-After): probe ended, not resumed")
        return fig

    def _record(self, fig: StepFigures) -> StepFigures:
        self.requests += fig.requests
        judge(fig, self._baseline, self._good, self.lim)
        self.result.steps.append(fig)
        if self._baseline is None and fig.verdict == GOOD:
            self._baseline = fig.p95
        c = fig.concurrency
        if fig.verdict == CLIENT_BOUND:
            if self._retried == c:
                self.result.client_bound = True
                self.end(f"the probe was the limit at concurrency {c} ({'; '.join(fig.reasons)})")
            else:
                self._retried = c
                self._next = (c, fig.phase)
            return fig
        key = (c, self._rate if fig.phase == RATE else 0.0)
        first = self._confirmed.get(key)
        if first is not None and fig.verdict == GOOD and fig.in_flight < self.lim.confirm_fill * first.in_flight:
            # CI, loaded: a slowdown at 16 (14.1 in flight) "confirmed" good by a run the probe
            # kept at 12.2, and the knee came out at 16 for a site whose knee is 12
            fig.verdict, fig.soft = BAD, False
            fig.reasons = [r for r in first.reasons if r != CONFIRM] + [
                f"its confirming run had {fig.in_flight:.1f} in flight, not {first.in_flight:.1f}"
            ]
        if fig.verdict == BAD and fig.soft and key not in self._confirmed:
            # latency or goodput alone: a moment's noise (the site's or this machine's) is no knee
            self._confirmed[key] = fig
            fig.reasons.append(CONFIRM)
            self._next = (c, fig.phase)
            return fig
        if fig.phase == RATE:
            self._next = self._choose_rate(fig)
            return fig
        if fig.verdict == GOOD:
            self._good = fig
            self.result.knee = fig
        elif self._bad is None or c < self._bad.concurrency:
            self._bad = fig
            self.result.first_bad = fig
        self._next = self._choose()
        return fig

    def _choose(self) -> tuple[int, str] | None:
        lo = self._good.concurrency if self._good is not None else 0
        if self._bad is None:
            if lo >= self.lim.cap:
                self.end(f"reached the cap ({self.lim.cap}) with no sign of a limit")
                return None
            return min(max(1, 2 * lo), self.lim.cap), RAMP
        hi = self._bad.concurrency
        if lo == 0:
            if self._bad.rate_limited and hi == 1 and self._bad.offered > 0:
                self._rate_bad = self._bad.offered
                return self._next_rate()
            self.end(f"the site fails already at concurrency {hi} ({'; '.join(self._bad.reasons)})")
            return None
        if hi - lo <= 1 or (hi - lo) <= self.lim.resolution * lo:
            self.end(f"knee between {lo} (good) and {hi} (bad: {'; '.join(self._bad.reasons)})")
            return None
        return (lo + hi) // 2, BISECT

    def _choose_rate(self, fig: StepFigures) -> tuple[int, str] | None:
        if fig.verdict == GOOD:
            self._rate_good = self._rate
            self._good = fig
            self.result.knee = fig
        else:
            self._rate_bad = self._rate
            if self.result.first_bad is None or self.result.first_bad.phase != RATE:
                self.result.first_bad = fig
        return self._next_rate()

    def _next_rate(self) -> tuple[int, str] | None:
        lo, hi = self._rate_good, self._rate_bad
        if lo is None:
            if hi / 2 < self.lim.min_rate:
                self.end(f"the site refuses even {hi:.3g} request/s, one at a time")
                return None
            self._rate = hi / 2
        elif hi <= lo * (1 + self.lim.resolution):
            self.end(f"knee between {lo:.3g}/s (good) and {hi:.3g}/s (bad), one request at a time")
            return None
        else:
            self._rate = (lo + hi) / 2
        return 1, RATE

    def end(self, why: str) -> None:
        self._next = None
        steps = self.result.steps
        if steps and steps[-1].verdict == CLIENT_BOUND:
            self.result.client_bound = True  # it ended where the probe, not the site, was the limit
        if not self.result.ended:
            self.result.ended = why


def wait_after(fig: StepFigures, cap: float = MAX_WAIT) -> float:
    """Seconds to let the site rest after a step: its Retry-After (capped), else 1 s after a
    bad step (queues drain), else none."""
    if fig.retry_after > 0 or not math.isfinite(fig.retry_after):  # the site's word: capped
        return min(cap, fig.retry_after) if math.isfinite(fig.retry_after) else cap
    if fig.verdict == BAD or (fig.verdict == CLIENT_BOUND and fig.classes.get(RATE_LIMITED)):
        return 1.0
    return 0.0
