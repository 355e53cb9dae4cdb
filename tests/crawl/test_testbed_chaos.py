"""Testbed faults for chaos plans: time-window faults (``until``), random 5xx noise, a slow host
(the window itself: tests/crawl/test_testbed.py)."""

from __future__ import annotations

import math
import time

import pytest

from scrapy_scale.testbed import Fault, Testbed, parse_faults
from tests.crawl.test_testbed import get

pytestmark = pytest.mark.crawl


def test_a_window_starts_at_the_rules_first_request_not_at_the_testbeds_start() -> None:
    with Testbed(hosts=2, pages=10, seed=1, faults="503@2,until=0.2") as tb:
        assert get(tb, 1, "/")[0] == 200  # host 1 is not selected: no window starts
        time.sleep(0.3)  # longer than the window, before the rule's first request
        assert get(tb, 2, "/")[0] == 503  # its first selected request: the window starts here
        assert [r.kind for r in tb.log] == ["ok", "503"]


def test_until_parsing_and_bad_values() -> None:
    assert parse_faults("503@4,until=5")[0] == Fault("503", hosts=(4,), until=5.0)
    for bad in (-1.0, math.nan):
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
