"""The testbed's hosts of known capacity, as plain models (no server)."""

from __future__ import annotations

import math

import pytest

from scrapy_scale.testbed.capacity import Capacity, CapacityPlan

pytestmark = pytest.mark.pure


class Ans:
    def __init__(self, status: int | None = 200, kind: str = "ok", body: bytes = b"", headers=(), delay: float = 0.0):  # type: ignore[no-untyped-def]
        self.status, self.kind, self.body, self.headers, self.delay = status, kind, body, headers, delay


def plan(cap: Capacity) -> CapacityPlan:
    return CapacityPlan({1: cap}, lambda h: int(h))


def test_knee_is_flat_up_to_its_concurrency_then_slows_steeply() -> None:
    p = plan(Capacity("knee", concurrency=4, latency=0.1))
    delays = [p.shape(Ans(), 1, "/item/1", 0.0).delay for _ in range(8)]  # 8 arrive at once
    assert delays[:4] == [0.1] * 4
    assert delays[4] == pytest.approx(0.1 * (5 / 4) ** 3)
    assert delays[7] == pytest.approx(0.1 * 2**3)
    # once they are answered, a new one is fast again
    assert p.shape(Ans(), 1, "/item/1", 10.0).delay == 0.1


def test_bucket_refuses_past_its_rate_and_refills() -> None:
    p = plan(Capacity("bucket", rate=10, burst=2, latency=0.05))
    got = [p.shape(Ans(), 1, "/item/1", 0.0) for _ in range(3)]
    assert [a.status for a in got] == [200, 200, 429]
    assert got[2].kind == "rate_limited" and ("Retry-After", "1") in got[2].headers
    assert p.shape(Ans(), 1, "/item/1", 0.1).status == 200  # one token back after 1/rate
    assert p.shape(Ans(), 1, "/robots.txt", 0.1).status == 200  # robots.txt is never shaped


def test_other_hosts_and_unanswered_kinds_are_left_alone() -> None:
    p = plan(Capacity("unlimited", latency=0.3))
    assert p.shape(Ans(), 1, "/", 0.0).delay == 0.3
    assert p.shape(Ans(), 2, "/", 0.0).delay == 0.0  # host 2 has no model
    reset = Ans(status=None, kind="reset")
    assert p.shape(reset, 1, "/", 0.0) is reset and reset.delay == 0.0


@pytest.mark.parametrize(
    "kw",
    [
        {"kind": "fast"},
        {"kind": "knee", "concurrency": 0},
        {"kind": "bucket", "rate": 0},
        {"kind": "bucket", "burst": 0.5},
        {"kind": "knee", "latency": math.nan},
        {"kind": "knee", "latency": -1},
    ],
)
def test_bad_capacities_are_refused(kw: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="capacity"):
        Capacity(**kw)  # type: ignore[arg-type]
