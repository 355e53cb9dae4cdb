"""Scrapy glue of the egress pool: a downloader middleware and an outcome subscriber.

``process_request`` (order 540, before the outcome middleware's not-before guard at
550) asks the pool for an egress for the request's domain, avoiding
``meta["scale_avoid_egress"]``, and sets ``meta["proxy"]`` (credential-free),
``meta["scale_egress"]`` (the stable id) and ``Proxy-Authorization`` (used by Scrapy
for plain requests and for the CONNECT of ``https://`` ones). The download slot is
never touched: pacing stays per target domain. When no egress is available for the
domain the request goes back to the scheduler with ``meta["scale_not_before"]`` (the
frontier keeps it; with another scheduler the outcome middleware's not-before guard
holds it in a timer), so other domains go on.

Health comes from the ``outcome`` signal only (:meth:`EgressMiddleware.on_outcome`).
Credentials stay on the wire: ``Proxy-Authorization`` is removed from every request
that goes back to the scheduler (``request_scheduled``), so the frontier never stores it.
"""

from __future__ import annotations

import base64
import itertools
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet import task, threads

from scrapy_scale import meta_keys
from scrapy_scale import signals as scale_signals
from scrapy_scale import stats_keys as K
from scrapy_scale.clock import Randomness
from scrapy_scale.config import core_settings
from scrapy_scale.context import ScaleContext
from scrapy_scale.egress import settings as S
from scrapy_scale.egress.browser import CONTEXT, PAGE, BrowserContexts
from scrapy_scale.egress.events import EventReport
from scrapy_scale.egress.first_byte import SLOW_BODY, FirstByteTimeout
from scrapy_scale.egress.health import HealthPolicy
from scrapy_scale.egress.identity import Egress
from scrapy_scale.egress.pool import EgressPool, PoolOptions
from scrapy_scale.egress.report import bounded_stats, describe_pool
from scrapy_scale.egress.shared import open_state
from scrapy_scale.egress.source_loading import SourceLoading
from scrapy_scale.egress.sources import Refresher
from scrapy_scale.egress.state_sync import StateSync
from scrapy_scale.egress.waits import Waits
from scrapy_scale.outcomes.model import Outcome
from scrapy_scale.redact import redact_text

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: meta key: the token of the attempt's in-flight slot in the pool (internal)
_TOKEN = "_scale_egress_token"
_AUTH = b"Proxy-Authorization"
#: longest a request waits for an egress before the pool is asked again (seconds)
RECHECK = 5.0


class EgressMiddleware:
    def __init__(self, crawler: Crawler, source: S.Source):
        self.crawler = crawler
        st = crawler.settings
        self.stats = crawler.stats
        policy = HealthPolicy(
            min_failures=S.MIN_FAILURES.get(st),
            threshold=S.THRESHOLD.get(st),
            half_life=S.HALF_LIFE.get(st),
            base=S.QUARANTINE.get(st),
            max_quarantine=S.QUARANTINE_MAX.get(st),
            probes=S.PROBES.get(st),
            probe_timeout=max(30.0, S.QUARANTINE.get(st)),
        )
        options = PoolOptions(
            sticky_uses=S.STICKY_USES.get(st),
            sticky_age=S.STICKY_AGE.get(st),
            route_rate=S.ROUTE_RATE.get(st),
            group_retire=S.GROUP_RETIRE.get(st),
        )
        self.pool = EgressPool(source.egresses, policy, options, time.time, Randomness())
        self.exhausted = S.EXHAUSTED.get(st)
        self.sync_every = S.SYNC.get(st)
        self.top = S.STATS_TOP.get(st)
        refresher = Refresher(source, S.REFRESH.get(st), time.time, timeout=S.PROVIDER_TIMEOUT.get(st))
        if source.kind == "provider":
            p = source.provider
            refresher.provider = p.from_crawler(crawler) if hasattr(p, "from_crawler") else p()
        self.sources = SourceLoading(crawler, refresher, self.pool, lambda: self.state.store, self.exhausted)
        self.worker = st.get("SCALE_FRONTIER_WORKER") or f"{socket.gethostname()}/{os.getpid()}"
        self._tokens: dict[int, str] = {}
        self._next_token = itertools.count(1)
        # the longest a request waits in place: past the longest quarantine and a re-probe's
        # slot, no egress came back for it
        self.waits = Waits(
            crawler, self.exhausted, S.QUARANTINE_MAX.get(st) + max(30.0, S.QUARANTINE.get(st)) + RECHECK
        )
        self._loops: list[task.LoopingCall] = []
        self.first_byte = FirstByteTimeout(
            crawler, S.FIRST_BYTE_TIMEOUT.get(st), answered=self.pool.answered, bodies=self.pool.bodies
        )
        self.browser = BrowserContexts(crawler, S.CONTEXT_PAGES.get(st), S.CONTEXT_AGE.get(st), time.time)
        self.events = EventReport(
            self.stats, self.browser, lambda: self.state.store.where if self.state.store else None
        )
        self.state = StateSync(self.pool, self.events, self.stats, self.worker, self.sync_every, self._browser_gauges)
        self.ctx = ScaleContext.of(crawler)
        self.ctx.egress_pool = self
        pacer = self.ctx.pacer
        if pacer is not None and hasattr(pacer, "use_routes"):  # the throttle learns each route's capacity
            self.pool.routes.attach(pacer.use_routes(self.pool.usable))
        self.ctx.browser = self.browser  # live contexts and browser processes, for the metrics
        crawler.signals.connect(self.on_outcome, signal=scale_signals.outcome)
        crawler.signals.connect(self.on_scheduled, signal=signals.request_scheduled)
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> EgressMiddleware:
        source = S.EGRESSES.get(crawler.settings)
        if source is None:
            raise NotConfigured("SCALE_EGRESSES is not set")
        return cls(crawler, source)

    # ---- requests ------------------------------------------------------------------

    async def process_request(self, request: Request, spider: Any = None) -> Request | None:
        m = request.meta
        self.pool.routes.release(request)  # it takes its route now, or waits
        if "proxy" in m and meta_keys.EGRESS not in m:
            return None  # the project chose this request's proxy itself
        self._release(m.pop(_TOKEN, None))
        # Scrapy's own downloads (robots.txt, media: no callback) do not go through the
        # scheduler: engine.download_async sends a returned request again at once, so such
        # a request waits here (as does every request when no guard would hold it back)
        here = request.callback is NO_CALLBACK or not self.ctx.outcomes_on
        nb = meta_keys.not_before_of(m)
        if nb is not None and nb > time.time() + meta_keys.NOT_BEFORE_TOLERANCE:
            if not here:
                # the outcome middleware's guard holds it back (whatever its clock says by
                # then: never out without an egress); an egress is chosen when it is due
                m[meta_keys.HOLD_BACK] = True
                return None
            await self.waits.nap(nb)
        domain = urlparse_cached(request).hostname or ""
        since = time.time()
        while True:
            choice = self.pool.choose(
                domain,
                meta_keys.avoid_of(m),
                retry=meta_keys.attempt_of(m) > 1,
                one_slot=self._one_slot(domain),
                refused_via=meta_keys.refused_via(m),
            )
            if choice.egress is not None:
                break
            if not here:
                return self._wait(request, domain, choice.wait_until, choice.reason)
            self.waits.note(domain, choice.wait_until, choice.reason)
            self.waits.check(domain, since)
            await self.waits.nap(min(choice.wait_until, time.time() + RECHECK))
        self.waits.over(domain)
        self._assign(request, choice.egress, choice.unproven)
        if choice.probe:
            self.stats.inc_value(K.EGRESS_REPROBES)
        self.stats.inc_value(K.EGRESS_REQUESTS)
        if m.get("playwright"):
            try:
                await self.browser.assign(request, choice.egress, self.crawler.spider)
            except Exception:
                self.stats.inc_value(K.EGRESS_BROWSER_FAILED_STARTS)
                raise  # EgressContextError: an egress_failed outcome, retried through another egress
        return None

    def _assign(self, request: Request, e: Egress, unproven: bool = False) -> None:
        m = request.meta
        m[meta_keys.EGRESS] = e.id
        if unproven:
            m[meta_keys.EGRESS_PROBE] = True
        else:
            m.pop(meta_keys.EGRESS_PROBE, None)  # an earlier attempt's
        m["proxy"] = e.proxy_url
        m.pop("_auth_proxy", None)  # HttpProxyMiddleware's memory of the previous egress
        request.headers.pop(_AUTH, None)
        creds = e.credentials
        if creds:
            request.headers[_AUTH] = b"Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode())
        token = next(self._next_token)
        self._tokens[token] = e.id
        m[_TOKEN] = token

    def _one_slot(self, domain: str) -> bool:
        """The pacer gives ``domain`` one request in flight (a Crawl-delay): no re-probe or
        unproven egress takes its one slot while a proven egress is free."""
        one = getattr(self.ctx.pacer, "one_at_a_time", None)
        return bool(one(domain)) if callable(one) else False

    def _wait(self, request: Request, domain: str, until: float, reason: str) -> Request:
        """The request back to the scheduler, not before the pool may have an egress for it.

        A scheduler that holds requests (the frontier) keeps it, as a retry of the same
        record; with another one it comes straight back and the outcome middleware's
        not-before guard holds it in a timer. It comes back within RECHECK seconds at
        most: the pool may have changed meanwhile (a source added egresses, another
        worker restored one)."""
        again = request.replace(dont_filter=True)
        again.meta[meta_keys.NOT_BEFORE] = min(until, time.time() + RECHECK)
        self.waits.note(domain, until, reason)
        return again

    def _release(self, token: Any) -> None:
        e = self._tokens.pop(token, None) if isinstance(token, int) else None
        if e is not None:
            self.pool.release(e)

    def process_response(self, request: Request, response: Any, spider: Any = None) -> Any:
        if request.callback is NO_CALLBACK:  # Scrapy's own downloads get no outcome
            self._release(request.meta.pop(_TOKEN, None))
        return response

    def on_scheduled(self, request: Request, spider: Any = None) -> None:
        """A request going (back) to the scheduler carries no credentials to be stored, nor
        what belongs to an earlier attempt (its copy of whose meta it is)."""
        request.meta.pop(meta_keys.EGRESS_PROBE, None)
        request.meta.pop(SLOW_BODY, None)
        if request.meta.get(meta_keys.EGRESS) is not None:
            # the pool assigns an egress at every attempt (a project's own "proxy" has no
            # EGRESS): an earlier attempt's egress and proxy must not stay, or a failure
            # before this middleware runs again (an earlier middleware's exception, a
            # request dropped while held) would be blamed on that egress
            request.meta.pop(meta_keys.EGRESS, None)
            request.meta.pop("proxy", None)
            request.headers.pop(_AUTH, None)
            request.meta.pop("_auth_proxy", None)
            kwargs = request.meta.get("playwright_context_kwargs")
            if isinstance(kwargs, dict) and "proxy" in kwargs:  # the context's proxy password
                request.meta["playwright_context_kwargs"] = {k: v for k, v in kwargs.items() if k != "proxy"}
            self._release(request.meta.pop(_TOKEN, None))
            self.browser.release(request.meta.pop(CONTEXT, None))
            # the page an earlier attempt kept (playwright_include_page), copied with its meta:
            # scrapy-playwright would load this request in it, in that attempt's context (the
            # egress it must avoid, not the one the pool assigns), and the frontier cannot
            # store it; the page is closed at that attempt's outcome
            request.meta.pop(PAGE, None)

    # ---- outcomes ------------------------------------------------------------------

    def on_outcome(self, outcome: Outcome, request: Request, spider: Any = None) -> None:
        self._release(request.meta.pop(_TOKEN, None))
        self.browser.release(request.meta.pop(CONTEXT, None))
        # the attempt is over (its callback too): a retry gets a page of its own (on_scheduled)
        self.browser.close_page(request)
        slow = request.meta.pop(SLOW_BODY, None)
        if outcome.fallback or outcome.egress is None:
            return
        events = self.pool.observe(
            outcome.egress,
            outcome.domain,
            outcome.cls.value,
            outcome.blame.value,
            outcome.responded,
            outcome.slow_down,
            slow if isinstance(slow, float) else None,
        )
        for ev in events:
            self.events.report(ev)

    # ---- lifecycle, shared state, sources ----------------------------------------

    async def spider_opened(self, spider: Any) -> None:
        if not self.ctx.outcomes_on:
            logger.error(
                "egress: the outcome middleware is not enabled: the pool gets no health evidence "
                "and cannot hold requests of a domain without egress (enable "
                "scrapy_scale.outcomes.OutcomeDownloaderMiddleware, or use the add-on)"
            )
        self.first_byte.install()
        job = self.ctx.job or core_settings.JOB.get(self.crawler.settings) or spider.name
        store = self.state.store = open_state(self.crawler.settings, job)
        try:
            records = await maybe_deferred_to_future(threads.deferToThread(self._open_state))
        except Exception as e:  # noqa: BLE001 - the sync loop must start all the same (issue 35 item 6)
            logger.warning(
                "egress: cannot read the pool's state from %s (%s); starting without it, the sync tries again",
                store.where,
                redact_text(str(e)),
            )
            records = {}
        self._opened(records)
        if self.sources.refresher.source.kind == "provider":  # the first fetch, before any request
            d = self.sources.refresh()
            if d is not None:
                await maybe_deferred_to_future(self.sources.first_fetch(d))
        self.sources.open = True

    def _open_state(self) -> dict[str, Any]:
        store = self.state.store
        assert store is not None
        store.set_pool(self.pool.members)
        return store.load()

    def _opened(self, records: dict[str, Any]) -> None:
        for ev in self.pool.merge(records):
            self.events.report(ev)
        refresh = (self.sources.refresh, min(1.0, self.sources.refresher.period))
        for fn, every in ((self.state.sync, self.sync_every), refresh):
            loop = task.LoopingCall(fn)
            loop.start(every, now=False).addErrback(lambda f: logger.error("egress: %s", f.getErrorMessage()))
            self._loops.append(loop)

    def _browser_gauges(self) -> None:
        contexts = self.browser.contexts
        if contexts or self.stats.get_value(K.EGRESS_BROWSER_CONTEXTS) is not None:
            self.stats.set_value(K.EGRESS_BROWSER_CONTEXTS, contexts)
            self.stats.max_value(K.EGRESS_BROWSER_CONTEXTS_MAX, contexts)
            self.stats.set_value(K.EGRESS_BROWSER_PROCESSES, self.browser.processes)

    async def spider_closed(self, spider: Any, reason: str = "") -> None:
        self.waits.close()  # the requests waiting in place fail now
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self.sources.stop()
        self.first_byte.uninstall()
        await self.browser.close_all()  # (fires its settled(), which the metrics wait for)
        self._browser_gauges()
        for key, n in (
            (K.EGRESS_FIRST_BYTE_TIMEOUTS, self.first_byte.expired),
            (K.EGRESS_FIRST_BYTE_TIMEOUTS_UNPROVEN, self.first_byte.expired_unproven),
            (K.EGRESS_SUSPECT, self.pool.counts["suspect_failures"]),
            (K.EGRESS_SUSPECT_BLAMED, self.pool.counts["suspect_blamed"]),
            (K.EGRESS_SLOW_BODIES, self.pool.counts["slow_bodies"]),
            (K.EGRESS_REPROBES_SPARED, self.pool.counts["reprobe/spared_retry"]),
            (
                K.EGRESS_ONE_SLOT_SPARED,
                self.pool.counts["reprobe/spared_one_slot"] + self.pool.counts["unproven/spared_one_slot"],
            ),
            (K.EGRESS_REFUSED_RETRIES, self.pool.counts["refused_retries"]),
            (K.EGRESS_REFUSED_RETRY_HOLDS, self.pool.routes.gate.retries_held if self.pool.routes.gate else 0),
        ):
            if n:
                self.stats.set_value(key, n)
        for key, value in bounded_stats(self.pool, self.top).items():
            self.stats.set_value(key, value)
        # the pool by state, as each sync writes it: a crawl shorter than one sync had none
        for state, n in self.pool.pool_sizes().items():
            self.stats.set_value(K.egress_pool(state), n)
        await self.state.close()

    # ---- what status shows -----------------------------------------------------------

    def pool_sizes(self) -> dict[str, int]:
        """Egresses by state (``healthy``, ``quarantined``, ``probing``), for the metrics."""
        return dict(self.pool.pool_sizes())

    def snapshot(self, top: int = 10) -> list[dict[str, Any]]:
        return describe_pool(self.pool, self.worker, time.time(), top)
