"""The testbed over real sockets: catalog, exact request log, every fault, determinism, rate limit."""

from __future__ import annotations

import pytest

from scrapy_scale.testbed import Fault, parse_faults

pytestmark = pytest.mark.pure


def test_fault_spec_parsing_and_errors() -> None:
    f = parse_faults("503@1+shop2.example.test:/list/*,first=2,retry_after=date:5 ; 403,egresses=p1+direct")
    assert f[0] == Fault("503", path="/list/*", hosts=(1, "shop2.example.test"), first=2, retry_after="date:5")
    assert f[1] == Fault("403", egresses=("p1", "direct"))
    assert parse_faults("503@1:/,until=5") == [Fault("503", path="/", hosts=(1,), until=5.0)]
    for bad in ["teapot", "429,p=2", "429,bogus=1", "layout,variant=weird", "429,retry_after=soon", "503,until=-1"]:
        with pytest.raises(ValueError):
            parse_faults(bad)
