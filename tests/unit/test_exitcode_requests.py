"""scrapy_scale.exitcode: the status a finished crawl exits with, through Scrapy's own sys.exit."""

from __future__ import annotations

import sys

import pytest

from scrapy_scale import exitcode

pytestmark = pytest.mark.pure

#: sys.exit as collection found it, before any test could request a status
SYS_EXIT = sys.exit


def test_requested_and_reset() -> None:
    try:
        assert exitcode.requested() is None
        exitcode.request(4, "why")
        assert exitcode.requested() == (4, "why") and exitcode.exit_status(0) == 4
        assert exitcode.exit_status(1) == 1
    finally:
        exitcode.reset()
    assert exitcode.requested() is None and sys.exit is SYS_EXIT
