"""A site with one request in flight (a robots.txt Crawl-delay) spends no probe on its one
slot: the real plan's Crawl-delay host had a 7.9 s gap when a re-probe of the blackhole
took its only slot and held it for the first-byte bound, and it finished 17 s after the
other hosts. The pool leaves re-probes and egresses no answer has come through yet to
other sites' requests while a proven egress is free."""

from __future__ import annotations

import asyncio

import pytest
from scrapy import Request
from scrapy.utils.test import get_crawler

from scrapy_scale.clock import FakeClock, Randomness
from scrapy_scale.egress.health import PROBING, HealthPolicy
from scrapy_scale.egress.identity import parse_egress
from scrapy_scale.egress.middleware import EgressMiddleware
from scrapy_scale.egress.pool import EgressPool
from scrapy_scale.throttle.throttle import Throttle

pytestmark = pytest.mark.pure

POLICY = HealthPolicy(min_failures=3, threshold=0.5, half_life=60, base=10, max_quarantine=80, probes=1)
A, B, C = "http://127.0.0.2:8001", "http://127.0.0.3:8002", "http://127.0.0.4:8003"


def pool(urls, clock) -> EgressPool:
    return EgressPool([parse_egress(u) for u in urls], POLICY, clock=clock, rng=Randomness(3))


def ids(p: EgressPool) -> list[str]:
    return list(p.egresses)


def test_a_reprobe_is_not_spent_on_a_one_slot_site_while_a_proven_egress_is_free():
    clock = FakeClock()
    p = pool([A, B, C], clock)
    ia, ib, ic = ids(p)
    for e in (ib, ic):
        p.observe(e, "d.test", "ok", "none", True)
    for _ in range(3):
        p.observe(ia, "d.test", "egress_failed", "egress", False)
    clock.now = p.health[ia].until + 0.01
    assert p.state(ia) == PROBING
    c = p.choose("d.test", one_slot=True)
    assert c.egress is not None and c.egress.id != ia and not c.probe
    assert p.counts["reprobe/spared_one_slot"] == 1  # the path ran
    c = p.choose("a.test")  # another site's request carries the re-probe
    assert c.egress is not None and c.egress.id == ia and c.probe


def test_an_unproven_egress_is_not_tried_on_a_one_slot_site_while_a_proven_one_is_free():
    clock = FakeClock()
    p = pool([A, B], clock)
    ia, ib = ids(p)
    p.observe(ib, "a.test", "ok", "none", True)  # ia: no answer through it yet (a blackhole?)
    for _ in range(20):
        c = p.choose("d.test", one_slot=True)
        assert c.egress is not None and c.egress.id == ib and not c.unproven
        p.release(ib)
    assert p.counts["unproven/spared_one_slot"] == 20


def test_a_one_slot_site_takes_a_reprobe_or_an_unproven_egress_when_nothing_else_is_free():
    clock = FakeClock()
    p = pool([A], clock)
    (ia,) = ids(p)
    for _ in range(3):
        p.observe(ia, "d.test", "egress_failed", "egress", False)
    clock.now = p.health[ia].until + 0.01
    c = p.choose("d.test", one_slot=True)
    assert c.egress is not None and c.egress.id == ia and c.probe  # rather than wait for ever
    fresh = pool([A, B], clock)  # no egress answered yet: nothing is proven, nothing spared
    assert fresh.choose("d.test", one_slot=True).egress is not None
    assert fresh.counts["unproven/spared_one_slot"] == 0


def test_the_egress_middleware_asks_the_throttle_which_sites_have_one_slot(tmp_path):
    crawler = get_crawler(
        settings_dict={"SCALE_EGRESSES": [A, B], "SCALE_THROTTLE_URL": f"sqlite:///{tmp_path}/throttle.db"}
    )
    throttle = Throttle.from_crawler(crawler)
    mw = EgressMiddleware.from_crawler(crawler)
    ia, ib = ids(mw.pool)
    mw.pool.observe(ib, "a.test", "ok", "none", True)
    throttle.pacing.set_crawl_delay("d.test", 1.0)  # what robots.txt's Crawl-delay: 1 does
    assert throttle.one_at_a_time("d.test") and not throttle.one_at_a_time("a.test")

    async def send(url: str) -> str:
        r = Request(url)
        await asyncio.wait_for(mw.process_request(r), 10)
        return r.meta["scale_egress"]

    # one request each: a second one to the same site would wait for the route the first holds
    assert asyncio.run(send("http://d.test/1")) == ib
    assert mw.pool.counts["unproven/spared_one_slot"] == 1  # the path ran
    asyncio.run(send("http://a.test/1"))
    assert mw.pool.counts["unproven/spared_one_slot"] == 1  # a site with more slots: not spared
