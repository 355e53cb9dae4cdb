"""A short, readable account of a run, logged when the crawl ends.

``RunSummary`` (enabled by the add-on; usable alone in ``EXTENSIONS``) logs at
INFO, as the very last thing a crawl prints, about ten lines a newcomer can
read: how long it ran, pages fetched, items stored and where, outcomes by
failure class, retries and give-ups, the frontier's state, and the one command
to look further. It is a subscriber of the outcome signal (requests, retries and
give-ups by class are what it counted itself, the same events the stats count)
and reads the crawl's stats for the rest, defensively: a component that is not
enabled simply leaves its line out.

The text is built by :func:`render` (:mod:`.summary_text`), a pure function of the stats
and a few facts, so it is testable without a reactor.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.spiders import Spider

from scrapy_scale import config, exitcode, meta_keys
from scrapy_scale import signals as scale_signals
from scrapy_scale import stats_keys as K
from scrapy_scale.config import core_settings
from scrapy_scale.context import ScaleContext
from scrapy_scale.monitor.summary_text import OutcomeTally, RunFacts, _num, dead_letters, render
from scrapy_scale.redact import redact_url
from scrapy_scale.storage import settings as storage_settings

__all__ = ["OutcomeTally", "RunFacts", "RunSummary", "render"]

logger = logging.getLogger(__name__)


def store_url(crawler: Crawler) -> str | None:
    """The item store's URL without credentials, when scrapy-scale's store pipeline is on
    (it registers the URL in the crawler's context when it is built)."""
    return ScaleContext.of(crawler).store_url


#: (counts by state, failed by class, dead letters)
FrontierCounts = tuple[dict[str, int], dict[str, int], int]


def read_frontier(crawler: Crawler, job: str) -> FrontierCounts | None:
    """(counts by state, failed by class, dead letters) of the job's frontier; None when it
    is not in use.

    Asks the frontier itself, as ``scrapy scale status`` does (its final numbers); falls
    back to the counts the scheduler last put in the stats.
    """
    if not ScaleContext.of(crawler).frontier_on:
        return None
    try:
        from scrapy_scale.frontier.ops import status as frontier_status

        st = frontier_status.read_status(crawler.settings, job, must_exist=True)
        return (
            {str(k): int(v) for k, v in st["counts"].items()},
            {str(k): int(v) for k, v in st["failed_by_class"].items() if v},
            int(st["dead_letters"]),
        )
    except Exception:  # noqa: BLE001 - the summary must never break a crawl's end
        logger.debug("run summary: frontier status unavailable", exc_info=True)
    stats = crawler.stats.get_stats() if crawler.stats else {}
    prefix = K.FRONTIER_STATE
    states = {k[len(prefix) :]: _num(stats, k) for k in stats if isinstance(k, str) and k.startswith(prefix)}
    dead = _num(stats, K.FRONTIER_DEAD_LETTERS) or _num(stats, K.FRONTIER_DEAD_LETTERED)
    return (states, {}, dead) if states else None


def scrapyd_job(crawler: Crawler) -> str | None:
    """scrapyd's job id when scrapyd started this crawl (it passes the spider argument
    ``_job``), else None."""
    value = getattr(getattr(crawler, "spider", None), "_job", None)
    return str(value) if value else None


def status_command(crawler: Crawler, job: str) -> str:
    """``scrapy scale status JOB``, with the settings needed to find a non-default frontier."""
    cmd = f"scrapy scale status {job}"
    s = crawler.settings
    under_scrapyd = scrapyd_job(crawler) is not None
    for name in ("SCALE_FRONTIER_URL", "SCALE_STATE_DIR"):
        value = s.get(name)
        declared = config.REGISTRY.get(name)
        if name == "SCALE_STATE_DIR" and under_scrapyd and not s.get("SCALE_FRONTIER_URL") and not s.get("JOBDIR"):
            # relative to scrapyd's working folder, which is not where the user runs the command
            cmd += f" -s SCALE_STATE_DIR={os.path.abspath(core_settings.state_folder(s))}"
        elif value and (declared is None or value != declared.default):
            cmd += f" -s {name}={redact_url(str(value)) if '://' in str(value) else value}"
    if not s.get("SCALE_FRONTIER_URL") and s.get("JOBDIR"):
        # under scrapyd (jobs_dir) or with -s JOBDIR: the state is not where a later command looks
        cmd += f" -s SCALE_FRONTIER_URL={core_settings.state_file_url(s, 'frontier.db')}"
    return cmd


def resume_how(crawler: Crawler, job: str) -> str | None:
    """Under scrapyd: what resumes the run (a new scrapyd job of the spider; with its
    ``SCALE_JOB`` when the job is not the spider's name). None: the same ``scrapy crawl``."""
    spider = getattr(crawler, "spider", None)
    if scrapyd_job(crawler) is None or spider is None:
        return None
    name = spider.name
    project = os.environ.get("SCRAPY_PROJECT") or "PROJECT"
    schedule = f"schedule.json -d project={project} -d spider={name}"
    if job != name:
        schedule += f" -d setting=SCALE_JOB={job}"
    return f"a new scrapyd job of spider {name} ({schedule})"


class RunSummary:
    """Extension: logs :func:`render`'s lines at INFO once the engine has stopped."""

    def __init__(
        self, crawler: Crawler, frontier_reader: Callable[[Crawler, str], FrontierCounts | None] = read_frontier
    ):
        self.crawler = crawler
        self.frontier_reader = frontier_reader
        self.started: float | None = None
        self.reason: str | None = None
        self.job: str | None = None
        self.done = False
        self.tally = OutcomeTally(self._fingerprint)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RunSummary:
        ext = cls(crawler)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(ext.engine_stopped, signal=signals.engine_stopped)
        crawler.signals.connect(ext.tally.on_outcome, signal=scale_signals.outcome)
        for sig in (signals.item_scraped, signals.item_dropped, signals.item_error):
            crawler.signals.connect(ext.tally.on_item, signal=sig)
        return ext

    def _fingerprint(self, request: Any) -> str | None:
        """The fingerprint outcomes carry (scrapy_scale.outcomes.emit: the frontier's, else Scrapy's)."""
        fp = request.meta.get(meta_keys.FINGERPRINT)
        if fp:
            return str(fp)
        fingerprinter = getattr(self.crawler, "request_fingerprinter", None)
        return fingerprinter.fingerprint(request).hex() if fingerprinter is not None else None

    def spider_opened(self, spider: Spider) -> None:
        self.started = time.monotonic()
        self.job = core_settings.JOB.get(self.crawler.settings) or spider.name

    def spider_closed(self, spider: Spider, reason: str) -> None:
        self.reason = reason

    def engine_stopped(self) -> None:
        # after the stats dump and "Spider closed": the summary is the last thing printed
        if self.done or self.reason is None:
            return
        self.done = True
        try:
            logger.info("\n".join(self.lines()))
        except Exception:  # noqa: BLE001 - never turn a finished crawl into a failure
            logger.exception("run summary failed")

    def lines(self) -> list[str]:
        stats = self.crawler.stats.get_stats() if self.crawler.stats else {}
        elapsed = stats.get(K.SCRAPY_ELAPSED)
        if not isinstance(elapsed, int | float):
            elapsed = time.monotonic() - self.started if self.started is not None else 0.0
        job = self.job or "?"
        frontier = self.frontier_reader(self.crawler, job)
        store = store_url(self.crawler)
        facts = RunFacts(
            job=job,
            reason=self.reason or "?",
            duration=float(elapsed),
            store_url=store,
            frontier=frontier[0] if frontier else None,
            frontier_failed=frontier[1] if frontier else {},
            status_command=status_command(self.crawler, job) if frontier else None,
            resume_how=resume_how(self.crawler, job),
            frontier_dead=frontier[2] if frontier and len(frontier) > 2 else 0,
            item_dead_letter=_dead_letter_table(self.crawler) if store else None,
            egress_pool=ScaleContext.of(self.crawler).egress_pool is not None,
        )
        if ScaleContext.of(self.crawler).outcomes_on:
            t = self.tally
            facts.outcomes, facts.retries, facts.gave_up = (
                t.ordered(t.outcomes),
                t.ordered(t.retries),
                t.ordered(t.gave_up),
            )
        dead = dead_letters(stats, facts)
        code = core_settings.EXIT_CODE_DEAD_LETTERS.get(self.crawler.settings)
        if dead and code:
            exitcode.request(code, f"the run has {dead:,} dead letters (SCALE_EXIT_CODE_DEAD_LETTERS)", self.crawler)
        facts.exit_status = exitcode.requested(self.crawler)
        return render(stats, facts)


def _dead_letter_table(crawler: Crawler) -> str:
    import scrapy_scale.storage.settings  # noqa: F401 - declares the names read below

    s = crawler.settings
    return str(storage_settings.DEAD_LETTER.get(s) or f"{storage_settings.COLLECTION.get(s)}_dead_letter")
