"""Testbed faults for chaos plans: time-window faults (``until``), random 5xx noise, a slow host."""

from __future__ import annotations

import math
import time

import pytest

from scrapy_scale.testbed import Fault, Testbed, parse_faults
from tests.test_testbed import get

pytestmark = pytest.mark.crawl


def test_until_fires_only_in_the_first_seconds_after_start() -> None:
    with Testbed(hosts=2, pages=10, seed=1, faults="503@2,until=3600") as tb:
        assert get(tb, 2, "/")[0] == 503  # inside the window: every request to host 2
        assert get(tb, 2, "/item/1")[0] == 503
        assert get(tb, 1, "/")[0] == 200  # another host
        tb.restart_clock(time.time() - 7200)  # the window is two hours past
        assert get(tb, 2, "/")[0] == 200
        tb.restart_clock()  # from now again
        assert get(tb, 2, "/item/1")[0] == 503
        assert [r.kind for r in tb.log] == ["503", "503", "ok", "ok", "503"]


def test_until_with_a_plan_and_a_restart_keeps_the_clock() -> None:
    tb = Testbed(hosts=1, pages=10, seed=1, faults=[Fault("500", path="/item/*", first=1, until=3600)])
    with tb:
        t0 = tb.clock_start
        assert get(tb, 1, "/item/1")[0] == 500
        assert get(tb, 1, "/item/1")[0] == 200  # first=1 still applies inside the window
    tb.start()
    try:
        assert tb.clock_start == t0  # a restart after stop() is no new start of the clock
        tb.restart_clock(t0 - 7200)
        assert get(tb, 1, "/item/2")[0] == 200  # past the window, the plan no longer fires
    finally:
        tb.stop()


def test_until_parsing_and_bad_values() -> None:
    assert parse_faults("503@4,until=5")[0] == Fault("503", hosts=(4,), until=5.0)
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="until"):
            Fault("503", until=bad)
    with pytest.raises(ValueError):
        parse_faults("503,until=soon")


def test_random_503_noise_and_a_slow_host() -> None:
    """What a chaos plan uses: 5% random 503s everywhere, and one host that always answers late."""
    with Testbed(hosts=2, pages=400, seed=5, faults="503:/item/*,p=0.05;slow@2,delay=0.2") as tb:
        statuses = [get(tb, 1, f"/item/{i}")[0] for i in range(1, 401)]
        assert 5 <= statuses.count(503) <= 40 and statuses.count(200) == 400 - statuses.count(503)
        t0 = time.monotonic()
        assert get(tb, 2, "/")[0] == 200  # a listing page: no 503 rule selects it
        assert time.monotonic() - t0 >= 0.2
        assert tb.count(host=tb.hosts[1], kind="slow") == 1
