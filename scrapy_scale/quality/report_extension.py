"""``scrapy_scale.quality.QualityReport``: the extension that counts a run's figures (a
subscriber of the ``outcome`` signal, plus ``item_scraped`` and what the store pipeline
offers), runs the checks on them periodically during the crawl and writes the end-of-run
consistency report (JSON and HTML beside the job's data, verdict in the history).

The decisions are in :mod:`~scrapy_scale.quality.checks` and
:mod:`~scrapy_scale.quality.report_build`; this is the Scrapy glue.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import task, threads

from scrapy_scale import exitcode, startup
from scrapy_scale import signals as scale_signals
from scrapy_scale import stats_keys as K
from scrapy_scale.config import core_settings
from scrapy_scale.context import ScaleContext
from scrapy_scale.outcomes.model import Outcome
from scrapy_scale.pids import pid_alive
from scrapy_scale.quality import report_build
from scrapy_scale.quality import settings as S
from scrapy_scale.quality import settings as quality_settings
from scrapy_scale.quality.checks import evaluate, failed
from scrapy_scale.quality.figures import COMPLETED_CLASSES, RunFigures
from scrapy_scale.quality.history import History, baseline
from scrapy_scale.quality.pipeline import figures_of
from scrapy_scale.storage import settings as storage_settings
from scrapy_scale.storage.pipeline import resolve_run_id

logger = logging.getLogger(__name__)


def callback_of(request: Request | None) -> str:
    cb = getattr(request, "callback", None)
    return str(getattr(cb, "__name__", None) or "parse")


class QualityReport:
    def __init__(self, crawler: Crawler):
        self.crawler = crawler
        self.settings = crawler.settings
        self.stats = crawler.stats
        self.ctx = ScaleContext.of(crawler)
        self.figures: RunFigures = figures_of(crawler)
        self.thresholds = report_build.thresholds(crawler.settings)
        self.batch_seconds: float = quality_settings.BATCH_SECONDS.get(crawler.settings)
        self.exit_code: int = quality_settings.EXIT_CODE.get(crawler.settings)
        self.finish_reason: str | None = quality_settings.FINISH_REASON.get(crawler.settings)
        self.started = time.time()
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.part = f"{self.host}-{self.pid}-{int(self.started * 1000)}"
        self.judge_wait: float = quality_settings.JUDGE_WAIT.get(crawler.settings)
        self._flush: Any = None
        self.history: History | None = None
        self._baseline: list[RunFigures] = []
        self._failing: set[str] = set()
        #: names of the checks failing at the last periodic run (None before the first); the
        #: metrics read it through the context (``ScaleContext.quality_report``)
        self.failing: list[str] | None = None
        self.ctx.quality_report = self
        self._loop: task.LoopingCall | None = None
        self._flushing = False
        #: the last report (tests, scripts)
        self.report: dict[str, Any] | None = None
        sig = crawler.signals
        sig.connect(self.on_outcome, signal=scale_signals.outcome)
        sig.connect(self.on_item_scraped, signal=signals.item_scraped)
        sig.connect(self.on_opened, signal=signals.spider_opened)
        sig.connect(self.on_closed, signal=signals.spider_closed)

    @classmethod
    @startup.reports_setting_errors
    def from_crawler(cls, crawler: Crawler) -> QualityReport:
        S.check_all(crawler.settings)
        if not quality_settings.REPORT.get(crawler.settings):
            raise NotConfigured("SCALE_QUALITY_REPORT is off")
        return cls(crawler)

    # ---- counting (reactor thread, O(1)) ---------------------------------------------------

    def on_outcome(self, outcome: Outcome, request: Request | None = None, **kw: Any) -> None:
        if not outcome.final or outcome.internal:
            return
        f = self.figures
        cls = str(outcome.cls)
        f.classes[cls] += 1
        if cls in COMPLETED_CLASSES:
            cb = outcome.callback or callback_of(request)
            f.completed[cb] += 1
            if outcome.items == 0 and not outcome.reason.startswith("callback raised"):
                f.empty[cb] += 1
                if outcome.requests:
                    f.listings[cb] += 1

    def on_item_scraped(self, item: Any = None, response: Any = None, **kw: Any) -> None:
        self.figures.stored[callback_of(getattr(response, "request", None))] += 1

    # ---- lifecycle ---------------------------------------------------------------------------

    async def on_opened(self, spider: Spider) -> None:
        f = self.figures
        f.job = self.ctx.job or core_settings.JOB.get(self.settings) or spider.name
        f.run_id = str(resolve_run_id(self.crawler))
        d = threads.deferToThread(self._load)
        d.addErrback(lambda fail: logger.error("quality history cannot be read: %s", fail.getErrorMessage()))
        if self.batch_seconds:
            self._loop = task.LoopingCall(self._batch)
            self._loop.start(self.batch_seconds, now=False)
        await maybe_deferred_to_future(d)

    def _load(self) -> None:
        """On a thread: open the history, read the earlier runs to compare with."""
        self.history = report_build.open_history(self.settings)
        runs = self.history.runs(self.figures.job)
        self._baseline = [r.figures for r in baseline(runs, self.figures.run_id)]
        # this process takes part in the run: whoever judges it waits for its final figures
        self._save(self.history, RunFigures.from_json(self.figures.to_json()), final=False)

    def _save(self, h: History, fig: RunFigures, final: bool) -> None:
        h.put_figures(fig, self.part, self.started, final=final, host=self.host, pid=self.pid)

    def _alive(self, host: str, pid: int) -> bool:
        """May the process that wrote a part still count? (Another host's: yes, until the wait ends.)"""
        return host != self.host or pid_alive(pid)

    def _sync_store_figures(self) -> None:
        store = self.ctx.store
        if store is not None:
            self.figures.duplicates_by_key = int(store.duplicates_in_run)

    def _batch(self) -> None:
        """The checks on the figures so far (no store scan): stats, and a warning per newly
        failing check; the figures go to the history (a crash keeps what was counted)."""
        self._sync_store_figures()
        checks = evaluate(self.figures, self._baseline, self.thresholds)
        bad = failed(checks)
        self.stats.inc_value(K.QUALITY_BATCH_CHECKS)
        self.stats.set_value(K.QUALITY_BATCH_FAILED, len(bad))
        new = [c for c in bad if c.name not in self._failing]
        self._failing = {c.name for c in bad}
        self.failing = sorted(self._failing)
        for c in new:
            logger.warning("quality check failing during the crawl: %s: %s", c.name, c.message)
        if self.history is not None and not self._flushing:
            self._flushing = True
            h, fig = self.history, RunFigures.from_json(self.figures.to_json())
            d = self._flush = threads.deferToThread(self._save, h, fig, False)
            d.addErrback(lambda fail: logger.warning("quality figures not saved: %s", fail.getErrorMessage()))
            d.addBoth(lambda _: setattr(self, "_flushing", False))

    async def on_closed(self, spider: Spider, reason: str) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self._flushing and self._flush is not None:  # its not-final figures must not land last
            await maybe_deferred_to_future(self._flush)
        self._sync_store_figures()
        store_on = self.ctx.store is not None
        snapshots = self.ctx.snapshot_index
        index = snapshots.index() if snapshots is not None else {}
        fig = RunFigures.from_json(self.figures.to_json())
        # the run is over when the crawl finished or the frontier found it drained (a fleet
        # held open for seeds, stopped with Ctrl-C): then every worker judges it whole
        ended = reason == "finished" or self.ctx.run_drained
        d = threads.deferToThread(self._finish, fig, store_on, index, reason, ended)
        d.addCallbacks(self._judged, self._failed)
        await maybe_deferred_to_future(d)

    def _finish(
        self, fig: RunFigures, store_on: bool, index: dict[str, str], reason: str, ended: bool
    ) -> dict[str, Any]:
        """On a thread: save this process's final figures, build the report of the whole run.
        The verdict goes to the history only when the run ``ended`` (the crawl finished, or
        the frontier found the run drained; an interrupted run, to be resumed, is judged by
        the process that finishes it); then every process that took part in the run has
        closed or is closing, so each waits for the others' final figures
        (``SCALE_QUALITY_JUDGE_WAIT``) and all judge the same whole run."""
        s = self.settings
        if self.history is None:
            self.history = report_build.open_history(s)
        h = self.history
        try:
            self._save(h, fig, final=True)
            left: list[str] = []
            if ended:
                left = h.wait_settled(fig.job, fig.run_id, self.judge_wait, self._alive)
                if left:
                    logger.warning(
                        "quality report of job %r run %s: judged without the final figures of %d process(es) "
                        "still counting after %.0f s (SCALE_QUALITY_JUDGE_WAIT): %s",
                        fig.job,
                        fig.run_id,
                        len(left),
                        self.judge_wait,
                        ", ".join(left[:5]),
                    )
            runs = h.runs(fig.job)
            scan = report_build.scan_store(s, fig.job, fig.run_id) if store_on else None
            report = report_build.build(
                fig.job,
                fig.run_id,
                runs,
                self.thresholds,
                scan,
                quality_settings.SAMPLE_SIZE.get(s),
                storage_settings.FIELDS.get(s),
                snapshots=index,
                keep=h.keep,
            )
            report["finished"], report["close_reason"] = ended, reason
            report["processes"] = next((r.parts for r in runs if r.run_id == fig.run_id), 1)
            report["unsettled"] = left
            if report["finished"]:
                h.put_report(fig.job, fig.run_id, report["ok"], report["failed"])
            h.prune(fig.job)
            report["paths"] = report_build.write(report, report_build.quality_dir(s, fig.job))
            return report
        finally:
            h.close()

    def _judged(self, report: dict[str, Any]) -> None:
        self.report = report
        st = self.stats
        st.set_value(K.QUALITY_REPORT_OK, int(report["ok"]))
        st.set_value(K.QUALITY_CHECKS_FAILED, len(report["failed"]))
        for name in report["failed"]:
            st.set_value(K.QUALITY_CHECK_FAILED + name, 1)
        json_path, html_path = report["paths"]
        whole = f"the figures of {report.get('processes', 1)} process(es)"
        if report["ok"]:
            logger.info("%s, from %s; report: %s", report["summary"], whole, html_path)
            return
        lines = [f"  FAILED {c['name']}: {c['message']}" for c in report["checks"] if c["ok"] is False]
        if not report.get("finished", True):
            logger.warning(
                "quality report of job %r run %s, which has not finished (closed: %s): %d check(s) "
                "failing so far (the run is judged when it finishes)\n%s\n  report: %s",
                report["job"],
                report["run_id"],
                report["close_reason"],
                len(lines),
                "\n".join(lines),
                html_path,
            )
            return
        logger.error(
            "quality report of job %r run %s: %d check(s) failed, from %s\n%s\n  report: %s (JSON: %s)",
            report["job"],
            report["run_id"],
            len(lines),
            whole,
            "\n".join(lines),
            html_path,
            json_path,
        )
        if self.exit_code:
            exitcode.request(self.exit_code, f"quality checks failed: {', '.join(report['failed'])}", self.crawler)
        if self.finish_reason:
            st.set_value(K.SCRAPY_FINISH_REASON, self.finish_reason)

    def _failed(self, failure: Any) -> None:
        logger.error("quality report not written: %s", failure.getTraceback())
