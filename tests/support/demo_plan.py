"""The demo's plan of faults, played against the throttle's policy without a reactor."""

from __future__ import annotations

import random

from scrapy_scale.clock import FakeClock
from scrapy_scale.throttle.pacing import Pacing


def demo_plan_run(
    pc: Pacing,
    clk: FakeClock,
    *,
    rng: random.Random | None = None,
    conc: int = 1,
    latency: float = 0.005,
    retry_after: float = 1.5,
) -> float:
    """One run of the demo's plan against one host "h" without any rate limit: the FIRST
    attempt of /item/1 and /item/10../item/19 answers 429 + Retry-After: 1 whatever the pace
    (tied to the path), retried ``retry_after`` seconds later. With ``rng`` the pages come in
    a mixed order (as the crawl's), latencies and retries vary; up to ``conc`` in flight.
    Returns how long the run took (seconds)."""
    queue = ["/"] + [f"/item/{i}" for i in range(1, 61)]
    if rng:
        rng.shuffle(queue)
    planned = {"/item/1"} | {f"/item/{i}" for i in range(10, 20)}
    retries: list[tuple[float, str]] = []
    flying: list[tuple[float, str, bool]] = []
    start = clk.now
    while queue or retries or flying:
        for item in sorted(x for x in flying if x[0] <= clk.now):
            flying.remove(item)
            pc.ended("h")
            if item[2]:
                pc.on_rate_limited("h", latency, 1.0)
                retries.append((clk.now + retry_after * (rng.uniform(0.7, 1.3) if rng else 1.0), item[1]))
            else:
                pc.on_success("h", latency)
        retries.sort()
        due = retries[0] if retries and retries[0][0] <= clk.now else None
        if len(flying) < conc and pc.hold_until("h") == 0.0 and (due or queue):
            if due:
                retries.remove(due)
                path = due[1]
            else:
                path = queue.pop(0)
            pc.handed_out("h")
            took = latency * (rng.uniform(0.5, 2.0) if rng else 1.0)
            flying.append((clk.now + took, path, path in planned))
            planned.discard(path)
        clk.advance(0.005)
    return clk.now - start
