"""Per-crawler glue shared by the outcome middlewares: emit outcomes, count, hold delayed retries.

The downloader middleware classifies each attempt and decides retries; the spider
middleware finishes a response's chain after its callback output was consumed.
Both talk to one :class:`OutcomeHub` per crawler (:meth:`OutcomeHub.of`).
"""

from __future__ import annotations

import itertools
import logging
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import signals as scrapy_signals
from scrapy.exceptions import DontCloseSpider, IgnoreRequest
from scrapy.http import Request
from scrapy.settings import BaseSettings
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import build_from_crawler, load_object

from scrapy_scale import config, meta
from scrapy_scale import signals as scale_signals
from scrapy_scale.clock import Clock, Randomness, wall
from scrapy_scale.outcomes import settings as oset
from scrapy_scale.outcomes._log import FirstFew
from scrapy_scale.outcomes.classify import BlockPageDetector, Classifier, Verdict
from scrapy_scale.outcomes.model import FailureClass, Outcome
from scrapy_scale.outcomes.parsecheck import ItemCheck
from scrapy_scale.outcomes.policy import Decision, RetryPolicy, build_policies

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger("scrapy_scale.outcomes")

C = FailureClass

#: a request whose not-before is at most this far ahead is sent (clock granularity)
NOT_BEFORE_TOLERANCE = 0.002
#: timers fire this much after the not-before time, so they are never early
TIMER_SLACK = 0.005
#: how many (class, reason) groups are kept and reported at close
TOP_ERRORS = 10
_MAX_GROUPS = 1000


def egress_id(request: Request) -> str | None:
    """``meta["scale_egress"]`` if set, else the proxy's host:port (never its credentials)."""
    e = request.meta.get(meta.EGRESS)
    if e:
        return str(e)
    proxy = request.meta.get("proxy")
    if not proxy:
        return None
    p = urlsplit(proxy if "://" in proxy else "http://" + proxy)
    host = p.hostname or ""
    try:
        port = p.port or {"http": 80, "https": 443, "socks5": 1080}.get(p.scheme)
    except ValueError:
        port = None
    return f"{host}:{port}" if port else host


def _scrapy_retry_enabled(settings: BaseSettings) -> bool:
    from scrapy.downloadermiddlewares.retry import RetryMiddleware
    from scrapy.utils.conf import build_component_list

    mws = build_component_list(
        settings.get_component_priority_dict_with_base("DOWNLOADER_MIDDLEWARES")
    )
    for mw in mws:
        try:
            obj = load_object(mw) if isinstance(mw, str) else mw
        except (ImportError, ValueError, AttributeError, NameError):
            continue
        if obj is RetryMiddleware:
            return True
    return False


def _project_set(settings: BaseSettings, name: str) -> bool:
    return (settings.getpriority(name) or 0) > 0


def _exception_classes(values: list[Any]) -> list[type[BaseException]]:
    """RETRY_EXCEPTIONS as classes (dotted paths imported, as Scrapy's RetryMiddleware does)."""
    out = []
    for v in values:
        try:
            obj = load_object(v) if isinstance(v, str) else v
        except (ImportError, ValueError, AttributeError, NameError) as e:
            raise config.ScaleSettingError("RETRY_EXCEPTIONS", f"cannot import {v!r}: {e}") from None
        if not (isinstance(obj, type) and issubclass(obj, BaseException)):
            raise config.ScaleSettingError("RETRY_EXCEPTIONS", f"{v!r} is not an exception class")
        out.append(obj)
    return out


@dataclass
class _ParseState:
    #: the downloader middleware's verdict on the response, its status and latency
    pending: tuple[Verdict, int | None, float | None]
    items: int = 0
    missing: tuple[str, ...] = ()
    done: bool = False
    #: the callback yielded a retry of its own request (same fingerprint and URL)
    retried: bool = False


class OutcomeHub:
    _hubs: weakref.WeakKeyDictionary[Any, OutcomeHub] = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, crawler: Crawler) -> OutcomeHub:
        hub = cls._hubs.get(crawler)
        if hub is None:
            hub = cls._hubs[crawler] = cls(crawler)
        return hub

    def __init__(self, crawler: Crawler, clock: Clock = wall, rng: Randomness | None = None):
        self.crawler = crawler
        s = crawler.settings
        self.clock = clock
        self.stats = crawler.stats
        # bound once: the stats collector's attribute access is slow
        self._inc = crawler.stats.inc_value
        rules = config.get(s, oset.FAILURE_RULES.name)
        detectors: list[BlockPageDetector] = []
        for path in config.get(s, oset.BLOCK_DETECTORS.name):
            try:
                dcls = load_object(path)
            except (ImportError, ValueError, AttributeError, NameError) as e:
                raise config.ScaleSettingError(
                    oset.BLOCK_DETECTORS.name, f"cannot import {path!r}: {e}"
                ) from None
            if not hasattr(dcls, "detect"):
                raise config.ScaleSettingError(
                    oset.BLOCK_DETECTORS.name, f"{path} has no detect(response, request) method"
                )
            detectors.append(
                build_from_crawler(dcls, crawler) if hasattr(dcls, "from_crawler") else dcls()
            )
        self.retry_codes: frozenset[int] | None = None
        if _project_set(s, "RETRY_HTTP_CODES"):
            self.retry_codes = frozenset(int(x) for x in s.getlist("RETRY_HTTP_CODES"))
        retry_exceptions = None
        if _project_set(s, "RETRY_EXCEPTIONS"):
            retry_exceptions = _exception_classes(s.getlist("RETRY_EXCEPTIONS"))
        self.classifier = Classifier(rules, detectors, self.retry_codes, retry_exceptions)
        retry_times = s.getint("RETRY_TIMES") if _project_set(s, "RETRY_TIMES") else None
        give_up_level = None
        if _project_set(s, "RETRY_GIVE_UP_LOG_LEVEL"):
            lv = s.get("RETRY_GIVE_UP_LOG_LEVEL")
            give_up_level = lv if isinstance(lv, int) else logging.getLevelName(str(lv).upper())
            if not isinstance(give_up_level, int):
                give_up_level = None
        policies = build_policies(config.get(s, oset.RETRY_POLICY.name), retry_times, give_up_level)
        self.warn_first = FirstFew(logger)
        self.policy = RetryPolicy(
            policies,
            retry_after_max=config.get(s, oset.RETRY_AFTER_MAX.name),
            clock=clock,
            rng=rng or Randomness(),
            warn=self._warn_counted,
        )
        self.retry_enabled = s.getbool("RETRY_ENABLED")
        self.priority_adjust = s.getint("RETRY_PRIORITY_ADJUST")
        self.item_check = ItemCheck(config.get(s, oset.CRITICAL_FIELDS.name))
        self.parse_log = FirstFew(logger)
        self.spider_mw_active = False
        self.pending: weakref.WeakKeyDictionary[
            Request, tuple[Verdict, int | None, float | None]
        ] = weakref.WeakKeyDictionary()
        self.parsing: weakref.WeakKeyDictionary[Response, _ParseState] = weakref.WeakKeyDictionary()
        self.started: weakref.WeakKeyDictionary[Request, float] = weakref.WeakKeyDictionary()
        self.held: dict[int, tuple[Any, Request]] = {}
        self.force_hold: set[int] = set()
        self._keys = itertools.count()
        self.scheduler_delays: bool | None = None
        #: the scheduler keys requests by their real fingerprint itself (the scrapy-scale frontier)
        self.scheduler_fingerprints = False
        self.errors: Counter[tuple[str, str]] = Counter()
        self.finals = 0
        sig = crawler.signals
        # request_scheduled is connected on first need (a receiver costs on every request)
        self._watching = False
        sig.connect(self.request_dropped, signal=scrapy_signals.request_dropped)
        sig.connect(self.spider_opened, signal=scrapy_signals.spider_opened)
        sig.connect(self.spider_idle, signal=scrapy_signals.spider_idle)
        sig.connect(self.spider_closed, signal=scrapy_signals.spider_closed)
        if self.retry_enabled and _scrapy_retry_enabled(s):
            logger.warning(
                "Scrapy's RetryMiddleware is still enabled next to scrapy_scale's retry policy: requests "
                "may be retried twice. Set DOWNLOADER_MIDDLEWARES['scrapy.downloadermiddlewares.retry."
                "RetryMiddleware'] = None (the scrapy_scale add-on does this)."
            )

    # ---- outcomes ------------------------------------------------------------

    def fingerprint(self, request: Request) -> str:
        fp = request.meta.get(meta.FINGERPRINT)
        if fp:
            return str(fp)
        return self.crawler.request_fingerprinter.fingerprint(request).hex()  # type: ignore[union-attr]

    def outcome(
        self,
        request: Request,
        verdict: Verdict,
        *,
        status: int | None = None,
        exception: BaseException | None = None,
        latency: float | None = None,
        final: bool = True,
        retry_at: float | None = None,
        avoid: tuple[str, ...] = (),
        items: int = 0,
    ) -> Outcome:
        exc_name = None
        if exception is not None:
            t = type(exception)
            exc_name = f"{t.__module__}.{t.__qualname__}"
        return Outcome(
            fingerprint=self.fingerprint(request),
            url=request.url,
            domain=urlparse_cached(request).hostname or "",
            cls=verdict.cls,
            reason=verdict.reason,
            status=status,
            exception=exc_name,
            egress=egress_id(request),
            latency=latency,
            attempt=int(request.meta.get(meta.ATTEMPT, 1)),
            final=final,
            retry_at=retry_at,
            avoid_egress=avoid,
            items=items,
        )

    def emit(self, outcome: Outcome, request: Request) -> None:
        inc = self._inc
        cls = outcome.cls.value
        if outcome.final:
            self.finals += 1
            inc(f"scale/outcome/{cls}")
            inc(f"scale/retry_depth/{outcome.attempt}")
        else:
            inc(f"scale/retry/{cls}")
        if outcome.cls is not C.OK:
            key = (cls, outcome.reason)
            if key in self.errors or len(self.errors) < _MAX_GROUPS:
                self.errors[key] += 1
            else:
                self.errors[(cls, "(other reasons)")] += 1
        self.crawler.signals.send_catch_log(
            scale_signals.outcome, outcome=outcome, request=request, spider=self.crawler.spider
        )

    # ---- retries -------------------------------------------------------------

    def decide(
        self, request: Request, verdict: Verdict, retry_after: float | None = None
    ) -> Decision:
        m = request.meta
        return self.policy.decide(
            verdict.cls,
            int(m.get(meta.ATTEMPT, 1)),
            retry_after=retry_after,
            max_retries=m.get("max_retry_times"),
            dont_retry=bool(m.get("dont_retry", False)),
            enabled=self.retry_enabled,
            where=urlparse_cached(request).hostname or "",
        )

    def retry_request(
        self, request: Request, outcome: Outcome, decision: Decision
    ) -> tuple[Request, tuple[str, ...]]:
        avoid = tuple(request.meta.get(meta.AVOID_EGRESS) or ())
        if (
            self.policy.policies[outcome.cls].new_egress
            and outcome.egress
            and outcome.egress not in avoid
        ):
            avoid = (*avoid, outcome.egress)
        new = request.copy()
        m = new.meta
        m[meta.ATTEMPT] = outcome.attempt + 1
        m[meta.NOT_BEFORE] = decision.not_before
        m[meta.AVOID_EGRESS] = list(avoid)
        m[meta.LAST_FAILURE] = [outcome.cls.value, outcome.reason]
        m[meta.FINGERPRINT] = outcome.fingerprint
        m["retry_times"] = outcome.attempt  # what Scrapy's own retry code would show
        new.dont_filter = True
        if not self._watching and not self._scheduler_delays():
            self.watch()
        new.priority = request.priority + int(
            request.meta.get("priority_adjust", self.priority_adjust)
        )
        return new, avoid

    def gave_up(self, outcome: Outcome, decision: Decision) -> None:
        self.stats.inc_value(f"scale/gave_up/{outcome.cls.value}")
        level = (
            self.policy.policies[outcome.cls].give_up_level
            if decision.why == "budget"
            else logging.DEBUG
        )
        logger.log(
            level,
            "Gave up on %s after %d attempt(s): %s (%s)%s",
            outcome.url,
            outcome.attempt,
            outcome.cls.value,
            outcome.reason or "-",
            "" if decision.why == "budget" else f" [{decision.why}]",
            extra={"spider": self.crawler.spider},
        )

    def _warn_counted(self, kind: str, msg: str, *args: Any) -> None:
        self.stats.inc_value(f"scale/{kind}")
        self.warn_first(kind, msg, *args)

    # ---- delayed retries without a delay-capable scheduler ------------------

    def _scheduler_delays(self) -> bool:
        if self.scheduler_delays is None:
            engine = self._engine()
            sched = getattr(engine, "scheduler", None) if engine is not None else None
            slot = getattr(engine, "_slot", None)
            if sched is None and slot is not None:
                sched = slot.scheduler
            if sched is None:
                return False
            self.scheduler_delays = bool(getattr(sched, "supports_not_before", False))
            self.scheduler_fingerprints = self.scheduler_delays and type(
                sched
            ).__module__.startswith("scrapy_scale.")
        return self.scheduler_delays

    def _engine(self) -> Any:
        try:
            return self.crawler.engine
        except RuntimeError:  # Scrapy 2.19: "not set yet" before the crawl starts
            return None

    def spider_opened(self, spider: Any) -> None:
        self.scheduler_delays = None
        self._scheduler_delays()

    def request_scheduled(self, request: Request, spider: Any) -> None:
        """Hold a request whose not-before is in the future in a reactor timer (not blocking)."""
        nb = request.meta.get(meta.NOT_BEFORE)
        if not nb:
            return
        now = self.clock()
        if nb <= now + NOT_BEFORE_TOLERANCE:
            return
        forced = id(request) in self.force_hold
        if forced:
            self.force_hold.discard(id(request))
        elif self._scheduler_delays():
            return  # the scheduler holds it until it is eligible
        from twisted.internet import reactor

        key = next(self._keys)
        call = reactor.callLater(nb - now + TIMER_SLACK, self._release, key)  # type: ignore[attr-defined]
        self.held[key] = (call, request)
        self.stats.inc_value("scale/retry/held")
        raise IgnoreRequest("held until its not-before time")  # the engine then does not enqueue it

    def hold(self, request: Request) -> None:
        """Make :meth:`request_scheduled` hold this request even with a delay-capable scheduler."""
        self.force_hold.add(id(request))
        self.watch()

    def watch(self) -> None:
        """Start holding delayed requests (the first time one is made)."""
        if not self._watching:
            self._watching = True
            self.crawler.signals.connect(
                self.request_scheduled, signal=scrapy_signals.request_scheduled
            )

    def _release(self, key: int) -> None:
        entry = self.held.pop(key, None)
        if entry is None:
            return
        request = entry[1]
        engine = self._engine()
        if engine is None or engine.spider is None:
            self._abandon(request, "spider closed")
            return
        engine.crawl(request)

    def spider_idle(self, spider: Any) -> None:
        if self.held:
            raise DontCloseSpider

    def _abandon(self, request: Request, why: str) -> None:
        """A held retry that will never be sent: its chain's final outcome."""
        last = request.meta.get(meta.LAST_FAILURE) or [C.FATAL.value, ""]
        try:
            cls = FailureClass.parse(str(last[0]))
        except ValueError:
            cls = C.FATAL
        attempt = max(1, int(request.meta.get(meta.ATTEMPT, 2)) - 1)
        o = self.outcome(request, Verdict(cls, f"{last[1]} ({why})".strip()), final=True).but(
            attempt=attempt
        )
        self.stats.inc_value("scale/retry/abandoned")
        self.emit(o, request)

    def request_dropped(self, request: Request, spider: Any) -> None:
        """A retry or redirect of a chain that the scheduler refused: the chain ends here."""
        m = request.meta
        if meta.FINGERPRINT not in m:
            return
        if int(m.get(meta.ATTEMPT, 1)) > 1:
            self._abandon(request, "dropped by the scheduler")
        elif m.get("redirect_urls"):
            o = self.outcome(request, Verdict(C.OK, "redirect to a URL already seen"), final=True)
            self.emit(o, request)

    def spider_closed(self, spider: Any, reason: str) -> None:
        for call, request in list(self.held.values()):
            if call.active():
                call.cancel()
            self._abandon(request, f"spider closed ({reason})")
        self.held.clear()
        self.report_top_errors()

    def report_top_errors(self) -> None:
        top = self.errors.most_common(TOP_ERRORS)
        if not top:
            return
        lines = []
        for (cls, reason), n in top:
            self.stats.set_value(f"scale/error_group/{cls}/{reason or '-'}", n)
            lines.append(f"  {n:>8}  {cls:<14} {reason or '-'}")
        logger.info(
            "Top error groups (class, reason) of %d:\n%s", len(self.errors), "\n".join(lines)
        )

    # ---- parse checks (spider middleware) -----------------------------------

    def parse_state(self, response: Response) -> _ParseState:
        st = self.parsing.get(response)
        if st is None:
            request = response.request
            pending = self.pending.pop(request, None) if request is not None else None
            if pending is None:  # the downloader middleware did not see it (used alone)
                req = request or Request(response.url)
                v = self.classifier.classify_response(response, req)
                pending = (v, response.status, req.meta.get("download_latency"))
            st = self.parsing[response] = _ParseState(pending)
        return st

    def callback_retry(self, response: Response, st: _ParseState, retry: Request) -> None:
        """The callback retries its own request (Scrapy's ``get_retry_request``): this attempt's
        outcome becomes non-final and the retry continues the chain as the next attempt."""
        request = response.request
        attempt = int(request.meta.get(meta.ATTEMPT, 1)) if request is not None else 1
        retry.meta[meta.ATTEMPT] = attempt + 1
        verdict = st.pending[0]
        cls = verdict.cls if verdict.cls is not C.OK else C.PARSE_FAILED
        retry.meta[meta.LAST_FAILURE] = [cls.value, "retried by the callback"]
        st.retried = True

    def finish_parse(
        self, response: Response, st: _ParseState, error: BaseException | None = None
    ) -> None:
        if st.done:
            return
        st.done = True
        verdict, status, latency = st.pending
        request = response.request or Request(response.url)
        kind = None
        if error is not None and not _is_http_error(error):
            kind, reason = "callback_error", f"callback raised {type(error).__name__}"
        elif verdict.cls is C.OK and error is None:
            if st.missing:
                kind, reason = "missing_fields", "missing fields: " + ", ".join(sorted(st.missing))
            elif st.items == 0 and self._expects_items(request):
                kind, reason = "no_items", "no items"
        if kind is not None:
            self._inc(f"scale/parse_failed/{kind}")
            self.parse_log(
                kind,
                "parse_failed (%s) %s",
                reason,
                request.url,
                extra={"spider": self.crawler.spider},
            )
            verdict = Verdict(C.PARSE_FAILED, reason)
        if st.retried:
            if verdict.cls is C.OK:
                verdict = Verdict(C.PARSE_FAILED, "retried by the callback")
            o = self.outcome(
                request,
                verdict,
                status=status,
                latency=latency,
                items=st.items,
                final=False,
                retry_at=self.clock(),
            )
        else:
            o = self.outcome(request, verdict, status=status, latency=latency, items=st.items)
        self.emit(o, request)

    def _expects_items(self, request: Request) -> bool:
        from scrapy_scale.outcomes.parsecheck import expected_items

        spider = self.crawler.spider
        cb = request.callback or getattr(spider, "parse", None)
        return expected_items(request.meta, cb, spider)


def _is_http_error(exc: BaseException) -> bool:
    from scrapy.spidermiddlewares.httperror import HttpError

    return isinstance(exc, HttpError)
