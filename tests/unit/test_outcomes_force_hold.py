"""The not-before guard marks the request it sends back to the engine (``hold``) so that
``request_scheduled`` holds it even with a scheduler that holds retries. The mark is by
``id(request)``: when the request came to be scheduled already due, the mark stayed, and a
later request that got the same id (CPython reuses them) was held in a timer instead of by
the scheduler (the frontier: then it was not stored)."""

from __future__ import annotations

import pytest
from scrapy import Request, signals
from scrapy.utils.test import get_crawler

from scrapy_scale import meta_keys
from scrapy_scale.clock import FakeClock
from scrapy_scale.context import ScaleContext
from scrapy_scale.outcomes.emit import OutcomeEmitter
from scrapy_scale.outcomes.holding import DelayedRetries

pytestmark = pytest.mark.pure


def test_the_hold_mark_goes_when_its_request_is_scheduled_already_due():
    crawler = get_crawler()
    ScaleContext.of(crawler).scheduler_holds_retries = True  # (the frontier)
    clock = FakeClock(1000.0)
    delayed = DelayedRetries(crawler, OutcomeEmitter(crawler), clock)
    again = Request("http://shop.test/a", meta={meta_keys.NOT_BEFORE: 1000.5})
    delayed.hold(again)
    assert delayed.force_hold == {id(again)}
    clock.advance(1.0)  # due by the time the engine schedules it
    crawler.signals.send_catch_log(signals.request_scheduled, request=again, spider=None)
    assert not delayed.held  # not held: due (the path under test ran)
    assert delayed.force_hold == set()  # no mark left for a later request with its id
