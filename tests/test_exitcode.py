"""scrapy_scale.exitcode: the status a finished crawl exits with, through Scrapy's own sys.exit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scrapy_scale import exitcode


@pytest.mark.parametrize("scrapy_status,expected", [(0, 3), (None, 3), (1, 1), (2, 2)])
def test_a_requested_status_replaces_a_zero_exit_only(scrapy_status, expected) -> None:
    code = (
        "import sys\n"
        "from scrapy_scale import exitcode\n"
        "exitcode.request(2, 'lower, ignored')\n"
        "exitcode.request(3, 'dead letters')\n"
        "exitcode.request(0, 'zero is ignored')\n"
        f"sys.exit({scrapy_status!r})\n"  # what scrapy.cmdline.execute ends with
    )
    proc = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert proc.returncode == expected


def test_requested_and_reset() -> None:
    try:
        assert exitcode.requested() is None
        exitcode.request(4, "why")
        assert exitcode.requested() == (4, "why") and exitcode.exit_status(0) == 4
        assert exitcode.exit_status(1) == 1
    finally:
        exitcode.reset()
    assert exitcode.requested() is None and sys.exit is exitcode._original_exit
