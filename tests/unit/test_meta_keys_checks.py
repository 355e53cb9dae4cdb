"""The chain keys of a request's meta read back from shared state (issue 35, part 4):
``scrapy_scale.meta_keys.not_before_of``, ``avoid_of``, and the codec's check on decode."""

from __future__ import annotations

import json
import logging
import math

import pytest

from scrapy_scale import meta_keys
from scrapy_scale.frontier.records import codec

pytestmark = pytest.mark.pure

NOW = 1_800_000_000.0


@pytest.fixture(autouse=True)
def _fresh_warnings():
    meta_keys._warned_keys.clear()
    yield
    meta_keys._warned_keys.clear()


@pytest.mark.parametrize(
    "bad", ["tomorrow", math.nan, math.inf, 4_102_444_800, NOW + meta_keys.NOT_BEFORE_FAR + 1, True, [1]]
)
def test_a_bad_not_before_is_dropped_with_one_warning(bad, caplog):
    m = {meta_keys.NOT_BEFORE: bad}
    with caplog.at_level(logging.WARNING):
        assert meta_keys.not_before_of(m, NOW) is None
        assert meta_keys.NOT_BEFORE not in m  # dropped: the request is due, later readers see nothing
        m2 = {meta_keys.NOT_BEFORE: bad}
        assert meta_keys.not_before_of(m2, NOW) is None
    assert [r.getMessage() for r in caplog.records].count(next(r.getMessage() for r in caplog.records)) == 1 and len(
        caplog.records
    ) == 1


@pytest.mark.parametrize("good", [NOW - 5, NOW + 600, NOW + meta_keys.NOT_BEFORE_FAR - 1, 0, int(NOW) + 3])
def test_a_plausible_not_before_is_kept(good, caplog):
    m = {meta_keys.NOT_BEFORE: good}
    assert meta_keys.not_before_of(m, NOW) == float(good)
    assert m[meta_keys.NOT_BEFORE] == good and not caplog.records


def test_avoid_egress_that_is_not_a_list_of_ids(caplog):
    assert meta_keys.avoid_of({meta_keys.AVOID_EGRESS: ["a:1", "b:2"]}) == ("a:1", "b:2")
    assert meta_keys.avoid_of({}) == ()
    m = {meta_keys.AVOID_EGRESS: 5}
    with caplog.at_level(logging.WARNING):
        assert meta_keys.avoid_of(m) == ()
        assert meta_keys.AVOID_EGRESS not in m
        m = {meta_keys.AVOID_EGRESS: ["a:1", 7, None]}
        assert meta_keys.avoid_of(m) == ("a:1",)
        assert m[meta_keys.AVOID_EGRESS] == ["a:1"]
    assert len(caplog.records) == 1 and "scale_avoid_egress = 5" in caplog.records[0].getMessage()


def test_decode_checks_the_chain_keys_of_a_stored_request(caplog):
    data = json.dumps(
        {
            "v": 2,
            "r": {
                "url": "http://shop.example/x",
                "meta": {
                    "scale_not_before": 4_102_444_800,
                    "scale_avoid_egress": "p1",
                    "scale_attempt": "many",
                    "k": 1,
                },
            },
        }
    )
    with caplog.at_level(logging.WARNING):
        r = codec.decode(data)
    assert r.meta == {"k": 1}
    assert len(caplog.records) >= 2  # not_before and avoid_egress (attempt_of warns once per process)
