"""The metrics extension: Scrapy glue between the crawl, :class:`~.metrics.CrawlMetrics`
and the export modes (:mod:`.export`).

Enabled by the add-on; it raises ``NotConfigured`` unless an export mode is set
(``SCALE_METRICS_PORT``, ``SCALE_METRICS_PUSHGATEWAY``, ``SCALE_METRICS_TEXTFILE``), so
a default crawl is unchanged. Alone: ``EXTENSIONS = {"scrapy_scale.monitor.MetricsExtension": 0}``.

- Counts: a subscriber of :data:`scrapy_scale.signals.outcome`, plus ``item_scraped``
  (stored) and ``item_dropped``/``item_error`` carrying ``ItemDeadLettered`` (dead letters).
- Every ``SCALE_METRICS_INTERVAL``: the busiest domains get their series, and the gauges
  are read from what the other components offer: the frontier's status (job-wide, through
  :class:`~.frontier_poller.FrontierPoller`), the downloader's open slots and their delays,
  ``ScaleContext.egress_pool`` (``pool_sizes()``: egresses by state) and
  ``ScaleContext.browser`` (``contexts``, ``processes``), ``quality_figures``
  (items validated / quarantined) and ``quality_report`` (``failing``: the checks
  failing at the last periodic run) when they are there;
  then the push and the textfile are written (in a thread: the reactor never waits).
- At close: a last read, the final push (then the group is deleted when
  ``SCALE_METRICS_PUSH_DELETE``), the final textfile; the endpoint and its file_sd file go.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet import defer, task, threads

from scrapy_scale import compat, startup
from scrapy_scale.config import ScaleSettingError, core_settings
from scrapy_scale.context import ScaleContext
from scrapy_scale.monitor import live_metrics
from scrapy_scale.monitor import settings as S
from scrapy_scale.redact import redact_url

logger = logging.getLogger(__name__)

#: longest wait for the final export when the reactor stops before the spider closed
SHUTDOWN_SECONDS = 5.0


class MetricsExtension:
    def __init__(self, crawler: Any):
        from scrapy_scale.monitor.export import FileSD, MetricsPortError, MetricsServer, Pusher

        s = crawler.settings
        self.crawler = crawler
        self.interval = S.INTERVAL.get(s)
        self.ports = S.PORT.get(s)
        self.gateway = S.PUSHGATEWAY.get(s)
        self.push_delete = S.PUSH_DELETE.get(s)
        self.textfile = S.TEXTFILE.get(s)
        job = core_settings.JOB.get(s) or getattr(crawler.spidercls, "name", None) or "-"
        self.metrics = live_metrics.crawl_metrics(crawler)
        self.registry = self.metrics.registry()
        self.server: MetricsServer | None = None
        self.file_sd: FileSD | None = None
        self.pusher: Pusher | None = None
        self._pusher_cls = Pusher
        self._loop: task.LoopingCall | None = None
        self._exporting: defer.Deferred[Any] | None = None
        self._export_warned: set[str] = set()
        self._poller: Any = None
        #: the final export ran (spider_closed), or the reactor's shutdown took its place
        self._finalized = False
        self._shutdown_trigger: Any = None
        if self.ports is not None:
            self.server = MetricsServer(self.registry, S.HOST.get(s), self.ports)
            try:
                self.server.start()
            except MetricsPortError as e:
                raise ScaleSettingError("SCALE_METRICS_PORT", str(e).split(": ", 1)[-1]) from None
            folder = S.FILE_SD.get(s) or os.path.join(core_settings.STATE_DIR.get(s), "prometheus")
            self.file_sd = FileSD(folder, job)

    @classmethod
    @startup.reports_setting_errors
    def from_crawler(cls, crawler: Any) -> MetricsExtension:
        s = crawler.settings
        if not any(x.get(s) is not None for x in (S.PORT, S.PUSHGATEWAY, S.TEXTFILE)):
            # the usual case (the add-on enables the extension in every crawl): a DEBUG line,
            # and NotConfigured without a message, which Scrapy would log at WARNING
            logger.debug(
                "Disabled MetricsExtension: no metrics export mode (SCALE_METRICS_PORT / _PUSHGATEWAY / _TEXTFILE)"
            )
            raise NotConfigured()
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            raise ScaleSettingError(
                "SCALE_METRICS_PORT", "metrics need prometheus-client: pip install 'scrapy-scale[prometheus]'"
            ) from None
        ext = cls(crawler)
        sig = crawler.signals
        sig.connect(ext.spider_opened, signal=signals.spider_opened)
        sig.connect(ext.spider_closed, signal=signals.spider_closed)
        sig.connect(ext.engine_stopped, signal=signals.engine_stopped)
        return ext

    # ---- lifecycle ----------------------------------------------------------------------

    def spider_opened(self, spider: Any) -> None:
        from scrapy_scale.monitor.frontier_poller import FrontierPoller

        m = self.metrics
        live_metrics.set_labels(self.crawler, m, spider)
        job, worker = m.base["job"], m.base["worker"]
        self._poller = FrontierPoller.install(self.crawler, job)
        if self.server is not None and self.file_sd is not None:
            self.file_sd.write(self.server.address, {"scale_job": job, "spider": spider.name})
            logger.info("metrics at http://%s/metrics (file_sd %s)", self.server.address, self.file_sd.path)
        if self.gateway:
            scrapyd_job = str(getattr(spider, "_job", "") or "")
            self.pusher = self._pusher_cls(
                self.registry,
                self.gateway,
                {"job": job, "spider": spider.name, "worker": worker, "scrapyd_job": scrapyd_job},
            )
        if self.pusher is not None or self.textfile:
            self._shutdown_trigger = compat.installed_reactor().addSystemEventTrigger(
                "before", "shutdown", self._on_reactor_shutdown
            )
        self._loop = task.LoopingCall(self.tick)
        self._loop.start(self.interval, now=True).addErrback(
            lambda f: logger.error("metrics: periodic read failed: %s", f.getErrorMessage())
        )

    def tick(self) -> None:
        """Every interval, on the reactor: nothing here waits (the frontier read and the
        exports run in threads and land when they are done)."""
        live_metrics.refresh(self.crawler, self.metrics)
        if self._poller is not None:
            self._poller.refresh().addCallback(self.metrics.set_frontier)
        if self._exporting is None and (self.pusher is not None or self.textfile):
            self._exporting = deferred_from_coro(self._export(final=False))
            self._exporting.addBoth(self._export_done)

    async def _final(self) -> None:
        """At close: a last read of everything, then the final exports. A browser
        integration closes its contexts at spider close too: its ``settled()`` is awaited
        first (30 s at most) so the last gauge says what stayed open, not what was."""
        settled = getattr(ScaleContext.of(self.crawler).browser, "settled", None)
        if callable(settled):
            from twisted.internet import reactor

            try:
                await maybe_deferred_to_future(settled().addTimeout(30, reactor))
            except Exception:  # noqa: BLE001 - the export goes on with what is open now
                logger.debug("metrics: browser contexts not settled at close", exc_info=True)
        if self._poller is not None:
            self.metrics.set_frontier(await maybe_deferred_to_future(self._poller.refresh(fresh=True)))
        await self._last_export()

    def _export_done(self, result: Any) -> None:
        self._exporting = None

    async def _export(self, final: bool) -> None:
        from twisted.internet import reactor

        def work() -> None:
            if self.textfile:
                self._guard("textfile", self._write_textfile)
            if self.pusher is not None:
                self._guard("push", self.pusher.push)
                if final and self.push_delete:
                    self._guard("delete", self._delete_group)

        await maybe_deferred_to_future(threads.deferToThreadPool(reactor, reactor.getThreadPool(), work))  # type: ignore[attr-defined]

    def _delete_group(self) -> None:
        """The final delete, tried three times: a group left behind at close stays on the
        Pushgateway until someone deletes it (a busy gateway may time out once)."""
        import time

        assert self.pusher is not None
        for attempt in range(3):
            try:
                self.pusher.delete()
                return
            except Exception:
                if attempt == 2:
                    raise
                time.sleep(0.5 * (attempt + 1))

    def _write_textfile(self) -> None:
        from scrapy_scale.monitor.export import write_textfile

        write_textfile(self.registry, self.textfile)

    def _guard(self, what: str, fn: Any) -> None:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - an export failing must not break the crawl
            if what not in self._export_warned:  # once per kind; the next interval tries again
                self._export_warned.add(what)
                where = self.textfile if what == "textfile" else redact_url(self.gateway or "")
                logger.warning("metrics %s to %s failed (will keep trying): %s", what, where, e)

    async def spider_closed(self, spider: Any, reason: str) -> None:
        self._finalized = True
        self._stop_loop()
        try:
            await self._final()
        finally:
            self._remove_trigger()

    def _on_reactor_shutdown(self) -> defer.Deferred[Any] | None:
        """The reactor stops without the spider having closed (a Ctrl-C while Scrapy's
        engine was still starting, a second Ctrl-C): the final push, the group's delete and
        the textfile are still written, within SHUTDOWN_SECONDS, so no group is left behind
        on the Pushgateway with a crawl's last numbers."""
        self._shutdown_trigger = None
        if self._finalized:
            return None
        self._finalized = True
        self._stop_loop()
        d = deferred_from_coro(self._last_export())
        d.addTimeout(SHUTDOWN_SECONDS, compat.installed_reactor())
        d.addErrback(lambda f: logger.warning("metrics: final export at shutdown failed: %s", f.getErrorMessage()))
        return d

    async def _last_export(self) -> None:
        """The final read of the crawl's gauges and the final exports, after any export
        still running."""
        while self._exporting is not None:
            await maybe_deferred_to_future(self._exporting)
        live_metrics.refresh(self.crawler, self.metrics)
        await self._export(final=True)

    def _stop_loop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    def _remove_trigger(self) -> None:
        if self._shutdown_trigger is not None:
            compat.installed_reactor().removeSystemEventTrigger(self._shutdown_trigger)
            self._shutdown_trigger = None

    def engine_stopped(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.file_sd is not None:
            self.file_sd.remove()
