"""The Spidermon example of docs/monitor.md, run as it is written there (Spidermon installed):
it reads scrapy-scale's stats, passes on a healthy crawl and fails on a blocked one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scrapy_scale.testbed import Testbed
from tests.support.crawling import UNPACED, run_crawl

pytestmark = pytest.mark.crawl

DOC = Path(__file__).resolve().parents[2] / "docs" / "monitor.md"


def example(tmp_path: Path) -> dict[str, object]:
    """The doc's monitor module, importable as ``scale_monitors``; its settings."""
    text = DOC.read_text().split("### Spidermon", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    module, settings = blocks[0], blocks[1]
    assert module.startswith("# myproject/monitors.py") and settings.startswith("# settings.py")
    pkg = tmp_path / "monitors_pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "scale_monitors.py").write_text(module)
    values: dict[str, object] = {}
    exec(settings, {}, values)  # noqa: S102 - the doc's own three settings
    values["SPIDERMON_SPIDER_CLOSE_MONITORS"] = tuple(
        p.replace("myproject.monitors", "scale_monitors") for p in values["SPIDERMON_SPIDER_CLOSE_MONITORS"]
    )
    return values


def run(tmp_path: Path, faults: str) -> str:
    settings = example(tmp_path)
    with Testbed(hosts=2, pages=20, faults=faults) as tb:
        # pacing is not what the monitors check: no start delay
        res = run_crawl(tb, {**settings, **UNPACED}, tmp_path, env={"PYTHONPATH": str(tmp_path / "monitors_pkg")})
    assert res.returncode == 0, res.tail()
    return res.log


def test_the_spidermon_example_passes_on_a_healthy_crawl(tmp_path: Path) -> None:
    log = run(tmp_path, "")
    assert "at least 90% of requests succeed... OK" in log, log[-3000:]
    assert "no item went to the dead letters... OK" in log
    assert "requests took 2 attempts or fewer on average... OK" in log


def test_the_spidermon_example_fails_on_a_blocked_crawl(tmp_path: Path) -> None:
    log = run(tmp_path, "403:/item/*")
    assert "at least 90% of requests succeed... FAIL" in log, log[-3000:]
