"""scrapy_scale.exitcode: the status a finished crawl exits with, through Scrapy's own sys.exit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.hang import hang_guard

pytestmark = pytest.mark.crawl


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
    proc = subprocess.run([sys.executable, "-c", code], timeout=hang_guard(60))
    assert proc.returncode == expected


TWO_CRAWLS = """
import sys
from scrapy.crawler import CrawlerRunner
from scrapy.utils.log import configure_logging
from scrapy.utils.project import get_project_settings
from scrapy.utils.reactor import install_reactor

install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
from twisted.internet import defer, reactor
from storage_test_spiders import UnencodableSpider
from scrapy_scale import exitcode


class CleanSpider(UnencodableSpider):
    name = "clean"
    start_urls = ["data:text/plain,ok"]


settings = get_project_settings()
settings.setdict({"SCALE_STATE_DIR": sys.argv[1], "FEEDS": {}, "LOG_LEVEL": "INFO", "DOWNLOAD_DELAY": 0,
                  "SCALE_FRONTIER_SCHEMES": ["http", "https", "data"], "TELNETCONSOLE_ENABLED": False})
configure_logging(settings)
runner = CrawlerRunner(settings)


@defer.inlineCallbacks
def one_after_the_other():
    try:
        yield runner.crawl(UnencodableSpider)  # 2 dead letters
        yield runner.crawl(CleanSpider)  # none
    finally:
        reactor.stop()


one_after_the_other()
reactor.run()
print("PROCESS", exitcode.requested())
"""


def test_the_exit_status_of_one_crawl_does_not_leak_into_the_next_in_the_same_process(tmp_path) -> None:
    """Before: after a crawl with dead letters, a later crawl of the same process said
    "exit status 3: the run has 2 dead letters" in its summary, with none of its own."""
    from tests.crawl.test_storage_crawl import write_spiders
    from tests.support.crawling import ROOT

    env = write_spiders(tmp_path)
    script = tmp_path / "two_crawls.py"
    script.write_text(TWO_CRAWLS)
    import os

    penv = {**os.environ, "PYTHONPATH": os.pathsep.join([env["PYTHONPATH"], str(ROOT)])}
    penv["SCRAPY_SETTINGS_MODULE"] = "example_project.settings"
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "state")],
        cwd=ROOT,
        env=penv,
        capture_output=True,
        text=True,
        timeout=hang_guard(120),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    first, second = out.split("summary: job 'clean'")
    assert "exit status   3: the run has 2 dead letters" in first, out[-4000:]
    assert "dead letters" not in second and "exit status" not in second, second[-2000:]
    # the process as a whole still knows: a script reads it after its crawls
    assert "PROCESS (3, 'the run has 2 dead letters (SCALE_EXIT_CODE_DEAD_LETTERS)')" in out, out[-2000:]
