"""Testbed proxies per mode, seen from a plain HTTP client and from the targets' log."""

from __future__ import annotations

import pytest

from scrapy_scale.testbed import ProxySpec, parse_proxy

pytestmark = pytest.mark.pure


def test_proxy_spec_parsing() -> None:
    assert parse_proxy("p1:flaky,p=0.5") == ProxySpec("p1", mode="flaky", p=0.5)
    assert parse_proxy("p2,banned_by=1+shop3.example.test") == ProxySpec("p2", banned_by=(1, "shop3.example.test"))
    with pytest.raises(ValueError):
        parse_proxy("p3:zombie")


def test_proxy_spec_parsing_of_the_failing_modes() -> None:
    assert parse_proxy("b:blackhole").mode == "blackhole"
    assert parse_proxy("g:garbage").mode == "garbage"
    assert parse_proxy("m:midclose").mode == "midclose"
