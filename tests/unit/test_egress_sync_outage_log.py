"""Failing syncs of the egress pool's shared state are logged once, then once on recovery
(issue 35: a Redis outage logged "egress: cannot sync" once a second per worker)."""

from __future__ import annotations

import pytest

from scrapy_scale.egress.events import SyncOutage

pytestmark = pytest.mark.pure


def test_one_line_when_syncs_start_failing_and_one_when_they_work_again():
    o = SyncOutage()
    assert o.succeeded(100.0) is None  # nothing to say while it works
    assert o.failed(101.0) is True  # the first failure: logged
    assert [o.failed(101.0 + i) for i in range(1, 92)] == [False] * 91  # the next 91: not
    assert o.succeeded(193.5) == (92, 92.5)  # the recovery: how many, over how long
    assert o.succeeded(194.0) is None
    assert o.failed(300.0) is True  # a new outage: logged again
    assert o.succeeded(301.0) == (1, 1.0)
